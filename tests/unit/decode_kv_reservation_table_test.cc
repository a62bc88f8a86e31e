// KvReservationTable: reservations hold blocks (and, with KV staging, staging blocks) until
// taken, released or expired; cached prompt prefixes are matched (and never handed out for
// remote writes).
#include "decode_svc/kv_reservation_table.h"

#include <algorithm>
#include <memory>
#include <vector>

#include "common/kv/block_hash.h"
#include "gtest/gtest.h"

namespace sparseserve::decode {
namespace {

std::vector<int32_t> Prompt(int n, int salt = 0) {
  std::vector<int32_t> p(n);
  for (int i = 0; i < n; ++i) p[i] = (i * 7 + salt) % 500;
  return p;
}

TEST(KvReservationTableTest, ReleaseAndExpiryReturnEveryBlock) {
  kv::KvBlockPool pool(10);
  KvReservationTable table(&pool, 16, absl::Seconds(30));
  auto a = table.Reserve(Prompt(40));  // 3 blocks
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->block_ids.size(), 3u);
  EXPECT_EQ(a->first_remote_block, 0);
  auto b = table.Reserve(Prompt(20, 1));  // 2 blocks
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(pool.num_used_blocks(), 5);
  EXPECT_TRUE(table.Release(a->id));
  EXPECT_FALSE(table.Release(a->id));
  EXPECT_EQ(pool.num_used_blocks(), 2);
  EXPECT_EQ(table.ExpireBefore(absl::Now()), 0);  // lease still running
  EXPECT_EQ(table.ExpireBefore(absl::Now() + absl::Minutes(1)), 1);
  EXPECT_EQ(pool.num_used_blocks(), 0);
  EXPECT_EQ(table.Take(b->id).status().code(), absl::StatusCode::kNotFound);
}

TEST(KvReservationTableTest, TakeHandsBlocksOverAndExhaustionKeepsNothing) {
  kv::KvBlockPool pool(4);
  KvReservationTable table(&pool, 16, absl::Seconds(30));
  auto r = table.Reserve(Prompt(33));  // 3 blocks
  ASSERT_TRUE(r.ok());
  auto taken = table.Take(r->id);
  ASSERT_TRUE(taken.ok());
  EXPECT_EQ(taken->reservation.block_ids, r->block_ids);
  EXPECT_EQ(taken->blocks.block_ids(), r->block_ids);
  EXPECT_TRUE(taken->staging.empty());
  EXPECT_EQ(table.size(), 0);
  EXPECT_EQ(table.ExpireBefore(absl::InfiniteFuture()), 0);  // no longer the table's
  EXPECT_EQ(pool.num_used_blocks(), 3);
  EXPECT_EQ(table.Reserve(Prompt(40, 2)).status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(pool.num_used_blocks(), 3);
  std::vector<int32_t> handed = taken->blocks.Take();  // the taker's now
  taken->blocks.Release();                             // an empty lease returns nothing
  EXPECT_EQ(pool.num_used_blocks(), 3);
  pool.Release(handed);
  EXPECT_EQ(pool.num_used_blocks(), 0);
  {
    auto dropped = table.Reserve(Prompt(40, 3));
    ASSERT_TRUE(dropped.ok());
    auto lost = table.Take(dropped->id);
    ASSERT_TRUE(lost.ok());
    EXPECT_EQ(pool.num_used_blocks(), 3);
  }  // a taker that fails on the way drops its lease: the blocks come back
  EXPECT_EQ(pool.num_used_blocks(), 0);
}

TEST(KvReservationTableTest, CachedPrefixIsMatchedNotRewritten) {
  kv::KvBlockPool pool(8);
  const std::vector<int32_t> prompt = Prompt(40);
  // A finished sequence left its two full blocks in the prefix cache.
  auto blocks = pool.Allocate(2);
  ASSERT_TRUE(blocks.ok());
  const std::vector<kv::BlockHash> hashes = kv::ComputeBlockHashes(prompt, 16);
  ASSERT_TRUE(pool.Register(hashes[0], (*blocks)[0]));
  ASSERT_TRUE(pool.Register(hashes[1], (*blocks)[1]));
  pool.Release(*blocks);
  KvReservationTable table(&pool, 16, absl::Seconds(30));
  auto r = table.Reserve(prompt);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->first_remote_block, 2);
  EXPECT_EQ(r->cached_tokens, 32);
  EXPECT_EQ(r->block_ids[0], (*blocks)[0]);
  EXPECT_EQ(r->block_ids[1], (*blocks)[1]);
  EXPECT_TRUE(table.Release(r->id));
  EXPECT_EQ(pool.num_used_blocks(), 0);
}

std::unique_ptr<KvStagingArea> StagingArea(int num_blocks) {
  std::vector<Tensor> layers;
  for (int l = 0; l < 2; ++l) {
    layers.push_back(Tensor::Zeros(DType::kF32, Shape{int64_t{2} * num_blocks, 16, 1, 4}));
  }
  auto area = KvStagingArea::Create(std::move(layers));
  EXPECT_TRUE(area.ok()) << area.status();
  return area.ok() ? *std::move(area) : nullptr;
}

TEST(KvReservationTableTest, StagingBlocksCoverTheRemoteBlocksAndReleaseAndExpiryReturnThem) {
  kv::KvBlockPool pool(10);
  auto staging = StagingArea(6);
  ASSERT_NE(staging, nullptr);
  KvReservationTable table(&pool, 16, absl::Seconds(30), staging.get());
  EXPECT_EQ(table.staging(), staging.get());
  auto a = table.Reserve(Prompt(40));  // 3 blocks, none cached: 3 staged
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->staging_block_ids.size(), 3u);
  auto b = table.Reserve(Prompt(20, 1));  // 2 blocks
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->staging_block_ids.size(), 2u);
  for (int32_t id : b->staging_block_ids) {  // distinct from a's
    EXPECT_EQ(std::count(a->staging_block_ids.begin(), a->staging_block_ids.end(), id), 0);
  }
  EXPECT_EQ(staging->num_free_blocks(), 1);
  EXPECT_TRUE(table.Release(a->id));
  EXPECT_EQ(staging->num_free_blocks(), 4);
  EXPECT_EQ(pool.num_used_blocks(), 2);
  EXPECT_EQ(table.ExpireBefore(absl::Now() + absl::Minutes(1)), 1);
  EXPECT_EQ(staging->num_free_blocks(), 6);
  EXPECT_EQ(pool.num_used_blocks(), 0);
}

