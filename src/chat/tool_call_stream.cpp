// The streaming tool-call state machine behind ToolCallStreamParser and
// parse_tool_calls() (contract in tool_call_parser.h).
//
// Bytes are processed one at a time. In text mode, a suffix that could start a
// marker (marker_buf_) and trailing whitespace (ws_buf_) are held; everything
// else is emitted at once. Inside a call region the raw text is kept in held_
// until the call is committed (name known, arguments begun), so a malformed
// bare Llama 3 call can be given back as content; after commit, arguments go
// out as they are scanned. A malformed region opened by a marker switches to
// discard mode: text mode's marker matching with nothing emitted, left at the
// next marker (its closer, which is a strip marker, or a new region). Text
// after a finished call that is not yet known to be a closing marker or
// separator is "junk": dropped if it completes the closer or the output ends,
// rescanned as text otherwise (inside a Cohere action list: discarded).
#include <optional>

#include "chat/tool_call_json.h"
#include "chat/tool_call_parser.h"

namespace ms {

using tool_call_detail::CallKeys;
using tool_call_detail::CallObjectParser;
using tool_call_detail::ScanStep;

// Named, not anonymous: ToolCallStreamParser::Impl (external linkage) holds
// a list of them.
namespace tool_call_detail {

enum class MarkerAction { kCallOpen, kActionOpen, kPythonTag, kReasoningOpen, kReasoningClose, kStrip };

struct Marker {
  const char* text;
  MarkerAction action;
};

}  // namespace tool_call_detail

using tool_call_detail::Marker;
using tool_call_detail::MarkerAction;

namespace {

bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

const std::vector<Marker>& markers_for(ToolCallFormat format) {
  static const std::vector<Marker> kNone;
  static const std::vector<Marker> kHermes = {{"<tool_call>", MarkerAction::kCallOpen},
                                              {"</tool_call>", MarkerAction::kStrip}};
  static const std::vector<Marker> kCohere = {
      {"<|START_ACTION|>", MarkerAction::kActionOpen},
      {"<|START_THINKING|>", MarkerAction::kReasoningOpen},
      {"<|END_THINKING|>", MarkerAction::kReasoningClose},
      {"<|START_RESPONSE|>", MarkerAction::kStrip},
      {"<|END_RESPONSE|>", MarkerAction::kStrip},
      {"<|END_ACTION|>", MarkerAction::kStrip},
  };
  static const std::vector<Marker> kLlama3 = {{"<|python_tag|>", MarkerAction::kPythonTag}};
  switch (format) {
    case ToolCallFormat::kHermes: return kHermes;
    case ToolCallFormat::kCohere: return kCohere;
    case ToolCallFormat::kLlama3Json: return kLlama3;
    case ToolCallFormat::kNone: break;
  }
  return kNone;
}

CallKeys keys_for(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::kCohere: return {{"tool_name"}, {"parameters"}, false};
    case ToolCallFormat::kLlama3Json: return {{"name"}, {"parameters", "arguments"}, true};
    default: return {{"name"}, {"arguments", "parameters"}, false};
  }
}

// Length of the incomplete UTF-8 sequence at the end of s (0 if none).
size_t incomplete_utf8_tail(std::string_view s) {
  for (size_t back = 1; back <= 3 && back <= s.size(); ++back) {
    unsigned char b = static_cast<unsigned char>(s[s.size() - back]);
    if ((b & 0xC0) == 0x80) continue;  // continuation byte: keep looking for the lead
    size_t need = (b & 0xE0) == 0xC0 ? 2 : (b & 0xF0) == 0xE0 ? 3 : (b & 0xF8) == 0xF0 ? 4 : 1;
    return need > back ? back : 0;
  }
  return 0;
}

}  // namespace

