// PrefillEngine on stories260K with real UCX in one process: several prompts admitted together
// share engine steps (asserted from the engine's step counters and the engine_step_sequences
// metric), and each one's first token and every KV row PUT into its decode-side blocks equal a
// lone prefill of that prompt on a fresh runner, bitwise (CPU) — straight from the KV cache and
// through a staging ring smaller than one prompt's KV (lanes and wraps). A transfer whose deadline
// has passed fails alone; an aborted waiting task gets CANCELLED.
#include "prefill_svc/prefill_engine.h"

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/core/thread_pool.h"
#include "common/metrics/serving_metrics.h"
#include "common/sampling/sampler.h"
#include "common/transfer/kv_transfer_target.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "prometheus/registry.h"
#include "tests/testing/test_model.h"

// (The LSan suppression for UCX is defined once per binary, in prefill_kv_staging_ring_test.cc.)

namespace sparseserve::prefill {
namespace {

constexpr int kBlockTokens = 16;
constexpr int kRemoteBlocks = 64;
constexpr absl::Duration kWait = absl::Seconds(60);

// One task's outcome, delivered on the engine thread.
struct Outcome {
  absl::StatusOr<PrefillResult> result = absl::UnknownError("not finished");
  absl::Notification done;
};

class PrefillEngineTest : public ::testing::TestWithParam<bool> {
 protected:
  bool staged() const { return GetParam(); }

  void SetUp() override {
    const std::string path = testing::FindTestModelFile("stories260K.gguf");
    if (path.empty()) GTEST_SKIP() << "stories260K.gguf not found (run scripts/fetch_model.sh)";
    auto src = engine::OpenModelSource(path);
    ASSERT_TRUE(src.ok()) << src.status();
    source_ = std::move(*src);
    runner_ = Runner();
    ASSERT_NE(runner_, nullptr);
    transfer::KvTransferOptions options;
    options.transports = "tcp,self";
    auto target = transfer::KvTransferTarget::Create(options);
    ASSERT_TRUE(target.ok()) << target.status();
    target_ = *std::move(target);
    auto kv_source = transfer::KvTransferSource::Create(options);
    ASSERT_TRUE(kv_source.ok()) << kv_source.status();
    kv_source_ = *std::move(kv_source);
    const model::PagedKvCache& cache = runner_->cache();
    const int num_layers = cache.shape().num_layers;
    for (int l = 0; l < num_layers; ++l) {
      const Tensor& layer = cache.layer(l);
      remote_.push_back(Tensor::Zeros(
          DType::kF32, Shape{2 * kRemoteBlocks, layer.dim(1), layer.dim(2), layer.dim(3)}));
      ASSERT_TRUE(
          target_->RegisterRegion(l, remote_.back().raw_data(), remote_.back().nbytes()).ok());
    }
    if (staged()) {
      // 3 (layer, block) units: smaller than any prompt's KV here, so lanes wrap with flushes.
      auto ring = KvStagingRing::Create(*kv_source_, cache.shape(), cache.dtype(), 3);
      ASSERT_TRUE(ring.ok()) << ring.status();
      ring_ = *std::move(ring);
    } else {
      for (int l = 0; l < num_layers; ++l) {
        ASSERT_TRUE(
            kv_source_->RegisterLocal(l, cache.layer(l).raw_data(), cache.layer(l).nbytes()).ok());
      }
    }
    block_bytes_ = static_cast<uint64_t>(cache.layer(0).nbytes() / cache.shape().num_blocks);
    auto pool = target_->ExportPool(num_layers, block_bytes_);
    ASSERT_TRUE(pool.ok()) << pool.status();
    pool_ = *std::move(pool);
    registry_ = std::make_shared<prometheus::Registry>();
    auto metrics = metrics::ServingMetrics::Create(registry_, metrics::ServiceRole::kPrefill);
    ASSERT_TRUE(metrics.ok()) << metrics.status();
    metrics_ = *std::move(metrics);
  }

