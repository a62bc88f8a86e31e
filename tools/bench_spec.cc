// `sparseserve bench spec`: speculative decoding against plain decoding on a real model, in
// batches — tokens/s, steps compression, acceptance per draft position and exactness (greedy
// outputs must equal plain decoding's) — for the real drafters (the draft passes of sparse-self,
// TokenSwift and Kangaroo run batched before each step, model_draft.h) and for an oracle drafter
// whose
// every draft token is right with a forced probability, which measures the controller: with
// acceptance 0 speculation must cost nothing (>= 0.95x plain), and it should gain where the
// step cost allows (issue 14).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/core/status.h"
#include "common/engine/model_draft.h"
#include "common/engine/model_runner.h"
#include "common/engine/model_source.h"
#include "common/engine/speculative_sequence.h"
#include "common/spec/draft_length_controller.h"
#include "common/spec/draft_proposer.h"
#include "kernels/backend.h"
#include "tools/bench_spec.h"
#include "tools/model_flags.h"
#include "tools/request_options_flags.h"

ABSL_FLAG(std::string, spec_batches, "1,8,64", "bench spec: batch sizes, comma-separated.");
ABSL_FLAG(std::string, spec_modes,
          "prompt-lookup,lookahead,sparse-self,tokenswift,oracle:0,oracle:0.3,oracle:0.7",
          "bench spec: modes set against plain decoding, comma-separated: prompt-lookup, "
          "lookahead, sparse-self, tokenswift, kangaroo (needs --kangaroo-adapter), or oracle:A (a "
          "drafter that knows plain decoding's output and gets each draft token right with "
          "probability A). --spec-max-draft, --spec-controller and the --lookahead-*, "
          "--sparse-self-*, --tokenswift-* and --kangaroo-* flags apply to all.");
ABSL_FLAG(int, spec_tokens, 256, "bench spec: tokens generated per sequence (EOS ignored).");
ABSL_FLAG(int, spec_repeats, 1,
          "bench spec: runs of each mode, each right after a plain run of its own; the table "
          "gives the median of the runs' ratios to their plain runs (and their range when > 1). "
          "Each run starts the controller afresh, as a new engine would.");
ABSL_FLAG(std::string, spec_prompts, "",
          "bench spec: a file of prompts, one per line (sequence i takes line i mod lines); "
          "empty = eight story openings.");

namespace sparseserve::tools {
namespace {

using Clock = std::chrono::steady_clock;

// Drafts plain decoding's own continuation, each token right with probability `accept`
// (independently), wrong (the right token + 1) otherwise.
class OracleProposer : public spec::DraftProposer {
 public:
  OracleProposer(std::vector<int32_t> truth, double accept, int depth, int vocab, uint64_t seed)
      : truth_(std::move(truth)), accept_(accept), depth_(depth), vocab_(vocab), rng_(seed) {}
  int max_depth() const override { return depth_; }
  int RowsAt(int depth) const override { return depth; }
  void Propose(absl::Span<const int32_t> history, int depth, bool /*verify_only*/,
               spec::StepDraft* draft) override {
    draft->Clear();
    std::vector<int32_t> chain;
    for (size_t i = history.size(); i < truth_.size() && static_cast<int>(chain.size()) < depth;
         ++i) {
      const bool right = std::uniform_real_distribution<double>(0, 1)(rng_) < accept_;
      chain.push_back(right ? truth_[i] : (truth_[i] + 1) % vocab_);
    }
    if (!chain.empty()) draft->AddChain(chain);
  }