class ToolCallStreamParser::Impl {
 public:
  Impl(ToolCallFormat format, ParserOptions options)
      : format_(format),
        options_(std::move(options)),
        keys_(keys_for(format)),
        markers_(markers_for(format)),
        ids_(options_.id_seed) {
    if (format_ == ToolCallFormat::kLlama3Json && options_.calls_allowed) mode_ = Mode::kLlamaStart;
    if (format_ == ToolCallFormat::kCohere && options_.starts_in_reasoning) reasoning_ = true;
  }

  StreamDelta feed(std::string_view text) {
    if (finished_) return {};
    utf8_tail_.append(text);
    size_t keep = incomplete_utf8_tail(utf8_tail_);
    std::string ready = utf8_tail_.substr(0, utf8_tail_.size() - keep);
    utf8_tail_.erase(0, ready.size());
    for (char c : ready) step(c);
    return std::exchange(out_, StreamDelta());
  }

  StreamDelta finish() {
    if (finished_) return {};
    for (char c : std::exchange(utf8_tail_, std::string())) step(c);
    end_of_input();
    finished_ = true;
    return std::exchange(out_, StreamDelta());
  }

  bool saturated() const { return mode_ == Mode::kDone; }
  int dropped_calls() const { return dropped_; }

 private:
  enum class Mode {
    kText,         // prose; markers_ are recognized
    kLlamaStart,   // llama3: only whitespace so far; '{' starts a call
    kLlamaNext,    // llama3: after ';' or <|python_tag|>, expecting '{'
    kLlamaSep,     // llama3: after a call: ';' or '{' (or the end)
    kCallOpen,     // hermes: after <tool_call>, expecting '{'
    kCall,         // inside a call object
    kCallClose,    // hermes: after a call, expecting </tool_call>
    kActionOpen,   // cohere: after <|START_ACTION|>, expecting '['
    kActionNext,   // cohere: expecting '{' (or ']')
    kActionSep,    // cohere: after an element: ',' or ']'
    kActionClose,  // cohere: after ']', expecting <|END_ACTION|>
    kDiscard,      // dropped markup: markers are recognized, nothing is emitted
    kDone,         // max_calls reached: everything is dropped
  };

  // ---- output
  void emit(char c) { (reasoning_ ? out_.reasoning : out_.content).push_back(c); }
  void emit(const std::string& s) { (reasoning_ ? out_.reasoning : out_.content) += s; }

  void append_args(const std::string& fragment) {
    if (fragment.empty()) return;
    if (!out_.tool_calls.empty() && out_.tool_calls.back().index == call_index_) {
      out_.tool_calls.back().arguments += fragment;
    } else {
      ToolCallDelta d;
      d.index = call_index_;
      d.arguments = fragment;
      out_.tool_calls.push_back(std::move(d));
    }
  }

  // ---- text mode
  // A character of prose: whitespace is held so that whitespace next to a
  // marker or call can be dropped.
  void plain_char(char c) {
    if (mode_ == Mode::kDiscard) return;
    if (is_ws(c)) {
      // After a dropped region its leading whitespace stands for the gap.
      if (!collapse_ws_ || ws_buf_.empty()) ws_buf_.push_back(c);
      return;
    }
    if (!trim_ws_) emit(ws_buf_);
    ws_buf_.clear();
    trim_ws_ = false;
    collapse_ws_ = false;
    emit(c);
  }

  void text_char(char c) {
    if (marker_buf_.empty()) {
      bool may_start = false;
      for (const Marker& m : markers_) may_start |= m.text[0] == c;
      if (!may_start) return plain_char(c);
    }
    marker_buf_.push_back(c);
    bool prefix = false;
    for (const Marker& m : markers_) {
      std::string_view t(m.text);
      if (t == marker_buf_) {
        marker_buf_.clear();
        return on_marker(m);
      }
      prefix |= t.substr(0, marker_buf_.size()) == marker_buf_;
    }
    if (prefix) return;
    // Not a marker: its first byte is prose; the rest may start another one.
    std::string rest = marker_buf_.substr(1);
    char first = marker_buf_[0];
    marker_buf_.clear();
    plain_char(first);
    for (char r : rest) step(r);
  }

