// BlockPool: exact block ids, free-queue (eviction) order, cache map.
#include "kv/block_pool.h"

#include <gtest/gtest.h>

namespace ms {
namespace {

using V = std::vector<int32_t>;

TEST(BlockPool, AllocatesInOrderAndFreesToTheBack) {
  BlockPool p(4);
  EXPECT_EQ(p.free_queue(), (V{0, 1, 2, 3}));
  EXPECT_EQ(*p.allocate(), 0);
  EXPECT_EQ(*p.allocate(), 1);
  EXPECT_EQ(*p.allocate(), 2);
  EXPECT_EQ(p.num_free(), 1);
  p.release(1);
  p.release(0);
  EXPECT_EQ(p.free_queue(), (V{3, 1, 0}));
  EXPECT_EQ(*p.allocate(), 3);
  EXPECT_EQ(*p.allocate(), 1);
  EXPECT_EQ(*p.allocate(), 0);
  EXPECT_FALSE(p.allocate().has_value());
  EXPECT_TRUE(p.check_invariants().is_ok());
}

TEST(BlockPool, RefcountsAndTouch) {
  BlockPool p(3);
  int32_t a = *p.allocate();
  p.touch(a);
  EXPECT_EQ(p.ref_count(a), 2);
  p.release(a);
  EXPECT_EQ(p.num_free(), 2);
  p.release(a);
  EXPECT_EQ(p.free_queue(), (V{1, 2, 0}));
  p.touch(0);  // a hit on a free block takes it out of the queue
  EXPECT_EQ(p.free_queue(), (V{1, 2}));
  EXPECT_EQ(p.ref_count(0), 1);
  EXPECT_TRUE(p.check_invariants().is_ok());
}

TEST(BlockPool, CachedBlocksAreEvictedLeastRecentlyFreedFirst) {
  BlockPool p(3);
  V t1{1, 2}, t2{3, 4}, t3{5, 6};
  int32_t a = *p.allocate(), b = *p.allocate(), c = *p.allocate();
  p.cache(a, {11, 0, t1});
  p.cache(b, {22, 11, t2});
  p.cache(c, {33, 22, t3});
  EXPECT_EQ(p.num_cached(), 3);
  p.release(b);
  p.release(a);
  p.release(c);
  EXPECT_EQ(p.free_queue(), (V{1, 0, 2}));
  // Still cached while free.
  EXPECT_EQ(p.lookup(11, 0, t1), std::optional<int32_t>(0));
  // Key verified exactly: wrong parent or tokens miss.
  EXPECT_FALSE(p.lookup(11, 5, t1).has_value());
  EXPECT_FALSE(p.lookup(11, 0, t2).has_value());
  // Allocation evicts block 1 (freed first) and drops its hash.
  EXPECT_EQ(*p.allocate(), 1);
  EXPECT_FALSE(p.lookup(22, 11, t2).has_value());
  EXPECT_EQ(p.num_cached(), 2);
  EXPECT_TRUE(p.check_invariants().is_ok());
}

TEST(BlockPool, DuplicateHashStaysUncached) {
  BlockPool p(2);
  V t{7};
  int32_t a = *p.allocate(), b = *p.allocate();
  p.cache(a, {5, 0, t});
  p.cache(b, {5, 0, t});
  EXPECT_TRUE(p.is_cached(a));
  EXPECT_FALSE(p.is_cached(b));
  EXPECT_EQ(p.lookup(5, 0, t), std::optional<int32_t>(a));
  EXPECT_TRUE(p.check_invariants().is_ok());
}

}  // namespace
}  // namespace ms
