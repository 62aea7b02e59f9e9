// Implementation of bpe.h. Short words (most of them) merge with an array of
// pair ranks rescanned per merge; long words use a linked list and a binary
// heap ordered by (rank, position), the order HF tokenizers merges in.
#include "tokenizer/bpe.h"

#include <algorithm>
#include <cstring>
#include <mutex>
#include <queue>
#include <shared_mutex>

#include "tokenizer/unicode.h"

namespace ms {

using nlohmann::json;

struct BpeModel::MergeMap {
  struct Slot {
    uint64_t key = kEmpty;
    int32_t rank = 0;
    int32_t id = 0;
  };
  static constexpr uint64_t kEmpty = ~0ull;
  std::vector<Slot> slots;
  uint64_t mask = 0;

  static uint64_t key_of(int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }
  static uint64_t hash(uint64_t k) { return (k * 0x9E3779B97F4A7C15ull) >> 20; }

  void reserve(size_t n) {
    size_t cap = 16;
    while (cap < n * 2) cap <<= 1;
    slots.assign(cap, Slot{});
    mask = cap - 1;
  }
  // A pair listed twice keeps its last rank, as HF's map collection does.
  void insert(int32_t a, int32_t b, int32_t rank, int32_t id) {
    const uint64_t k = key_of(a, b);
    for (uint64_t i = hash(k) & mask;; i = (i + 1) & mask) {
      if (slots[i].key == k || slots[i].key == kEmpty) {
        slots[i] = {k, rank, id};
        return;
      }
    }
  }
  const Slot* find(int32_t a, int32_t b) const {
    const uint64_t k = key_of(a, b);
    for (uint64_t i = hash(k) & mask;; i = (i + 1) & mask) {
      if (slots[i].key == k) return &slots[i];
      if (slots[i].key == kEmpty) return nullptr;
    }
  }
};

// Word -> ids cache: open addressing over flat slots, keys and ids in two
// arenas, so a hit costs one slot read and one key compare (a node-based
// unordered_map cost ~20% of encode time here). Readers share the lock; it
// stops growing when half full or when the key arena reaches kMaxKeyBytes.
struct BpeModel::Cache {
  static constexpr size_t kSlots = size_t(1) << 18;
  static constexpr size_t kMaxEntries = kSlots / 2;
  static constexpr size_t kMaxWordBytes = 1024;
  static constexpr size_t kMaxKeyBytes = size_t(16) << 20;
  struct Slot {
    uint64_t hash = 0;  // 0 = empty (stored hashes have the low bit set)
    uint32_t key_offset = 0, key_len = 0;
    uint32_t ids_offset = 0, ids_len = 0;
  };
  mutable std::shared_mutex mu;
  std::vector<Slot> slots = std::vector<Slot>(kSlots);
  std::string keys;
  std::vector<int32_t> ids;
  size_t entries = 0;

  static uint64_t hash_of(std::string_view w) { return uint64_t(StringHash{}(w)) | 1; }

  // Slot holding `w`, or the empty slot where it would go.
  const Slot& probe(std::string_view w, uint64_t h) const {
    for (size_t i = h & (kSlots - 1);; i = (i + 1) & (kSlots - 1)) {
      const Slot& s = slots[i];
      if (s.hash == 0) return s;
      if (s.hash == h && s.key_len == w.size() && std::memcmp(keys.data() + s.key_offset, w.data(), w.size()) == 0)
        return s;
    }
  }
  bool lookup(std::string_view w, uint64_t h, std::vector<int32_t>& out) const {
    std::shared_lock lock(mu);
    const Slot& s = probe(w, h);
    if (s.hash == 0) return false;
    out.insert(out.end(), ids.begin() + s.ids_offset, ids.begin() + s.ids_offset + s.ids_len);
    return true;
  }
  void insert(std::string_view w, uint64_t h, const int32_t* first, size_t n) {
    std::unique_lock lock(mu);
    if (entries >= kMaxEntries || keys.size() + w.size() > kMaxKeyBytes) return;
    Slot& s = const_cast<Slot&>(probe(w, h));
    if (s.hash != 0) return;  // another thread got there first
    s = {h, uint32_t(keys.size()), uint32_t(w.size()), uint32_t(ids.size()), uint32_t(n)};
    keys.append(w);
    ids.insert(ids.end(), first, first + n);
    ++entries;
  }
};

void FlatStringIdMap::build(const std::vector<std::string>& keys) {
  size_t cap = 16;
  while (cap < keys.size() * 2) cap <<= 1;
  slots_.assign(cap, -1);
  mask_ = cap - 1;
  for (int32_t id = 0; id < static_cast<int32_t>(keys.size()); ++id) {
    const std::string& k = keys[id];
    if (k.empty()) continue;
    for (size_t i = StringHash{}(k) & mask_;; i = (i + 1) & mask_) {
      if (slots_[i] < 0) {
        slots_[i] = id;
        break;
      }
      if (keys[slots_[i]] == k) break;  // duplicate key: the first id wins
    }
  }
}

std::optional<int32_t> FlatStringIdMap::find(std::string_view key, const std::vector<std::string>& keys) const {
  if (slots_.empty()) return std::nullopt;
  for (size_t i = StringHash{}(key) & mask_;; i = (i + 1) & mask_) {
    const int32_t id = slots_[i];
    if (id < 0) return std::nullopt;
    if (keys[id] == key) return id;
  }
}

BpeModel::BpeModel() : merges_(std::make_unique<MergeMap>()), cache_(std::make_unique<Cache>()) {}
BpeModel::~BpeModel() = default;
BpeModel::BpeModel(BpeModel&&) noexcept = default;
BpeModel& BpeModel::operator=(BpeModel&&) noexcept = default;

// Byte-level string (GPT-2 table) -> raw bytes; nullopt if a code point is not in the table.
static std::optional<std::string> byte_level_decode(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const unicode::Decoded d = unicode::decode_utf8(s, i);
    i += d.len;
    const int b = d.valid ? unicode::code_point_to_byte(d.cp) : -1;
    if (b < 0) return std::nullopt;
    out.push_back(static_cast<char>(b));
  }
  return out;
}