  void on_marker(const Marker& m) {
    if (mode_ == Mode::kDiscard) {
      mode_ = Mode::kText;
      region_marked_ = false;
      ws_buf_ = std::exchange(region_ws_, std::string());
      trim_ws_ = trim_before_region_;
      collapse_ws_ = !ws_buf_.empty();
      if (m.action == MarkerAction::kStrip) return;  // the dropped region's closer
    }
    std::string ws = std::exchange(ws_buf_, std::string());
    trim_before_region_ = trim_ws_;
    trim_ws_ = true;
    collapse_ws_ = false;
    switch (m.action) {
      case MarkerAction::kCallOpen:
      case MarkerAction::kActionOpen:
      case MarkerAction::kPythonTag:
        region_marked_ = true;
        region_ws_ = ws;
        if (!options_.calls_allowed) {
          ++dropped_;
          enter_discard();
          break;
        }
        held_ = ws + m.text;
        held_is_junk_ = false;
        mode_ = m.action == MarkerAction::kCallOpen     ? Mode::kCallOpen
                : m.action == MarkerAction::kActionOpen ? Mode::kActionOpen
                                                        : Mode::kLlamaNext;
        break;
      case MarkerAction::kReasoningOpen: reasoning_ = true; break;
      case MarkerAction::kReasoningClose: reasoning_ = false; break;
      case MarkerAction::kStrip: break;
    }
  }

  // ---- call regions
  void step(char c) {
    if (mode_ == Mode::kDone) return;
    if (mode_ == Mode::kText || mode_ == Mode::kDiscard) return text_char(c);
    held_.push_back(c);
    if (!region_char(c)) {
      held_.pop_back();
      fail(c);
    }
  }

  // Returns false if c cannot continue the region (c is then re-dispatched).
  bool region_char(char c) {
    switch (mode_) {
      case Mode::kText:
      case Mode::kDiscard:
      case Mode::kDone:
        return false;
      case Mode::kLlamaStart:
      case Mode::kLlamaNext:
      case Mode::kLlamaSep:
      case Mode::kCallOpen:
        if (is_ws(c)) return true;
        if (c == '{') return start_call();
        if (c == ';' && mode_ == Mode::kLlamaSep) {
          mode_ = Mode::kLlamaNext;
          return true;
        }
        return false;
      case Mode::kActionOpen:
        if (is_ws(c)) return true;
        if (c != '[') return false;
        mode_ = Mode::kActionNext;
        return true;
      case Mode::kActionNext:
        if (is_ws(c)) return true;
        if (c == '{') return start_call();
        if (c == ']') {  // empty list, or a trailing comma
          mode_ = Mode::kActionClose;
          return true;
        }
        return false;
      case Mode::kActionSep:
        if (is_ws(c)) return true;
        if (c == ',') mode_ = Mode::kActionNext;
        else if (c == ']') mode_ = Mode::kActionClose;
        else return false;
        return true;
      case Mode::kCallClose:
        return closer_char(c, "</tool_call>");
      case Mode::kActionClose:
        return closer_char(c, "<|END_ACTION|>");
      case Mode::kCall:
        return call_char(c);
    }
    return false;
  }

  bool closer_char(char c, std::string_view closer) {
    if (closer_pos_ == 0 && is_ws(c)) return true;
    if (c != closer[closer_pos_]) return false;
    if (++closer_pos_ < closer.size()) return true;
    closer_pos_ = 0;
    back_to_text();
    return true;
  }

  void back_to_text() {
    mode_ = Mode::kText;
    held_.clear();
    held_is_junk_ = false;
    trim_ws_ = true;
    region_marked_ = false;
  }

  // The current region is markup that did not make a call: drop it up to the
  // next marker (a call announced before stays as streamed).
  void enter_discard() {
    clear_call(false);
    mode_ = Mode::kDiscard;
  }

