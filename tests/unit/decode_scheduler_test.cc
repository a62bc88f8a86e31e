// DecodeScheduler on stories260K: batched continuous decoding gives every request exactly the
// tokens a lone Generator run gives (greedy, and seeded sampling); a tiny pool forces preemption
// without changing outputs; aborts and queue limits return blocks and errors cleanly; KV staged
// in host memory is copied into the pool on admission and its staging blocks come back on every
// path. (Request ids are built with absl::StrCat: GCC 12 at -O3 reports a false -Wrestrict in
// libstdc++'s operator+(const char*, std::string&&), GCC bug 105329, fatal under -Werror.)
#include "decode_svc/decode_scheduler.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/core/thread_pool.h"
#include "common/engine/kv_block_copy.h"
#include "common/metrics/serving_metrics.h"
#include "common/sampling/sampling_params.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "prometheus/registry.h"
#include "tests/testing/test_model.h"

namespace sparseserve::decode {
namespace {

// Collects one request's output; Wait() blocks the test thread (bounded) until OnFinish.
class CollectingSink : public DecodeSink {
 public:
  void OnStart(int cached, double, double) override { cached_ = cached; }
  void OnToken(int32_t token, const model::TokenLogprobs* logprobs) override {
    tokens_.push_back(token);
    if (logprobs != nullptr) logprobs_.push_back(*logprobs);
  }
  void OnFinish(const absl::Status& status, engine::FinishReason reason,
                const DecodeWork& work) override {
    status_ = status;
    reason_ = reason;
    work_ = work;
    done_.Notify();
  }
  bool Wait() { return done_.WaitForNotificationWithTimeout(absl::Seconds(60)); }
  std::vector<int32_t> tokens_;
  std::vector<model::TokenLogprobs> logprobs_;  // one per token when the job asked
  absl::Status status_;
  engine::FinishReason reason_ = engine::FinishReason::kLength;
  DecodeWork work_;
  int cached_ = -1;
  absl::Notification done_;
};

class DecodeSchedulerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string path = testing::FindTestModelFile("stories260K.gguf");
    if (path.empty()) GTEST_SKIP() << "stories260K.gguf not found (run scripts/fetch_model.sh)";
    auto src = engine::OpenModelSource(path);
    ASSERT_TRUE(src.ok()) << src.status();
    source_ = std::move(*src);
  }

  // `adapters`: stories260K's trained TokenSwift heads and Kangaroo adapter.
  std::unique_ptr<engine::ModelRunner> Runner(int kv_tokens, int tokenselect_max_k = 0,
                                              bool adapters = false) {
    engine::ModelRunnerOptions options;
    options.kv_cache_tokens = kv_tokens;
    options.block_tokens = 16;
    options.tokenselect_max_k = tokenselect_max_k;
    if (adapters) {
      const std::string dir = std::string(SPARSESERVE_TEST_DATA_DIR) + "/spec_adapters/";
      options.tokenswift_heads = dir + "s260k_tokenswift.safetensors";
      options.kangaroo_adapter = dir + "s260k_kangaroo.safetensors";
    }
    auto runner = engine::ModelRunner::Create(source_, &backend_, options);
    EXPECT_TRUE(runner.ok()) << runner.status();
    return std::move(*runner);
  }

  static sampling::SamplingParams Greedy() {
    sampling::SamplingParams params;
    params.temperature = 0;
    return params;
  }

  // Every knob on, a seed of its own per request.
  static sampling::SamplingParams Seeded(int i) {
    sampling::SamplingParams params;
    params.temperature = 0.9f;
    params.top_k = 50;
    params.top_p = 0.95f;
    params.min_p = 0.02f;
    params.repetition_penalty = 1.15f;
    params.penalty_window = 8;
    params.seed = 1000 + static_cast<uint64_t>(i);
    return params;
  }

  // Reference for one prompt, generated alone.
  std::vector<int32_t> Reference(const std::vector<int32_t>& prompt, int max_tokens,
                                 const sampling::SamplingParams& params = Greedy()) {
    auto runner = Runner(0);
    engine::Generator gen(runner.get(), source_.tokenizer.get());
    engine::GenerationRequest req;
    req.prompt_tokens = prompt;
    req.max_tokens = max_tokens;
    req.ignore_eos = true;
    req.sampling = params;
    auto result = gen.Generate(req);
    EXPECT_TRUE(result.ok()) << result.status();
    return result->output_tokens;
  }

