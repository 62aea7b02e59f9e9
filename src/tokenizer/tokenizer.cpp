// Implementation of tokenizer.h: loading tokenizer.json and its side files,
// added-token matching (a byte trie, leftmost-longest like HF's Aho-Corasick),
// encode, decode and the post-processor.
#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <climits>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unordered_map>

#include "core/json_parse.h"
#include "tokenizer/unicode.h"

namespace ms {

using nlohmann::json;

// Byte trie over added-token contents; find() returns the leftmost, then
// longest, match whose token is allowed.
class AddedTokenMatcher {
 public:
  struct Match {
    size_t begin, end;
    int index;  // into Tokenizer::added_
  };

  bool empty() const { return count_ == 0; }

  void add(std::string_view content, int index) {
    if (content.empty()) return;
    int node = 0;
    for (unsigned char b : content) {
      const uint64_t key = (uint64_t(node) << 8) | b;
      auto it = edges_.find(key);
      if (it == edges_.end()) {
        terminal_.push_back(-1);
        it = edges_.emplace(key, static_cast<int>(terminal_.size()) - 1).first;
      }
      node = it->second;
    }
    terminal_[node] = index;
    first_[static_cast<unsigned char>(content[0])] = true;
    ++count_;
  }

  // allowed(index, begin, end): whether token `index` may match s[begin, end).
  template <typename Allowed>
  std::optional<Match> find(std::string_view s, size_t from, const Allowed& allowed) const {
    for (size_t i = from; i < s.size(); ++i) {
      if (!first_[static_cast<unsigned char>(s[i])]) continue;
      int node = 0, best = -1;
      size_t best_end = 0;
      for (size_t j = i; j < s.size(); ++j) {
        auto it = edges_.find((uint64_t(node) << 8) | static_cast<unsigned char>(s[j]));
        if (it == edges_.end()) break;
        node = it->second;
        const int t = terminal_[node];
        if (t >= 0 && allowed(t, i, j + 1)) {
          best = t;
          best_end = j + 1;
        }
      }
      if (best >= 0) return Match{i, best_end, best};
    }
    return std::nullopt;
  }

 private:
  std::unordered_map<uint64_t, int> edges_;  // (node << 8 | byte) -> child node
  std::vector<int> terminal_{-1};            // node -> token index or -1
  std::array<bool, 256> first_{};
  int count_ = 0;
};

// Which special tokens encode() may match: all, none, or all but those that
// overlap a text-only range (byte offsets into the text given to encode();
// `offset` maps a piece's offsets back to it).
struct SpecialPolicy {
  bool all = true;
  std::span<const TextRange> text_only;  // sorted, not overlapping
  size_t offset = 0;