  bool start_call() {
    if (held_is_junk_) {  // separators after the previous call: not content
      held_.clear();
      held_.push_back('{');
      held_is_junk_ = false;
      trim_before_region_ = true;
    }
    call_.emplace(&keys_);
    committed_ = false;
    mode_ = Mode::kCall;
    return call_->push('{') == ScanStep::kMore;
  }

  bool call_char(char c) {
    ScanStep s = call_->push(c);
    if (s == ScanStep::kError) {
      // Forgive a missing '}' before the closer: close, then re-dispatch c.
      bool closer = (format_ == ToolCallFormat::kHermes && c == '<') ||
                    (format_ == ToolCallFormat::kCohere && c == ']');
      if (!closer || !call_->at_member_boundary() || call_->force_close() != ScanStep::kDone) return false;
      if (!progress()) return false;
      call_done();  // clears held_, c included
      step(c);      // c now belongs to the closer (or fails there)
      return true;
    }
    if (!progress()) return false;
    if (s == ScanStep::kDone) call_done();
    return true;
  }

  // Commits the call once possible and forwards new argument text. A call to a
  // name that is not allowed is skipped when it is markup (scanned to its end,
  // nothing emitted), and makes the text content when it is bare Llama 3 JSON.
  bool progress() {
    if (!committed_ && !skipping_ && call_->ready()) {
      if (!name_allowed(call_->name())) {
        if (!region_marked_) return false;
        skipping_ = true;
        ++dropped_;
        held_.clear();
      }
    }
    if (skipping_) {
      call_->take_args();
      return true;
    }
    if (!committed_ && call_->ready()) {
      committed_ = true;
      held_.clear();
      call_index_ = next_index_++;
      ToolCallDelta d;
      d.index = call_index_;
      d.id = ids_.next();
      d.name = call_->name();
      out_.tool_calls.push_back(std::move(d));
    }
    if (committed_) append_args(call_->take_args());
    return true;
  }

  bool name_allowed(const std::string& name) const {
    if (options_.allowed_names.empty()) return true;
    for (const std::string& n : options_.allowed_names) {
      if (n == name) return true;
    }
    return false;
  }

  // Forgets the call being scanned; junk_follows: what comes next follows a
  // finished call (separators, a closer).
  void clear_call(bool junk_follows) {
    call_.reset();
    committed_ = false;
    skipping_ = false;
    held_.clear();
    held_is_junk_ = junk_follows;
    closer_pos_ = 0;
  }

  void call_done() {
    const bool counted = committed_;
    clear_call(true);
    mode_ = format_ == ToolCallFormat::kHermes   ? Mode::kCallClose
            : format_ == ToolCallFormat::kCohere ? Mode::kActionSep
                                                 : Mode::kLlamaSep;
    if (counted && ++calls_done_ == options_.max_calls) mode_ = Mode::kDone;
  }

  // c cannot continue the current region.
  void fail(char c) {
    const bool in_action_list = mode_ == Mode::kActionSep || mode_ == Mode::kActionNext;
    if (region_marked_ && (!held_is_junk_ || in_action_list)) {
      if (!committed_ && !held_is_junk_) ++dropped_;
      if (committed_ || held_is_junk_) {  // after a call: whitespace goes as after a call
        region_ws_.clear();
        trim_before_region_ = true;
      }
      enter_discard();
      return step(c);  // c may be the closer's first byte, or start another marker
    }
    if (call_ && committed_) {
      // Announced calls cannot be taken back: the call ends here.
      call_.reset();
      committed_ = false;
      back_to_text();
      return step(c);
    }
    call_.reset();
    std::string text = std::exchange(held_, std::string());
    bool junk = held_is_junk_;
    mode_ = Mode::kText;
    region_marked_ = false;
    held_is_junk_ = false;
    reasoning_ = false;
    closer_pos_ = 0;
    if (junk) {
      trim_ws_ = true;
      for (char t : text) step(t);  // may hold a real marker, e.g. a next <tool_call>
    } else {
      trim_ws_ = trim_before_region_;
      for (char t : text) plain_char(t);  // a malformed call: give it back verbatim
    }
    step(c);
  }