  DecodeJob Job(const std::string& id, std::vector<int32_t> prompt, int max_tokens,
                std::shared_ptr<DecodeSink> sink,
                const sampling::SamplingParams& params = Greedy()) {
    DecodeJob job;
    job.request_id = id;
    job.prompt = std::move(prompt);
    job.max_tokens = max_tokens;
    job.ignore_eos = true;
    job.sampling = params;
    job.sink = std::move(sink);
    return job;
  }

  std::vector<std::vector<int32_t>> Prompts(int n) {
    std::vector<std::vector<int32_t>> prompts;
    for (int i = 0; i < n; ++i) {
      auto ids = source_.tokenizer->Encode("Once upon a time there was a " +
                                               std::string(i % 3 == 0 ? "cat" : "dog") +
                                               std::string(i, '!'),
                                           true);
      prompts.push_back(*ids);
    }
    return prompts;
  }

  core::ThreadPool pool_{2};
  kernels::CpuBackend backend_{&pool_};
  engine::ModelSource source_;
};

TEST_F(DecodeSchedulerTest, BatchedOutputsEqualSingleRuns) {
  auto runner = Runner(0);
  const auto prompts = Prompts(8);
  std::vector<std::shared_ptr<CollectingSink>> sinks;
  {
    DecodeScheduler scheduler(runner.get(), {});
    for (size_t i = 0; i < prompts.size(); ++i) {
      sinks.push_back(std::make_shared<CollectingSink>());
      ASSERT_TRUE(scheduler.Submit(Job(absl::StrCat("r", i), prompts[i], 24, sinks[i])).ok());
    }
    for (auto& s : sinks) ASSERT_TRUE(s->Wait());
  }
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_TRUE(sinks[i]->status_.ok());
    EXPECT_EQ(sinks[i]->reason_, engine::FinishReason::kLength);
    EXPECT_EQ(sinks[i]->tokens_, Reference(prompts[i], 24)) << "request " << i;
  }
  EXPECT_EQ(runner->pool().num_used_blocks(), 0);
}

// Any step budget and chunk size give the same tokens (the CPU reference is batch-invariant), from
// one row per step (sequences run one at a time, prompts fed token by token) to the defaults.
TEST_F(DecodeSchedulerTest, StepBudgetsAndChunkSizesGiveTheSameTokens) {
  auto prompts = Prompts(4);
  std::vector<int32_t> long_prompt = prompts[1];
  for (int i = 0; i < 90; ++i) long_prompt.push_back(prompts[0][i % prompts[0].size()]);
  prompts.push_back(long_prompt);
  std::vector<std::vector<int32_t>> want;
  for (const auto& p : prompts) want.push_back(Reference(p, 12));
  for (auto [budget, chunk] : {std::pair{1, 1}, {3, 2}, {7, 5}, {64, 13}, {2048, 512}}) {
    auto runner = Runner(0);
    DecodeSchedulerOptions options;
    options.max_step_tokens = budget;
    options.prefill_chunk = chunk;
    std::vector<std::shared_ptr<CollectingSink>> sinks;
    {
      DecodeScheduler scheduler(runner.get(), options);
      for (size_t i = 0; i < prompts.size(); ++i) {
        sinks.push_back(std::make_shared<CollectingSink>());
        ASSERT_TRUE(scheduler.Submit(Job(absl::StrCat("b", i), prompts[i], 12, sinks[i])).ok());
      }
      for (auto& s : sinks) ASSERT_TRUE(s->Wait());
    }
    for (size_t i = 0; i < prompts.size(); ++i) {
      ASSERT_TRUE(sinks[i]->status_.ok()) << sinks[i]->status_;
      EXPECT_EQ(sinks[i]->tokens_, want[i])
          << "budget " << budget << " chunk " << chunk << " request " << i;
    }
    EXPECT_EQ(runner->pool().num_used_blocks(), 0);
  }
}

// Notifies when the first token arrives (the test then submits a long prompt beside it).
class FirstTokenSink : public CollectingSink {
 public:
  void OnToken(int32_t token, const model::TokenLogprobs* logprobs) override {
    CollectingSink::OnToken(token, logprobs);
    if (!first_.HasBeenNotified()) first_.Notify();
  }
  absl::Notification first_;
};

