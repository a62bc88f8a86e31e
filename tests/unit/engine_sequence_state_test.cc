// SequenceStateTable: slots keyed by sequence id survive batch compaction (the id, not the row,
// picks the slot), are zeroed when reused, and running out is an error. Wired into ModelRunner:
// every step's attention batch carries each sequence's slot and the table's memory, a sequence
// keeps its slot while others come and go, and a finished sequence's slot is zeroed for the next.
#include "common/engine/sequence_state_table.h"

#include <vector>

#include "common/core/thread_pool.h"
#include "common/engine/model_runner.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "tests/testing/forwarding_backend.h"
#include "tests/testing/test_model.h"

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

// Records the state slots and the state memory of every attention batch the model plans.
class SlotRecordingBackend : public testing::ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;
  absl::StatusOr<kernels::AttentionPlan> PlanAttention(
      const kernels::AttentionBatch& batch, const kernels::AttentionShape& shape,
      kernels::AttentionWorkspace& workspace) override {
    std::vector<int32_t> slots;
    for (const kernels::SequenceAttention& sa : batch.sequences) slots.push_back(sa.state_slot);
    planned_slots.push_back(slots);
    planned_state.push_back(batch.sequence_state.raw_data());
    return ForwardingBackend::PlanAttention(batch, shape, workspace);
  }
  std::vector<std::vector<int32_t>> planned_slots;
  std::vector<void*> planned_state;
};

TEST(ModelRunnerSequenceStateTest, ASequenceKeepsItsSlotWhileOthersComeAndGo) {
  const std::string path = testing::FindTestModelFile("stories260K.gguf");
  if (path.empty()) GTEST_SKIP() << "stories260K.gguf not found (run scripts/fetch_model.sh)";
  auto source = OpenModelSource(path);
  ASSERT_TRUE(source.ok()) << source.status();
  core::ThreadPool pool(1);
  kernels::CpuBackend cpu(&pool);
  SlotRecordingBackend backend(&cpu);
  ModelRunnerOptions options;
  options.kv_cache_tokens = 1024;
  options.block_tokens = 16;
  options.sequence_state_words = 4;
  options.max_sequences = 3;
  auto made = ModelRunner::Create(*source, &backend, options);
  ASSERT_TRUE(made.ok()) << made.status();
  ModelRunner& runner = **made;
  SequenceStateTable& table = *runner.sequence_state();
  int32_t* memory = table.memory().data<int32_t>();
  auto step = [&](std::vector<SequenceKv*> seqs, std::vector<int32_t> tokens) {
    std::vector<StepRows> rows(seqs.size());
    for (size_t i = 0; i < seqs.size(); ++i) {
      rows[i].seq = seqs[i];
      rows[i].tokens = {tokens[i]};
      rows[i].sample = model::LogitRows::kNone;
    }
    return runner.Step(rows, kernels::SamplingBatch()).status();
  };
  SequenceKv a, b, c, d, e;
  for (SequenceKv* s : {&a, &b, &c, &d, &e}) ASSERT_TRUE(runner.BeginPrefill({1, 42}, *s).ok());

  ASSERT_TRUE(step({&a, &b, &c}, {42, 42, 42}).ok());
  const int slot_a = table.SlotOf(a.id), slot_b = table.SlotOf(b.id), slot_c = table.SlotOf(c.id);
  EXPECT_EQ(backend.planned_slots.back(), (std::vector<int32_t>{slot_a, slot_b, slot_c}));
  EXPECT_EQ(backend.planned_state.back(), table.memory().raw_data());
  EXPECT_NE(slot_a, slot_b);
  EXPECT_NE(slot_b, slot_c);
  EXPECT_NE(slot_a, slot_c);
  // What an index builder would leave there between steps.
  for (int w = 0; w < 4; ++w) {
    memory[slot_a * 4 + w] = 100 + w;
    memory[slot_b * 4 + w] = 200 + w;
  }

  // b finishes; the batch compacts and a moves from row 0 to row 1, its slot stays.
  runner.Release(b);
  EXPECT_EQ(table.num_free_slots(), 1);
  ASSERT_TRUE(step({&c, &a}, {7, 8}).ok());
  EXPECT_EQ(backend.planned_slots.back(), (std::vector<int32_t>{slot_c, slot_a}));
  EXPECT_EQ(table.SlotOf(a.id), slot_a);

  // d, new, gets b's old slot with b's state zeroed; a's state is untouched.
  ASSERT_TRUE(step({&d, &a}, {42, 9}).ok());
  EXPECT_EQ(backend.planned_slots.back(), (std::vector<int32_t>{slot_b, slot_a}));
  for (int w = 0; w < 4; ++w) {
    EXPECT_EQ(memory[slot_b * 4 + w], 0);
    EXPECT_EQ(memory[slot_a * 4 + w], 100 + w);
  }

  // Every slot is taken (a, c, d): a fourth sequence's step fails, nothing else changes.
  const size_t plans = backend.planned_slots.size();
  EXPECT_EQ(step({&e}, {42}).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(backend.planned_slots.size(), plans);
  EXPECT_EQ(e.tokens.size(), 0u);
  for (SequenceKv* s : {&a, &c, &d, &e}) runner.Release(*s);
  EXPECT_EQ(table.num_free_slots(), 3);
}

TEST(ModelRunnerSequenceStateTest, NoTableMeansNoSlots) {
  const std::string path = testing::FindTestModelFile("stories260K.gguf");
  if (path.empty()) GTEST_SKIP() << "stories260K.gguf not found (run scripts/fetch_model.sh)";
  auto source = OpenModelSource(path);
  ASSERT_TRUE(source.ok()) << source.status();
  core::ThreadPool pool(1);
  kernels::CpuBackend cpu(&pool);
  SlotRecordingBackend backend(&cpu);
  ModelRunnerOptions options;
  options.kv_cache_tokens = 256;
  options.block_tokens = 16;
  auto runner = ModelRunner::Create(*source, &backend, options);
  ASSERT_TRUE(runner.ok()) << runner.status();
  EXPECT_EQ((*runner)->sequence_state(), nullptr);
  SequenceKv seq;
  ASSERT_TRUE((*runner)->Prefill({1, 42, 43}, seq).ok());
  EXPECT_EQ(backend.planned_slots.back(), (std::vector<int32_t>{-1}));
  EXPECT_EQ(backend.planned_state.back(), nullptr);
  (*runner)->Release(seq);
}

}  // namespace
}  // namespace sparseserve::engine
