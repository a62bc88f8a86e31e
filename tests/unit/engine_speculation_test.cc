// Speculative decoding end to end on the CPU reference (issues 14, 15): every mode's greedy output
// equals plain greedy decoding token for token — on stories260K (where drafts must really be
// accepted) and the tiny HF models, 200 prompts each, generating up to the model's context — and
// under sampling the first two generated tokens follow plain sampling's distribution (a
// two-sample chi-square test over 20,000 seeded runs per mode), with a deliberately biased
// verifier failing the same test. Modes: prompt lookup, Lookahead, sparse self-speculation
// drafting with TokenSelect or a sliding window, TokenSwift without and with the trained draft
// heads of tests/data/spec_adapters (whose acceptance must beat no heads) and with the heads but
// no draft pass, and Kangaroo with its trained early-exit adapter.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/core/status.h"
#include "common/core/thread_pool.h"
#include "common/engine/generator.h"
#include "common/engine/model_draft.h"
#include "common/engine/model_runner.h"
#include "common/engine/speculative_sequence.h"
#include "common/sampling/sampler.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "tests/testing/test_model.h"

namespace sparseserve::engine {
namespace {

std::string ModelPath(const std::string& name) {
  if (name == "stories260K") return testing::FindTestModelFile("stories260K.gguf");
  return std::string(SPARSESERVE_TEST_DATA_DIR) + "/" + name;
}

// The trained adapter of `model` for `method` (tokenswift: draft heads, kangaroo: the early-exit
// adapter; tools/train_spec_adapters.py). stories260K's are named s260k_* (the model itself is
// never in the repo: only adapters trained for it).
std::string AdapterPath(const std::string& model, const std::string& method) {
  const std::string prefix = model == "stories260K" ? "s260k" : model;
  return std::string(SPARSESERVE_TEST_DATA_DIR) + "/spec_adapters/" + prefix + "_" + method +
         ".safetensors";
}

// The modes under test: a speculation method and its parameters. "sparse-self-window" is
// sparse-self drafting with a sliding window instead of TokenSelect; "tokenswift-heads" is
// TokenSwift on a runner with the model's trained draft heads (Fixture's `heads`);
// "tokenswift-kvh" is TokenSwift whose partial KV is selected per KV head (TokenSwift's own
// rule) on a runner sized for it; "tokenswift-nopass" is TokenSwift with the trained heads and no
// draft pass (the heads read the row that sampled the root) and chained 4-grams.
SpeculationChoice Choice(const std::string& mode) {
  SpeculationChoice c;
  const bool window_draft = mode == "sparse-self-window";
  c.method = window_draft ? SpecMethod::kSparseSelf
             : mode == "tokenswift-heads" || mode == "tokenswift-kvh" || mode == "tokenswift-nopass"
                 ? SpecMethod::kTokenSwift
                 : *ParseSpecMethod(mode);
  c.sparse_self_per_kv_head = mode == "tokenswift-kvh";
  c.tokenswift_draft_pass = mode != "tokenswift-nopass";
  if (!c.tokenswift_draft_pass) {
    c.tokenswift_ngram_k = 4;  // 51-row trees: CI's CPU time
    // Chained 4-grams: at the depth of 4 below, one token past the heads' 3 levels.
    c.tokenswift_ngram_chain = 2;
  }
  c.controller = false;  // a fixed draft length: every step verifies a draft
  if (c.method == SpecMethod::kPromptLookup) c.max_draft = 4;
  if (c.method == SpecMethod::kKangaroo) c.max_draft = 6;  // γ; η stops most drafts earlier
  if (c.method == SpecMethod::kLookahead) {  // small enough for CI, deep enough (N - 1 = 3)
    c.lookahead_window = 3;
    c.lookahead_ngram = 4;
    c.lookahead_guesses = 3;
  }
  if (c.method == SpecMethod::kSparseSelf || c.method == SpecMethod::kTokenSwift) {
    // A draft budget far below the outputs' contexts (up to 512), so drafts really differ from
    // the dense model's tokens.
    c.max_draft = 4;
    c.tokenswift_ngram_lag = 16;  // the outputs are short: reuse what lies 16 tokens back
    c.sparse_self_attention =
        window_draft ? AttentionMethod::kSlidingWindow : AttentionMethod::kTokenSelect;
    c.sparse_self_sinks = 4;
    c.sparse_self_window = 16;
    c.sparse_self_k = 16;
  }
  return c;
}

class Fixture {
 public:
  // `heads`, `kangaroo`: load the model's trained TokenSwift heads, Kangaroo adapter
  // (AdapterPath). found() is false when the model is not here (the test skips); any other
  // failure is status().
  explicit Fixture(const std::string& model, bool heads = false, bool kangaroo = false,
                   bool per_kv_head = false) {
    const std::string path = ModelPath(model);
    if (path.empty()) return;
    found_ = true;
    auto src = OpenModelSource(path);
    if (!src.ok()) {
      status_ = src.status();
      return;
    }
    source_ = std::move(*src);
    ModelRunnerOptions options;
    options.block_tokens = 16;
    options.tokenselect_max_k = 64;  // sparse-self's TokenSelect drafts
    options.tokenselect_per_kv_head = per_kv_head;
    if (heads) options.tokenswift_heads = AdapterPath(model, "tokenswift");
    if (kangaroo) options.kangaroo_adapter = AdapterPath(model, "kangaroo");
    auto runner = ModelRunner::Create(source_, &backend_, options);
    if (runner.ok()) {
      runner_ = std::move(*runner);
    } else {
      status_ = runner.status();
    }
  }
  bool found() const { return found_; }
  const absl::Status& status() const { return status_; }
  ModelRunner* runner() { return runner_.get(); }
  const tokenizer::Tokenizer* tokenizer() { return source_.tokenizer.get(); }

