#include "common/kv/block_table.h"

#include <vector>

#include "gtest/gtest.h"

namespace sparseserve::kv {
namespace {

TEST(BlockTableTest, NumBlocksNeededRoundsUpAndCountsHeldBlocks) {
  BlockTable table(16);
  EXPECT_EQ(table.NumBlocksNeeded(0), 0);
  EXPECT_EQ(table.NumBlocksNeeded(1), 1);
  EXPECT_EQ(table.NumBlocksNeeded(16), 1);
  EXPECT_EQ(table.NumBlocksNeeded(17), 2);
  table.Append({7, 3});
  EXPECT_EQ(table.capacity_tokens(), 32);
  EXPECT_EQ(table.NumBlocksNeeded(32), 0);
  EXPECT_EQ(table.NumBlocksNeeded(33), 1);
  EXPECT_EQ(table.NumBlocksNeeded(5), 0);
}

TEST(BlockTableTest, SlotMapsPositionsToBlockAndOffset) {
  BlockTable table(16);
  table.Append({7, 3});
  table.Append({11});
  EXPECT_EQ(table.block_ids(), (std::vector<int32_t>{7, 3, 11}));
  EXPECT_EQ(table.Slot(0).block_id, 7);
  EXPECT_EQ(table.Slot(0).offset, 0);
  EXPECT_EQ(table.Slot(15).block_id, 7);
  EXPECT_EQ(table.Slot(15).offset, 15);
  EXPECT_EQ(table.Slot(16).block_id, 3);
  EXPECT_EQ(table.Slot(16).offset, 0);
  EXPECT_EQ(table.Slot(40).block_id, 11);
  EXPECT_EQ(table.Slot(40).offset, 8);
}

TEST(BlockTableTest, TokenCountAndClear) {
  BlockTable table(64);
  table.Append({0});
  table.AddTokens(60);
  table.AddTokens(4);
  EXPECT_EQ(table.num_tokens(), 64);
  EXPECT_EQ(table.NumBlocksNeeded(table.num_tokens() + 1), 1);
  table.Clear();
  EXPECT_EQ(table.num_tokens(), 0);
  EXPECT_EQ(table.num_blocks(), 0);
}

TEST(BlockTableDeathTest, AddingTokensPastCapacityIsABug) {
  BlockTable table(16);
  table.Append({0});
  EXPECT_DEATH(table.AddTokens(17), "");
}

}  // namespace
}  // namespace sparseserve::kv