// A long prompt admitted while a stream runs is prefilled in chunks inside the stream's steps:
// every step that holds one of its chunks also holds the running stream's decode row (a "mixed"
// step), none is prefill-only, and both outputs equal their lone runs.
TEST_F(DecodeSchedulerTest, RunningStreamsAdvanceInEveryStepOfALongPrefill) {
  auto runner = Runner(0);
  auto registry = std::make_shared<prometheus::Registry>();
  auto metrics = metrics::ServingMetrics::Create(registry, metrics::ServiceRole::kDecode);
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  DecodeSchedulerOptions options;
  options.prefill_chunk = 16;
  options.metrics = metrics->get();
  const std::vector<int32_t> short_prompt = Prompts(1)[0];
  std::vector<int32_t> long_prompt;
  while (long_prompt.size() < 400) long_prompt.push_back(3 + (long_prompt.size() * 29) % 400);
  auto running = std::make_shared<FirstTokenSink>();
  auto joining = std::make_shared<CollectingSink>();
  const int running_tokens = 450;  // outlasts the long prompt's 25 chunks by far
  {
    DecodeScheduler scheduler(runner.get(), options);
    ASSERT_TRUE(scheduler.Submit(Job("run", short_prompt, running_tokens, running)).ok());
    ASSERT_TRUE(running->first_.WaitForNotificationWithTimeout(absl::Seconds(60)));
    ASSERT_TRUE(scheduler.Submit(Job("join", long_prompt, 8, joining)).ok());
    ASSERT_TRUE(joining->Wait());
    // The long prompt finished while the stream still ran: it was never alone in a step.
    EXPECT_EQ((*metrics)->engine_steps_prefill().Value(), 1);  // the short prompt's only chunk
    EXPECT_GE((*metrics)->engine_steps_mixed().Value(), 400 / 16);
    ASSERT_TRUE(running->Wait());
  }
  EXPECT_EQ(joining->tokens_, Reference(long_prompt, 8));
  EXPECT_EQ(running->tokens_, Reference(short_prompt, running_tokens));
}

// The shadow-dense monitor through the scheduler (issue 11): at rate 1 every decode step of a
// sliding-window request lands in sparseserve_sparse_attention_error{role="decode",
// method="sliding-window"}, one value per layer — all exactly 0 while the window covers the
// context, some above 0 with a short window (proof the monitor can fail); a dense request adds
// nothing; and the tokens stay those of a run without the monitor.
TEST_F(DecodeSchedulerTest, ShadowDenseErrorsReachTheHistogram) {
  engine::ModelRunnerOptions runner_options;
  runner_options.block_tokens = 16;
  runner_options.shadow_dense_rate = 1;
  auto runner = engine::ModelRunner::Create(source_, &backend_, runner_options);
  ASSERT_TRUE(runner.ok()) << runner.status();
  auto registry = std::make_shared<prometheus::Registry>();
  auto metrics = metrics::ServingMetrics::Create(registry, metrics::ServiceRole::kDecode);
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  DecodeSchedulerOptions options;
  options.metrics = metrics->get();
  prometheus::Histogram& errors = (*metrics)->sparse_attention_error("sliding-window");
  const std::vector<int32_t> prompt = Prompts(1)[0];
  const int layers = (*runner)->config().num_layers;
  constexpr int kTokens = 8;  // the first comes from the (dense) prefill, 7 decode steps follow
  auto run = [&](int window, engine::AttentionMethod method) {
    auto sink = std::make_shared<CollectingSink>();
    DecodeJob job = Job(absl::StrCat("w", window), prompt, kTokens, sink);
    job.options.decode.method = method;
    job.options.decode.window = window;
    job.options.decode.sink_tokens = 0;
    DecodeScheduler scheduler(runner->get(), options);
    EXPECT_TRUE(scheduler.Submit(std::move(job)).ok());
    EXPECT_TRUE(sink->Wait());
    return sink->tokens_;
  };
  EXPECT_EQ(run(4096, engine::AttentionMethod::kSlidingWindow), Reference(prompt, kTokens));
  prometheus::ClientMetric m = errors.Collect();
  EXPECT_EQ(m.histogram.sample_count, static_cast<uint64_t>((kTokens - 1) * layers));
  EXPECT_EQ(m.histogram.sample_sum, 0.0);

  run(1, engine::AttentionMethod::kDense);  // the window is ignored: dense
  EXPECT_EQ(errors.Collect().histogram.sample_count, m.histogram.sample_count);

  run(4, engine::AttentionMethod::kSlidingWindow);
  m = errors.Collect();
  EXPECT_EQ(m.histogram.sample_count, static_cast<uint64_t>(2 * (kTokens - 1) * layers));
  EXPECT_GT(m.histogram.sample_sum, 0.0);
}

