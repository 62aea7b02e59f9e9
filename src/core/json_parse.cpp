// Bounded JSON parsing (see json_parse.h): a SAX handler that builds the value
// with an explicit stack of open containers and stops at the first container
// past the depth limit.
#include "core/json_parse.h"

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace ms {
namespace {

template <typename Json>
class BoundedBuilder {
 public:
  using number_integer_t = typename Json::number_integer_t;
  using number_unsigned_t = typename Json::number_unsigned_t;
  using number_float_t = typename Json::number_float_t;
  using string_t = typename Json::string_t;
  using binary_t = typename Json::binary_t;

  BoundedBuilder(Json* root, int max_depth) : root_(root), max_depth_(max_depth) {}

  bool null() { return add(Json(nullptr)); }
  bool boolean(bool v) { return add(Json(v)); }
  bool number_integer(number_integer_t v) { return add(Json(v)); }
  bool number_unsigned(number_unsigned_t v) { return add(Json(v)); }
  bool number_float(number_float_t v, const string_t&) { return add(Json(v)); }
  bool string(string_t& v) { return add(Json(std::move(v))); }
  bool binary(binary_t& v) { return add(Json::binary(std::move(v))); }
  bool start_object(std::size_t) { return open(Json::object()); }
  bool start_array(std::size_t) { return open(Json::array()); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }
  bool key(string_t& k) {
    // Duplicate keys keep the last value, as nlohmann's own parser does.
    slot_ = &(*open_.back())[k];
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) {
    error_ = invalid_argument(strip_id(e.what()));
    return false;
  }

  // Set when the handler stopped the parse.
  const Status& error() const { return error_; }
  bool too_deep() const { return too_deep_; }

 private:
  // "[json.exception.parse_error.101] parse error at ..." -> "parse error at ...".
  static std::string strip_id(const std::string& what) {
    if (!what.empty() && what[0] == '[') {
      size_t close = what.find("] ");
      if (close != std::string::npos) return what.substr(close + 2);
    }
    return what;
  }

  // Places `v` where the parser is (top level, next array element, or the
  // value of the last key) and returns where it went.
  Json* place(Json&& v) {
    if (open_.empty()) {
      *root_ = std::move(v);
      return root_;
    }
    Json* parent = open_.back();
    if (parent->is_array()) {
      parent->push_back(std::move(v));
      return &parent->back();
    }
    *slot_ = std::move(v);
    return slot_;
  }
  bool add(Json&& v) {
    place(std::move(v));
    return true;
  }
  bool open(Json&& container) {
    if (static_cast<int>(open_.size()) >= max_depth_) {
      too_deep_ = true;
      return false;
    }
    // Pointers into open_ stay valid: a container only grows after the child
    // it holds at its end has been closed.
    open_.push_back(place(std::move(container)));
    return true;
  }
  bool close() {
    open_.pop_back();
    return true;
  }

  Json* root_;
  int max_depth_;
  std::vector<Json*> open_;  // containers being filled, outermost first
  Json* slot_ = nullptr;     // value of the last key in the innermost object
  Status error_;
  bool too_deep_ = false;
};

// Byte offset of the bracket that opens level max_depth + 1. Only called after
// the parser stopped there, so the text before it is valid JSON and a plain
// scan that skips strings finds it.
size_t first_too_deep_byte(std::string_view text, int max_depth) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return i;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return text.size();
}

template <typename Json>
Result<Json> parse_bounded(std::string_view text, int max_depth) {
  Json root;
  BoundedBuilder<Json> builder(&root, max_depth);
  const bool ok = Json::sax_parse(text.begin(), text.end(), &builder, nlohmann::json::input_format_t::json,
                                  /*strict=*/true);
  if (builder.too_deep()) {
    return out_of_range("JSON nested deeper than the limit of " + std::to_string(max_depth) + " levels (at byte " +
                        std::to_string(first_too_deep_byte(text, max_depth)) + ")");
  }
  if (!builder.error().is_ok()) return builder.error();
  if (!ok) return invalid_argument("parse error");
  return root;
}

}  // namespace

Result<nlohmann::json> parse_json(std::string_view text, int max_depth) {
  return parse_bounded<nlohmann::json>(text, max_depth);
}

Result<nlohmann::json> read_json_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found(path + ": cannot open");
  std::stringstream text;
  text << in.rdbuf();
  auto j = parse_json(text.str());
  if (!j.is_ok()) return invalid_argument(path + ": not valid JSON (" + j.status().message() + ")");
  return j;
}

Result<nlohmann::ordered_json> parse_ordered_json(std::string_view text, int max_depth) {
  return parse_bounded<nlohmann::ordered_json>(text, max_depth);
}

}  // namespace ms
