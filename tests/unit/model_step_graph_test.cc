// LlamaModel's step-graph protocol, on the CPU: a test backend records ops during CaptureGraph and
// replays them at LaunchGraph the way a CUDA graph does — the same tensors, no host code, and the
// attention plan the last PlanAttention wrote into the same workspace. Graph steps must then give
// the logits of op-by-op steps exactly, and the model must warm up, capture, recapture graphs whose
// workspace grew and graphs of another KV cache, and fall back to ops when a capture fails.
// (tests/gpu covers real CUDA graphs.)
#include <functional>
#include <map>
#include <vector>

#include "common/core/status.h"
#include "common/core/thread_pool.h"
#include "common/model/llama_model.h"
#include "common/model/model_presets.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"

namespace sparseserve::model {
namespace {

using kernels::AttentionBatch;

class RecordingBackend final : public kernels::Backend {
 public:
  explicit RecordingBackend(kernels::Backend* inner) : inner_(inner) {}

  int captures = 0, launches = 0, failed_captures = 0;
  bool grow_next_plan = false;     // the next plan "reallocates" its workspace (graphs go stale)
  bool fail_next_capture = false;  // the next CaptureGraph fails as a driver error would

  Device device() const override { return inner_->device(); }
  DType compute_dtype() const override { return inner_->compute_dtype(); }
  absl::StatusOr<Tensor> Allocate(DType dtype, Shape shape) override {
    if (tape_ != nullptr) return absl::FailedPreconditionError("Allocate while capturing");
    return inner_->Allocate(dtype, shape);
  }
  absl::Status CopyFromHost(const Tensor& src, const Tensor& dst) override {
    if (tape_ != nullptr) return absl::FailedPreconditionError("CopyFromHost while capturing");
    return inner_->CopyFromHost(src, dst);
  }
  absl::Status CopyToHost(const Tensor& src, const Tensor& dst) override {
    if (tape_ != nullptr) return absl::FailedPreconditionError("CopyToHost while capturing");
    return inner_->CopyToHost(src, dst);
  }
  absl::Status Copy(const Tensor& src, const Tensor& dst) override {
    return Op([=, this] { return inner_->Copy(src, dst); });
  }
  absl::Status FillUniform(const Tensor& t, uint64_t seed, float lo, float hi) override {
    return Op([=, this] { return inner_->FillUniform(t, seed, lo, hi); });
  }
  absl::Status Synchronize() override {
    if (tape_ != nullptr) return absl::FailedPreconditionError("Synchronize while capturing");
    return inner_->Synchronize();
  }
  absl::StatusOr<MemoryInfo> GetMemoryInfo() override { return inner_->GetMemoryInfo(); }
  absl::Status Embedding(const Tensor& table, const Tensor& ids, const Tensor& out) override {
    return Op([=, this] { return inner_->Embedding(table, ids, out); });
  }
  absl::Status RmsNorm(const Tensor& x, const Tensor& w, float eps, const Tensor& out) override {
    return Op([=, this] { return inner_->RmsNorm(x, w, eps, out); });
  }
  absl::Status AddRmsNorm(const Tensor& r, const Tensor& x, const Tensor& w, float eps,
                          const Tensor& out) override {
    return Op([=, this] { return inner_->AddRmsNorm(r, x, w, eps, out); });
  }
  absl::Status Linear(const Tensor& x, const Tensor& w, const Tensor& b,
                      const Tensor& out) override {
    return Op([=, this] { return inner_->Linear(x, w, b, out); });
  }
  absl::Status Rope(const Tensor& q, const Tensor& k, const Tensor& pos,
                    const Tensor& inv_freq) override {
    return Op([=, this] { return inner_->Rope(q, k, pos, inv_freq); });
  }
  absl::Status SiluMul(const Tensor& g, const Tensor& u, const Tensor& out) override {
    return Op([=, this] { return inner_->SiluMul(g, u, out); });
  }
  absl::Status LinearSiluMul(const Tensor& x, const Tensor& w, const Tensor& gate_up,
                             const Tensor& out) override {
    return Op([=, this] { return inner_->LinearSiluMul(x, w, gate_up, out); });
  }
  absl::Status LinearRopeWriteKv(const Tensor& x, const Tensor& w, const Tensor& b,
                                 const Tensor& qkv, const Tensor& positions, const Tensor& inv_freq,
                                 const Tensor& slots, const Tensor& q,
                                 const Tensor& kv_layer) override {
    return Op([=, this] {
      return inner_->LinearRopeWriteKv(x, w, b, qkv, positions, inv_freq, slots, q, kv_layer);
    });
  }
  absl::Status WriteKv(const Tensor& k, const Tensor& v, const Tensor& slots,
                       const Tensor& kv) override {
    return Op([=, this] { return inner_->WriteKv(k, v, slots, kv); });
  }
  absl::Status RopeWriteKv(const Tensor& qkv, const Tensor& pos, const Tensor& inv_freq,
                           const Tensor& slots, const Tensor& q, const Tensor& kv) override {
    return Op([=, this] { return inner_->RopeWriteKv(qkv, pos, inv_freq, slots, q, kv); });
  }
  absl::Status SupportsAttention(const kernels::AttentionPattern& pattern,
                                 int head_dim) const override {
    return inner_->SupportsAttention(pattern, head_dim);
  }
  // Like a device plan, the batch is copied into storage that belongs to the workspace: a replay
  // reads whatever the latest plan into that workspace wrote.
  absl::StatusOr<kernels::AttentionPlan> PlanAttention(
      const AttentionBatch& batch, const kernels::AttentionShape& shape,
      kernels::AttentionWorkspace& workspace) override {
    if (tape_ != nullptr) return absl::FailedPreconditionError("batch not planned before capture");
    AttentionBatch& stored = planned_[&workspace];
    stored = batch;
    if (grow_next_plan) {
      grow_next_plan = false;
      ++workspace.generation;
    }
    return inner_->PlanAttention(stored, shape, workspace);
  }
  absl::Status BuildAttentionIndex(const kernels::AttentionPlan& plan, const Tensor& q,
                                   const Tensor& kv, int layer) override {
    return Op([=, this] { return inner_->BuildAttentionIndex(plan, q, kv, layer); });
  }
  absl::Status Attention(const kernels::AttentionPlan& plan, const Tensor& q, const Tensor& kv,
                         int layer, const Tensor& out) override {
    return Op([=, this] { return inner_->Attention(plan, q, kv, layer, out); });
  }
  absl::Status ReadKv(const Tensor& kv, const Tensor& slots, const Tensor& k,
                      const Tensor& v) override {
    return Op([=, this] { return inner_->ReadKv(kv, slots, k, v); });
  }
  absl::Status GatherRows(const Tensor& x, const Tensor& rows, const Tensor& out) override {
    return Op([=, this] { return inner_->GatherRows(x, rows, out); });
  }
  absl::Status RelativeL2Error(const Tensor& actual, const Tensor& expected, const Tensor& ranges,
                               const Tensor& out) override {
    return Op([=, this] { return inner_->RelativeL2Error(actual, expected, ranges, out); });
  }
  absl::Status Sample(const Tensor& logits, const kernels::SamplingBatch& batch,
                      const Tensor& out) override {
    return Op([=, this] { return inner_->Sample(logits, batch, out); });
  }
  absl::Status TokenLogprobs(const Tensor& logits, const Tensor& tokens, int top_n,
                             const Tensor& values, const Tensor& ids) override {
    return Op([=, this] { return inner_->TokenLogprobs(logits, tokens, top_n, values, ids); });
  }