TEST_F(DecodeSchedulerTest, SmallPoolPreemptsWithoutChangingOutputs) {
  auto runner = Runner(96);  // 6 blocks of 16: not enough for 4 sequences of ~50 tokens
  const auto prompts = Prompts(4);
  std::vector<std::shared_ptr<CollectingSink>> sinks;
  {
    DecodeScheduler scheduler(runner.get(), {});
    for (size_t i = 0; i < prompts.size(); ++i) {
      sinks.push_back(std::make_shared<CollectingSink>());
      ASSERT_TRUE(scheduler.Submit(Job(absl::StrCat("p", i), prompts[i], 40, sinks[i])).ok());
    }
    for (auto& s : sinks) ASSERT_TRUE(s->Wait());
  }
  for (size_t i = 0; i < prompts.size(); ++i) {
    ASSERT_TRUE(sinks[i]->status_.ok()) << sinks[i]->status_;
    EXPECT_EQ(sinks[i]->tokens_, Reference(prompts[i], 40)) << "request " << i;
  }
  EXPECT_EQ(runner->pool().num_used_blocks(), 0);
}

// Seeded sampling (every knob on, on the backend for every decode step): batched with others, and
// batched in a pool so small that sequences are preempted and recomputed, each request gets
// exactly the tokens a lone Generator run with its seed gets.
TEST_F(DecodeSchedulerTest, SeededSamplingIsReproducibleBatchedAndUnderPreemption) {
  const auto prompts = Prompts(4);
  for (const int kv_tokens : {0, 96}) {
    auto runner = Runner(kv_tokens);
    std::vector<std::shared_ptr<CollectingSink>> sinks;
    {
      DecodeScheduler scheduler(runner.get(), {});
      for (size_t i = 0; i < prompts.size(); ++i) {
        sinks.push_back(std::make_shared<CollectingSink>());
        DecodeJob job =
            Job(absl::StrCat("s", i), prompts[i], 40, sinks[i], Seeded(static_cast<int>(i)));
        ASSERT_TRUE(scheduler.Submit(std::move(job)).ok());
      }
      for (auto& s : sinks) ASSERT_TRUE(s->Wait());
    }
    for (size_t i = 0; i < prompts.size(); ++i) {
      ASSERT_TRUE(sinks[i]->status_.ok()) << sinks[i]->status_;
      const std::vector<int32_t> want = Reference(prompts[i], 40, Seeded(static_cast<int>(i)));
      EXPECT_EQ(sinks[i]->tokens_, want) << "request " << i << ", pool " << kv_tokens;
      EXPECT_NE(want, Reference(prompts[i], 40)) << "sampling should differ from greedy";
    }
    EXPECT_EQ(runner->pool().num_used_blocks(), 0);
  }
}

