// KvReservationTable: reservations hold blocks until taken, released or expired; cached prompt
// prefixes are matched (and never handed out for remote writes).
#include "decode_svc/kv_reservation_table.h"

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
  EXPECT_EQ(taken->block_ids, r->block_ids);
  EXPECT_EQ(table.size(), 0);
  EXPECT_EQ(table.ExpireBefore(absl::InfiniteFuture()), 0);  // no longer the table's
  EXPECT_EQ(pool.num_used_blocks(), 3);
  EXPECT_EQ(table.Reserve(Prompt(40, 2)).status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(pool.num_used_blocks(), 3);
  pool.Release(taken->block_ids);
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

}  // namespace
}  // namespace sparseserve::decode