  bool overlaps(size_t b, size_t e) const {
    auto it = std::upper_bound(text_only.begin(), text_only.end(), b + offset,
                               [](size_t x, const TextRange& r) { return x < r.end; });
    return it != text_only.end() && it->begin < e + offset;
  }
  bool allows(const AddedToken& t, size_t b, size_t e) const {
    if (!t.special) return true;
    if (all) return text_only.empty() || !overlaps(b, e);
    return false;
  }
};

Tokenizer::Tokenizer() = default;
Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;

static Result<std::string> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return not_found("cannot open " + path);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

static Result<json> parse_json_file(std::string_view text, const std::string& name) {
  auto j = parse_json(text);
  if (!j.is_ok()) return data_loss(name + ": not valid JSON (" + j.status().message() + ")");
  return std::move(j.value());
}

// "<s>" or {"content": "<s>", ...} or null -> the token text.
static std::string token_text(const json& j) {
  if (j.is_string()) return j.get<std::string>();
  if (j.is_object() && j.contains("content") && j["content"].is_string()) return j["content"].get<std::string>();
  return "";
}

static Status parse_post_processor(const json& j, std::vector<int32_t>& prefix, std::vector<int32_t>& suffix) {
  if (j.is_null()) return Status::ok();
  const std::string type = j.value("type", std::string());
  if (type == "ByteLevel") return Status::ok();  // only moves offsets; ids unchanged
  if (type == "Sequence") {
    for (const json& sub : j.value("processors", json::array()))
      MS_RETURN_IF_ERROR(parse_post_processor(sub, prefix, suffix));
    return Status::ok();
  }
  if (type == "TemplateProcessing") {
    if (!prefix.empty() || !suffix.empty())
      return unimplemented("post_processor: more than one TemplateProcessing is not supported");
    const json& specials = j.value("special_tokens", json::object());
    bool seen_sequence = false;
    for (const json& item : j.value("single", json::array())) {
      if (item.contains("Sequence")) {
        if (item["Sequence"].value("id", std::string("A")) != "A")
          return invalid_argument("post_processor TemplateProcessing: single template uses sequence B");
        if (seen_sequence) return unimplemented("post_processor TemplateProcessing: sequence A twice");
        seen_sequence = true;
      } else if (item.contains("SpecialToken")) {
        const std::string name = item["SpecialToken"].value("id", std::string());
        if (!specials.contains(name))
          return invalid_argument("post_processor TemplateProcessing: special token '" + name + "' undefined");
        for (const json& id : specials[name].value("ids", json::array()))
          (seen_sequence ? suffix : prefix).push_back(id.get<int32_t>());
      } else {
        return invalid_argument("post_processor TemplateProcessing: unknown template item " + item.dump());
      }
    }
    return Status::ok();
  }
  return unimplemented("tokenizer.json post_processor type '" + type +
                       "' is not supported (supported: TemplateProcessing, ByteLevel, Sequence)");
}

static Status check_decoder(const json& j) {
  if (j.is_null())
    return unimplemented("tokenizer.json has no decoder; only the ByteLevel decoder is supported");
  const std::string type = j.value("type", std::string());
  if (type == "ByteLevel") return Status::ok();
  if (type == "Sequence") {
    for (const json& sub : j.value("decoders", json::array())) MS_RETURN_IF_ERROR(check_decoder(sub));
    return Status::ok();
  }
  return unimplemented("tokenizer.json decoder type '" + type + "' is not supported (supported: ByteLevel, Sequence)");
}

// Ids follow HF tokenizers' AddedVocabulary, not the "id" written in the
// file: a token already in the vocab (or already added) keeps that id; a new
// one gets the next id after the vocab and the added tokens.
Status Tokenizer::add_added_token(AddedToken t) {
  for (AddedToken& a : added_) {
    if (a.content == t.content) {
      t.id = a.id;
      a = std::move(t);
      return Status::ok();
    }
  }
  if (auto id = model_.token_to_id(t.content)) {
    t.id = *id;
  } else {
    const int32_t vocab_count = model_.vocab_count();
    int32_t max_added = -1;
    for (const AddedToken& a : added_) max_added = std::max(max_added, a.id);
    t.id = (max_added >= vocab_count || (max_added >= 0 && vocab_count == 0)) ? max_added + 1 : vocab_count;
  }
  added_.push_back(std::move(t));
  return Status::ok();
}

static Result<AddedToken> parse_added_token(const json& a, int32_t id) {
  AddedToken t;
  t.id = id;
  t.content = a.value("content", std::string());
  t.special = a.value("special", false);
  t.lstrip = a.value("lstrip", false);
  t.rstrip = a.value("rstrip", false);
  t.normalized = a.value("normalized", !t.special);
  t.single_word = a.value("single_word", false);
  if (t.content.empty()) return invalid_argument("added token with id " + std::to_string(id) + " is empty");
  return t;
}

Status Tokenizer::init_from_json(const json& j) {
  if (!j.is_object()) return invalid_argument("top level is not an object");
  for (const char* key : {"truncation", "padding"}) {
    if (j.contains(key) && !j[key].is_null())
      return unimplemented(std::string("tokenizer.json ") + key + " is not supported (must be null)");
  }
  MS_ASSIGN_OR_RETURN(normalizer_, Normalizer::from_json(j.value("normalizer", json())));
  MS_ASSIGN_OR_RETURN(pre_tokenizer_, PreTokenizer::from_json(j.value("pre_tokenizer", json())));
  if (!pre_tokenizer_.byte_level())
    return unimplemented("tokenizer.json pre_tokenizer has no ByteLevel step; only byte-level BPE is supported");
  if (!j.contains("model")) return invalid_argument("tokenizer.json has no model");
  MS_ASSIGN_OR_RETURN(model_, BpeModel::from_json(j["model"]));
  MS_RETURN_IF_ERROR(parse_post_processor(j.value("post_processor", json()), prefix_ids_, suffix_ids_));
  MS_RETURN_IF_ERROR(check_decoder(j.value("decoder", json())));
  const json added = j.value("added_tokens", json::array());
  for (size_t i = 0; i < added.size(); ++i) {
    const json& a = added[i];
    // HF stores ids as u32: a negative or non-integer id is a broken file,
    // not something to renumber silently.
    int32_t id = -1;
    if (a.is_object() && a.contains("id")) {
      const json& v = a["id"];
      if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > INT32_MAX) {
        return invalid_argument("added_tokens[" + std::to_string(i) + "] (" + a.value("content", json()).dump(-1, ' ', false, json::error_handler_t::replace) +
                                "): id " + v.dump() + " is not a token id (a non-negative integer)");
      }
      id = v.get<int32_t>();
    }
    MS_ASSIGN_OR_RETURN(AddedToken t, parse_added_token(a, id));
    MS_RETURN_IF_ERROR(add_added_token(std::move(t)));
  }
  return Status::ok();
}