// Speculative decoding inside continuous batching (issues 14, 15): sequences of different modes
// (none, prompt lookup and Lookahead at a fixed draft length, prompt lookup under the controller,
// sparse self-speculation drafting with TokenSelect at a fixed length and with a sliding window
// under the controller, TokenSwift with trained heads and Kangaroo at fixed lengths: their draft
// passes batched, Kangaroo's early exits in steps of their own; TokenSwift without a draft pass,
// its heads read after each step from the row that sampled its root) share
// steps, greedy and seeded, in a roomy pool and in one so small that sequences are preempted;
// each gets exactly the tokens a lone plain run with its seed gets, drafts are counted in the
// spec_decode metrics, and every block comes back.
TEST_F(DecodeSchedulerTest, SpeculativeSequencesBatchedWithPlainOnesEqualPlainDecoding) {
  const auto prompts = Prompts(9);
  const engine::SpecMethod modes[] = {
      engine::SpecMethod::kNone,       engine::SpecMethod::kPromptLookup,
      engine::SpecMethod::kLookahead,  engine::SpecMethod::kPromptLookup,
      engine::SpecMethod::kSparseSelf, engine::SpecMethod::kSparseSelf,
      engine::SpecMethod::kTokenSwift, engine::SpecMethod::kKangaroo,
      engine::SpecMethod::kTokenSwift};
  for (const bool seeded : {false, true}) {
    for (const int kv_tokens : {0, 200}) {
      auto runner = Runner(kv_tokens, /*tokenselect_max_k=*/16, /*adapters=*/true);
      auto registry = std::make_shared<prometheus::Registry>();
      auto metrics = metrics::ServingMetrics::Create(registry, metrics::ServiceRole::kDecode);
      ASSERT_TRUE(metrics.ok()) << metrics.status();
      std::vector<std::shared_ptr<CollectingSink>> sinks;
      {
        DecodeSchedulerOptions options;
        options.metrics = metrics->get();
        DecodeScheduler scheduler(runner.get(), options);
        for (size_t i = 0; i < prompts.size(); ++i) {
          sinks.push_back(std::make_shared<CollectingSink>());
          DecodeJob job = Job(absl::StrCat("s", i), prompts[i], 60, sinks[i],
                              seeded ? Seeded(static_cast<int>(i)) : Greedy());
          job.options.spec.method = modes[i];
          job.options.spec.controller = i == 3 || i == 5;
          job.options.spec.tokenswift_ngram_lag = 8;
          job.options.spec.tokenswift_draft_pass = i != 8;
          job.options.spec.kangaroo_eta = 0.3f;
          job.options.spec.lookahead_window = 4;
          job.options.spec.lookahead_ngram = 4;
          job.options.spec.lookahead_guesses = 4;
          job.options.spec.sparse_self_attention = i == 5 ? engine::AttentionMethod::kSlidingWindow
                                                          : engine::AttentionMethod::kTokenSelect;
          job.options.spec.sparse_self_sinks = 4;
          job.options.spec.sparse_self_window = 12;
          job.options.spec.sparse_self_k = 16;
          ASSERT_TRUE(scheduler.Submit(std::move(job)).ok());
        }
        for (auto& sink : sinks) ASSERT_TRUE(sink->Wait());
      }
      for (size_t i = 0; i < prompts.size(); ++i) {
        ASSERT_TRUE(sinks[i]->status_.ok()) << sinks[i]->status_;
        EXPECT_EQ(sinks[i]->tokens_,
                  Reference(prompts[i], 60, seeded ? Seeded(static_cast<int>(i)) : Greedy()))
            << "request " << i << " (" << engine::SpecMethodName(modes[i]) << "), pool "
            << kv_tokens << (seeded ? ", seeded" : ", greedy");
      }
      EXPECT_EQ(runner->pool().num_used_blocks(), 0);
      // Drafts take only spare blocks, so in the small pool whether a method drafts depends on
      // how admissions and preemptions interleave; in the roomy one every method drafts.
      if (kv_tokens == 0) {
        EXPECT_GT((*metrics)->spec_decode_draft_tokens("lookahead").Value(), 0);
        EXPECT_GT((*metrics)->spec_decode_draft_tokens("prompt-lookup").Value(), 0);
        EXPECT_GT((*metrics)->spec_decode_draft_tokens("sparse-self").Value(), 0);
        EXPECT_GT((*metrics)->spec_decode_accepted_tokens("sparse-self").Value(), 0);
        for (const char* method : {"tokenswift", "kangaroo"}) {
          EXPECT_GT((*metrics)->spec_decode_accepted_tokens(method).Value(), 0) << method;
        }
      }
    }
  }
}