 private:
  std::vector<int32_t> truth_;  // prompt + plain output
  double accept_;
  int depth_, vocab_;
  std::mt19937_64 rng_;
};

struct Mode {
  std::string name;
  engine::SpecMethod method = engine::SpecMethod::kNone;
  double oracle = -1;  // >= 0: the oracle's acceptance
};

// Where a run's decode loop spent its time, summed over its steps (seconds).
struct LoopTimes {
  double choose = 0;  // the controller's depths (PickDraftDepths)
  double drafts = 0;  // model drafters' passes before the steps
  double plan = 0;    // each sequence's rows and sampling rows
  double step = 0;    // ModelRunner::Step (forward pass, sampling, copy back)
  double finish = 0;  // verification, commits, emitting
};

struct RunResult {
  std::vector<std::vector<int32_t>> outputs;  // per sequence
  double seconds = 0;                         // the decode loop
  LoopTimes times;
  int64_t speculative_steps = 0;  // steps where some sequence drafted
  int64_t head_reads = 0;         // steps that read TokenSwift's draft heads (no draft pass)
  int64_t head_rows = 0;          // rows they read
  // Where a run's time beyond its plain steps goes (steps timed as `times.step` is): steps that
  // warmed up or captured a step graph, steps where some sequence drafted, steps that read the
  // heads without drafting.
  int64_t setup_steps = 0;
  double setup_seconds = 0, speculative_seconds = 0, head_read_seconds = 0;
  int64_t steps = 0, tokens = 0;
  int64_t sequence_steps = 0;             // steps summed over the sequences in them
  std::vector<double> reached, accepted;  // per draft position
  int64_t drafted = 0, accepted_total = 0;
};

absl::StatusOr<std::vector<int>> ParseBatches(const std::string& text) {
  std::vector<int> out;
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    int v = 0;
    if (!absl::SimpleAtoi(item, &v) || v < 1 || v > 4096) {
      return absl::InvalidArgumentError(absl::StrCat("--spec-batches: bad batch '", item, "'"));
    }
    out.push_back(v);
  }
  return out;
}

absl::StatusOr<std::vector<Mode>> ParseModes(const std::string& text) {
  std::vector<Mode> out;
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    Mode m;
    m.name = std::string(item);
    if (absl::ConsumePrefix(&item, "oracle:")) {
      if (!absl::SimpleAtod(item, &m.oracle) || m.oracle < 0 || m.oracle > 1) {
        return absl::InvalidArgumentError(
            absl::StrCat("--spec-modes: oracle acceptance '", item, "' is not in [0, 1]"));
      }
      m.method = engine::SpecMethod::kPromptLookup;  // the label its steps count under
    } else {
      SS_ASSIGN_OR_RETURN(m.method, engine::ParseSpecMethod(item));
      if (m.method != engine::SpecMethod::kPromptLookup &&
          m.method != engine::SpecMethod::kLookahead &&
          m.method != engine::SpecMethod::kSparseSelf &&
          m.method != engine::SpecMethod::kTokenSwift &&
          m.method != engine::SpecMethod::kKangaroo) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--spec-modes: '", item,
            "' (prompt-lookup, lookahead, sparse-self, tokenswift, kangaroo or oracle:A)"));
      }
    }
    out.push_back(m);
  }
  return out;
}

class SpecBench {
 public:
  SpecBench(engine::ModelRunner* runner, engine::SpeculationChoice choice, int tokens)
      : runner_(runner), choice_(std::move(choice)), tokens_(tokens) {}