Status Tokenizer::load_side_files(const std::string& dir) {
  namespace fs = std::filesystem;
  auto load_opt = [&](const char* name) -> Result<json> {
    const std::string p = (fs::path(dir) / name).string();
    if (!fs::exists(p)) return json();
    MS_ASSIGN_OR_RETURN(std::string text, read_file(p));
    return parse_json_file(text, p);
  };
  MS_ASSIGN_OR_RETURN(json config, load_opt("tokenizer_config.json"));
  MS_ASSIGN_OR_RETURN(json special_map, load_opt("special_tokens_map.json"));
  MS_ASSIGN_OR_RETURN(json gen, load_opt("generation_config.json"));
  if (config.is_object()) {
    if (config.contains("added_tokens_decoder") && config["added_tokens_decoder"].is_object()) {
      for (auto it = config["added_tokens_decoder"].begin(); it != config["added_tokens_decoder"].end(); ++it) {
        const std::string& key = it.key();
        const bool digits = !key.empty() && key.size() <= 10 &&
                            std::all_of(key.begin(), key.end(), [](char c) { return c >= '0' && c <= '9'; });
        if (!digits || std::stoll(key) > INT32_MAX) {
          return invalid_argument("tokenizer_config.json: added_tokens_decoder key '" + key +
                                  "' is not a token id (a non-negative integer)");
        }
        const int32_t id = static_cast<int32_t>(std::stoll(key));
        const std::string content = it.value().value("content", std::string());
        const bool known = std::any_of(added_.begin(), added_.end(),
                                       [&](const AddedToken& a) { return a.id == id || a.content == content; });
        if (known) continue;  // tokenizer.json wins, as in transformers
        MS_ASSIGN_OR_RETURN(AddedToken t, parse_added_token(it.value(), id));
        MS_RETURN_IF_ERROR(add_added_token(std::move(t)));
      }
    }
    bos_token_ = token_text(config.value("bos_token", json()));
    eos_token_ = token_text(config.value("eos_token", json()));
    const json& tmpl = config.value("chat_template", json());
    if (tmpl.is_string()) {
      chat_template_ = tmpl.get<std::string>();
    } else if (tmpl.is_array()) {  // [{"name": "default", "template": "..."}, ...]
      for (const json& t : tmpl)
        if (t.value("name", std::string()) == "default") chat_template_ = t.value("template", std::string());
    }
    if (!chat_template_.empty()) chat_template_source_ = (fs::path(dir) / "tokenizer_config.json").string();
  }
  if (special_map.is_object()) {
    if (bos_token_.empty()) bos_token_ = token_text(special_map.value("bos_token", json()));
    if (eos_token_.empty()) eos_token_ = token_text(special_map.value("eos_token", json()));
  }
  const std::string jinja = (fs::path(dir) / "chat_template.jinja").string();
  if (chat_template_.empty() && fs::exists(jinja)) {
    MS_ASSIGN_OR_RETURN(chat_template_, read_file(jinja));
    chat_template_source_ = jinja;
  }
  if (gen.is_object()) {
    if (gen.contains("bos_token_id") && gen["bos_token_id"].is_number_integer())
      bos_id_ = gen["bos_token_id"].get<int32_t>();
    const json& eos = gen.value("eos_token_id", json());
    if (eos.is_number_integer()) eos_ids_.push_back(eos.get<int32_t>());
    for (const json& e : eos.is_array() ? eos : json::array())
      if (e.is_number_integer()) eos_ids_.push_back(e.get<int32_t>());
  }
  return Status::ok();
}