  absl::StatusOr<std::unique_ptr<kernels::StepGraph>> CaptureGraph(
      const std::function<absl::Status()>& record) override {
    auto graph = std::make_unique<Graph>();
    tape_ = &graph->ops;
    const absl::Status recorded = record();
    tape_ = nullptr;
    if (fail_next_capture) {
      fail_next_capture = false;
      ++failed_captures;
      return absl::InternalError("capture failed (test)");
    }
    if (!recorded.ok()) return recorded;
    if (!graph->ops.empty()) ++captures;  // the model's probe records nothing
    return std::unique_ptr<kernels::StepGraph>(std::move(graph));
  }
  absl::Status LaunchGraph(const kernels::StepGraph& graph) override {
    const auto& g = static_cast<const Graph&>(graph);
    ++launches;
    for (const auto& op : g.ops) {
      if (absl::Status s = op(); !s.ok()) return s;
    }
    return absl::OkStatus();
  }

 private:
  struct Graph final : kernels::StepGraph {
    std::vector<std::function<absl::Status()>> ops;
  };
  // Runs `op` now, or records it while capturing.
  absl::Status Op(std::function<absl::Status()> op) {
    if (tape_ == nullptr) return op();
    tape_->push_back(std::move(op));
    return absl::OkStatus();
  }