  // Prefills every prompt, then decodes all of them in lockstep (one engine step per iteration,
  // greedy) under `mode` (method kNone = plain) until each has `tokens_` tokens.
  absl::StatusOr<RunResult> Run(const std::vector<std::vector<int32_t>>& prompts, const Mode& mode,
                                const RunResult* plain) {
    const int n = static_cast<int>(prompts.size());
    std::vector<engine::SequenceKv> seqs(static_cast<size_t>(n));
    std::vector<std::vector<int32_t>> history(prompts);
    std::vector<std::unique_ptr<sampling::Sampler>> samplers;
    std::vector<std::unique_ptr<engine::SpeculativeSequence>> spec(static_cast<size_t>(n));
    RunResult result;
    result.outputs.resize(static_cast<size_t>(n));
    sampling::SamplingParams greedy;
    greedy.temperature = 0;
    kernels::SamplingBatch one;
    one.rows.resize(1);
    for (int i = 0; i < n; ++i) {
      samplers.push_back(std::make_unique<sampling::Sampler>(greedy));
      SS_ASSIGN_OR_RETURN(const int32_t first, runner_->PrefillSampled(prompts[i], seqs[i], one));
      history[i].push_back(first);
      result.outputs[i].push_back(first);
      if (mode.method == engine::SpecMethod::kNone) continue;
      engine::SpeculationChoice choice = choice_;
      choice.method = mode.method;
      if (mode.oracle >= 0) {
        std::vector<int32_t> truth = prompts[i];
        truth.insert(truth.end(), plain->outputs[i].begin(), plain->outputs[i].end());
        const int depth = choice.max_draft > 0 ? choice.max_draft : 4;
        spec[i] = engine::SpeculativeSequence::CreateWithProposer(
            choice, std::make_unique<OracleProposer>(std::move(truth), mode.oracle, depth,
                                                     runner_->config().vocab_size, 77 + i));
      } else {
        SS_ASSIGN_OR_RETURN(spec[i], engine::SpeculativeSequence::Create(choice, *runner_));
      }
      if (spec[i]->drafts_from_last_step()) {  // the prompt's last row drafts the first step
        const engine::HeadDraftJob job{spec[i].get(), -1, history[i], {}, samplers[i].get()};
        SS_RETURN_IF_ERROR(engine::DraftFromLastStep(*runner_, absl::MakeConstSpan(&job, 1)));
      }
    }
    const Clock::time_point start = Clock::now();
    while (true) {
      std::vector<int> live;
      for (int i = 0; i < n; ++i) {
        if (static_cast<int>(result.outputs[i].size()) < tokens_) live.push_back(i);
      }
      if (live.empty()) break;
      // Depths: the controller over every speculating sequence, or the fixed depth.
      Clock::time_point mark = Clock::now();
      // Adds the time since `mark` to `into`, moves `mark` on and returns that time.
      auto lap = [&mark](double& into) {
        const Clock::time_point now = Clock::now();
        const double seconds = std::chrono::duration<double>(now - mark).count();
        into += seconds;
        mark = now;
        return seconds;
      };
      std::vector<int> depth(live.size(), 0);
      if (mode.method != engine::SpecMethod::kNone) {
        std::vector<engine::DraftRoom> rooms;
        rooms.reserve(live.size());
        for (const int i : live) {
          rooms.push_back({spec[i].get(),
                           runner_->max_context() - static_cast<int>(seqs[i].tokens.size()) - 1,
                           tokens_ - static_cast<int>(result.outputs[i].size()) - 1});
        }
        depth = engine::PickDraftDepths(cost_, rooms, static_cast<int>(live.size()), nullptr,
                                        runner_->replays_step_graphs());
      }
      lap(result.times.choose);
      const bool drafted = std::any_of(depth.begin(), depth.end(), [](int d) { return d > 0; });
      result.speculative_steps += drafted;
      std::vector<engine::ModelDraftJob> model_drafts;
      for (size_t j = 0; j < live.size(); ++j) {
        const int i = live[j];
        if (spec[i] != nullptr && spec[i]->drafts_on_model() && depth[j] > 0) {
          model_drafts.push_back(
              {spec[i].get(), &seqs[i], history[i], samplers[i].get(), depth[j]});
        }
      }
      if (!model_drafts.empty()) {
        SS_RETURN_IF_ERROR(engine::RunModelDrafts(*runner_, model_drafts, &cost_));
      }
      lap(result.times.drafts);
      const Clock::time_point step_start = Clock::now();  // draft passes are priced apart
      result.sequence_steps += static_cast<int64_t>(live.size());
      std::vector<engine::StepRows> rows(live.size());
      kernels::SamplingBatch sampling;
      sampling.penalized_begin.push_back(0);
      engine::StepDraftHeads heads(cost_);  // TokenSwift without a draft pass: in the step
      int32_t token_rows = 0;
      for (size_t j = 0; j < live.size(); ++j) {
        const int i = live[j];
        if (spec[i] != nullptr) {
          spec[i]->Plan(depth[j], history[i], &seqs[i], {}, *samplers[i], &rows[j], &sampling);
          heads.Add(spec[i].get(), token_rows, static_cast<int32_t>(rows[j].tokens.size()));
        } else {
          rows[j].seq = &seqs[i];
          rows[j].tokens = {history[i].back()};
          sampling.rows.emplace_back();
          sampling.penalized_begin.push_back(0);
        }
        token_rows += static_cast<int32_t>(rows[j].tokens.size());
      }
      lap(result.times.plan);
      SS_ASSIGN_OR_RETURN(const std::vector<int32_t> next,
                          runner_->Step(rows, sampling, nullptr, heads.pass()));
      const double step_seconds = lap(result.times.step);
      if (heads.pass() != nullptr) {
        ++result.head_reads;
        result.head_rows += static_cast<int64_t>(heads.pass()->head_rows.size());
        if (!drafted) result.head_read_seconds += step_seconds;
      }
      if (runner_->last_step_was_graph_setup()) {
        ++result.setup_steps;
        result.setup_seconds += step_seconds;
      }
      if (drafted) result.speculative_seconds += step_seconds;
      size_t k = 0;
      for (size_t j = 0; j < live.size(); ++j) {
        const int i = live[j];
        const size_t count = rows[j].sample == model::LogitRows::kAll ? rows[j].tokens.size() : 1;
        std::vector<int32_t> emitted = {next[k]};
        if (spec[i] != nullptr) {
          SS_ASSIGN_OR_RETURN(const engine::SpecStepResult done,
                              spec[i]->Finish(absl::MakeConstSpan(next).subspan(k, count), *runner_,
                                              seqs[i], *samplers[i]));
          emitted.assign(done.emitted.begin(), done.emitted.end());
          heads.Deliver(spec[i].get(), done.emitted_rows.back(),
                        static_cast<int64_t>(history[i].size() + done.emitted.size()));
          result.drafted += done.drafted;
          result.accepted_total += done.accepted;
          if (result.reached.size() < static_cast<size_t>(done.depth)) {
            result.reached.resize(static_cast<size_t>(done.depth));
            result.accepted.resize(static_cast<size_t>(done.depth));
          }
          for (int p = 0; p < done.depth && p <= done.accepted; ++p) {
            result.reached[p] += 1;
            if (p < done.accepted) result.accepted[p] += 1;
          }
        }
        k += count;
        for (const int32_t t : emitted) {
          if (static_cast<int>(result.outputs[i].size()) == tokens_) break;
          result.outputs[i].push_back(t);
          history[i].push_back(t);
          ++result.tokens;
        }
      }
      engine::RecordStepCost(
          *runner_, rows, std::chrono::duration<double>(Clock::now() - step_start).count(), cost_);
      lap(result.times.finish);
      ++result.steps;
    }
    result.seconds = std::chrono::duration<double>(Clock::now() - start).count();
    for (engine::SequenceKv& s : seqs) runner_->Release(s);
    return result;
  }