Status Tokenizer::finalize() {
  vocab_size_ = model_.max_id() + 1;
  for (const AddedToken& a : added_) vocab_size_ = std::max(vocab_size_, a.id + 1);
  token_bytes_.assign(vocab_size_, std::string());
  special_.assign(vocab_size_, 0);
  added_index_.assign(vocab_size_, -1);
  // ByteLevel decoder: a token whose every code point is in the byte table
  // decodes to those bytes; any other token decodes to its own UTF-8 text.
  auto bytes_of = [](const std::string& token) {
    std::string out;
    for (size_t i = 0; i < token.size();) {
      const unicode::Decoded d = unicode::decode_utf8(token, i);
      i += d.len;
      const int b = d.valid ? unicode::code_point_to_byte(d.cp) : -1;
      if (b < 0) return token;
      out.push_back(static_cast<char>(b));
    }
    return out;
  };
  for (int32_t id = 0; id <= model_.max_id(); ++id)
    if (const std::string* t = model_.id_to_token(id)) token_bytes_[id] = bytes_of(*t);
  raw_matcher_ = std::make_unique<AddedTokenMatcher>();
  norm_matcher_ = std::make_unique<AddedTokenMatcher>();
  for (size_t i = 0; i < added_.size(); ++i) {
    const AddedToken& a = added_[i];
    token_bytes_[a.id] = bytes_of(a.content);
    special_[a.id] = a.special;
    added_index_[a.id] = static_cast<int32_t>(i);
    if (a.normalized) {
      std::string content = a.content;
      normalizer_.normalize(content);
      norm_matcher_->add(content, static_cast<int>(i));
    } else {
      raw_matcher_->add(a.content, static_cast<int>(i));
    }
  }
  for (int32_t id : prefix_ids_)
    if (id < 0 || id >= vocab_size_) return invalid_argument("post_processor uses unknown id " + std::to_string(id));
  for (int32_t id : suffix_ids_)
    if (id < 0 || id >= vocab_size_) return invalid_argument("post_processor uses unknown id " + std::to_string(id));
  // tokenizer_config's bos_token wins over generation_config's bos_token_id.
  if (!bos_token_.empty())
    if (auto id = token_to_id(bos_token_)) bos_id_ = *id;
  if (!eos_token_.empty()) {
    if (auto id = token_to_id(eos_token_); id && std::find(eos_ids_.begin(), eos_ids_.end(), *id) == eos_ids_.end())
      eos_ids_.insert(eos_ids_.begin(), *id);
  }
  return Status::ok();
}

Result<Tokenizer> Tokenizer::from_json_text(std::string_view json_text, const std::string& name) {
  MS_ASSIGN_OR_RETURN(json j, parse_json_file(json_text, name));
  Tokenizer t;
  t.source_ = name;
  try {
    MS_RETURN_IF_ERROR(t.init_from_json(j).with_context(name));
    MS_RETURN_IF_ERROR(t.finalize().with_context(name));
  } catch (const std::exception& e) {  // nlohmann type errors on malformed fields
    return invalid_argument(name + ": malformed field: " + e.what());
  }
  return t;
}