  void TearDown() override {
    engine_.reset();
    kv_source_.reset();  // before the ring whose buffer it registered
    ring_.reset();
    target_.reset();
  }

  std::unique_ptr<engine::ModelRunner> Runner() {
    engine::ModelRunnerOptions options;
    options.kv_cache_tokens = 4096;
    options.block_tokens = kBlockTokens;
    auto runner = engine::ModelRunner::Create(source_, &backend_, options);
    EXPECT_TRUE(runner.ok()) << runner.status();
    return runner.ok() ? std::move(*runner) : nullptr;
  }

  void StartEngine(int max_step_tokens, int prefill_chunk) {
    PrefillEngineOptions options;
    options.max_step_tokens = max_step_tokens;
    options.prefill_chunk = prefill_chunk;
    options.metrics = metrics_.get();
    engine_ = std::make_unique<PrefillEngine>(runner_.get(), kv_source_.get(), ring_.get(),
                                              std::move(options));
  }

  static std::vector<int32_t> Prompt(int length, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int32_t> id(3, 500);
    std::vector<int32_t> prompt(length);
    for (int32_t& t : prompt) t = id(rng);
    return prompt;
  }

  // A task PUTting `prompt` into remote blocks [first_remote, ...); the decode side already has
  // its first `cached_remote` blocks.
  PrefillTask Task(const std::string& id, const std::vector<int32_t>& prompt, int first_remote,
                   int cached_remote = 0) {
    PrefillTask task;
    task.request_id = id;
    task.prompt = prompt;
    task.sampling.temperature = 0;
    PrefillTarget target;
    target.pool = pool_;
    target.layout = engine_->layout();
    const int blocks = (static_cast<int>(prompt.size()) + kBlockTokens - 1) / kBlockTokens;
    for (int b = 0; b < blocks; ++b) target.remote_blocks.push_back(first_remote + b);
    target.first_block = cached_remote;
    task.target = std::move(target);
    task.deadline = absl::Now() + kWait;
    return task;
  }

  void Submit(PrefillTask task, Outcome* out) {
    ASSERT_TRUE(engine_
                    ->Submit(std::move(task),
                             [out](absl::StatusOr<PrefillResult> r) {
                               out->result = std::move(r);
                               out->done.Notify();
                             })
                    .ok());
  }

  // The first token and KV of `prompt` prefilled alone on a fresh runner, then compared with
  // what reached remote blocks [first_remote + cached_remote, ...): every row of the prompt.
  void ExpectEqualsLonePrefill(const std::vector<int32_t>& prompt, const PrefillResult& result,
                               int first_remote, int cached_remote = 0) {
    std::unique_ptr<engine::ModelRunner> lone = Runner();
    ASSERT_NE(lone, nullptr);
    sampling::SamplingParams greedy;
    greedy.temperature = 0;
    sampling::Sampler sampler(greedy);
    kernels::SamplingBatch row;
    row.rows = {sampler.NextRow(prompt, &row.penalized_ids)};
    row.penalized_begin = {0, static_cast<int32_t>(row.penalized_ids.size())};
    engine::SequenceKv seq;
    absl::StatusOr<int32_t> first = lone->PrefillSampled(prompt, seq, row);
    ASSERT_TRUE(first.ok()) << first.status();
    EXPECT_EQ(result.first_token, *first);
    const int n = static_cast<int>(prompt.size());
    const int64_t row_floats = remote_[0].numel() / remote_[0].dim(0) / kBlockTokens;
    for (int l = 0; l < lone->config().num_layers; ++l) {
      const float* want = lone->cache().layer(l).data<float>();
      const float* got = remote_[l].data<float>();
      for (int pos = cached_remote * kBlockTokens; pos < n; ++pos) {
        const int b = pos / kBlockTokens, t = pos % kBlockTokens;
        for (int kv = 0; kv < 2; ++kv) {
          const float* w = want + ((2 * seq.block_ids[b] + kv) * kBlockTokens + t) * row_floats;
          const float* g = got + ((2 * (first_remote + b) + kv) * kBlockTokens + t) * row_floats;
          ASSERT_EQ(std::vector<float>(w, w + row_floats), std::vector<float>(g, g + row_floats))
              << "layer " << l << " position " << pos << (kv == 0 ? " K" : " V");
        }
      }
    }
    lone->Release(seq);
  }