  // What the controller learned in this bench's runs.
  const spec::StepCostModel& cost() const { return cost_; }

 private:
  engine::ModelRunner* runner_;
  engine::SpeculationChoice choice_;
  int tokens_;
  spec::StepCostModel cost_;  // shared by this bench's runs, as the scheduler's by its steps
};

// "choose 1.2, plan 3.4, step 370.1, finish 5.6 us/step" (drafts too where there were any).
std::string DescribeTimes(const RunResult& r) {
  const double per = 1e6 / static_cast<double>(std::max<int64_t>(r.steps, 1));
  std::string out = absl::StrFormat("choose %.1f, ", r.times.choose * per);
  if (r.times.drafts * per >= 0.05)
    absl::StrAppendFormat(&out, "drafts %.1f, ", r.times.drafts * per);
  absl::StrAppendFormat(
      &out, "plan %.1f, step %.1f, finish %.1f us/step; %lld of %lld steps drafted",
      r.times.plan * per, r.times.step * per, r.times.finish * per,
      static_cast<long long>(r.speculative_steps), static_cast<long long>(r.steps));
  if (r.head_reads > 0) {
    absl::StrAppendFormat(&out, "; draft heads read in %lld steps (%.1f rows each)",
                          static_cast<long long>(r.head_reads),
                          static_cast<double>(r.head_rows) / static_cast<double>(r.head_reads));
  }
  // Of the loop's time (ms): drafted steps, plain steps that read the heads, graph set-ups (which
  // may be either) — where a run that drafts little loses to plain decoding.
  absl::StrAppendFormat(&out,
                        "; of %.1f ms: drafted steps %.1f, head-read steps %.1f, %lld graph "
                        "set-up steps %.1f",
                        r.seconds * 1e3, r.speculative_seconds * 1e3, r.head_read_seconds * 1e3,
                        static_cast<long long>(r.setup_steps), r.setup_seconds * 1e3);
  return out;
}

