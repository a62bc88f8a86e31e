// SequenceStateTable: slots keyed by sequence id survive batch compaction (the id, not the row,
// picks the slot), are zeroed when reused, and running out is an error.
#include "common/engine/sequence_state_table.h"

#include "common/core/thread_pool.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"

namespace sparseserve::engine {
namespace {

TEST(SequenceStateTableTest, SlotsFollowIdsAndAreZeroedWhenReused) {
  core::ThreadPool pool(1);
  kernels::CpuBackend backend(&pool);
  auto table = SequenceStateTable::Create(backend, 3, 4);
  ASSERT_TRUE(table.ok()) << table.status();
  SequenceStateTable& t = **table;
  const int a = *t.Acquire(101), b = *t.Acquire(202), c = *t.Acquire(303);
  EXPECT_NE(a, b);
  EXPECT_NE(b, c);
  EXPECT_NE(a, c);
  EXPECT_EQ(*t.Acquire(202), b);  // the same sequence keeps its slot whatever its batch row
  EXPECT_EQ(t.SlotOf(303), c);
  EXPECT_EQ(t.Acquire(404).status().code(), absl::StatusCode::kResourceExhausted);
  // Sequence 202 writes state, finishes; its slot goes to a new sequence, zeroed.
  for (int w = 0; w < 4; ++w) t.memory().data<int32_t>()[b * 4 + w] = 7 + w;
  t.Release(202);
  EXPECT_EQ(t.SlotOf(202), -1);
  EXPECT_EQ(t.num_free_slots(), 1);
  const int d = *t.Acquire(404);
  EXPECT_EQ(d, b);
  for (int w = 0; w < 4; ++w) EXPECT_EQ(t.memory().data<int32_t>()[d * 4 + w], 0);
  t.Release(999);  // no slot: nothing happens
  EXPECT_EQ(t.num_free_slots(), 0);
  EXPECT_EQ(SequenceStateTable::Create(backend, 0, 4).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace sparseserve::engine
