// MergeKvBlockRuns: the one merger of (source, destination) block pairs into runs consecutive on
// both sides, used by the KV copies and the UCX transfers.
#include "common/kv/block_runs.h"

#include <climits>
#include <vector>

#include "gtest/gtest.h"

namespace sparseserve::kv {
namespace {

TEST(MergeKvBlockRunsTest, MergesOnlyRunsConsecutiveOnBothSides) {
  const std::vector<int32_t> src = {0, 1, 2, 3, 7, 8, 12, 13, 20, 21, 5};
  const std::vector<int32_t> dst = {4, 5, 6, 7, 0, 2, 15, 14, 30, 31, 9};
  const std::vector<KvBlockRun> runs = MergeKvBlockRuns(src, dst);
  // 7->0 then 8->2 skips on the destination; 12->15 then 13->14 goes backwards there.
  const std::vector<std::vector<int32_t>> expected = {
      {0, 4, 4}, {7, 0, 1}, {8, 2, 1}, {12, 15, 1}, {13, 14, 1}, {20, 30, 2}, {5, 9, 1}};
  ASSERT_EQ(runs.size(), expected.size());
  for (size_t i = 0; i < runs.size(); ++i) {
    EXPECT_EQ(std::vector<int32_t>({runs[i].src_block, runs[i].dst_block, runs[i].num_blocks}),
              expected[i])
        << "run " << i;
  }
}

TEST(MergeKvBlockRunsTest, EmptyInputGivesNoRunsAndMaxIdDoesNotWrap) {
  EXPECT_TRUE(MergeKvBlockRuns({}, {}).empty());
  const std::vector<int32_t> src = {INT32_MAX, INT32_MIN};
  const std::vector<int32_t> dst = {0, 1};
  EXPECT_EQ(MergeKvBlockRuns(src, dst).size(), 2u);
}

}  // namespace
}  // namespace sparseserve::kv