TEST(KvReservationTableTest, FullStagingAreaFailsLikeAFullPoolAndKeepsNothing) {
  kv::KvBlockPool pool(10);
  auto staging = StagingArea(4);
  ASSERT_NE(staging, nullptr);
  KvReservationTable table(&pool, 16, absl::Seconds(30), staging.get());
  auto a = table.Reserve(Prompt(48));  // 3 of the 4 staging blocks
  ASSERT_TRUE(a.ok()) << a.status();
  auto b = table.Reserve(Prompt(40, 3));  // needs 3 more: the pool has them, staging does not
  EXPECT_EQ(b.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(pool.num_used_blocks(), 3);  // b's pool blocks went back
  EXPECT_EQ(staging->num_free_blocks(), 1);
  EXPECT_EQ(table.size(), 1);
  auto c = table.Reserve(Prompt(10, 4));  // one block fits
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(staging->num_free_blocks(), 0);
}

TEST(KvReservationTableTest, TakeHandsOverTheStagingLeaseAndOnlyUncachedBlocksAreStaged) {
  kv::KvBlockPool pool(8);
  auto staging = StagingArea(8);
  ASSERT_NE(staging, nullptr);
  const std::vector<int32_t> prompt = Prompt(40);
  auto cached = pool.Allocate(1);  // the prompt's first block is in the prefix cache
  ASSERT_TRUE(cached.ok());
  ASSERT_TRUE(pool.Register(kv::ComputeBlockHashes(prompt, 16)[0], (*cached)[0]));
  pool.Release(*cached);
  KvReservationTable table(&pool, 16, absl::Seconds(30), staging.get());
  auto r = table.Reserve(prompt);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->first_remote_block, 1);
  EXPECT_EQ(r->staging_block_ids.size(), 2u);  // blocks 1 and 2 only
  EXPECT_EQ(staging->num_free_blocks(), 6);
  {
    auto taken = table.Take(r->id);
    ASSERT_TRUE(taken.ok());
    EXPECT_EQ(taken->staging.block_ids(), r->staging_block_ids);
    EXPECT_EQ(table.ExpireBefore(absl::InfiniteFuture()), 0);  // no longer the table's
    EXPECT_EQ(staging->num_free_blocks(), 6);                  // held by the taker
  }  // the taker's leases return the pool and staging blocks
  EXPECT_EQ(staging->num_free_blocks(), 8);
  EXPECT_EQ(pool.num_used_blocks(), 0);
}