  void end_of_input() {
    if (mode_ == Mode::kCall) {
      bool closable = call_->at_member_boundary() && call_->force_close() == ScanStep::kDone;
      if (closable && progress()) {
        call_done();
      } else if (committed_) {
        call_.reset();  // cut off (max_tokens): arguments stay as streamed
        committed_ = false;
        back_to_text();
      }
    }
    if (mode_ == Mode::kDiscard || mode_ == Mode::kDone) {
      held_.clear();
      marker_buf_.clear();
      ws_buf_.clear();
      return;
    }
    if (mode_ != Mode::kText) {
      std::string text = std::exchange(held_, std::string());
      if (held_is_junk_) {
        text.clear();
      } else if (region_marked_) {
        text.clear();  // cut off before its call was announced: markup, dropped
        if (!skipping_) ++dropped_;
      } else {
        trim_ws_ = trim_before_region_;
      }
      region_marked_ = false;
      skipping_ = false;
      call_.reset();
      mode_ = Mode::kText;
      reasoning_ = false;
      for (char t : text) plain_char(t);
    }
    std::string pending = std::exchange(marker_buf_, std::string());
    for (char t : pending) plain_char(t);
    if (!trim_ws_ && !collapse_ws_) emit(ws_buf_);  // a dropped region's gap is not trailing text
    ws_buf_.clear();
  }

  ToolCallFormat format_;
  ParserOptions options_;
  CallKeys keys_;
  const std::vector<Marker>& markers_;
  ToolCallIdGenerator ids_;

  Mode mode_ = Mode::kText;
  bool reasoning_ = false;   // text goes to StreamDelta::reasoning
  std::string utf8_tail_;    // incomplete UTF-8 character at the end of the input
  std::string marker_buf_;   // text-mode suffix that may start a marker
  std::string ws_buf_;       // text-mode whitespace not yet emitted
  bool trim_ws_ = false;     // drop ws_buf_ (it follows a marker or call)
  bool trim_before_region_ = false;  // trim_ws_ when the current region began
  bool collapse_ws_ = false;  // ws_buf_ holds a dropped region's whitespace: add no more
  bool region_marked_ = false;  // the current region was opened by a marker (it is markup)
  std::string region_ws_;     // the whitespace before the current region's marker
  bool skipping_ = false;     // the call being scanned is not allowed: emit nothing
  int calls_done_ = 0;        // complete announced calls
  int dropped_ = 0;
  std::string held_;         // raw text of the current region, not yet committed
  bool held_is_junk_ = false;  // held_ follows a finished call
  size_t closer_pos_ = 0;
  std::optional<CallObjectParser> call_;
  bool committed_ = false;
  int call_index_ = -1;
  int next_index_ = 0;
  StreamDelta out_;
  bool finished_ = false;
};

ToolCallStreamParser::ToolCallStreamParser(ToolCallFormat format, ParserOptions options)
    : impl_(std::make_unique<Impl>(format, std::move(options))) {}
ToolCallStreamParser::~ToolCallStreamParser() = default;
ToolCallStreamParser::ToolCallStreamParser(ToolCallStreamParser&&) noexcept = default;
ToolCallStreamParser& ToolCallStreamParser::operator=(ToolCallStreamParser&&) noexcept = default;

StreamDelta ToolCallStreamParser::feed(std::string_view text) { return impl_->feed(text); }
StreamDelta ToolCallStreamParser::finish() { return impl_->finish(); }
bool ToolCallStreamParser::saturated() const { return impl_->saturated(); }
int ToolCallStreamParser::dropped_calls() const { return impl_->dropped_calls(); }

}  // namespace ms
