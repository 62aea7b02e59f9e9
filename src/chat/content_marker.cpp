// content_marker.cpp: see content_marker.h.
#include "chat/content_marker.h"

#include <algorithm>

#include "tokenizer/unicode.h"

namespace ms {
namespace {

constexpr char32_t kEscape = 0xFDD0;        // noncharacter: never meaningful text
constexpr char32_t kIndexBase = 0x100000;   // plane 16 private use
constexpr size_t kMaxIndex = 0xFFFD;        // U+100000 .. U+10FFFD

// U+FDD0 in UTF-8.
constexpr std::string_view kEscapeUtf8 = "\xEF\xB7\x90";

// The code point U+100000..U+10FFFF encoded at s[i] (4 bytes), or -1.
long plane16_at(std::string_view s, size_t i) {
  if (i + 4 > s.size() || static_cast<unsigned char>(s[i]) != 0xF4) return -1;
  const unsigned char b1 = s[i + 1], b2 = s[i + 2], b3 = s[i + 3];
  if (b1 < 0x80 || b1 > 0x8F || (b2 & 0xC0) != 0x80 || (b3 & 0xC0) != 0x80) return -1;
  return (long(b1 & 0x0F) << 12 | long(b2 & 0x3F) << 6 | long(b3 & 0x3F)) + 0x100000;
}

}  // namespace

std::string ContentMarker::mark_text(std::string_view s, size_t* count) const {
  auto next_escape = [&](size_t from) { return s.find(kEscapeUtf8, from); };
  std::string out;
  size_t pos = 0;
  while (pos < s.size()) {
    auto hit = tok_.find_special_text(s, pos);
    const size_t esc = next_escape(pos);
    const size_t special_at = hit ? hit->begin : std::string_view::npos;
    if (esc == std::string_view::npos && special_at == std::string_view::npos) break;
    if (out.empty()) out.reserve(s.size() + 16);
    if (esc < special_at) {  // a literal U+FDD0: doubled (counted: unmark() must undo it)
      ++*count;
      out.append(s.substr(pos, esc - pos));
      out.append(kEscapeUtf8);
      out.append(kEscapeUtf8);
      pos = esc + kEscapeUtf8.size();
      continue;
    }
    out.append(s.substr(pos, hit->begin - pos));
    if (static_cast<size_t>(hit->index) <= kMaxIndex) {
      unicode::append_utf8(out, kEscape);
      unicode::append_utf8(out, kIndexBase + static_cast<char32_t>(hit->index));
      ++*count;
    } else {
      // More than 65534 added tokens: cannot be marked; drop the text rather
      // than let it become a control token.
      ++*count;
    }
    pos = hit->end;
  }
  if (pos == 0 && out.empty()) return std::string(s);
  out.append(s.substr(pos));
  return out;
}

size_t ContentMarker::mark(nlohmann::ordered_json& root, const std::vector<std::string>& skip) const {
  using Json = nlohmann::ordered_json;
  size_t count = 0;
  std::vector<Json*> todo;
  auto visit_object = [&](Json& obj, bool top) {
    bool rename = false;
    for (auto it = obj.begin(); it != obj.end() && !rename; ++it) {
      size_t n = 0;
      rename = mark_text(it.key(), &n) != it.key();
    }
    if (rename) {
      Json fresh = Json::object();
      for (auto it = obj.begin(); it != obj.end(); ++it) {
        const bool keep = top && std::find(skip.begin(), skip.end(), it.key()) != skip.end();
        fresh[keep ? it.key() : mark_text(it.key(), &count)] = std::move(it.value());
      }
      obj = std::move(fresh);
    }
    for (auto it = obj.begin(); it != obj.end(); ++it) {
      if (top && std::find(skip.begin(), skip.end(), it.key()) != skip.end()) continue;
      todo.push_back(&it.value());
    }
  };
  if (root.is_object()) visit_object(root, true);
  else todo.push_back(&root);
  while (!todo.empty()) {
    Json* j = todo.back();
    todo.pop_back();
    if (j->is_string()) {
      const std::string& s = j->get_ref<const std::string&>();
      size_t n = 0;
      std::string m = mark_text(s, &n);
      if (n > 0 || m.size() != s.size()) *j = std::move(m);
      count += n;
    } else if (j->is_array()) {
      for (auto& e : *j) todo.push_back(&e);
    } else if (j->is_object()) {
      visit_object(*j, false);
    }
  }
  return count;
}

ContentMarker::Unmarked ContentMarker::unmark(std::string_view s) const {
  Unmarked u;
  u.text.reserve(s.size());
  const auto& added = tok_.added_tokens();
  size_t pos = 0;
  while (pos < s.size()) {
    const size_t esc = s.find(kEscapeUtf8, pos);
    if (esc == std::string_view::npos) break;
    u.text.append(s.substr(pos, esc - pos));
    const size_t after = esc + kEscapeUtf8.size();
    if (s.substr(after, kEscapeUtf8.size()) == kEscapeUtf8) {  // doubled: one literal U+FDD0
      u.text.append(kEscapeUtf8);
      pos = after + kEscapeUtf8.size();
      continue;
    }
    const long cp = plane16_at(s, after);
    const long index = cp - static_cast<long>(kIndexBase);
    if (cp >= 0 && index >= 0 && static_cast<size_t>(index) < added.size()) {
      const std::string& text = added[static_cast<size_t>(index)].content;
      u.text_only.push_back({u.text.size(), u.text.size() + text.size()});
      u.text.append(text);
      pos = after + 4;
      continue;
    }
    u.text.append(kEscapeUtf8);  // a stray escape (cut by the template): kept as is
    pos = after;
  }
  u.text.append(s.substr(pos));
  return u;
}

}  // namespace ms
