// Incremental JSON scanning for streamed tool calls.
//
// Model output arrives a few bytes at a time, and a tool call's arguments must
// be forwarded while they are still being generated. JsonScanner validates one
// JSON value byte by byte (strings with escapes and \u sequences, numbers,
// literals, nesting) and writes its compact form (insignificant whitespace
// dropped, everything else byte-exact, key order kept) as it goes, so a prefix
// of the output is always a prefix of the final compact text. One leniency:
// raw control characters inside strings (models emit raw newlines in code) are
// written escaped, so the compact text is always valid JSON.
//
// CallObjectParser uses it to read one tool-call object such as
// {"name": "f", "arguments": {...}}: it decodes the name, streams the
// arguments' compact text, and says when the call can be committed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ms::tool_call_detail {

// What one pushed byte did to the value being scanned.
enum class ScanStep {
  kMore,        // consumed; the value is not finished
  kDone,        // consumed; it finished the value
  kDoneUnused,  // not consumed: it ended a top-level number; re-dispatch it
  kError,       // not valid JSON here
};

class JsonScanner {
 public:
  static constexpr int kMaxDepth = 256;

  // Compact text is appended to *out (may be null to only validate).
  explicit JsonScanner(std::string* out = nullptr) : out_(out) {}
  ScanStep push(char c);
  // True once the first non-whitespace byte was consumed.
  bool started() const { return started_; }
  // True after a top-level number whose digits could end here (EOF is fine).
  bool can_end_at_eof() const;

 private:
  enum class State : uint8_t {
    kValue,        // expecting a value (whitespace skipped)
    kObjectFirst,  // after '{': key or '}'
    kObjectKey,    // after ',' in an object: key
    kColon,        // after a key
    kArrayFirst,   // after '[': value or ']'
    kAfterValue,   // inside a container after a value: ',' or close
    kString, kEscape, kUnicode,
    kNumMinus, kNumZero, kNumInt, kNumDot, kNumFrac, kNumExp, kNumExpSign, kNumExpInt,
    kLiteral,
    kDone,
  };
  ScanStep value_done();
  ScanStep start_value(char c);
  ScanStep number(char c);
  void emit(char c) { if (out_) out_->push_back(c); }

  std::string* out_;
  State state_ = State::kValue;
  std::vector<char> stack_;  // '{' or '['
  bool key_string_ = false;  // the string being scanned is an object key
  bool started_ = false;
  int unicode_left_ = 0;
  const char* literal_ = nullptr;  // "true" / "false" / "null" being matched
  int literal_pos_ = 0;
};

// Which keys of a call object hold the function name and its arguments.
struct CallKeys {
  std::vector<std::string> name;  // e.g. {"name"} or {"tool_name"}
  std::vector<std::string> args;  // e.g. {"arguments", "parameters"}
  // Llama 3 JSON calls look like any JSON answer, so until the call is
  // committed only the name / args keys and "type" are allowed there.
  bool strict = false;
};

// Parses one call object, starting at its '{'. The arguments must be an
// object, or a string holding one ("{\"a\": 1}", as some models and
// templates write them: decoded, and announced only once complete); absent
// arguments become "{}". Other keys are validated and ignored.
class CallObjectParser {
 public:
  explicit CallObjectParser(const CallKeys* keys) : keys_(keys) {}
  ScanStep push(char c);
  // The name is decoded and the arguments have begun (or the object ended):
  // the caller may announce the call.
  bool ready() const { return name_ok_ && (args_started_ || done_); }
  const std::string& name() const { return name_; }
  // Compact arguments text produced since the last call.
  std::string take_args();
  // After a complete member, where only ',' or '}' may follow: a model that
  // forgot the closing brace can be forgiven here.
  bool at_member_boundary() const;
  // Closes the object as if '}' had been pushed; only at_member_boundary().
  ScanStep force_close();

 private:
  enum class State : uint8_t { kOpen, kKeyOrEnd, kKey, kKeyBody, kColon, kValue, kValueBody, kCommaOrEnd, kDone };
  enum class Role : uint8_t { kName, kArgs, kOther };
  ScanStep finish_value();
  ScanStep close();

  const CallKeys* keys_;
  State state_ = State::kOpen;
  Role role_ = Role::kOther;
  JsonScanner value_;
  std::string key_raw_;
  std::string name_raw_;
  std::string sink_;   // values of ignored keys
  std::string args_;   // compact arguments not yet taken
  std::string args_string_;  // raw JSON string token of stringified arguments
  bool args_in_string_ = false;
  std::string name_;
  bool name_seen_ = false, name_ok_ = false;
  bool args_seen_ = false, args_started_ = false;
  bool done_ = false;
};

// Decodes a compact JSON string token ("..." with escapes); false if invalid.
bool decode_json_string(const std::string& raw, std::string* out);

}  // namespace ms::tool_call_detail