// "= plain", or how many sequences differ and, for each, the plain logits' top-1 minus top-2 gap
// where it first differs (a near tie flipped by other kernels' rounding: on a GPU multi-row
// steps use other GEMM and attention kernels than one-row decode steps). The logits come from a
// prefill of prompt + the plain output up to there.
std::string Exactness(engine::ModelRunner& runner, const std::vector<std::vector<int32_t>>& prompts,
                      const RunResult& plain, const RunResult& run) {
  if (run.outputs == plain.outputs) return "= plain";
  int differ = 0;
  std::string gaps;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const std::vector<int32_t>& a = plain.outputs[i];
    const std::vector<int32_t>& b = run.outputs[i];
    if (a == b) continue;
    ++differ;
    size_t at = 0;
    while (at < a.size() && at < b.size() && a[at] == b[at]) ++at;
    if (differ > 4) continue;  // the first few are enough
    std::vector<int32_t> context = prompts[i];
    context.insert(context.end(), a.begin(), a.begin() + static_cast<std::ptrdiff_t>(at));
    engine::SequenceKv seq;
    absl::StatusOr<Tensor> logits = runner.Prefill(context, seq);
    runner.Release(seq);
    if (!logits.ok()) continue;
    const float* l = logits->data<float>();
    float top1 = -1e30f, top2 = -1e30f;
    for (int64_t v = 0; v < logits->shape()[1]; ++v) {
      if (l[v] > top1) {
        top2 = top1;
        top1 = l[v];
      } else if (l[v] > top2) {
        top2 = l[v];
      }
    }
    absl::StrAppendFormat(&gaps, "%s%.2g@%d", gaps.empty() ? "" : " ", top1 - top2,
                          static_cast<int>(at));
  }
  return absl::StrFormat("%d of %d differ, gap@token %s", differ, static_cast<int>(prompts.size()),
                         gaps);
}

std::vector<std::string> DefaultPrompts() {
  return {"Once upon a time",       "One day, a little girl named Lily",
          "Tom had a big red ball", "The little bird",
          "There was a boy who",    "Sam liked to play",
          "In the park, a dog",     "Mom said"};
}