  kernels::Backend* inner_;
  std::vector<std::function<absl::Status()>>* tape_ = nullptr;
  std::map<const kernels::AttentionWorkspace*, AttentionBatch> planned_;
};

class StepGraphTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<ModelConfig> c = SyntheticModelConfig("tiny");
    ASSERT_TRUE(c.ok()) << c.status();
    config_ = *c;
  }

  std::unique_ptr<LlamaModel> MakeModel(kernels::Backend* backend, int graph_rows) {
    auto model = LlamaModel::CreateRandom(config_, backend, 11);
    EXPECT_TRUE(model.ok()) << model.status();
    (*model)->set_step_graph_rows(graph_rows);
    return std::move(*model);
  }
  std::unique_ptr<PagedKvCache> MakeCache(kernels::Backend& backend) {
    auto cache = PagedKvCache::Create(
        {config_.num_layers, 64, 16, config_.num_kv_heads, config_.head_dim}, backend);
    EXPECT_TRUE(cache.ok()) << cache.status();
    return std::move(*cache);
  }
  // Three sequences with prompts of 5, 20 and 33 tokens, blocks [16 s, 16 s + 16) reversed.
  std::vector<ForwardSequence> Prompts() const {
    std::vector<ForwardSequence> seqs(3);
    const int lengths[] = {5, 20, 33};
    for (int s = 0; s < 3; ++s) {
      for (int i = 0; i < lengths[s]; ++i) seqs[s].tokens.push_back((i * 31 + s) % 100);
      for (int b = 15; b >= 0; --b) seqs[s].block_table.push_back(16 * s + b);
    }
    return seqs;
  }
  // Decodes `steps` greedy steps of the first batch_of(step) sequences; returns every logit.
  static std::vector<float> Decode(LlamaModel& model, PagedKvCache& cache,
                                   std::vector<ForwardSequence> seqs, int steps,
                                   const std::function<size_t(int)>& batch_of,
                                   const std::function<void(int)>& before_step = nullptr) {
    std::vector<float> all;
    for (ForwardSequence& seq : seqs) {
      EXPECT_TRUE(model.Forward({seq}, cache).ok());
      seq.start_pos = static_cast<int32_t>(seq.tokens.size());
      seq.tokens = {3};
    }
    for (int step = 0; step < steps; ++step) {
      if (before_step) before_step(step);
      const size_t n = batch_of(step);
      std::vector<ForwardSequence> active(seqs.begin(), seqs.begin() + n);
      absl::StatusOr<Tensor> logits = model.Forward(active, cache);
      EXPECT_TRUE(logits.ok()) << logits.status();
      if (!logits.ok()) return all;
      const float* p = logits->data<float>();
      all.insert(all.end(), p, p + logits->numel());
      const int64_t vocab = logits->dim(1);
      for (size_t s = 0; s < n; ++s) {
        seqs[s].start_pos += 1;
        seqs[s].tokens = {static_cast<int32_t>(
            std::max_element(p + s * vocab, p + (s + 1) * vocab) - (p + s * vocab))};
      }
    }
    return all;
  }

  ModelConfig config_;
  core::ThreadPool pool_{2};
  kernels::CpuBackend cpu_{&pool_};
};

