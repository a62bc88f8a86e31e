#include "common/kv/kv_block_pool.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "common/core/thread_pool.h"
#include "gtest/gtest.h"

namespace sparseserve::kv {
namespace {

TEST(KvBlockPoolTest, AllocateAndReleaseReturnAccountingToZero) {
  KvBlockPool pool(10);
  EXPECT_EQ(pool.num_blocks(), 10);
  EXPECT_EQ(pool.num_free_blocks(), 10);
  absl::StatusOr<std::vector<int32_t>> a = pool.Allocate(3);
  ASSERT_TRUE(a.ok()) << a.status();
  absl::StatusOr<std::vector<int32_t>> b = pool.Allocate(4);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(pool.num_used_blocks(), 7);
  EXPECT_EQ(pool.num_free_blocks(), 3);
  EXPECT_DOUBLE_EQ(pool.usage_ratio(), 0.7);

  std::vector<int32_t> all = *a;
  all.insert(all.end(), b->begin(), b->end());
  std::sort(all.begin(), all.end());
  EXPECT_TRUE(std::adjacent_find(all.begin(), all.end()) == all.end()) << "duplicate id";
  EXPECT_EQ(all.front(), 0);
  EXPECT_EQ(all.back(), 6);

  pool.Release(*a);
  pool.Release(*b);
  EXPECT_EQ(pool.num_used_blocks(), 0);
  EXPECT_EQ(pool.num_free_blocks(), 10);
  EXPECT_DOUBLE_EQ(pool.usage_ratio(), 0.0);
}

TEST(KvBlockPoolTest, ExhaustionIsResourceExhaustedAndAllocatesNothing) {
  KvBlockPool pool(4);
  absl::StatusOr<std::vector<int32_t>> held = pool.Allocate(3);
  ASSERT_TRUE(held.ok());
  absl::StatusOr<std::vector<int32_t>> too_many = pool.Allocate(2);
  ASSERT_FALSE(too_many.ok());
  EXPECT_EQ(too_many.status().code(), absl::StatusCode::kResourceExhausted);
  const std::string message(too_many.status().message());
  EXPECT_NE(message.find("requested 2"), std::string::npos) << message;
  EXPECT_NE(message.find("only 1 of 4"), std::string::npos) << message;
  EXPECT_EQ(pool.num_used_blocks(), 3);  // no partial allocation
  EXPECT_EQ(pool.num_free_blocks(), 1);
  absl::StatusOr<std::vector<int32_t>> last = pool.Allocate(1);
  ASSERT_TRUE(last.ok());
  EXPECT_EQ(pool.num_free_blocks(), 0);
}

TEST(KvBlockPoolTest, ZeroAndNegativeRequests) {
  KvBlockPool pool(2);
  absl::StatusOr<std::vector<int32_t>> none = pool.Allocate(0);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
  EXPECT_EQ(pool.Allocate(-1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(pool.num_used_blocks(), 0);
}

TEST(KvBlockPoolTest, SharedBlockIsFreedOnlyAfterLastRelease) {
  KvBlockPool pool(2);
  absl::StatusOr<std::vector<int32_t>> ids = pool.Allocate(1);
  ASSERT_TRUE(ids.ok());
  pool.Retain(*ids);
  pool.Retain(*ids);
  EXPECT_EQ(pool.ref_count((*ids)[0]), 3);
  pool.Release(*ids);
  pool.Release(*ids);
  EXPECT_EQ(pool.num_used_blocks(), 1);
  EXPECT_EQ(pool.num_free_blocks(), 1);
  pool.Release(*ids);
  EXPECT_EQ(pool.num_used_blocks(), 0);
  EXPECT_EQ(pool.ref_count((*ids)[0]), 0);
}

TEST(KvBlockPoolDeathTest, DoubleReleaseIsABug) {
  KvBlockPool pool(2);
  absl::StatusOr<std::vector<int32_t>> ids = pool.Allocate(1);
  ASSERT_TRUE(ids.ok());
  pool.Release(*ids);
  EXPECT_DEATH(pool.Release(*ids), "count > 0");
}

TEST(KvBlockPoolDeathTest, UnknownIdIsABug) {
  KvBlockPool pool(2);
  const std::vector<int32_t> bad = {2};
  EXPECT_DEATH(pool.Release(bad), "block_id");
}

// 4 threads allocate, share and release random batches. Each thread records itself as the
// owner of the ids it holds, so a block handed to two holders at once is caught; the pool must
// end empty.
TEST(KvBlockPoolTest, ConcurrentAllocateReleaseEndsWithZeroUsed) {
  constexpr int kNumBlocks = 64;
  constexpr int kThreads = 4;
  constexpr int kIterations = 2000;
  struct Held {
    std::vector<int32_t> ids;
    int num_refs = 1;  // references this thread holds on each id
  };
  KvBlockPool pool(kNumBlocks);
  std::vector<std::atomic<int>> owner(kNumBlocks);
  for (std::atomic<int>& o : owner) o.store(-1);
  std::atomic<int> num_errors{0};
  const auto release_all = [&](const Held& held) {
    for (const int32_t id : held.ids) owner[static_cast<size_t>(id)].store(-1);
    for (int r = 0; r < held.num_refs; ++r) pool.Release(held.ids);
  };
  core::ThreadPool threads(kThreads);
  threads.ParallelFor(kThreads, 1, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      std::mt19937 rng(static_cast<uint32_t>(1234 + t));
      std::vector<Held> held;
      for (int i = 0; i < kIterations; ++i) {
        if (!held.empty() && rng() % 2 == 0) {
          release_all(held.back());
          held.pop_back();
          continue;
        }
        absl::StatusOr<std::vector<int32_t>> ids = pool.Allocate(1 + static_cast<int>(rng() % 4));
        if (!ids.ok()) {
          if (ids.status().code() != absl::StatusCode::kResourceExhausted) ++num_errors;
          continue;
        }
        for (const int32_t id : *ids) {
          int expected = -1;
          if (!owner[static_cast<size_t>(id)].compare_exchange_strong(expected,
                                                                      static_cast<int>(t))) {
            ++num_errors;  // handed out while another thread holds it
          }
        }
        Held h{*std::move(ids), 1};
        if (rng() % 4 == 0) {
          pool.Retain(h.ids);
          ++h.num_refs;
        }
        held.push_back(std::move(h));
      }
      for (const Held& h : held) release_all(h);
    }
  });
  EXPECT_EQ(num_errors.load(), 0);
  EXPECT_EQ(pool.num_used_blocks(), 0);
  EXPECT_EQ(pool.num_free_blocks(), kNumBlocks);
  for (int32_t id = 0; id < kNumBlocks; ++id) EXPECT_EQ(pool.ref_count(id), 0);
}

}  // namespace
}  // namespace sparseserve::kv
