// Step graphs on the CUDA backend: decode steps replayed from a CUDA graph give exactly the logits
// of the same steps run kernel by kernel (the same kernels read the same inputs), while contexts
// grow across KV blocks and split-KV chunk sizes, batch sizes change, with dense and
// sliding-window attention; speculative verify steps (a few rows per sequence, or masked trees
// of many) keep graphs of their own beside decode steps; plan layouts do not follow the contexts;
// workspaces that grow mark the graphs read from them; captures refuse ops that cannot be recorded.
#include "common/model/llama_model.h"
#include "tests/gpu/cuda_test_util.h"

namespace sparseserve::testing {
namespace {

using model::ForwardSequence;
using model::LlamaModel;
using model::PagedKvCache;

// Small, but on the tensor-core decode path (head_dim 128, GQA group 4).
model::ModelConfig GraphTestConfig() {
  model::ModelConfig c;
  c.vocab_size = 1000;
  c.hidden_size = 512;
  c.intermediate_size = 1024;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = 1;
  c.head_dim = 128;
  c.max_position_embeddings = 32768;
  return c;
}

class CudaStepGraphTest : public CudaTest {
 public:
  struct Run {
    std::unique_ptr<LlamaModel> model;
    std::unique_ptr<PagedKvCache> cache;
  };