// Logprobs (the OpenAI API's): every emitted token's equals the log-softmax of the model's logits
// computed by a separate prefill of the prompt and the tokens before it; greedy tokens are their
// own top alternative; speculative decoding reports the same numbers as plain decoding (its
// verification rows' logits); a job that asks for none gets none.
TEST_F(DecodeSchedulerTest, LogprobsMatchTheModelPlainAndSpeculative) {
  const auto prompts = Prompts(3);
  constexpr int kTokens = 24;
  const engine::SpecMethod modes[] = {engine::SpecMethod::kNone, engine::SpecMethod::kPromptLookup,
                                      engine::SpecMethod::kTokenSwift};
  auto runner = Runner(0, /*tokenselect_max_k=*/16, /*adapters=*/true);
  std::vector<std::shared_ptr<CollectingSink>> sinks;  // [prompt * 4 + mode], mode 3: no logprobs
  auto metrics = metrics::ServingMetrics::Create(std::make_shared<prometheus::Registry>(),
                                                 metrics::ServiceRole::kDecode);
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  {
    DecodeSchedulerOptions options;
    options.metrics = metrics->get();
    DecodeScheduler scheduler(runner.get(), options);
    for (size_t p = 0; p < prompts.size(); ++p) {
      for (int mode = 0; mode < 4; ++mode) {
        sinks.push_back(std::make_shared<CollectingSink>());
        DecodeJob job = Job(absl::StrCat("p", p, "m", mode), prompts[p], kTokens, sinks.back());
        job.options.spec.method = modes[mode % 3];
        job.options.spec.sparse_self_k = 16;
        job.options.spec.controller = false;  // always draft: verification rows beyond the root
        job.options.spec.tokenswift_ngram_lag = 8;
        job.top_logprobs = mode == 3 ? -1 : 3 + mode;
        const absl::Status submitted = scheduler.Submit(std::move(job));
        ASSERT_TRUE(submitted.ok()) << submitted;
      }
    }
    for (auto& sink : sinks) ASSERT_TRUE(sink->Wait());
  }
  // Accepted drafts: emitted tokens came from verification rows beyond the root.
  EXPECT_GT((*metrics)->spec_decode_accepted_tokens("tokenswift").Value(), 0);
  auto reference = Runner(0);
  for (size_t p = 0; p < prompts.size(); ++p) {
    const CollectingSink& plain = *sinks[p * 4];
    ASSERT_TRUE(plain.status_.ok()) << plain.status_;
    ASSERT_EQ(plain.tokens_.size(), static_cast<size_t>(kTokens));
    ASSERT_EQ(plain.logprobs_.size(), plain.tokens_.size());
    EXPECT_TRUE(sinks[p * 4 + 3]->logprobs_.empty());
    EXPECT_EQ(sinks[p * 4 + 3]->tokens_, plain.tokens_);
    std::vector<int32_t> context = prompts[p];
    for (int i = 0; i < kTokens; ++i) {
      const model::TokenLogprobs& lp = plain.logprobs_[static_cast<size_t>(i)];
      ASSERT_EQ(lp.top_ids.size(), 3u);
      EXPECT_EQ(lp.top_ids[0], plain.tokens_[static_cast<size_t>(i)]);  // greedy
      EXPECT_EQ(lp.top_logprobs[0], lp.logprob);
      EXPECT_GE(lp.top_logprobs[0], lp.top_logprobs[1]);
      EXPECT_GE(lp.top_logprobs[1], lp.top_logprobs[2]);
      if (p == 0) {  // against a separate prefill's logits
        engine::SequenceKv seq;
        absl::StatusOr<Tensor> logits = reference->Prefill(context, seq);
        ASSERT_TRUE(logits.ok()) << logits.status();
        const float* l = logits->data<float>();
        const int64_t vocab = logits->dim(1);
        const float max = *std::max_element(l, l + vocab);
        double sum = 0;
        for (int64_t v = 0; v < vocab; ++v) sum += std::exp(static_cast<double>(l[v]) - max);
        const double lse = max + std::log(sum);
        for (size_t k = 0; k < 3; ++k) {
          EXPECT_NEAR(lp.top_logprobs[k], l[lp.top_ids[k]] - lse, 2e-4) << "token " << i;
        }
        reference->Release(seq);
      }
      context.push_back(plain.tokens_[static_cast<size_t>(i)]);
      for (int mode = 1; mode < 3; ++mode) {
        const CollectingSink& spec = *sinks[p * 4 + static_cast<size_t>(mode)];
        ASSERT_TRUE(spec.status_.ok()) << spec.status_;
        ASSERT_EQ(spec.tokens_, plain.tokens_) << engine::SpecMethodName(modes[mode]);
        ASSERT_EQ(spec.logprobs_.size(), spec.tokens_.size());
        const model::TokenLogprobs& s = spec.logprobs_[static_cast<size_t>(i)];
        ASSERT_EQ(s.top_ids.size(), static_cast<size_t>(3 + mode));
        EXPECT_NEAR(s.logprob, lp.logprob, 2e-4) << engine::SpecMethodName(modes[mode]) << " " << i;
        for (size_t k = 0; k < 3; ++k) EXPECT_EQ(s.top_ids[k], lp.top_ids[k]);
      }
    }
  }
}