TEST_F(StepGraphTest, ReplayedStepsEqualOpByOpSteps) {
  RecordingBackend recording(&cpu_);
  auto graph_model = MakeModel(&recording, 64);
  auto cache_a = MakeCache(recording);
  auto plain_model = MakeModel(&cpu_, 0);
  auto cache_b = MakeCache(cpu_);
  // 3 sequences for 12 steps, then 2: each size runs once op by op, is captured on its second
  // step and replayed after that.
  auto batch_of = [](int step) -> size_t { return step < 12 ? 3 : 2; };
  const std::vector<float> got = Decode(*graph_model, *cache_a, Prompts(), 24, batch_of);
  const std::vector<float> want = Decode(*plain_model, *cache_b, Prompts(), 24, batch_of);
  ASSERT_EQ(got.size(), want.size());
  EXPECT_EQ(got, want);
  EXPECT_EQ(recording.captures, 2);
  EXPECT_EQ(recording.launches, 22);  // steps 1-11 and 13-23: captured, then replayed
}

TEST_F(StepGraphTest, GraphsOfAGrownWorkspaceAndAnotherCacheAreCapturedAgain) {
  RecordingBackend recording(&cpu_);
  auto graph_model = MakeModel(&recording, 64);
  auto cache = MakeCache(recording);
  auto plain_model = MakeModel(&cpu_, 0);
  auto plain_cache = MakeCache(cpu_);
  auto batch_of = [](int) -> size_t { return 3; };
  const std::vector<float> got =
      Decode(*graph_model, *cache, Prompts(), 10, batch_of, [&](int step) {
        if (step == 5) recording.grow_next_plan = true;
      });
  EXPECT_EQ(got, Decode(*plain_model, *plain_cache, Prompts(), 10, batch_of));
  EXPECT_EQ(recording.captures, 2);  // step 1, and step 5 after the workspace grew

  // The same model on another KV cache: its graphs read the old cache, so it captures anew.
  auto other_cache = MakeCache(recording);
  const int before = recording.captures;
  const std::vector<float> again = Decode(*graph_model, *other_cache, Prompts(), 4, batch_of);
  auto fresh_plain = MakeModel(&cpu_, 0);
  auto fresh_cache = MakeCache(cpu_);
  EXPECT_EQ(again, Decode(*fresh_plain, *fresh_cache, Prompts(), 4, batch_of));
  EXPECT_EQ(recording.captures, before + 1);
}

TEST_F(StepGraphTest, FailedCaptureFallsBackToOps) {
  RecordingBackend recording(&cpu_);
  auto graph_model = MakeModel(&recording, 64);
  auto cache = MakeCache(recording);
  recording.fail_next_capture = false;
  auto batch_of = [](int) -> size_t { return 2; };
  const std::vector<float> got =
      Decode(*graph_model, *cache, Prompts(), 8, batch_of, [&](int step) {
        if (step == 1) recording.fail_next_capture = true;
      });
  auto plain_model = MakeModel(&cpu_, 0);
  auto plain_cache = MakeCache(cpu_);
  EXPECT_EQ(got, Decode(*plain_model, *plain_cache, Prompts(), 8, batch_of));
  EXPECT_EQ(recording.failed_captures, 1);
  EXPECT_EQ(recording.captures, 0);  // that size stays op by op
  EXPECT_EQ(recording.launches, 0);
}