  double StepSequencesMetric(bool shared_only) {
    for (const prometheus::MetricFamily& family : registry_->Collect()) {
      if (family.name != "sparseserve_engine_step_sequences") continue;
      const prometheus::ClientMetric::Histogram& h = family.metric.at(0).histogram;
      // Bucket 0 holds steps of one sequence.
      return shared_only ? static_cast<double>(h.sample_count - h.bucket.at(0).cumulative_count)
                         : static_cast<double>(h.sample_count);
    }
    return -1;
  }

  core::ThreadPool pool_threads_{2};
  kernels::CpuBackend backend_{&pool_threads_};
  engine::ModelSource source_;
  std::unique_ptr<engine::ModelRunner> runner_;
  std::vector<Tensor> remote_;  // the decode worker's layers [2 * kRemoteBlocks, bt, heads, dim]
  std::unique_ptr<transfer::KvTransferTarget> target_;
  std::unique_ptr<KvStagingRing> ring_;
  std::unique_ptr<transfer::KvTransferSource> kv_source_;
  transfer::RemoteKvPool pool_;
  uint64_t block_bytes_ = 0;
  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<metrics::ServingMetrics> metrics_;
  std::unique_ptr<PrefillEngine> engine_;
};

TEST_P(PrefillEngineTest, PromptsShareStepsAndEachKvEqualsALonePrefill) {
  StartEngine(/*max_step_tokens=*/64, /*prefill_chunk=*/24);
  // A first task holds the engine thread in its callback until the others are queued, so they
  // are admitted together (no timing involved).
  absl::Notification entered, queued;
  Outcome gate;
  ASSERT_TRUE(engine_
                  ->Submit(Task("gate", Prompt(5, 1), 60),
                           [&](absl::StatusOr<PrefillResult> r) {
                             gate.result = std::move(r);
                             entered.Notify();
                             queued.WaitForNotificationWithTimeout(kWait);
                             gate.done.Notify();
                           })
                  .ok());
  // The others are submitted only once the engine thread waits in the gate's callback: on a busy
  // machine they could otherwise join the gate's own step (seen in CI).
  ASSERT_TRUE(entered.WaitForNotificationWithTimeout(kWait));
  const std::vector<std::vector<int32_t>> prompts = {Prompt(70, 2), Prompt(33, 3), Prompt(100, 4),
                                                     Prompt(17, 5)};
  const std::vector<int> first_remote = {0, 8, 12, 20};
  std::vector<Outcome> outcomes(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    Submit(Task(absl::StrCat("p", i), prompts[i], first_remote[i]), &outcomes[i]);
  }
  queued.Notify();
  ASSERT_TRUE(gate.done.WaitForNotificationWithTimeout(kWait));
  ASSERT_TRUE(gate.result.ok()) << gate.result.status();
  for (size_t i = 0; i < prompts.size(); ++i) {
    ASSERT_TRUE(outcomes[i].done.WaitForNotificationWithTimeout(kWait));
    ASSERT_TRUE(outcomes[i].result.ok()) << outcomes[i].result.status();
    const PrefillResult& r = *outcomes[i].result;
    EXPECT_EQ(r.computed_tokens, static_cast<int>(prompts[i].size()));
    EXPECT_EQ(r.staged, staged());
    const int blocks = (static_cast<int>(prompts[i].size()) + kBlockTokens - 1) / kBlockTokens;
    EXPECT_EQ(r.transferred_bytes,
              static_cast<int64_t>(blocks * runner_->config().num_layers * block_bytes_));
    ExpectEqualsLonePrefill(prompts[i], r, first_remote[i]);
  }
  // 220 rows at 64 per step take at least 4 steps; all four prompts started in the first one.
  const PrefillEngineStats stats = engine_->stats();
  EXPECT_EQ(stats.max_step_prompts, 4);
  EXPECT_GE(stats.num_shared_steps, 3);
  EXPECT_EQ(stats.num_running, 0);
  EXPECT_EQ(StepSequencesMetric(false), static_cast<double>(stats.num_steps));
  EXPECT_EQ(StepSequencesMetric(true), static_cast<double>(stats.num_shared_steps));
  EXPECT_EQ(runner_->pool().num_used_blocks(), 0);  // every block released (cached ones stay)
}

TEST_P(PrefillEngineTest, CachedRemotePrefixIsSkippedAndAnExpiredTransferFailsAlone) {
  StartEngine(/*max_step_tokens=*/256, /*prefill_chunk=*/32);
  absl::Notification entered, queued;
  Outcome gate;
  ASSERT_TRUE(engine_
                  ->Submit(Task("gate", Prompt(5, 1), 60),
                           [&](absl::StatusOr<PrefillResult> r) {
                             gate.result = std::move(r);
                             entered.Notify();
                             queued.WaitForNotificationWithTimeout(kWait);
                             gate.done.Notify();
                           })
                  .ok());
  // The others are submitted only once the engine thread waits in the gate's callback: on a busy
  // machine they could otherwise join the gate's own step (seen in CI).
  ASSERT_TRUE(entered.WaitForNotificationWithTimeout(kWait));
  const std::vector<int32_t> a = Prompt(50, 6), b = Prompt(40, 7), c = Prompt(30, 8);
  Outcome out_a, out_b, out_c, out_aborted;
  Submit(Task("a", a, 0, /*cached_remote=*/2), &out_a);  // decode side holds a's first 2 blocks
  PrefillTask late = Task("b", b, 10);
  late.deadline = absl::Now() - absl::Seconds(1);
  Submit(std::move(late), &out_b);
  Submit(Task("c", c, 20), &out_c);
  Submit(Task("x", Prompt(20, 9), 30), &out_aborted);
  EXPECT_TRUE(engine_->Abort("x"));
  EXPECT_FALSE(engine_->Abort("nobody"));
  queued.Notify();
  for (Outcome* o : {&gate, &out_a, &out_b, &out_c, &out_aborted}) {
    ASSERT_TRUE(o->done.WaitForNotificationWithTimeout(kWait));
  }
  ASSERT_TRUE(out_a.result.ok()) << out_a.result.status();
  EXPECT_EQ(out_a.result->transferred_bytes,
            static_cast<int64_t>(2 * runner_->config().num_layers * block_bytes_));
  ExpectEqualsLonePrefill(a, *out_a.result, 0, /*cached_remote=*/2);
  for (int l = 0; l < runner_->config().num_layers; ++l) {  // the cached blocks were not written
    const float* p = remote_[l].data<float>();
    const int64_t floats = remote_[l].numel() / kRemoteBlocks;
    EXPECT_EQ(std::vector<float>(p, p + 2 * floats), std::vector<float>(2 * floats, 0.0f));
  }
  EXPECT_EQ(out_b.result.status().code(), absl::StatusCode::kDeadlineExceeded);
  ASSERT_TRUE(out_c.result.ok()) << out_c.result.status();
  ExpectEqualsLonePrefill(c, *out_c.result, 20);
  EXPECT_EQ(out_aborted.result.status().code(), absl::StatusCode::kCancelled);
  EXPECT_GE(engine_->stats().num_shared_steps, 1);
  EXPECT_EQ(runner_->pool().num_used_blocks(), 0);
}

INSTANTIATE_TEST_SUITE_P(KvPaths, PrefillEngineTest, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& param_info) {
                           return std::string(param_info.param ? "Staged" : "Direct");
                         });

}  // namespace
}  // namespace sparseserve::prefill
