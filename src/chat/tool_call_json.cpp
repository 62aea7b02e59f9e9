// Incremental JSON scanning for streamed tool calls (see tool_call_json.h).
#include "chat/tool_call_json.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <utility>

#include "core/json_parse.h"

namespace ms::tool_call_detail {
namespace {

bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_hex(char c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

bool contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

}  // namespace

bool decode_json_string(const std::string& raw, std::string* out) {
  if (raw.empty() || raw.front() != '"') return false;
  auto j = parse_json(raw);
  if (!j.is_ok() || !j->is_string()) return false;
  *out = j->get<std::string>();
  return true;
}

// ---------------------------------------------------------------- JsonScanner

bool JsonScanner::can_end_at_eof() const {
  if (state_ == State::kDone) return true;
  return stack_.empty() && (state_ == State::kNumZero || state_ == State::kNumInt ||
                            state_ == State::kNumFrac || state_ == State::kNumExpInt);
}

ScanStep JsonScanner::value_done() {
  if (stack_.empty()) {
    state_ = State::kDone;
    return ScanStep::kDone;
  }
  state_ = State::kAfterValue;
  return ScanStep::kMore;
}

ScanStep JsonScanner::start_value(char c) {
  started_ = true;
  switch (c) {
    case '{':
    case '[':
      if (static_cast<int>(stack_.size()) >= kMaxDepth) return ScanStep::kError;
      stack_.push_back(c);
      emit(c);
      state_ = c == '{' ? State::kObjectFirst : State::kArrayFirst;
      return ScanStep::kMore;
    case '"':
      emit(c);
      key_string_ = false;
      state_ = State::kString;
      return ScanStep::kMore;
    case '-':
      emit(c);
      state_ = State::kNumMinus;
      return ScanStep::kMore;
    case '0':
      emit(c);
      state_ = State::kNumZero;
      return ScanStep::kMore;
    case 't':
    case 'f':
    case 'n':
      literal_ = c == 't' ? "true" : c == 'f' ? "false" : "null";
      literal_pos_ = 1;
      emit(c);
      state_ = State::kLiteral;
      return ScanStep::kMore;
    default:
      if (c >= '1' && c <= '9') {
        emit(c);
        state_ = State::kNumInt;
        return ScanStep::kMore;
      }
      return ScanStep::kError;
  }
}

ScanStep JsonScanner::number(char c) {
  State next = State::kDone;  // kDone here means "the number ended before c"
  switch (state_) {
    case State::kNumMinus:
      if (c == '0') next = State::kNumZero;
      else if (is_digit(c)) next = State::kNumInt;
      else return ScanStep::kError;
      break;
    case State::kNumZero:
    case State::kNumInt:
      if (state_ == State::kNumInt && is_digit(c)) next = State::kNumInt;
      else if (c == '.') next = State::kNumDot;
      else if (c == 'e' || c == 'E') next = State::kNumExp;
      break;
    case State::kNumDot:
      if (!is_digit(c)) return ScanStep::kError;
      next = State::kNumFrac;
      break;
    case State::kNumFrac:
      if (is_digit(c)) next = State::kNumFrac;
      else if (c == 'e' || c == 'E') next = State::kNumExp;
      break;
    case State::kNumExp:
      if (c == '+' || c == '-') next = State::kNumExpSign;
      else if (is_digit(c)) next = State::kNumExpInt;
      else return ScanStep::kError;
      break;
    case State::kNumExpSign:
      if (!is_digit(c)) return ScanStep::kError;
      next = State::kNumExpInt;
      break;
    case State::kNumExpInt:
      if (is_digit(c)) next = State::kNumExpInt;
      break;
    default:
      return ScanStep::kError;
  }
  if (next != State::kDone) {
    emit(c);
    state_ = next;
    return ScanStep::kMore;
  }
  // c is not part of the number: the number is complete.
  if (stack_.empty()) {
    state_ = State::kDone;
    return ScanStep::kDoneUnused;
  }
  state_ = State::kAfterValue;
  return push(c);
}

ScanStep JsonScanner::push(char c) {
  switch (state_) {
    case State::kDone:
      return ScanStep::kError;
    case State::kValue:
      if (is_ws(c)) return ScanStep::kMore;
      return start_value(c);
    case State::kObjectFirst:
    case State::kObjectKey:
      if (is_ws(c)) return ScanStep::kMore;
      if (c == '"') {
        emit(c);
        key_string_ = true;
        state_ = State::kString;
        return ScanStep::kMore;
      }
      if (c == '}' && state_ == State::kObjectFirst) {
        emit(c);
        stack_.pop_back();
        return value_done();
      }
      return ScanStep::kError;
    case State::kColon:
      if (is_ws(c)) return ScanStep::kMore;
      if (c != ':') return ScanStep::kError;
      emit(c);
      state_ = State::kValue;
      return ScanStep::kMore;
    case State::kArrayFirst:
      if (is_ws(c)) return ScanStep::kMore;
      if (c == ']') {
        emit(c);
        stack_.pop_back();
        return value_done();
      }
      return start_value(c);
    case State::kAfterValue:
      if (is_ws(c)) return ScanStep::kMore;
      if (c == ',') {
        emit(c);
        state_ = stack_.back() == '{' ? State::kObjectKey : State::kValue;
        return ScanStep::kMore;
      }
      if ((c == '}' && stack_.back() == '{') || (c == ']' && stack_.back() == '[')) {
        emit(c);
        stack_.pop_back();
        return value_done();
      }
      return ScanStep::kError;
    case State::kString:
      if (c == '"') {
        emit(c);
        if (key_string_) {
          key_string_ = false;
          state_ = State::kColon;
          return ScanStep::kMore;
        }
        return value_done();
      }
      if (c == '\\') {
        emit(c);
        state_ = State::kEscape;
        return ScanStep::kMore;
      }
      if (static_cast<unsigned char>(c) < 0x20) {
        // Lenient: a raw control character is written as its escape.
        static const char kHex[] = "0123456789abcdef";
        switch (c) {
          case '\n': emit('\\'); emit('n'); break;
          case '\r': emit('\\'); emit('r'); break;
          case '\t': emit('\\'); emit('t'); break;
          case '\b': emit('\\'); emit('b'); break;
          case '\f': emit('\\'); emit('f'); break;
          default:
            for (char e : {'\\', 'u', '0', '0'}) emit(e);
            emit(kHex[(c >> 4) & 0xf]);
            emit(kHex[c & 0xf]);
        }
        return ScanStep::kMore;
      }
      emit(c);
      return ScanStep::kMore;
    case State::kEscape:
      if (c == 'u') {
        emit(c);
        unicode_left_ = 4;
        state_ = State::kUnicode;
        return ScanStep::kMore;
      }
      if (c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n' || c == 'r' || c == 't') {
        emit(c);
        state_ = State::kString;
        return ScanStep::kMore;
      }
      return ScanStep::kError;
    case State::kUnicode:
      if (!is_hex(c)) return ScanStep::kError;
      emit(c);
      if (--unicode_left_ == 0) state_ = State::kString;
      return ScanStep::kMore;
    case State::kLiteral:
      if (c != literal_[literal_pos_]) return ScanStep::kError;
      emit(c);
      if (literal_[++literal_pos_] == '\0') return value_done();
      return ScanStep::kMore;
    default:
      return number(c);
  }
}

// ----------------------------------------------------------- CallObjectParser

std::string CallObjectParser::take_args() { return std::exchange(args_, std::string()); }

bool CallObjectParser::at_member_boundary() const {
  return state_ == State::kCommaOrEnd || (state_ == State::kValueBody && value_.can_end_at_eof());
}

ScanStep CallObjectParser::force_close() {
  if (state_ == State::kValueBody) {
    if (!value_.can_end_at_eof() || finish_value() == ScanStep::kError) return ScanStep::kError;
  }
  if (state_ != State::kCommaOrEnd) return ScanStep::kError;
  return close();
}

ScanStep CallObjectParser::close() {
  if (!args_started_) {
    args_ += "{}";
    args_started_ = true;
  }
  done_ = true;
  state_ = State::kDone;
  return name_ok_ ? ScanStep::kDone : ScanStep::kError;
}

ScanStep CallObjectParser::finish_value() {
  if (role_ == Role::kName) {
    if (!decode_json_string(name_raw_, &name_) || name_.empty()) return ScanStep::kError;
    name_ok_ = true;
  }
  if (role_ == Role::kArgs && args_in_string_) {
    args_in_string_ = false;
    std::string decoded, compact;
    if (!decode_json_string(args_string_, &decoded)) return ScanStep::kError;
    JsonScanner inner(&compact);
    bool done = false;
    for (char c : decoded) {
      ScanStep s = done ? (is_ws(c) ? ScanStep::kMore : ScanStep::kError) : inner.push(c);
      if (s == ScanStep::kError) return s;
      done |= s == ScanStep::kDone;
    }
    if (!done || compact.empty() || compact.front() != '{') return ScanStep::kError;
    args_ += compact;
    args_started_ = true;
  }
  state_ = State::kCommaOrEnd;
  return ScanStep::kMore;
}

ScanStep CallObjectParser::push(char c) {
  switch (state_) {
    case State::kOpen:
      if (is_ws(c)) return ScanStep::kMore;
      if (c != '{') return ScanStep::kError;
      state_ = State::kKeyOrEnd;
      return ScanStep::kMore;
    case State::kKeyOrEnd:
    case State::kKey:
      if (is_ws(c)) return ScanStep::kMore;
      if (c == '}' && state_ == State::kKeyOrEnd) return close();
      if (c != '"') return ScanStep::kError;
      key_raw_.clear();
      value_ = JsonScanner(&key_raw_);
      value_.push(c);
      state_ = State::kKeyBody;
      return ScanStep::kMore;
    case State::kKeyBody: {
      ScanStep s = value_.push(c);
      if (s == ScanStep::kError) return s;
      if (s == ScanStep::kMore) return s;
      std::string key;
      if (!decode_json_string(key_raw_, &key)) return ScanStep::kError;
      if (!name_seen_ && contains(keys_->name, key)) {
        role_ = Role::kName;
        name_seen_ = true;
      } else if (!args_seen_ && contains(keys_->args, key)) {
        role_ = Role::kArgs;
        args_seen_ = true;
      } else {
        if (keys_->strict && !ready() && key != "type") return ScanStep::kError;
        role_ = Role::kOther;
      }
      state_ = State::kColon;
      return ScanStep::kMore;
    }
    case State::kColon:
      if (is_ws(c)) return ScanStep::kMore;
      if (c != ':') return ScanStep::kError;
      state_ = State::kValue;
      return ScanStep::kMore;
    case State::kValue:
      if (is_ws(c)) return ScanStep::kMore;
      if (role_ == Role::kName) {
        name_raw_.clear();
        value_ = JsonScanner(&name_raw_);
      } else if (role_ == Role::kArgs) {
        if (c == '"') {  // stringified arguments, decoded when complete
          args_in_string_ = true;
          args_string_.clear();
          value_ = JsonScanner(&args_string_);
        } else if (c == '{') {
          value_ = JsonScanner(&args_);
          args_started_ = true;
        } else {
          return ScanStep::kError;  // arguments must be an object
        }
      } else {
        value_ = JsonScanner(nullptr);
      }
      state_ = State::kValueBody;
      [[fallthrough]];
    case State::kValueBody: {
      ScanStep s = value_.push(c);
      if (s == ScanStep::kMore || s == ScanStep::kError) return s;
      if (finish_value() == ScanStep::kError) return ScanStep::kError;
      return s == ScanStep::kDoneUnused ? push(c) : ScanStep::kMore;
    }
    case State::kCommaOrEnd:
      if (is_ws(c)) return ScanStep::kMore;
      if (c == ',') {
        state_ = State::kKey;
        return ScanStep::kMore;
      }
      if (c == '}') return close();
      return ScanStep::kError;
    case State::kDone:
      return ScanStep::kError;
  }
  return ScanStep::kError;
}

}  // namespace ms::tool_call_detail