Result<Tokenizer> Tokenizer::load(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(path, ec)) return not_found(path + ": no such directory or tokenizer.json file");
  const bool is_dir = fs::is_directory(path, ec);
  const std::string file = is_dir ? (fs::path(path) / "tokenizer.json").string() : path;
  MS_ASSIGN_OR_RETURN(std::string text, read_file(file));
  MS_ASSIGN_OR_RETURN(json j, parse_json_file(text, file));
  text.clear();
  Tokenizer t;
  t.source_ = file;
  try {
    MS_RETURN_IF_ERROR(t.init_from_json(j).with_context(file));
    j = json();
    MS_RETURN_IF_ERROR(t.load_side_files(fs::path(file).parent_path().string()).with_context(path));
    MS_RETURN_IF_ERROR(t.finalize().with_context(file));
  } catch (const std::exception& e) {
    return invalid_argument(path + ": malformed field: " + e.what());
  }
  return t;
}

std::optional<Tokenizer::SpecialMatch> Tokenizer::find_special_text(std::string_view text, size_t from) const {
  auto special = [&](int index, size_t, size_t) { return added_[index].special; };
  std::optional<SpecialMatch> best;
  for (const AddedTokenMatcher* m : {raw_matcher_.get(), norm_matcher_.get()}) {
    if (!m || m->empty()) continue;
    auto hit = m->find(text, from, special);
    if (hit && (!best || hit->begin < best->begin || (hit->begin == best->begin && hit->end > best->end))) {
      best = SpecialMatch{hit->begin, hit->end, hit->index};
    }
  }
  return best;
}

Status Tokenizer::check_fits_vocab(int64_t model_vocab_size, const std::string& model_source) const {
  auto outside = [&](int32_t id, const std::string& what) {
    return invalid_argument(source_ + ": " + what + " " + std::to_string(id) + " (" + json(id_to_token(id)).dump(-1, ' ', false, json::error_handler_t::replace) +
                            ") is outside the model's vocabulary of " + std::to_string(model_vocab_size) +
                            " tokens (" + model_source + " vocab_size): the tokenizer does not belong to this model");
  };
  if (vocab_size_ > model_vocab_size) {
    const int32_t id = vocab_size_ - 1;
    return outside(id, added_index_[id] >= 0 ? "added token id" : "token id");
  }
  if (bos_id_ && (*bos_id_ < 0 || *bos_id_ >= model_vocab_size)) return outside(*bos_id_, "bos token id");
  for (int32_t id : eos_ids_) {
    if (id < 0 || id >= model_vocab_size) return outside(id, "eos token id");
  }
  return Status::ok();
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  for (const AddedToken& a : added_)
    if (a.content == token) return a.id;
  return model_.token_to_id(token);
}

std::string Tokenizer::id_to_token(int32_t id) const {
  if (id < 0 || id >= vocab_size_) return "";
  if (added_index_[id] >= 0) return added_[added_index_[id]].content;
  const std::string* t = model_.id_to_token(id);
  return t ? *t : "";
}

bool Tokenizer::is_special(int32_t id) const { return id >= 0 && id < vocab_size_ && special_[id]; }

std::string_view Tokenizer::token_bytes(int32_t id) const {
  if (id < 0 || id >= vocab_size_) return {};
  return token_bytes_[id];
}

void Tokenizer::encode_text(std::string& text, std::vector<int32_t>& out) const {
  thread_local std::vector<Span> words;
  pre_tokenizer_.split(text, words);
  for (const Span& w : words) model_.encode_word(std::string_view(text).substr(w.begin, w.end - w.begin), out);
}

// Start of the code point that ends at byte `i` of `s` (i > 0), if valid.
static std::optional<std::pair<size_t, char32_t>> char_before(std::string_view s, size_t i) {
  for (size_t len = 1; len <= 4 && len <= i; ++len) {
    const unicode::Decoded d = unicode::decode_utf8(s, i - len);
    if (d.valid && static_cast<size_t>(d.len) == len) return std::pair{i - len, d.cp};
  }
  return std::nullopt;
}