  Run Make(int graph_rows, int num_blocks) {
    Run r;
    auto model = LlamaModel::CreateRandom(GraphTestConfig(), gpu_.get(), 7);
    EXPECT_TRUE(model.ok()) << model.status();
    r.model = std::move(*model);
    r.model->set_step_graph_rows(graph_rows);
    const model::ModelConfig c = GraphTestConfig();
    auto cache =
        PagedKvCache::Create({c.num_layers, num_blocks, 16, c.num_kv_heads, c.head_dim}, *gpu_);
    EXPECT_TRUE(cache.ok()) << cache.status();
    r.cache = std::move(*cache);
    return r;
  }
};

// Sequence s owns blocks [s * per_seq, (s + 1) * per_seq), shuffled within that range.
std::vector<ForwardSequence> Prompts(const std::vector<int>& lengths, int per_seq) {
  std::vector<ForwardSequence> seqs(lengths.size());
  for (size_t s = 0; s < lengths.size(); ++s) {
    for (int i = 0; i < lengths[s]; ++i) seqs[s].tokens.push_back((i * 37 + 11 * s) % 1000);
    for (int b = per_seq - 1; b >= 0; --b) {
      seqs[s].block_table.push_back(static_cast<int32_t>(s * per_seq + b));
    }
  }
  return seqs;
}

// Prefills every sequence on both runs, then leaves each at its first decode step (token 1).
void PrefillBoth(CudaStepGraphTest::Run& graphs, CudaStepGraphTest::Run& eager,
                 std::vector<ForwardSequence>& seqs) {
  for (ForwardSequence& seq : seqs) {
    auto a = graphs.model->Forward({seq}, *graphs.cache);
    auto b = eager.model->Forward({seq}, *eager.cache);
    ASSERT_TRUE(a.ok() && b.ok()) << a.status() << b.status();
    seq.start_pos = static_cast<int32_t>(seq.tokens.size());
    seq.tokens = {1};
  }
}

void ReplayMatchesKernelByKernel(CudaStepGraphTest::Run graphs, CudaStepGraphTest::Run eager,
                                 const kernels::AttentionPattern& pattern, int per_seq) {
  // Prompts end at different offsets within their blocks; one is long enough that its split-KV
  // chunk count changes while it grows.
  std::vector<ForwardSequence> seqs = Prompts({5, 63, 2000, 17}, per_seq);
  for (ForwardSequence& seq : seqs) seq.pattern = pattern;
  ASSERT_NO_FATAL_FAILURE(PrefillBoth(graphs, eager, seqs));
  int replayed_steps = 0;
  for (int step = 0; step < 80; ++step) {
    // The batch shrinks to 3 sequences at step 30 and to 2 at step 55: each size warms up,
    // captures, then replays.
    const size_t batch = step < 30 ? 4 : (step < 55 ? 3 : 2);
    std::vector<ForwardSequence> active(seqs.begin(), seqs.begin() + batch);
    auto a = graphs.model->Forward(active, *graphs.cache);
    auto b = eager.model->Forward(active, *eager.cache);
    ASSERT_TRUE(a.ok()) << a.status();
    ASSERT_TRUE(b.ok()) << b.status();
    ASSERT_EQ(a->numel(), b->numel());
    for (int64_t i = 0; i < a->numel(); ++i) {
      ASSERT_EQ(a->data<float>()[i], b->data<float>()[i])
          << "step " << step << " batch " << batch << " element " << i;
    }
    ++replayed_steps;
    for (size_t s = 0; s < batch; ++s) {
      const float* row = a->data<float>() + s * 1000;
      seqs[s].start_pos += 1;
      seqs[s].tokens = {static_cast<int32_t>(std::max_element(row, row + 1000) - row)};
    }
  }
  EXPECT_EQ(replayed_steps, 80);
}

TEST_F(CudaStepGraphTest, ReplayedDecodeStepsEqualKernelByKernelSteps) {
  constexpr int kPerSeq = 256;  // 4096 tokens per sequence
  ReplayMatchesKernelByKernel(Make(LlamaModel::kDefaultStepGraphRows, 4 * kPerSeq),
                              Make(0, 4 * kPerSeq), {}, kPerSeq);
}

TEST_F(CudaStepGraphTest, ReplayedSlidingWindowDecodeStepsEqualKernelByKernelSteps) {
  constexpr int kPerSeq = 256;
  kernels::AttentionPattern window;
  window.kind = kernels::AttentionMethodKind::kSlidingWindow;
  window.window = 100;  // shorter than most contexts: the sink and window items both run
  window.sink_tokens = 4;
  ReplayMatchesKernelByKernel(Make(LlamaModel::kDefaultStepGraphRows, 4 * kPerSeq),
                              Make(0, 4 * kPerSeq), window, kPerSeq);
}

// Verify steps: every sequence feeds 5 rows (a chain, all sampled) on two steps of three and one
// row on the third, so both shapes warm up, capture and replay interleaved, and the batch
// shrinks; replayed logits equal kernel-by-kernel ones exactly.
TEST_F(CudaStepGraphTest, ReplayedVerifyStepsEqualKernelByKernelSteps) {
  constexpr int kPerSeq = 256;
  Run graphs = Make(LlamaModel::kDefaultStepGraphRows, 4 * kPerSeq);
  Run eager = Make(0, 4 * kPerSeq);
  std::vector<ForwardSequence> seqs = Prompts({5, 63, 2000, 17}, kPerSeq);
  ASSERT_NO_FATAL_FAILURE(PrefillBoth(graphs, eager, seqs));
  for (int step = 0; step < 45; ++step) {
    const size_t batch = step < 30 ? 4 : 3;
    const int rows = step % 3 == 2 ? 1 : 5;
    std::vector<ForwardSequence> active(seqs.begin(), seqs.begin() + batch);
    for (ForwardSequence& seq : active) {
      while (static_cast<int>(seq.tokens.size()) < rows) {
        seq.tokens.push_back((seq.tokens.back() * 7 + 3) % 1000);
      }
      seq.tokens.resize(rows);
      seq.logits = model::LogitRows::kAll;
    }
    auto a = graphs.model->Forward(active, *graphs.cache);
    auto b = eager.model->Forward(active, *eager.cache);
    ASSERT_TRUE(a.ok()) << a.status();
    ASSERT_TRUE(b.ok()) << b.status();
    ASSERT_EQ(a->numel(), static_cast<int64_t>(batch * rows * 1000));
    ASSERT_EQ(a->numel(), b->numel());
    for (int64_t i = 0; i < a->numel(); ++i) {
      ASSERT_EQ(a->data<float>()[i], b->data<float>()[i])
          << "step " << step << " rows " << rows << " element " << i;
    }
    for (size_t s = 0; s < batch; ++s) {
      const float* row = a->data<float>() + (s * rows + rows - 1) * 1000;
      seqs[s].start_pos += rows;
      seqs[s].tokens = {static_cast<int32_t>(std::max_element(row, row + 1000) - row)};
    }
  }
}

// A tree of `rows` rows: row 0 the root, then two chains that each see the root and their own
// earlier rows (a verify tree's shape, as Lookahead's branches and TokenSwift's trees make).
std::vector<uint8_t> TwoBranchMask(int rows) {
  std::vector<uint8_t> mask(static_cast<size_t>(rows) * rows, 0);
  const int half = (rows + 1) / 2;
  for (int i = 0; i < rows; ++i) {
    mask[static_cast<size_t>(i) * rows] = 1;
    const int first = i == 0 ? 0 : (i < half ? 1 : half);
    for (int j = first; j <= i; ++j) mask[static_cast<size_t>(i) * rows + j] = 1;
  }
  return mask;
}

// Masked verify steps replay graphs too: a long-context sequence whose 24 or 60 rows go to the
// decode kernel in row groups beside a short one whose rows take the masked prefill kernel, and
// plain steps between them; replayed logits equal kernel-by-kernel ones exactly.
TEST_F(CudaStepGraphTest, ReplayedMaskedTreeStepsEqualKernelByKernelSteps) {
  constexpr int kPerSeq = 256;
  Run graphs = Make(LlamaModel::kDefaultStepGraphRows, 2 * kPerSeq);
  Run eager = Make(0, 2 * kPerSeq);
  std::vector<ForwardSequence> seqs = Prompts({2500, 63}, kPerSeq);
  ASSERT_NO_FATAL_FAILURE(PrefillBoth(graphs, eager, seqs));
  for (int step = 0; step < 30; ++step) {
    const int rows = step % 3 == 2 ? 1 : (step % 3 == 0 ? 24 : 60);
    for (ForwardSequence& seq : seqs) {
      while (static_cast<int>(seq.tokens.size()) < rows) {
        seq.tokens.push_back((seq.tokens.back() * 7 + 3) % 1000);
      }
      seq.tokens.resize(rows);
      seq.logits = rows > 1 ? model::LogitRows::kAll : model::LogitRows::kLast;
      seq.mask = rows > 1 ? TwoBranchMask(rows) : std::vector<uint8_t>();
    }
    auto a = graphs.model->Forward(seqs, *graphs.cache);
    auto b = eager.model->Forward(seqs, *eager.cache);
    ASSERT_TRUE(a.ok()) << a.status();
    ASSERT_TRUE(b.ok()) << b.status();
    ASSERT_EQ(a->numel(), static_cast<int64_t>(2 * rows * 1000));
    ASSERT_EQ(a->numel(), b->numel());
    for (int64_t i = 0; i < a->numel(); ++i) {
      ASSERT_EQ(a->data<float>()[i], b->data<float>()[i])
          << "step " << step << " rows " << rows << " element " << i;
    }
    for (size_t s = 0; s < seqs.size(); ++s) {
      const float* row = a->data<float>() + (s * rows) * 1000;  // the root's: one accepted
      seqs[s].start_pos += 1;
      seqs[s].tokens = {static_cast<int32_t>(std::max_element(row, row + 1000) - row)};
    }
  }
}

// What a step graph bakes in does not follow the contexts: a decode batch's plan layout is the
// same at 100, 1000 and 3000 keys (block tables last, the item count read on the device), and so
// is a masked verify sequence's at 2000 and 3000.
TEST_F(CudaStepGraphTest, PlanLayoutsDoNotGrowWithTheContexts) {
  const model::ModelConfig c = GraphTestConfig();
  kernels::AttentionShape shape{c.num_heads, c.num_kv_heads, c.head_dim, 1, 1024};
  auto layout_at = [&](int q_len, int kv_len) {
    kernels::AttentionBatch b;
    b.block_tokens = 16;
    kernels::SequenceAttention sa;
    sa.q_len = q_len;
    sa.kv_len = kv_len;
    if (q_len > 1) sa.mask = TwoBranchMask(q_len);
    for (int i = 0; i < (kv_len + 15) / 16; ++i) sa.block_table.push_back(i);
    b.sequences.push_back(sa);
    shape.num_rows = q_len;
    kernels::AttentionWorkspace ws;
    auto plan = gpu_->PlanAttention(b, shape, ws);
    EXPECT_TRUE(plan.ok()) << plan.status();
    return plan.ok() ? plan->layout : kernels::AttentionPlan::Layout();
  };
  const kernels::AttentionPlan::Layout decode = layout_at(1, 100);
  EXPECT_TRUE(decode == layout_at(1, 1000));
  EXPECT_TRUE(decode == layout_at(1, 3000));
  EXPECT_TRUE(layout_at(60, 2000) == layout_at(60, 3000));
  EXPECT_TRUE(gpu_->Synchronize().ok());
}

TEST_F(CudaStepGraphTest, CaptureRefusesAllocationsCopiesAndSyncs) {
  Tensor host = Tensor::Zeros(DType::kF32, {4});
  Tensor dev = ToGpu(host);
  auto alloc = gpu_->CaptureGraph([&] { return gpu_->Allocate(DType::kF32, {4}).status(); });
  EXPECT_EQ(alloc.status().code(), absl::StatusCode::kFailedPrecondition) << alloc.status();
  auto upload = gpu_->CaptureGraph([&] { return gpu_->CopyFromHost(host, dev); });
  EXPECT_EQ(upload.status().code(), absl::StatusCode::kFailedPrecondition) << upload.status();
  auto download = gpu_->CaptureGraph([&] { return gpu_->CopyToHost(dev, host); });
  EXPECT_EQ(download.status().code(), absl::StatusCode::kFailedPrecondition);
  auto sync = gpu_->CaptureGraph([&] { return gpu_->Synchronize(); });
  EXPECT_EQ(sync.status().code(), absl::StatusCode::kFailedPrecondition);
  // The backend works normally afterwards.
  EXPECT_TRUE(gpu_->FillUniform(dev, 1, 0.0f, 1.0f).ok());
  EXPECT_TRUE(gpu_->Synchronize().ok());
}

TEST_F(CudaStepGraphTest, GrownWorkspacesAreMarkedAndCapturesCannotGrowThem) {
  const model::ModelConfig c = GraphTestConfig();
  auto cache =
      PagedKvCache::Create({1, 8192, 16, c.num_kv_heads, c.head_dim}, *gpu_);  // 131072 tokens
  ASSERT_TRUE(cache.ok());
  ASSERT_TRUE(gpu_->FillUniform((*cache)->layer(0), 3, -1.0f, 1.0f).ok());
  Tensor q = ToGpu(RandomHost({1, c.num_heads, c.head_dim}));
  Tensor out = Poisoned(DType::kBf16, {1, c.num_heads, c.head_dim});
  auto batch_of = [](int kv_len) {
    kernels::AttentionBatch b;
    b.block_tokens = 16;
    kernels::SequenceAttention sa;
    sa.q_len = 1;
    sa.kv_len = kv_len;
    for (int i = 0; i < (kv_len + 15) / 16; ++i) sa.block_table.push_back(i);
    b.sequences.push_back(sa);
    return b;
  };
  kernels::AttentionShape shape{c.num_heads, c.num_kv_heads, c.head_dim, 1, 8192};
  kernels::AttentionWorkspace ws;
  const kernels::AttentionBatch small = batch_of(100);
  auto plan = gpu_->PlanAttention(small, shape, ws);
  ASSERT_TRUE(plan.ok()) << plan.status();
  const uint64_t generation = ws.generation;
  auto graph =
      gpu_->CaptureGraph([&] { return gpu_->Attention(*plan, q, (*cache)->layer(0), 0, out); });
  ASSERT_TRUE(graph.ok()) << graph.status();
  ASSERT_TRUE(gpu_->LaunchGraph(**graph).ok());
  const Tensor replayed = ToHost(out);
  Tensor direct_out = Poisoned(DType::kBf16, out.shape());
  ASSERT_TRUE(gpu_->Attention(*plan, q, (*cache)->layer(0), 0, direct_out).ok());
  EXPECT_EQ(RelError(replayed, ToHost(direct_out)), 0.0);

  // A plan that needs a bigger workspace cannot be made inside a capture.
  const kernels::AttentionBatch big = batch_of(131072);
  auto inside = gpu_->CaptureGraph([&] { return gpu_->PlanAttention(big, shape, ws).status(); });
  EXPECT_EQ(inside.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(ws.generation, generation);
  // Outside, 8192 blocks of block table outgrow the buffer: the generation moves, so a caller
  // knows graphs that read the old buffer are stale.
  ASSERT_TRUE(gpu_->PlanAttention(big, shape, ws).ok());
  EXPECT_GT(ws.generation, generation);
  EXPECT_TRUE(gpu_->Synchronize().ok());
}

}  // namespace
}  // namespace sparseserve::testing