Result<BpeModel> BpeModel::from_json(const json& m) {
  BpeModel bpe;
  if (m.value("type", std::string("BPE")) != "BPE")
    return unimplemented("tokenizer.json model type '" + m.value("type", std::string()) +
                         "' is not supported (supported: BPE)");
  if (m.contains("dropout") && !m["dropout"].is_null() && m["dropout"].get<double>() != 0.0)
    return unimplemented("tokenizer.json model.dropout is not supported");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (m.contains(key) && !m[key].is_null() && !m[key].get<std::string>().empty())
      return unimplemented(std::string("tokenizer.json model.") + key + " is not supported");
  }
  bpe.fuse_unk_ = m.value("fuse_unk", false);
  bpe.ignore_merges_ = m.value("ignore_merges", false);
  // byte_fallback only matters when a byte has no token; byte-level vocabularies have all 256.
  if (!m.contains("vocab") || !m["vocab"].is_object()) return invalid_argument("tokenizer.json model.vocab missing");

  const json& vocab = m["vocab"];
  int32_t max_id = -1;
  for (auto it = vocab.begin(); it != vocab.end(); ++it) max_id = std::max(max_id, it.value().get<int32_t>());
  bpe.tokens_.assign(max_id + 1, std::string());
  bpe.token_raw_.assign(max_id + 1, std::string());
  bpe.byte_id_.fill(-1);
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    const int32_t id = it.value().get<int32_t>();
    if (id < 0) return invalid_argument("tokenizer.json vocab id < 0 for '" + it.key() + "'");
    if (it.key().empty()) return invalid_argument("tokenizer.json vocab holds an empty token");
    if (!bpe.tokens_[id].empty()) return invalid_argument("tokenizer.json vocab id " + std::to_string(id) + " used twice");
    bpe.tokens_[id] = it.key();
    if (auto raw = byte_level_decode(it.key())) {
      if (raw->size() == 1) bpe.byte_id_[static_cast<unsigned char>((*raw)[0])] = id;
      bpe.token_raw_[id] = std::move(*raw);
    }
  }
  bpe.vocab_count_ = static_cast<int32_t>(vocab.size());
  bpe.vocab_.build(bpe.tokens_);
  bpe.bytes_vocab_.build(bpe.token_raw_);
  if (m.contains("unk_token") && m["unk_token"].is_string()) {
    auto id = bpe.token_to_id(m["unk_token"].get<std::string>());
    if (!id) return invalid_argument("tokenizer.json model.unk_token is not in the vocab");
    bpe.unk_id_ = *id;
  }

  static const json kNoMerges = json::array();
  const json& merges = m.contains("merges") ? m["merges"] : kNoMerges;  // value() would copy
  bpe.merges_->reserve(merges.size());
  int32_t rank = 0;
  std::string left, right, both;
  for (const json& mj : merges) {
    if (mj.is_string()) {
      const std::string& s = mj.get_ref<const std::string&>();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
        return invalid_argument("tokenizer.json merge '" + s + "' is not two tokens separated by a space");
      left = s.substr(0, sp);
      right = s.substr(sp + 1);
    } else if (mj.is_array() && mj.size() == 2 && mj[0].is_string() && mj[1].is_string()) {
      left = mj[0].get<std::string>();
      right = mj[1].get<std::string>();
    } else {
      return invalid_argument("tokenizer.json merge #" + std::to_string(rank) + " is neither \"a b\" nor [\"a\", \"b\"]");
    }
    both.assign(left).append(right);
    auto a = bpe.token_to_id(left), b = bpe.token_to_id(right), c = bpe.token_to_id(both);
    if (!a || !b || !c)
      return invalid_argument("tokenizer.json merge '" + left + " " + right + "' uses a token not in the vocab");
    bpe.merges_->insert(*a, *b, rank++, *c);
  }
  return bpe;
}