 private:
  core::ThreadPool pool_{1};
  kernels::CpuBackend backend_{&pool_};
  ModelSource source_;
  std::unique_ptr<ModelRunner> runner_;
  bool found_ = false;
  absl::Status status_;
};

// Prompt i: 3 to 24 tokens, BOS first, spread over the vocabulary.
std::vector<int32_t> Prompt(int i, int vocab) {
  std::vector<int32_t> p = {1};
  const int len = 2 + i % 22;
  for (int j = 0; j < len; ++j) p.push_back(3 + (i * 131 + j * 977 + j * j * 37) % (vocab - 3));
  return p;
}

class LosslessGreedyTest : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(LosslessGreedyTest, EveryPromptsOutputEqualsPlainGreedy) {
  const auto& [model, mode] = GetParam();
  Fixture f(model, mode == "tokenswift-heads" || mode == "tokenswift-nopass", mode == "kangaroo",
            mode == "tokenswift-kvh");
  if (!f.found()) GTEST_SKIP() << model << " not found (run scripts/fetch_model.sh)";
  ASSERT_TRUE(f.status().ok()) << f.status();
  Generator gen(f.runner(), f.tokenizer());
  int64_t drafted = 0, accepted = 0, steps = 0, tokens = 0;
  // TokenSwift verifies trees of up to 100 rows per step and Kangaroo drafts up to 6 tokens: fewer
  // prompts keep CI's CPU time, and fewer and shorter still on the 20x larger long-context model.
  // (120 prompts of up to 510 tokens for the others: 60K tokens a mode; Lookahead's took 5 min
  // of CI's CPU at 200.)
  const bool large = model == "longctx_model";
  const SpecMethod method = Choice(mode).method;
  const bool heavy = method == SpecMethod::kTokenSwift || method == SpecMethod::kKangaroo;
  const int prompts = large ? 6 : heavy ? 40 : 120;
  for (int i = 0; i < prompts; ++i) {
    GenerationRequest request;
    request.prompt_tokens = Prompt(i, f.runner()->config().vocab_size);
    // Up to the context the model was trained for: stories260K's metadata says 2048, but it
    // was trained at 512 (models/stories260K/README.md), as the tiny HF models' configs say.
    request.max_tokens = std::min(f.runner()->max_context(), large ? 192 : 512) -
                         static_cast<int>(request.prompt_tokens.size());
    request.ignore_eos = true;
    request.sampling.temperature = 0;
    absl::StatusOr<GenerationResult> plain = gen.Generate(request);
    ASSERT_TRUE(plain.ok()) << plain.status();
    request.options.spec = Choice(mode);
    absl::StatusOr<GenerationResult> spec = gen.Generate(request);
    ASSERT_TRUE(spec.ok()) << spec.status();
    ASSERT_EQ(spec->output_tokens, plain->output_tokens) << "prompt " << i;
    ASSERT_EQ(spec->finish_reason, plain->finish_reason) << "prompt " << i;
    drafted += spec->spec_draft_tokens;
    accepted += spec->spec_accepted_tokens;
    steps += spec->decode_steps;
    tokens += static_cast<int64_t>(spec->output_tokens.size()) - 1;
  }
  EXPECT_GT(drafted, 0);
  if (model == "stories260K") {
    EXPECT_GT(accepted, 0) << "drafts must really be verified";
    // A sparse draft is often, not always, the dense model's token: some drafts rejected shows
    // that the drafts ran sparse and that verification checks them.
    if (Choice(mode).method != SpecMethod::kPromptLookup &&
        Choice(mode).method != SpecMethod::kLookahead) {
      EXPECT_LT(accepted, drafted);
    }
  }
  std::printf("%s %s: %lld drafted, %lld accepted, steps compression %.3f\n", model.c_str(),
              mode.c_str(), static_cast<long long>(drafted), static_cast<long long>(accepted),
              static_cast<double>(tokens) / steps);
}

std::string ParamName(const ::testing::TestParamInfo<LosslessGreedyTest::ParamType>& param_info) {
  std::string name = std::get<0>(param_info.param) + "_" + std::get<1>(param_info.param);
  for (char& c : name) c = std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return name;
}

INSTANTIATE_TEST_SUITE_P(
    Models, LosslessGreedyTest,
    ::testing::Combine(::testing::Values("stories260K", "tiny_llama", "tiny_qwen2"),
                       ::testing::Values("prompt-lookup", "lookahead", "sparse-self")),
    ParamName);
// A sliding-window draft on the trained model only: on random weights it is a poor draft
// (acceptance near 1%), which the run above already covers for exactness.
INSTANTIATE_TEST_SUITE_P(WindowDraft, LosslessGreedyTest,
                         ::testing::Combine(::testing::Values("stories260K"),
                                            ::testing::Values("sparse-self-window")),
                         ParamName);
// TokenSwift; its trained heads exist for the trained models only.
INSTANTIATE_TEST_SUITE_P(TokenSwift, LosslessGreedyTest,
                         ::testing::Combine(::testing::Values("stories260K", "tiny_llama",
                                                              "tiny_qwen2"),
                                            ::testing::Values("tokenswift")),
                         ParamName);
// TokenSwift's partial KV chosen per KV head (stories260K has 4 KV heads).
INSTANTIATE_TEST_SUITE_P(TokenSwiftPerKvHead, LosslessGreedyTest,
                         ::testing::Combine(::testing::Values("stories260K"),
                                            ::testing::Values("tokenswift-kvh")),
                         ParamName);
INSTANTIATE_TEST_SUITE_P(TrainedAdapters, LosslessGreedyTest,
                         ::testing::Combine(::testing::Values("stories260K", "longctx_model"),
                                            ::testing::Values("tokenswift-heads",
                                                              "tokenswift-nopass", "kangaroo")),
                         ParamName);

// A worker's KV layout carries its Kangaroo adapter file's fingerprint: equal for the same file,
// different for an adapter of the same shape with one weight changed (so two workers loading
// different adapters refuse each other's KV instead of adopting an adapter layer neither
// computed), and 0 without an adapter.
TEST(KangarooAdapterFingerprintTest, LayoutsOfDifferentAdapterFilesDoNotMatch) {
  const std::string path = ModelPath("stories260K");
  if (path.empty()) GTEST_SKIP() << "stories260K not found (run scripts/fetch_model.sh)";
  auto source = OpenModelSource(path);
  ASSERT_TRUE(source.ok()) << source.status();
  const std::string adapter = AdapterPath("stories260K", "kangaroo");
  std::string bytes;
  {
    std::ifstream in(adapter, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  ASSERT_GT(bytes.size(), 16u);
  bytes.back() = static_cast<char>(bytes.back() ^ 1);  // the last weight's lowest byte
  const std::string changed = ::testing::TempDir() + "/s260k_kangaroo_changed.safetensors";
  {
    std::ofstream out(changed, std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  core::ThreadPool pool(1);
  kernels::CpuBackend backend(&pool);
  auto layout_with = [&](const std::string& file) -> absl::StatusOr<kv::KvLayout> {
    ModelRunnerOptions options;
    options.block_tokens = 16;
    options.kangaroo_adapter = file;
    SS_ASSIGN_OR_RETURN(std::unique_ptr<ModelRunner> runner,
                        ModelRunner::Create(*source, &backend, options));
    return runner->kv_layout();
  };
  absl::StatusOr<kv::KvLayout> a = layout_with(adapter), b = layout_with(adapter),
                               c = layout_with(changed), none = layout_with("");
  ASSERT_TRUE(a.ok() && b.ok() && c.ok() && none.ok())
      << a.status() << b.status() << c.status() << none.status();
  EXPECT_NE(a->adapter_fingerprint, 0u);
  EXPECT_EQ(none->adapter_fingerprint, 0u);
  EXPECT_TRUE(kv::CheckCompatible(*a, *b).ok());
  EXPECT_EQ(c->num_layers, a->num_layers);
  const absl::Status mismatch = kv::CheckCompatible(*a, *c);
  EXPECT_EQ(mismatch.code(), absl::StatusCode::kFailedPrecondition) << mismatch;
  EXPECT_NE(mismatch.message().find("--kangaroo-adapter"), std::string::npos) << mismatch;
}

// The trained heads' purpose: on the same prompts, TokenSwift with them accepts more draft tokens
// per step than without them (the tree [1, 3, 3, 3] against the drafted token alone; the 4-gram
// table on in both).
TEST(TokenSwiftHeadsTest, TrainedHeadsRaiseAcceptance) {
  double per_step[2] = {0, 0};
  for (const bool heads : {false, true}) {
    Fixture f("stories260K", heads);
    if (!f.found()) GTEST_SKIP() << "stories260K.gguf not found";
    ASSERT_TRUE(f.status().ok()) << f.status();
    Generator gen(f.runner(), f.tokenizer());
    int64_t accepted = 0, steps = 0;
    for (int i = 0; i < 40; ++i) {
      GenerationRequest request;
      request.prompt_tokens = Prompt(i, f.runner()->config().vocab_size);
      request.max_tokens = 256;
      request.ignore_eos = true;
      request.sampling.temperature = 0;
      request.options.spec = Choice("tokenswift");
      absl::StatusOr<GenerationResult> r = gen.Generate(request);
      ASSERT_TRUE(r.ok()) << r.status();
      accepted += r->spec_accepted_tokens;
      steps += r->decode_steps;
    }
    per_step[heads] = static_cast<double>(accepted) / static_cast<double>(steps);
  }
  std::printf("TokenSwift on stories260K: %.3f accepted per step without heads, %.3f with\n",
              per_step[0], per_step[1]);
  EXPECT_GT(per_step[1], per_step[0] * 1.1);
}

// Q(a, x), the upper regularised incomplete gamma function: the chi-square p-value is
// Q(df / 2, chi2 / 2). Series below a + 1, Lentz's continued fraction above.
double UpperGamma(double a, double x) {
  if (x <= 0) return 1.0;
  const double log_front = -x + a * std::log(x) - std::lgamma(a);
  if (x < a + 1) {
    double term = 1.0 / a, sum = term;
    for (int n = 1; n < 10000 && std::fabs(term) > 1e-16 * std::fabs(sum); ++n) {
      term *= x / (a + n);
      sum += term;
    }
    return 1.0 - sum * std::exp(log_front);
  }
  double b = x + 1 - a, c = 1e300, d = 1 / b, h = d;
  for (int i = 1; i < 10000; ++i) {
    const double an = -i * (i - a);
    b += 2;
    d = an * d + b;
    d = std::fabs(d) < 1e-300 ? 1e-300 : d;
    c = b + an / c;
    c = std::fabs(c) < 1e-300 ? 1e-300 : c;
    d = 1 / d;
    const double delta = d * c;
    h *= delta;
    if (std::fabs(delta - 1) < 1e-15) break;
  }
  return std::exp(log_front) * h;
}

// p-value of the chi-square test that two samples of categories come from one distribution;
// categories seen fewer than 10 times in both samples together are pooled.
double HomogeneityPValue(const std::map<std::pair<int, int>, int>& a,
                         const std::map<std::pair<int, int>, int>& b) {
  std::map<std::pair<int, int>, std::pair<double, double>> counts;
  for (const auto& [k, n] : a) counts[k].first += n;
  for (const auto& [k, n] : b) counts[k].second += n;
  std::vector<std::pair<double, double>> cells;
  std::pair<double, double> other = {0, 0};
  double na = 0, nb = 0;
  for (const auto& [k, c] : counts) {
    na += c.first;
    nb += c.second;
    if (c.first + c.second < 10) {
      other.first += c.first;
      other.second += c.second;
    } else {
      cells.push_back(c);
    }
  }
  if (other.first + other.second > 0) cells.push_back(other);
  double chi2 = 0;
  for (const auto& [x, y] : cells) {
    const double total = x + y;
    const double ex = total * na / (na + nb), ey = total * nb / (na + nb);
    chi2 += (x - ex) * (x - ex) / ex + (y - ey) * (y - ey) / ey;
  }
  const double df = static_cast<double>(cells.size()) - 1;
  return UpperGamma(df / 2, chi2 / 2);
}

// Plain steps measure prompt lookup's acceptance with shadow drafts; Lookahead's would predict
// nothing (its window feeds the pool only on speculative steps), so its plain steps record none.
TEST(ShadowDraftsTest, PlainStepsMeasurePromptLookupButNotLookahead) {
  Fixture f("stories260K");
  if (!f.found()) GTEST_SKIP() << "stories260K.gguf not found";
  ASSERT_TRUE(f.status().ok()) << f.status();
  ModelRunner& runner = *f.runner();
  for (const std::string mode : {"prompt-lookup", "lookahead"}) {
    SCOPED_TRACE(mode);
    std::vector<int32_t> history = Prompt(3, runner.config().vocab_size);
    SequenceKv seq;
    ASSERT_TRUE(runner.Prefill(std::vector<int32_t>(history.begin(), history.end() - 1), seq).ok());
    sampling::SamplingParams greedy;
    greedy.temperature = 0;  // stories repeat themselves: prompt lookup's shadows find matches
    sampling::Sampler sampler(greedy);
    std::unique_ptr<SpeculativeSequence> spec = *SpeculativeSequence::Create(Choice(mode), runner);
    for (int step = 0; step < 60; ++step) {
      StepRows rows;
      kernels::SamplingBatch sampling;
      spec->Plan(/*depth=*/0, history, &seq, {}, sampler, &rows, &sampling);
      absl::StatusOr<std::vector<int32_t>> next =
          runner.Step(absl::MakeConstSpan(&rows, 1), sampling);
      ASSERT_TRUE(next.ok()) << next.status();
      absl::StatusOr<SpecStepResult> done = spec->Finish(*next, runner, seq, sampler);
      ASSERT_TRUE(done.ok()) << done.status();
      ASSERT_EQ(done->drafted, 0);
      history.insert(history.end(), done->emitted.begin(), done->emitted.end());
    }
    const double measured = spec->Option(1000, 1000).stats->samples();
    if (mode == "lookahead") {
      EXPECT_EQ(measured, 0);
    } else {
      EXPECT_GT(measured, 0);
    }
    runner.Release(seq);
  }
}

// A TokenSwift sequence without a draft pass under the controller, greedy on stories260K with its
// trained heads: Prompt(prompt) prefilled, the first draft read at the prompt's last row, then
// decode steps at the depths the test picks (as a decode loop runs them, WantsDraftHeads included).
class NoPassSequenceRun {
 public:
  struct Step {
    SpecStepResult result;
    size_t step_rows = 0;
    size_t head_rows = 0;  // 0: the step did not read the heads
  };

  explicit NoPassSequenceRun(ModelRunner& runner) : runner_(runner) {}
  ~NoPassSequenceRun() { runner_.Release(seq_); }

  absl::Status Start(int prompt) {
    history_ = Prompt(prompt, runner_.config().vocab_size);
    SS_RETURN_IF_ERROR(
        runner_.Prefill(std::vector<int32_t>(history_.begin(), history_.end() - 1), seq_).status());
    SpeculationChoice choice = Choice("tokenswift-nopass");
    choice.controller = true;
    SS_ASSIGN_OR_RETURN(spec_, SpeculativeSequence::Create(choice, runner_));
    if (!spec_->drafts_from_last_step()) return absl::InternalError("not heads-drafted");
    const HeadDraftJob first{spec_.get(), -1, history_, {}, &sampler_};
    return DraftFromLastStep(runner_, absl::MakeConstSpan(&first, 1));
  }

  absl::StatusOr<Step> Run(int depth, const spec::StepCostModel& cost) {
    StepRows rows;
    kernels::SamplingBatch sampling;
    spec_->Plan(depth, history_, &seq_, {}, sampler_, &rows, &sampling);
    StepDraftHeads heads(cost);
    heads.Add(spec_.get(), 0, static_cast<int32_t>(rows.tokens.size()));
    Step step;
    step.step_rows = rows.tokens.size();
    if (heads.pass() != nullptr) step.head_rows = heads.pass()->head_rows.size();
    SS_ASSIGN_OR_RETURN(
        const std::vector<int32_t> sampled,
        runner_.Step(absl::MakeConstSpan(&rows, 1), sampling, nullptr, heads.pass()));
    SS_ASSIGN_OR_RETURN(step.result, spec_->Finish(sampled, runner_, seq_, sampler_));
    const auto& emitted = step.result.emitted;
    heads.Deliver(spec_.get(), step.result.emitted_rows.back(),
                  static_cast<int64_t>(history_.size() + emitted.size()));
    history_.insert(history_.end(), emitted.begin(), emitted.end());
    return step;
  }

  SpeculativeSequence& spec() { return *spec_; }

 private:
  static sampling::SamplingParams Greedy() {
    sampling::SamplingParams p;
    p.temperature = 0;
    return p;
  }

  ModelRunner& runner_;
  std::vector<int32_t> history_;
  SequenceKv seq_;
  sampling::Sampler sampler_{Greedy()};
  std::unique_ptr<SpeculativeSequence> spec_;
};

// TokenSwift without a draft pass, kept plain by the controller: its heads are read for shadow
// drafts on ever fewer steps (8, 16, 32, 64 apart), always on multiples of the interval (the same
// steps for every sequence), and every 8th step again after a speculative step.
TEST(ShadowDraftsTest, PlainTokenSwiftReadsItsHeadsLessOftenAndAgainAfterADraft) {
  Fixture f("stories260K", /*heads=*/true);
  if (!f.found()) GTEST_SKIP() << "stories260K.gguf not found";
  ASSERT_TRUE(f.status().ok()) << f.status();
  NoPassSequenceRun run(*f.runner());
  ASSERT_TRUE(run.Start(5).ok());
  spec::StepCostModel cost;
  std::vector<int64_t> reads;  // the cost model's step count at each step that read the heads
  for (int step = 0; step < 240; ++step) {
    // Plain but for one step that drafts: the reads are 8 apart again after it.
    const int depth = step == 150 ? 2 : 0;
    absl::StatusOr<NoPassSequenceRun::Step> done = run.Run(depth, cost);
    ASSERT_TRUE(done.ok()) << done.status();
    if (done->head_rows > 0) {
      reads.push_back(cost.steps());
      // Padded to a power of 2 (one step graph per count).
      EXPECT_EQ(done->head_rows & (done->head_rows - 1), 0u) << done->head_rows;
      EXPECT_GE(done->head_rows, done->step_rows);
    }
    cost.Record(static_cast<int>(done->step_rows), 1e-3, depth > 0);
  }
  std::string listed;
  for (const int64_t r : reads) absl::StrAppend(&listed, r, " ");
  std::printf("draft heads read at steps %s\n", listed.c_str());
  // The step before the explore due at kExploreSteps - 1 and that step read them (an explore
  // drafts from the heads); the other reads before the draft at step 150 come at growing
  // multiples, 64 apart at the end.
  const int64_t explore = spec::StepCostModel::kExploreSteps - 1;
  for (const int64_t r : {explore - 1, explore}) {
    EXPECT_NE(std::find(reads.begin(), reads.end(), r), reads.end()) << r;
  }
  std::vector<int64_t> before, after;
  for (const int64_t r : reads) {
    if (r != explore - 1 && r != explore) (r < 150 ? before : after).push_back(r);
  }
  // (128 gives way to the explore's reads, whose shadow is still open then.)
  EXPECT_EQ(before, (std::vector<int64_t>{8, 16, 32, 64}));
  // The drafting step reads them (it may draft again), and the next plain reads are 8 apart.
  ASSERT_GE(after.size(), 3u);
  EXPECT_EQ(after[0], 150);
  EXPECT_LE(after[2] - after[1], 16);
  EXPECT_EQ(after[1] % 8, 0);
}

// A heads-drafted sequence that the controller runs at depth 1 at every step still measures the
// deeper positions (a shadow of its deepest draft beside the step's): otherwise they stay at the
// prior, and the controller never learns that a deeper draft would pay.
TEST(ShadowDraftsTest, ShallowTokenSwiftStepsMeasureTheDeeperPositions) {
  Fixture f("stories260K", /*heads=*/true);
  if (!f.found()) GTEST_SKIP() << "stories260K.gguf not found";
  ASSERT_TRUE(f.status().ok()) << f.status();
  NoPassSequenceRun run(*f.runner());
  ASSERT_TRUE(run.Start(7).ok());
  ASSERT_GE(run.spec().max_depth(), 3);
  const spec::StepCostModel cost;
  int64_t drafted = 0;
  for (int step = 0; step < 60; ++step) {
    absl::StatusOr<NoPassSequenceRun::Step> done = run.Run(/*depth=*/1, cost);
    ASSERT_TRUE(done.ok()) << done.status();
    EXPECT_LE(done->result.depth, 1);
    drafted += done->result.drafted;
  }
  ASSERT_GT(drafted, 0);
  const spec::AcceptanceStats& stats = run.spec().acceptance();
  EXPECT_GT(stats.samples(), 1.0);
  // Positions 2 and 3 were never drafted, yet measured: off the Beta(1, 1) prior's 0.5.
  std::printf("alpha by position: %.3f %.3f %.3f\n", stats.Alpha(1), stats.Alpha(2),
              stats.Alpha(3));
  EXPECT_TRUE(std::abs(stats.Alpha(2) - 0.5) > 1e-9 || std::abs(stats.Alpha(3) - 0.5) > 1e-9);
}

TEST(ChiSquareTest, PValuesOfKnownStatistics) {
  EXPECT_NEAR(UpperGamma(0.5, 3.841 / 2), 0.05, 1e-3);    // chi2(1) at 3.841
  EXPECT_NEAR(UpperGamma(5, 18.307 / 2), 0.05, 1e-3);     // chi2(10) at 18.307
  EXPECT_NEAR(UpperGamma(50, 149.449 / 2), 0.001, 1e-4);  // chi2(100) at 149.449
}

// Like AcceptDraft, but when the root's sample rejects every child it takes the first child
// anyway: it prefers draft tokens, so its outputs are not plain sampling's.
spec::AcceptedDraft BiasedAccept(const spec::StepDraft& draft, absl::Span<const int32_t> sampled) {
  spec::AcceptedDraft out = spec::AcceptDraft(draft, sampled);
  if (out.accepted() > 0 || draft.empty() || draft.parents[0] != 0) return out;
  out.emitted = {draft.tokens[0], sampled[1]};
  out.kept = {0, 1};
  return out;
}

class LosslessSamplingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fixture_ = std::make_unique<Fixture>("stories260K", /*heads=*/true, /*kangaroo=*/true);
    if (!fixture_->found()) GTEST_SKIP() << "stories260K.gguf not found";
    ASSERT_TRUE(fixture_->status().ok()) << fixture_->status();
    // A story told twice, so that drafts exist for the root: prompt lookup finds the n-gram,
    // Lookahead's pool holds the prompt's n-grams.
    Generator gen(fixture_->runner(), fixture_->tokenizer());
    GenerationRequest request;
    request.prompt = "Once upon a time";
    request.max_tokens = 40;
    request.ignore_eos = true;
    request.sampling.temperature = 0;
    absl::StatusOr<GenerationResult> story = gen.Generate(request);
    ASSERT_TRUE(story.ok()) << story.status();
    prompt_ = story->prompt_tokens;
    prompt_.insert(prompt_.end(), story->output_tokens.begin(), story->output_tokens.end());
    prompt_.insert(prompt_.end(), story->output_tokens.begin(), story->output_tokens.begin() + 12);
    params_.temperature = 1.0f;
    params_.top_k = 50;
    params_.repetition_penalty = 1.2f;  // a penalty the request sets
    params_.penalty_window = 16;
  }

  // The first two tokens generated after prompt_ with `seed`: plainly (method kNone) or with a
  // speculative step whose root is the prompt's last token.
  std::pair<int, int> FirstTwo(const std::string& mode, uint64_t seed,
                               SpeculativeSequence::Verifier verifier = nullptr) {
    ModelRunner& runner = *fixture_->runner();
    SequenceKv seq;
    const std::vector<int32_t> prefix(prompt_.begin(), prompt_.end() - 1);
    EXPECT_TRUE(runner.Prefill(prefix, seq).ok());
    sampling::SamplingParams params = params_;
    params.seed = seed;
    sampling::Sampler sampler(params);
    std::vector<int32_t> history = prompt_, out;
    std::unique_ptr<SpeculativeSequence> spec;
    if (mode != "none") {
      SpeculationChoice choice = Choice(mode);
      choice.max_draft = 3;
      if (!choice.tokenswift_draft_pass) {  // 12-row trees: 20,000 runs of 51 rows took minutes
        choice.tokenswift_tree = {1, 2, 1, 1};
        choice.tokenswift_ngram_k = 2;
      }
      if (choice.method == SpecMethod::kSparseSelf || choice.method == SpecMethod::kTokenSwift) {
        // A draft far from the target (5 of ~60 keys): rejections are common enough for the
        // biased verifier to show (with the 36-key draft 83% of draft tokens are accepted).
        choice.sparse_self_sinks = 1;
        choice.sparse_self_window = 2;
        choice.sparse_self_k = 2;
      }
      // Kangaroo drafts every step (no second exit): the runs must verify drafts to test them.
      if (choice.method == SpecMethod::kKangaroo) choice.kangaroo_eta = 0;
      spec = *SpeculativeSequence::Create(choice, runner);
      if (verifier != nullptr) spec->set_verifier(verifier);
      if (spec->drafts_from_last_step()) {  // the prefix's last row predicted the root
        const HeadDraftJob job{spec.get(), -1, history, {}, &sampler};
        EXPECT_TRUE(DraftFromLastStep(runner, absl::MakeConstSpan(&job, 1)).ok());
      }
    }
    const spec::StepCostModel cost;  // no controller: WantsDraftHeads says yes on every step
    while (out.size() < 2) {
      StepRows rows;
      kernels::SamplingBatch sampling;
      StepDraftHeads heads(cost);
      if (spec == nullptr) {
        rows.seq = &seq;
        rows.tokens = {history.back()};
        sampling.penalized_begin = {0};
        sampling.rows = {sampler.NextRow(history, &sampling.penalized_ids)};
        sampling.penalized_begin.push_back(static_cast<int32_t>(sampling.penalized_ids.size()));
      } else {
        if (spec->drafts_on_model()) {
          const ModelDraftJob job{spec.get(), &seq, history, &sampler, 3};
          EXPECT_TRUE(RunModelDrafts(runner, absl::MakeConstSpan(&job, 1)).ok());
        }
        spec->Plan(3, history, &seq, {}, sampler, &rows, &sampling);
        heads.Add(spec.get(), 0, static_cast<int32_t>(rows.tokens.size()));
      }
      absl::StatusOr<std::vector<int32_t>> next =
          runner.Step(absl::MakeConstSpan(&rows, 1), sampling, nullptr, heads.pass());
      EXPECT_TRUE(next.ok()) << next.status();
      if (!next.ok()) break;
      std::vector<int32_t> emitted = {next->front()};
      if (spec != nullptr) {
        absl::StatusOr<SpecStepResult> done = spec->Finish(*next, runner, seq, sampler);
        EXPECT_TRUE(done.ok()) << done.status();
        emitted.assign(done->emitted.begin(), done->emitted.end());
        drafted_ += done->drafted;
        accepted_ += done->accepted;
        heads.Deliver(spec.get(), done->emitted_rows.back(),
                      static_cast<int64_t>(history.size() + emitted.size()));
      }
      history.insert(history.end(), emitted.begin(), emitted.end());
      out.insert(out.end(), emitted.begin(), emitted.end());
    }
    runner.Release(seq);
    return {out[0], out[1]};
  }

  std::map<std::pair<int, int>, int> Sample(const std::string& mode, uint64_t first_seed, int runs,
                                            SpeculativeSequence::Verifier verifier = nullptr) {
    std::map<std::pair<int, int>, int> counts;
    for (int i = 0; i < runs; ++i) ++counts[FirstTwo(mode, first_seed + i, verifier)];
    return counts;
  }

  // The check for `modes` (each must verify drafts), and its failure with the biased verifier for
  // `biased_modes`.
  void ExpectPlainSampling(const std::vector<std::string>& modes,
                           const std::vector<std::string>& biased_modes) {
    const std::map<std::pair<int, int>, int> plain = Sample("none", 1, kRuns);
    ASSERT_GT(plain.size(), 3u) << "the test needs a spread distribution";
    for (const std::string& mode : modes) {
      drafted_ = 0;
      accepted_ = 0;
      // Other seeds than the plain runs': a test of the distribution, not of the coupling.
      const double p = HomogeneityPValue(plain, Sample(mode, 1'000'001, kRuns));
      std::printf("%s: p = %.4g over %d runs each, %lld draft tokens, %lld accepted\n",
                  mode.c_str(), p, kRuns, static_cast<long long>(drafted_),
                  static_cast<long long>(accepted_));
      EXPECT_GT(p, 1e-3) << mode;
      EXPECT_GT(drafted_, kRuns / 2) << "most runs must verify a draft";
      // The same seed gives the same tokens as plain decoding.
      for (uint64_t seed = 1; seed <= 200; ++seed) {
        EXPECT_EQ(FirstTwo(mode, seed), FirstTwo("none", seed)) << seed;
      }
    }
    for (const std::string& mode : biased_modes) {
      const double biased = HomogeneityPValue(plain, Sample(mode, 1'000'001, kRuns, &BiasedAccept));
      std::printf("%s, biased verifier: p = %.4g\n", mode.c_str(), biased);
      EXPECT_LT(biased, 1e-6) << mode;
    }
  }

  static constexpr int kRuns = 20000;
  std::unique_ptr<Fixture> fixture_;
  std::vector<int32_t> prompt_;
  sampling::SamplingParams params_;
  int64_t drafted_ = 0;
  int64_t accepted_ = 0;
};

TEST_F(LosslessSamplingTest, FirstTwoTokensFollowPlainSampling) {
  ExpectPlainSampling({"prompt-lookup", "lookahead", "sparse-self", "tokenswift-heads", "kangaroo"},
                      {"prompt-lookup", "sparse-self", "tokenswift-heads", "kangaroo"});
}

// TokenSwift without a draft pass on its own (a test of its own: CI's per-test time).
TEST_F(LosslessSamplingTest, TokenSwiftWithoutADraftPassFollowsPlainSampling) {
  ExpectPlainSampling({"tokenswift-nopass"}, {"tokenswift-nopass"});
}

// Chains of `depth` copies of the last token: a drafter for controller tests, never run.
class RepeatProposer : public spec::DraftProposer {
 public:
  int max_depth() const override { return 4; }
  int RowsAt(int depth) const override { return depth; }
  void Propose(absl::Span<const int32_t> history, int depth, bool /*verify_only*/,
               spec::StepDraft* draft) override {
    draft->Clear();
    draft->AddChain(std::vector<int32_t>(static_cast<size_t>(depth), history.back()));
  }
};

TEST(PickDraftDepthsTest, ASettledPlainRunKeepsControlledSequencesPlainAndFixedOnesDrafting) {
  SpeculationChoice controlled = Choice("prompt-lookup");
  controlled.controller = true;
  SpeculationChoice fixed = controlled;
  fixed.controller = false;
  std::vector<std::unique_ptr<SpeculativeSequence>> seqs;
  seqs.push_back(
      SpeculativeSequence::CreateWithProposer(controlled, std::make_unique<RepeatProposer>()));
  seqs.push_back(
      SpeculativeSequence::CreateWithProposer(fixed, std::make_unique<RepeatProposer>()));
  const std::vector<DraftRoom> rooms = {{seqs[0].get(), 100, 100}, {seqs[1].get(), 100, 100}};
  // Speculative steps priced as plain ones: at the prior's acceptance (E(4) = 0.94) the
  // controller speculates whenever it decides.
  spec::StepCostModel cost;
  for (int i = 0; i < spec::StepCostModel::kSettledSteps; ++i) cost.Record(2, 1.0);
  cost.Record(6, 1.0, /*speculative=*/true);
  for (int i = 0; i < spec::StepCostModel::kSettledSteps; ++i) cost.Record(2, 1.0);
  ASSERT_TRUE(cost.DecisionSettled());
  std::vector<spec::DraftOption> options;
  std::vector<int> depths = PickDraftDepths(cost, rooms, 2, &options);
  EXPECT_EQ(depths, (std::vector<int>{0, 4}));  // controlled: plain, unread; fixed: its depth
  ASSERT_EQ(options.size(), 2U);
  EXPECT_TRUE(options[0].rows_at.empty());
  EXPECT_EQ(options[1].rows_at.size(), 4U);
  // On the run's deciding step the controller reads the sequence and speculates.
  while (cost.DecisionSettled()) cost.Record(2, 1.0);
  depths = PickDraftDepths(cost, rooms, 2, &options);
  EXPECT_GT(depths[0], 0);
  EXPECT_EQ(depths[1], 4);
}

}  // namespace
}  // namespace sparseserve::engine
