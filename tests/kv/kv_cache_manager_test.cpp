// KvCacheManager: exact block tables, prefix-cache hits / refcounts / LRU
// eviction, sliding-window release and the sliding hit policy, and long
// randomized operation sequences that check invariants and that every cached
// hit holds exactly the KV its prefix would have computed.
#include "kv/kv_cache_manager.h"

#include <gtest/gtest.h>

#include <map>
#include <numeric>
#include <random>

namespace ms {
namespace {

using V = std::vector<int32_t>;
using T = std::vector<std::vector<int32_t>>;

V iota_tokens(int n, int first = 100) {
  V v(n);
  std::iota(v.begin(), v.end(), first);
  return v;
}

KvCacheConfig full_only(int blocks, int bs = 4) {
  KvCacheConfig c;
  c.block_size = bs;
  c.groups = {{0, blocks}};
  c.salt = make_cache_salt("test-model");
  return c;
}

TEST(KvCacheManager, AllocatesGrowsAndFreesTailFirst) {
  KvCacheManager kv(full_only(8));
  V toks = iota_tokens(10);
  EXPECT_EQ(kv.find_cached_prefix(toks), 0);
  ASSERT_TRUE(kv.admit(1, toks, 0, 10));
  EXPECT_EQ(kv.block_tables(1), (T{{0, 1, 2}}));
  ASSERT_TRUE(kv.allocate(1, 10, 12));  // still inside block 2
  EXPECT_EQ(kv.block_tables(1), (T{{0, 1, 2}}));
  ASSERT_TRUE(kv.allocate(1, 12, 13));
  EXPECT_EQ(kv.block_tables(1), (T{{0, 1, 2, 3}}));
  EXPECT_EQ(kv.num_blocks_used(), 4);
  kv.free(1);
  EXPECT_EQ(kv.pool(0).free_queue(), (V{4, 5, 6, 7, 3, 2, 1, 0}));
  EXPECT_TRUE(kv.check_invariants().is_ok());
}

TEST(KvCacheManager, OutOfBlocksChangesNothing) {
  KvCacheManager kv(full_only(3));
  ASSERT_TRUE(kv.admit(1, iota_tokens(8), 0, 8));
  EXPECT_FALSE(kv.admit(2, iota_tokens(8, 500), 0, 8));
  EXPECT_FALSE(kv.has(2));
  EXPECT_FALSE(kv.allocate(1, 8, 13));  // needs 2 more, 1 free
  EXPECT_EQ(kv.block_tables(1), (T{{0, 1}}));
  EXPECT_EQ(kv.pool(0).free_queue(), (V{2}));
  EXPECT_TRUE(kv.check_invariants().is_ok());
}

TEST(KvCacheManager, PrefixHitsShareBlocksWithRefcounts) {
  KvCacheManager kv(full_only(8));
  V toks = iota_tokens(10);
  ASSERT_TRUE(kv.admit(1, toks, 0, 10));
  kv.commit(1, toks, 10);  // blocks 0, 1 full and cached; block 2 partial
  EXPECT_EQ(kv.pool(0).num_cached(), 2);
  EXPECT_EQ(kv.find_cached_prefix(toks), 8);
  // A prompt of exactly 8 tokens: the last token must be recomputed.
  EXPECT_EQ(kv.find_cached_prefix(iota_tokens(8)), 4);
  EXPECT_EQ(kv.find_cached_prefix(iota_tokens(9)), 8);
  // Different first block: no hit at all (chained hashes).
  V other = toks;
  other[0] = 7;
  EXPECT_EQ(kv.find_cached_prefix(other), 0);
  // Different salt (another model): no hit.
  KvCacheConfig c2 = full_only(8);
  c2.salt = make_cache_salt("other-model");
  KvCacheManager kv2(c2);
  ASSERT_TRUE(kv2.admit(1, toks, 0, 10));
  kv2.commit(1, toks, 10);
  EXPECT_EQ(kv2.find_cached_prefix(toks), 8);

  ASSERT_TRUE(kv.admit(2, toks, 8, 10));
  EXPECT_EQ(kv.block_tables(2), (T{{0, 1, 3}}));
  EXPECT_EQ(kv.pool(0).ref_count(0), 2);
  EXPECT_EQ(kv.pool(0).ref_count(1), 2);
  EXPECT_EQ(kv.pool(0).ref_count(2), 1);
  kv.free(1);
  EXPECT_EQ(kv.pool(0).ref_count(0), 1);
  EXPECT_EQ(kv.pool(0).free_queue(), (V{4, 5, 6, 7, 2}));
  kv.free(2);
  EXPECT_EQ(kv.pool(0).free_queue(), (V{4, 5, 6, 7, 2, 3, 1, 0}));
  // Hit on free cached blocks takes them out of the free queue.
  ASSERT_TRUE(kv.admit(3, toks, 8, 10));
  EXPECT_EQ(kv.block_tables(3), (T{{0, 1, 4}}));
  EXPECT_EQ(kv.pool(0).free_queue(), (V{5, 6, 7, 2, 3}));
  EXPECT_TRUE(kv.check_invariants().is_ok());
}

TEST(KvCacheManager, LruEvictionOfFreeCachedBlocks) {
  KvCacheManager kv(full_only(4));
  V a = iota_tokens(9, 100), b = iota_tokens(9, 200);
  ASSERT_TRUE(kv.admit(1, a, 0, 9));  // blocks 0, 1, 2
  kv.commit(1, a, 9);
  kv.free(1);  // queue: 3, 2, 1, 0 (a's head last)
  EXPECT_EQ(kv.pool(0).free_queue(), (V{3, 2, 1, 0}));
  ASSERT_TRUE(kv.admit(2, b, 0, 5));  // takes 3 and 2 (2 was a's partial block, uncached)
  EXPECT_EQ(kv.block_tables(2), (T{{3, 2}}));
  EXPECT_EQ(kv.find_cached_prefix(a), 8);
  ASSERT_TRUE(kv.allocate(2, 5, 9));  // evicts block 1 (a's second block)
  EXPECT_EQ(kv.block_tables(2), (T{{3, 2, 1}}));
  EXPECT_EQ(kv.find_cached_prefix(a), 4);
  EXPECT_TRUE(kv.check_invariants().is_ok());
}

KvCacheConfig full_and_sliding(int full_blocks, int sliding_blocks, int window = 6) {
  KvCacheConfig c;
  c.block_size = 4;
  c.groups = {{0, full_blocks}, {window, sliding_blocks}};
  c.salt = make_cache_salt("test-model");
  return c;
}

TEST(KvCacheManager, SlidingWindowReleasesBlocksThatLeaveTheWindow) {
  KvCacheManager kv(full_and_sliding(16, 8));
  V toks = iota_tokens(20);
  ASSERT_TRUE(kv.admit(1, toks, 0, 8));
  EXPECT_EQ(kv.block_tables(1), (T{{0, 1}, {0, 1}}));
  kv.commit(1, toks, 8);  // next step reads from position 3: block 0 stays
  EXPECT_EQ(kv.block_tables(1), (T{{0, 1}, {0, 1}}));
  ASSERT_TRUE(kv.allocate(1, 8, 12));
  kv.commit(1, toks, 12);  // reads from 7: block 0 leaves the window
  EXPECT_EQ(kv.block_tables(1), (T{{0, 1, 2}, {-1, 1, 2}}));
  EXPECT_EQ(kv.pool(1).free_queue(), (V{3, 4, 5, 6, 7, 0}));
  ASSERT_TRUE(kv.allocate(1, 12, 20));
  kv.commit(1, toks, 20);  // reads from 15: blocks 0..2 gone
  EXPECT_EQ(kv.block_tables(1), (T{{0, 1, 2, 3, 4}, {-1, -1, -1, 3, 4}}));
  EXPECT_EQ(kv.pool(1).free_queue(), (V{5, 6, 7, 0, 1, 2}));
  EXPECT_EQ(kv.pool(1).num_used(), 2);
  kv.free(1);
  EXPECT_EQ(kv.pool(1).num_used(), 0);
  EXPECT_TRUE(kv.check_invariants().is_ok());
}

TEST(KvCacheManager, SlidingPrefixHitNeedsOnlyInWindowBlocks) {
  KvCacheManager kv(full_and_sliding(16, 8));
  V a = iota_tokens(20);
  ASSERT_TRUE(kv.admit(1, a, 0, 20));  // one 20-token step: all 5 blocks
  kv.commit(1, a, 20);                 // all cached; sliding 0..2 released
  EXPECT_EQ(kv.block_tables(1), (T{{0, 1, 2, 3, 4}, {-1, -1, -1, 3, 4}}));
  EXPECT_EQ(kv.pool(1).free_queue(), (V{5, 6, 7, 0, 1, 2}));
  V longer = iota_tokens(24);
  EXPECT_EQ(kv.find_cached_prefix(longer), 20);
  // An unrelated sequence evicts sliding blocks 5, 6, 7 and 0.
  V x = iota_tokens(16, 300);
  ASSERT_TRUE(kv.admit(2, x, 0, 16));
  EXPECT_EQ(kv.block_tables(2)[1], (V{5, 6, 7, 0}));
  // 9 tokens: k=2 needs sliding blocks 0, 1 (0 evicted); k=1 needs 0: miss,
  // although the full-attention group still holds both blocks.
  EXPECT_EQ(kv.find_cached_prefix(iota_tokens(9)), 0);
  // 13 tokens: k=3 needs sliding blocks 1, 2 only: hit.
  EXPECT_EQ(kv.find_cached_prefix(iota_tokens(13)), 12);
  EXPECT_EQ(kv.find_cached_prefix(longer), 20);
  ASSERT_TRUE(kv.admit(3, longer, 20, 24));
  EXPECT_EQ(kv.block_tables(3), (T{{0, 1, 2, 3, 4, 9}, {-1, -1, -1, 3, 4, 1}}));
  EXPECT_EQ(kv.pool(1).ref_count(3), 2);
  EXPECT_TRUE(kv.check_invariants().is_ok());
}

TEST(KvCacheManager, FitsAlone) {
  KvCacheManager kv(full_and_sliding(4, 3, 6));
  EXPECT_TRUE(kv.check_fits_alone(16, 1).is_ok());
  EXPECT_FALSE(kv.check_fits_alone(17, 1).is_ok());  // 5 full blocks
  // Sliding: ceil((6 - 1 + 4) / 4) + 1 = 4 > 3 blocks with 4-token chunks.
  EXPECT_EQ(kv.check_fits_alone(16, 4).code(), StatusCode::kResourceExhausted);
}

// Randomized operation sequences over a simulated cache: each block slot
// stores a fingerprint of the token prefix whose KV it holds; every live
// position of every sequence must read its own prefix's fingerprint.
class KvRandomized : public ::testing::TestWithParam<uint32_t> {};

TEST_P(KvRandomized, InvariantsAndCachedContentHold) {
  std::mt19937 rng(GetParam());
  KvCacheConfig cfg = full_and_sliding(24, 12, 6);
  cfg.prefix_caching = GetParam() % 5 != 0;
  KvCacheManager kv(cfg);
  const int bs = cfg.block_size, chunk = 5;
  std::vector<std::vector<uint64_t>> content(2);
  content[0].assign(size_t(24) * bs, 0);
  content[1].assign(size_t(12) * bs, 0);
  struct Live {
    V tokens;
    int computed = 0;
    int target = 0;
  };
  std::map<int64_t, Live> live;
  std::vector<V> bases;
  for (int i = 0; i < 3; ++i) {
    V b(24);
    for (auto& t : b) t = rng() % 50;
    bases.push_back(b);
  }
  auto fp = [](const V& t, int pos) {
    return hash_block(7, std::span<const int32_t>(t.data(), size_t(pos) + 1)) | 1;
  };
  int64_t next_id = 0;
  int hits = 0;
  for (int op = 0; op < 4000; ++op) {
    int kind = rng() % 10;
    if (kind < 3 && live.size() < 6) {
      Live s;
      s.tokens = bases[rng() % bases.size()];
      s.tokens.resize(2 + rng() % 20);
      for (int extra = rng() % 4; extra > 0; --extra) s.tokens.push_back(rng() % 50);
      s.target = static_cast<int>(s.tokens.size()) + 1 + rng() % 12;
      int cached = kv.find_cached_prefix(s.tokens);
      ASSERT_EQ(cached % bs, 0);
      ASSERT_LT(cached, static_cast<int>(s.tokens.size()));
      int n = std::min<int>(s.tokens.size() - cached, 1 + rng() % chunk);
      if (!kv.admit(next_id, s.tokens, cached, cached + n)) continue;
      hits += cached > 0;
      s.computed = cached;
      // Cached positions must hold exactly this prefix's KV.
      for (int g = 0; g < 2; ++g) {
        const auto& t = kv.block_tables(next_id)[g];
        for (int p = 0; p < cached; ++p)
          if (t[p / bs] >= 0) {
            ASSERT_EQ(content[g][size_t(t[p / bs]) * bs + p % bs], fp(s.tokens, p)) << op;
          }
        ASSERT_LE(kv.first_live_block(g, cached), cached / bs);
        for (int b = kv.first_live_block(g, cached); b < cached / bs; ++b) ASSERT_GE(t[b], 0);
      }
      for (int g = 0; g < 2; ++g)
        for (int p = cached; p < cached + n; ++p)
          content[g][size_t(kv.block_tables(next_id)[g][p / bs]) * bs + p % bs] = fp(s.tokens, p);
      s.computed += n;
      kv.commit(next_id, s.tokens, s.computed);
      live[next_id++] = s;
    } else if (kind < 8 && !live.empty()) {
      auto it = std::next(live.begin(), rng() % live.size());
      Live& s = it->second;
      if (s.computed == static_cast<int>(s.tokens.size())) s.tokens.push_back(rng() % 50);  // "sampled"
      int n = std::min<int>(s.tokens.size() - s.computed, 1 + rng() % chunk);
      if (!kv.allocate(it->first, s.computed, s.computed + n)) {
        kv.free(live.begin()->first);  // "preempt" someone
        live.erase(live.begin());
        continue;
      }
      for (int g = 0; g < 2; ++g) {
        const auto& t = kv.block_tables(it->first)[g];
        for (int p = s.computed; p < s.computed + n; ++p) content[g][size_t(t[p / bs]) * bs + p % bs] = fp(s.tokens, p);
        // Everything the step reads holds this sequence's own prefix.
        for (int p = kv.first_live_block(g, s.computed) * bs; p < s.computed; ++p)
          ASSERT_EQ(content[g][size_t(t[p / bs]) * bs + p % bs], fp(s.tokens, p)) << op;
      }
      s.computed += n;
      kv.commit(it->first, s.tokens, s.computed);
      if (s.computed >= s.target) {
        kv.free(it->first);
        live.erase(it);
      }
    } else if (!live.empty()) {
      auto it = std::next(live.begin(), rng() % live.size());
      kv.free(it->first);
      live.erase(it);
    }
    Status st = kv.check_invariants();
    ASSERT_TRUE(st.is_ok()) << "op " << op << ": " << st.to_string();
  }
  for (auto& [id, s] : live) kv.free(id);
  EXPECT_EQ(kv.num_blocks_used(), 0);
  EXPECT_EQ(kv.num_blocks_free(), kv.num_blocks_total());
  EXPECT_TRUE(kv.check_invariants().is_ok());
  if (cfg.prefix_caching) {
    EXPECT_GT(hits, 10);
  }
}

INSTANTIATE_TEST_SUITE_P(Seeds, KvRandomized, ::testing::Values(1u, 2u, 3u, 4u, 5u, 42u, 1234u, 99991u));

}  // namespace
}  // namespace ms