absl::Status RunSpecBench() {
  SS_ASSIGN_OR_RETURN(const std::vector<int> batches,
                      ParseBatches(absl::GetFlag(FLAGS_spec_batches)));
  SS_ASSIGN_OR_RETURN(const std::vector<Mode> modes, ParseModes(absl::GetFlag(FLAGS_spec_modes)));
  const int tokens = absl::GetFlag(FLAGS_spec_tokens);
  if (tokens < 2) return absl::InvalidArgumentError("--spec-tokens must be >= 2");
  const int repeats = absl::GetFlag(FLAGS_spec_repeats);
  if (repeats < 1 || repeats > 100) {
    return absl::InvalidArgumentError("--spec-repeats must be in [1, 100]");
  }
  SS_ASSIGN_OR_RETURN(const engine::RequestOptions request, RequestOptionsFromFlags());
  SS_ASSIGN_OR_RETURN(const Device device, DeviceFromFlags());
  SS_ASSIGN_OR_RETURN(std::unique_ptr<kernels::Backend> backend, kernels::CreateBackend(device));
  SS_ASSIGN_OR_RETURN(engine::ModelSource source, engine::OpenModelSource(ModelPathFromFlags()));
  SS_ASSIGN_OR_RETURN(engine::ModelRunnerOptions runner_options, RunnerOptionsFromFlags());
  SS_ASSIGN_OR_RETURN(std::unique_ptr<engine::ModelRunner> runner,
                      engine::ModelRunner::Create(source, backend.get(), runner_options));
  std::vector<std::string> texts = DefaultPrompts();
  if (const std::string file = absl::GetFlag(FLAGS_spec_prompts); !file.empty()) {
    std::FILE* f = std::fopen(file.c_str(), "r");
    if (f == nullptr)
      return absl::NotFoundError(absl::StrCat("--spec-prompts: cannot open ", file));
    texts.clear();
    std::string all;
    char buf[4096];
    size_t got = 0;
    while ((got = std::fread(buf, 1, sizeof(buf), f)) > 0) all.append(buf, got);
    std::fclose(f);
    for (absl::string_view line : absl::StrSplit(all, '\n', absl::SkipEmpty())) {
      texts.emplace_back(line);
    }
    if (texts.empty()) return absl::InvalidArgumentError("--spec-prompts: no prompts");
  }
  std::printf(
      "| batch | mode | tokens/s | vs plain | steps compression | accepted / drafted | "
      "acceptance by position | greedy output |\n|---|---|---|---|---|---|---|---|\n");
  for (const int batch : batches) {
    std::vector<std::vector<int32_t>> prompts;
    for (int i = 0; i < batch; ++i) {
      SS_ASSIGN_OR_RETURN(std::vector<int32_t> ids,
                          source.tokenizer->Encode(texts[i % texts.size()], true));
      prompts.push_back(std::move(ids));
    }
    SpecBench bench(runner.get(), request.spec, tokens);
    std::fprintf(stderr, "batch %d: plain (warm-up runs, then the timed one)\n", batch);
    SS_RETURN_IF_ERROR(bench.Run(prompts, Mode{"plain"}, nullptr).status());
    {  // the speculative steps' kernels and workspaces too (first launches are slow on a GPU)
      engine::SpeculationChoice fixed = request.spec;
      fixed.controller = false;
      SpecBench warm(runner.get(), fixed, std::min(tokens, 32));
      Mode mode{"warm-up", engine::SpecMethod::kPromptLookup};
      SS_RETURN_IF_ERROR(warm.Run(prompts, mode, nullptr).status());
    }
    SS_ASSIGN_OR_RETURN(const RunResult plain, bench.Run(prompts, Mode{"plain"}, nullptr));
    const double plain_rate = plain.tokens / plain.seconds;
    std::printf("| %d | plain | %.1f | 1.00 | 1.00 | - | - | - |\n", batch, plain_rate);
    std::fprintf(stderr, "batch %d: plain: %s\n", batch, DescribeTimes(plain).c_str());
    for (const Mode& mode : modes) {
      // Each run right after a plain run of its own (the GPU's speed drifts between runs by as
      // much as the gaps measured) and with a controller that starts afresh (one that priced
      // another mode's shapes, at other contexts, decides differently).
      std::vector<double> ratios;
      RunResult r;
      double rate = 0;
      for (int rep = 0; rep < repeats; ++rep) {
        std::fprintf(stderr, "batch %d: %s (run %d of %d)\n", batch, mode.name.c_str(), rep + 1,
                     repeats);
        SS_ASSIGN_OR_RETURN(const RunResult beside, bench.Run(prompts, Mode{"plain"}, nullptr));
        SpecBench fresh(runner.get(), request.spec, tokens);
        SS_ASSIGN_OR_RETURN(r, fresh.Run(prompts, mode, &plain));
        rate = r.tokens / r.seconds;
        ratios.push_back(rate / (beside.tokens / beside.seconds));
        std::fprintf(stderr, "batch %d: %s: %.3fx plain; %s\n", batch, mode.name.c_str(),
                     ratios.back(), DescribeTimes(r).c_str());
        if (request.spec.controller) {  // what the controller priced its choices with
          std::fprintf(stderr, "batch %d: %s: step costs learned: %s\n", batch, mode.name.c_str(),
                       fresh.cost().Describe().c_str());
        }
      }
      std::sort(ratios.begin(), ratios.end());
      std::string vs_plain = absl::StrFormat("%.2f", ratios[ratios.size() / 2]);
      if (repeats > 1) {
        absl::StrAppendFormat(&vs_plain, " (%.2f-%.2f)", ratios.front(), ratios.back());
      }
      std::string by_position;
      for (size_t p = 0; p < r.reached.size(); ++p) {
        absl::StrAppendFormat(&by_position, "%s%.2f", p ? " " : "",
                              r.reached[p] > 0 ? r.accepted[p] / r.reached[p] : 0.0);
      }
      std::printf("| %d | %s | %.1f | %s | %.2f | %lld / %lld | %s | %s |\n", batch,
                  mode.name.c_str(), rate, vs_plain.c_str(),
                  static_cast<double>(r.tokens) / r.sequence_steps,
                  static_cast<long long>(r.accepted_total), static_cast<long long>(r.drafted),
                  by_position.empty() ? "-" : by_position.c_str(),
                  Exactness(*runner, prompts, plain, r).c_str());
      std::fflush(stdout);
    }
  }
  return absl::OkStatus();
}

}  // namespace

int RunSpecBenchCommand() {
  if (absl::Status s = RunSpecBench(); !s.ok()) {
    std::fprintf(stderr, "error: %s\n", s.ToString().c_str());
    return s.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
  }
  return 0;
}

}  // namespace sparseserve::tools