// The shadow-dense monitor in graph steps: shadowed decode steps replay a graph of their own
// (captured once per batch size), unshadowed ones the plain graph, and both give the logits and
// the errors of op-by-op steps with the same draws.
TEST_F(StepGraphTest, ShadowedStepsReplayTheirOwnGraph) {
  RecordingBackend recording(&cpu_);
  auto graph_model = MakeModel(&recording, 64);
  auto cache_a = MakeCache(recording);
  auto plain_model = MakeModel(&cpu_, 0);
  auto cache_b = MakeCache(cpu_);
  graph_model->set_shadow_dense(0.5, 3);
  plain_model->set_shadow_dense(0.5, 3);
  std::vector<ForwardSequence> prompts = Prompts();
  prompts[0].pattern = {kernels::AttentionMethodKind::kSlidingWindow, 4, 1};
  prompts[2].pattern = {kernels::AttentionMethodKind::kSlidingWindow, 64, 0};
  std::vector<std::vector<ShadowAttentionError>> got_errors, want_errors;
  auto batch_of = [](int) -> size_t { return 3; };
  const std::vector<float> got =
      Decode(*graph_model, *cache_a, prompts, 30, batch_of, [&](int step) {
        if (step > 0) got_errors.push_back(graph_model->shadow_errors());
      });
  const std::vector<float> want =
      Decode(*plain_model, *cache_b, prompts, 30, batch_of, [&](int step) {
        if (step > 0) want_errors.push_back(plain_model->shadow_errors());
      });
  EXPECT_EQ(got, want);
  ASSERT_EQ(got_errors.size(), want_errors.size());
  int shadowed = 0;
  for (size_t i = 0; i < got_errors.size(); ++i) {
    ASSERT_EQ(got_errors[i].size(), want_errors[i].size()) << "step " << i + 1;
    shadowed += got_errors[i].empty() ? 0 : 1;
    for (size_t j = 0; j < got_errors[i].size(); ++j) {
      EXPECT_EQ(got_errors[i][j].relative_l2, want_errors[i][j].relative_l2);
      EXPECT_EQ(got_errors[i][j].sequence, want_errors[i][j].sequence);
    }
  }
  EXPECT_GT(shadowed, 3);
  EXPECT_LT(shadowed, 26);
  EXPECT_EQ(recording.captures, 2);  // one plain and one shadow graph of batch size 3
}

// Verify steps of a masked tree replay a graph whatever their rows (masked rows never take
// cuDNN), while an unmasked chain longer than kGraphRowsPerSequence (a prefill chunk) runs op by
// op; both give the op-by-op logits.
TEST_F(StepGraphTest, MaskedTreeStepsReplayAGraphLongUnmaskedChainsDoNot) {
  constexpr int kRows = 12;
  auto steps = [&](kernels::Backend* backend, int graph_rows, bool masked) {
    auto model = MakeModel(backend, graph_rows);
    auto cache = MakeCache(*backend);
    ForwardSequence seq = Prompts()[1];  // 20 tokens
    EXPECT_TRUE(model->Forward({seq}, *cache).ok());
    std::vector<float> all;
    for (int step = 0; step < 6; ++step) {
      seq.start_pos = static_cast<int32_t>(20 + step);  // one token accepted per step
      seq.tokens.clear();
      for (int i = 0; i < kRows; ++i) seq.tokens.push_back((step * 13 + i * 7) % 100);
      seq.logits = model::LogitRows::kAll;
      seq.mask.clear();
      if (masked) {  // two branches of 6 rows under a shared root: row i sees rows of its branch
        seq.mask.assign(kRows * kRows, 0);
        for (int i = 0; i < kRows; ++i) {
          seq.mask[i * kRows] = 1;
          const int first = i == 0 ? 0 : (i <= 6 ? 1 : 7);
          for (int j = first; j <= i; ++j) seq.mask[i * kRows + j] = 1;
        }
      }
      absl::StatusOr<Tensor> logits = model->Forward({seq}, *cache);
      EXPECT_TRUE(logits.ok()) << logits.status();
      if (!logits.ok()) break;
      all.insert(all.end(), logits->data<float>(), logits->data<float>() + logits->numel());
    }
    return all;
  };
  for (const bool masked : {true, false}) {
    SCOPED_TRACE(masked ? "masked tree" : "unmasked chain");
    RecordingBackend recording(&cpu_);
    const std::vector<float> got = steps(&recording, 64, masked);
    EXPECT_EQ(got, steps(&cpu_, 0, masked));
    EXPECT_EQ(recording.captures, masked ? 1 : 0);
    EXPECT_EQ(recording.launches, masked ? 5 : 0);  // warmed on step 0, captured on step 1
  }
}

TEST_F(StepGraphTest, PrefillAndLargeBatchesRunOpByOp) {
  RecordingBackend recording(&cpu_);
  auto graph_model = MakeModel(&recording, 2);  // graphs for batches of at most 2
  auto cache = MakeCache(recording);
  Decode(*graph_model, *cache, Prompts(), 6, [](int) -> size_t { return 3; });
  EXPECT_EQ(recording.captures, 0);
  EXPECT_EQ(recording.launches, 0);
}

}  // namespace
}  // namespace sparseserve::model