TEST_F(DecodeSchedulerTest, PromptLargerThanThePoolFailsCleanly) {
  auto runner = Runner(32);
  DecodeScheduler scheduler(runner.get(), {});
  auto sink = std::make_shared<CollectingSink>();
  std::vector<int32_t> prompt(100, 300);
  prompt[0] = 1;
  ASSERT_TRUE(scheduler.Submit(Job("big", prompt, 4, sink)).ok());
  ASSERT_TRUE(sink->Wait());
  EXPECT_EQ(sink->status_.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(runner->pool().num_used_blocks(), 0);
}

TEST_F(DecodeSchedulerTest, AbortAndValidation) {
  auto runner = Runner(0);
  DecodeSchedulerOptions options;
  options.max_waiting = 2;
  DecodeScheduler scheduler(runner.get(), options);
  auto sink = std::make_shared<CollectingSink>();
  ASSERT_TRUE(scheduler.Submit(Job("long", Prompts(1)[0], 1000, sink)).ok());
  EXPECT_EQ(scheduler.Submit(Job("long", Prompts(1)[0], 5, sink)).code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_TRUE(scheduler.Abort("long"));
  ASSERT_TRUE(sink->Wait());
  EXPECT_EQ(sink->reason_, engine::FinishReason::kAborted);
  EXPECT_FALSE(scheduler.Abort("nope"));
  auto other = std::make_shared<CollectingSink>();
  EXPECT_EQ(scheduler.Submit(Job("e", {}, 5, other)).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(scheduler.Submit(Job("v", {1, 99999}, 5, other)).code(),
            absl::StatusCode::kInvalidArgument);
  DecodeJob bad = Job("t", {1, 2}, 5, other);
  bad.sampling.temperature = -1;
  EXPECT_EQ(scheduler.Submit(std::move(bad)).code(), absl::StatusCode::kInvalidArgument);
  // The aborted request's blocks come back once the engine thread has processed the abort.
  for (int i = 0; i < 1000 && runner->pool().num_used_blocks() != 0; ++i) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_EQ(runner->pool().num_used_blocks(), 0);
}

// A host staging area in `runner`'s KV layout with `num_blocks` blocks.
std::unique_ptr<KvStagingArea> StagingFor(const engine::ModelRunner& runner, int num_blocks) {
  std::vector<Tensor> layers;
  const model::PagedKvCacheShape& shape = runner.cache().shape();
  for (int l = 0; l < shape.num_layers; ++l) {
    layers.push_back(Tensor::Zeros(
        runner.cache().dtype(),
        Shape{int64_t{2} * num_blocks, shape.block_tokens, shape.num_kv_heads, shape.head_dim}));
  }
  auto area = KvStagingArea::Create(std::move(layers));
  EXPECT_TRUE(area.ok()) << area.status();
  return area.ok() ? *std::move(area) : nullptr;
}

TEST_F(DecodeSchedulerTest, StagedKvIsCopiedIntoThePoolAndItsStagingBlocksReturn) {
  // A "prefill worker" runner computes the prompt; its KV reaches the decode runner the way a
  // staged transfer does: block 0 as if cached on the decode side, the rest through staging.
  std::vector<int32_t> prompt;
  for (const auto& p : Prompts(4)) prompt.insert(prompt.end(), p.begin(), p.end());
  ASSERT_GT(prompt.size(), 32u);  // at least three 16-token blocks
  auto prefill = Runner(0);
  engine::SequenceKv prefilled;
  auto logits = prefill->Prefill(prompt, prefilled);
  ASSERT_TRUE(logits.ok()) << logits.status();
  const int vocab = prefill->config().vocab_size;
  const float* row = logits->data<float>();
  const auto first = static_cast<int32_t>(std::max_element(row, row + vocab) - row);

  auto runner = Runner(0);
  auto staging = StagingFor(*runner, 8);
  ASSERT_NE(staging, nullptr);
  const int num_blocks = static_cast<int>(prefilled.block_ids.size());
  auto pool_blocks = runner->mutable_pool().Allocate(num_blocks);
  ASSERT_TRUE(pool_blocks.ok());
  auto lease = staging->Allocate(num_blocks - 1);
  ASSERT_TRUE(lease.ok());
  const std::vector<int32_t> remote(prefilled.block_ids.begin() + 1, prefilled.block_ids.end());
  for (int l = 0; l < runner->cache().shape().num_layers; ++l) {
    ASSERT_TRUE(engine::CopyKvBlocksToHost(backend_, prefill->cache().layer(l),
                                           {prefilled.block_ids[0]}, runner->cache().layer(l),
                                           {(*pool_blocks)[0]})
                    .ok());
    ASSERT_TRUE(engine::CopyKvBlocksToHost(backend_, prefill->cache().layer(l), remote,
                                           staging->layer(l), lease->block_ids())
                    .ok());
  }
  EXPECT_EQ(staging->num_free_blocks(), 8 - (num_blocks - 1));

  auto sink = std::make_shared<CollectingSink>();
  {
    DecodeScheduler scheduler(runner.get(), {});
    DecodeJob job = Job("staged", prompt, 19, sink);
    job.prefilled_kv = kv::KvBlockLease(&runner->mutable_pool(), *pool_blocks);
    job.first_token = first;
    job.staged_kv = *std::move(lease);
    job.first_staged_block = 1;
    ASSERT_TRUE(scheduler.Submit(std::move(job)).ok());
    ASSERT_TRUE(sink->Wait());
  }
  ASSERT_TRUE(sink->status_.ok()) << sink->status_;
  std::vector<int32_t> expected = Reference(prompt, 20);
  ASSERT_EQ(expected.front(), first);
  expected.erase(expected.begin());  // the first token was the prefill worker's
  EXPECT_EQ(sink->tokens_, expected);
  EXPECT_EQ(staging->num_free_blocks(), 8);
  EXPECT_EQ(runner->pool().num_used_blocks(), 0);
  prefill->Release(prefilled);
}

TEST_F(DecodeSchedulerTest, StagedKvThatDoesNotMatchItsBlocksFailsAndReturnsEverything) {
  auto runner = Runner(0);
  auto staging = StagingFor(*runner, 4);
  ASSERT_NE(staging, nullptr);
  const std::vector<int32_t> prompt = Prompts(1)[0];  // fits in one 16-token block
  auto pool_blocks = runner->mutable_pool().Allocate(1);
  ASSERT_TRUE(pool_blocks.ok());
  auto lease = staging->Allocate(2);  // two staged blocks for one pool block
  ASSERT_TRUE(lease.ok());
  auto sink = std::make_shared<CollectingSink>();
  {
    DecodeScheduler scheduler(runner.get(), {});
    DecodeJob job = Job("mismatch", prompt, 5, sink);
    job.prefilled_kv = kv::KvBlockLease(&runner->mutable_pool(), *pool_blocks);
    job.first_token = 1;
    job.staged_kv = *std::move(lease);
    ASSERT_TRUE(scheduler.Submit(std::move(job)).ok());
    ASSERT_TRUE(sink->Wait());
  }
  EXPECT_EQ(sink->status_.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(staging->num_free_blocks(), 4);
  EXPECT_EQ(runner->pool().num_used_blocks(), 0);
}

TEST_F(DecodeSchedulerTest, RejectedStagedJobReturnsItsStagingBlocks) {
  auto runner = Runner(0);
  auto staging = StagingFor(*runner, 4);
  ASSERT_NE(staging, nullptr);
  DecodeScheduler scheduler(runner.get(), {});
  auto sink = std::make_shared<CollectingSink>();
  DecodeJob job = Job("bad", {}, 5, sink);  // empty prompt: refused by Submit
  job.staged_kv = std::move(*staging->Allocate(3));
  EXPECT_EQ(staging->num_free_blocks(), 1);
  EXPECT_EQ(scheduler.Submit(std::move(job)).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(staging->num_free_blocks(), 4);
}

}  // namespace
}  // namespace sparseserve::decode