std::optional<int32_t> BpeModel::token_to_id(std::string_view token) const { return vocab_.find(token, tokens_); }

const std::string* BpeModel::id_to_token(int32_t id) const {
  if (id < 0 || id >= static_cast<int32_t>(tokens_.size()) || tokens_[id].empty()) return nullptr;
  return &tokens_[id];
}

void BpeModel::merge_small(std::vector<int32_t>& syms) const {
  constexpr int32_t kNone = INT32_MAX;
  int32_t ranks[64];
  int32_t results[64];
  size_t n = syms.size();
  auto pair_rank = [&](size_t i) {
    const MergeMap::Slot* s = merges_->find(syms[i], syms[i + 1]);
    ranks[i] = s ? s->rank : kNone;
    results[i] = s ? s->id : -1;
  };
  for (size_t i = 0; i + 1 < n; ++i) pair_rank(i);
  while (n > 1) {
    size_t best = 0;
    for (size_t i = 1; i + 1 < n; ++i)
      if (ranks[i] < ranks[best]) best = i;
    if (ranks[best] == kNone) break;
    syms[best] = results[best];
    for (size_t i = best + 1; i + 1 < n; ++i) {
      syms[i] = syms[i + 1];
      ranks[i] = ranks[i + 1];
      results[i] = results[i + 1];
    }
    --n;
    syms.resize(n);
    if (best > 0) pair_rank(best - 1);
    if (best + 1 < n) pair_rank(best);
  }
}

void BpeModel::merge_large(std::vector<int32_t>& syms) const {
  const int n = static_cast<int>(syms.size());
  std::vector<int> prev(n), next(n);
  for (int i = 0; i < n; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
  }
  struct Entry {
    int32_t rank;
    int pos;
    int32_t left, right, result;
    bool operator>(const Entry& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap;
  auto push = [&](int i) {
    if (i < 0 || next[i] < 0) return;
    if (const MergeMap::Slot* s = merges_->find(syms[i], syms[next[i]]))
      heap.push({s->rank, i, syms[i], syms[next[i]], s->id});
  };
  for (int i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    const Entry e = heap.top();
    heap.pop();
    const int r = next[e.pos];
    if (syms[e.pos] != e.left || r < 0 || syms[r] != e.right) continue;  // stale
    syms[e.pos] = e.result;
    syms[r] = -1;
    next[e.pos] = next[r];
    if (next[r] >= 0) prev[next[r]] = e.pos;
    push(prev[e.pos]);
    push(e.pos);
  }
  size_t out = 0;
  for (int i = 0; i >= 0 && i < n; i = next[i]) syms[out++] = syms[i];
  syms.resize(out);
}

void BpeModel::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    if (auto id = bytes_vocab_.find(word, token_raw_)) {
      out.push_back(*id);
      return;
    }
  }
  const bool cacheable = word.size() <= Cache::kMaxWordBytes;
  const uint64_t h = cacheable ? Cache::hash_of(word) : 0;
  if (cacheable && cache_->lookup(word, h, out)) return;
  std::vector<int32_t> syms;
  syms.reserve(word.size());
  bool last_unk = false;
  for (unsigned char b : word) {
    const int32_t id = byte_id_[b];
    if (id >= 0) {
      syms.push_back(id);
      last_unk = false;
    } else if (unk_id_) {  // only for vocabularies missing some byte
      if (!(fuse_unk_ && last_unk)) syms.push_back(*unk_id_);
      last_unk = true;
    }
  }
  if (syms.size() <= 64) merge_small(syms);
  else merge_large(syms);
  out.insert(out.end(), syms.begin(), syms.end());
  if (cacheable) cache_->insert(word, h, syms.data(), syms.size());
}

}  // namespace ms