// Rolling KV (a model whose every layer has a 32-token window): the prompt's next token sees keys
// > n - 32, so blocks wholly before that are neither reserved nor sent (kNoBlock), and a cached
// prefix inside that dead stretch is let go.
TEST(KvReservationTableTest, RollingWindowReservesOnlyTheWindowsBlocks) {
  kv::KvBlockPool pool(4);
  KvReservationTable table(&pool, 16, absl::Seconds(30), nullptr, /*rolling_window=*/32);
  // 100 tokens: 7 blocks; the next token (index 100) sees keys 69..99, blocks 4..6.
  auto r = table.Reserve(Prompt(100));
  ASSERT_TRUE(r.ok()) << r.status();  // 3 blocks fit a pool of 4
  ASSERT_EQ(r->block_ids.size(), 7u);
  EXPECT_EQ(r->first_remote_block, 4);
  for (int b = 0; b < 4; ++b) EXPECT_EQ(r->block_ids[b], kv::kNoBlock) << b;
  for (int b = 4; b < 7; ++b) EXPECT_NE(r->block_ids[b], kv::kNoBlock) << b;
  EXPECT_EQ(r->cached_tokens, 0);
  EXPECT_EQ(pool.num_used_blocks(), 3);
  EXPECT_TRUE(table.Release(r->id));  // the kNoBlock entries are skipped
  EXPECT_EQ(pool.num_used_blocks(), 0);

  // A cached prefix of 5 blocks: the one inside the window is used, the 4 before it let go.
  const std::vector<int32_t> prompt = Prompt(100, 3);
  const std::vector<kv::BlockHash> hashes = kv::ComputeBlockHashes(prompt, 16);
  kv::KvBlockPool big(8);
  auto blocks = big.Allocate(5);
  ASSERT_TRUE(blocks.ok());
  for (int b = 0; b < 5; ++b) ASSERT_TRUE(big.Register(hashes[b], (*blocks)[b]));
  big.Release(*blocks);
  KvReservationTable rolling(&big, 16, absl::Seconds(30), nullptr, 32);
  auto hit = rolling.Reserve(prompt);
  ASSERT_TRUE(hit.ok()) << hit.status();
  EXPECT_EQ(hit->first_remote_block, 5);
  EXPECT_EQ(hit->block_ids[4], (*blocks)[4]);
  EXPECT_EQ(hit->cached_tokens, 5 * 16);
  EXPECT_EQ(big.num_used_blocks(), 3);  // block 4 (cached) and 5, 6
  EXPECT_EQ(big.ref_count((*blocks)[0]), 0);
}

}  // namespace
}  // namespace sparseserve::decode