// Cuts `text` at added-token matches (with lstrip / rstrip) and calls
// on_text for the pieces between them and on_token for the tokens.
template <typename OnText>
static void split_added(const AddedTokenMatcher& m, std::string_view text, const SpecialPolicy& policy,
                        const std::vector<AddedToken>& tokens, OnText&& on_text, std::vector<int32_t>& out) {
  size_t start = 0, pos = 0;
  auto allowed = [&](int index, size_t b, size_t e) { return policy.allows(tokens[index], b, e); };
  while (!m.empty()) {
    auto match = m.find(text, pos, allowed);
    if (!match) break;
    size_t b = match->begin, e = match->end;
    const AddedToken& t = tokens[match->index];
    if (t.single_word) {  // HF: no word character (regex \w) right before or after
      auto before = b > 0 ? char_before(text, b) : std::nullopt;
      const unicode::Decoded after = e < text.size() ? unicode::decode_utf8(text, e) : unicode::Decoded{0, 0, false};
      if ((before && is_word_character(before->second)) || (after.valid && is_word_character(after.cp))) {
        pos = e;  // the match is consumed, as HF's non-overlapping search does
        continue;
      }
    }
    if (t.lstrip) {
      while (b > start) {
        auto c = char_before(text, b);
        if (!c || !unicode::is_whitespace(c->second) || c->first < start) break;
        b = c->first;
      }
    }
    if (t.rstrip) {
      while (e < text.size()) {
        const unicode::Decoded d = unicode::decode_utf8(text, e);
        if (!d.valid || !unicode::is_whitespace(d.cp)) break;
        e += d.len;
      }
    }
    if (b > start) on_text(text.substr(start, b - start));
    out.push_back(t.id);
    start = pos = e;
  }
  if (start < text.size()) on_text(text.substr(start));
}

void Tokenizer::encode_normalized_part(std::string_view part, size_t part_offset, const SpecialPolicy& policy,
                                       std::vector<int32_t>& out) const {
  std::string s(part);
  normalizer_.normalize(s);
  if (norm_matcher_->empty()) {
    encode_text(s, out);
    return;
  }
  // Offsets survive an identity normalizer; after NFC they may not, so a
  // piece that touches a text-only range then matches no special token.
  SpecialPolicy p = policy;
  p.offset = part_offset;
  if (!normalizer_.is_identity() && !policy.text_only.empty() && policy.overlaps(part_offset, part_offset + part.size())) {
    p.all = false;
  }
  split_added(
      *norm_matcher_, s, p, added_,
      [&](std::string_view piece) {
        std::string p(piece);
        encode_text(p, out);
      },
      out);
}

std::vector<int32_t> Tokenizer::encode_with(std::string_view text, bool add_special_tokens,
                                            const SpecialPolicy& policy) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  if (add_special_tokens) out = prefix_ids_;
  split_added(
      *raw_matcher_, text, policy, added_,
      [&](std::string_view piece) {
        encode_normalized_part(piece, static_cast<size_t>(piece.data() - text.data()), policy, out);
      },
      out);
  if (add_special_tokens) out.insert(out.end(), suffix_ids_.begin(), suffix_ids_.end());
  return out;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens, bool parse_special) const {
  SpecialPolicy policy;
  policy.all = parse_special;
  return encode_with(text, add_special_tokens, policy);
}

std::vector<int32_t> Tokenizer::encode_with_text_ranges(std::string_view text, std::span<const TextRange> text_only,
                                                        bool add_special_tokens) const {
  SpecialPolicy policy;
  policy.text_only = text_only;
  return encode_with(text, add_special_tokens, policy);
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  std::string bytes;
  bytes.reserve(ids.size() * 4);
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size_) continue;
    if (skip_special && special_[id]) continue;
    bytes += token_bytes_[id];
  }
  return unicode::utf8_lossy(bytes);
}

}  // namespace ms
