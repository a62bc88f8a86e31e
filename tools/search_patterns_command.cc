// `sparseserve search-patterns`: MInference's offline kernel-aware pattern search (paper Alg. 1,
// issue 12 item 4). Prefills a sample densely; in every layer of every chunk a model probe runs
// each candidate pattern (common/engine/pattern_search.h) on that layer's queries and KV through
// the Backend interface (the same code on the CPU and the GPU) and compares its output with the
// dense one; each (layer, head) keeps the candidate with the smallest relative L2 error, written
// as a --minference-config file. A last MInference prefill of the sample under the chosen config
// measures its density.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/core/status.h"
#include "common/engine/minference_config.h"
#include "common/engine/model_runner.h"
#include "common/engine/model_source.h"
#include "common/engine/pattern_search.h"
#include "kernels/backend.h"
#include "tools/command.h"
#include "tools/model_flags.h"

ABSL_FLAG(std::string, sample, "",
          "Text file to calibrate on (required), e.g. one long-context task prompt: tokenized "
          "with the model's tokenizer and prefilled whole, in --prefill-chunk chunks as served.");
ABSL_FLAG(int, sample_tokens, 0,
          "Use only the sample's first N tokens (0 = all of it, up to the model's context - 1).");
ABSL_FLAG(double, target_density, 0.1,
          "The work budget every candidate is sized to: this share of the causal (row, key) "
          "pairs at the sample's length (paper: A-shape (1024, 4096) at ~30K tokens, ~0.1).");
ABSL_FLAG(int, error_rows, 0,
          "Score candidates on the sample's last N rows only (0 = every row). The last rows are "
          "where a retrieval prompt's question reads its needle; over every row the error favours "
          "patterns that keep the local mass (A-shape, block-sparse) and lose distant keys.");
// Shared with `eval` (eval_command.cc).
ABSL_DECLARE_FLAG(std::string, out);

namespace sparseserve::tools {
namespace {

using kernels::HeadPatternKind;

// A usage error (exit status 2): bad flags or unusable input files.
absl::Status UsageError(absl::string_view message) {
  return absl::InvalidArgumentError(message);
}

absl::StatusOr<std::string> ReadSample(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read --sample file '", path, "'"));
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The number of chunks PrefillChunks cuts `n` tokens into.
int CountChunks(int n, const engine::ModelRunnerOptions& options) {
  int chunks = 0;
  for (int done = 0; done < n; ++chunks) {
    done +=
        engine::PrefillChunkLength(done, n, options.prefill_chunk_tokens, options.max_step_tokens);
  }
  return chunks;
}

// The probe's state: each candidate as a uniform config, one scratch workspace and output, and
// the accumulated errors.
struct Prober {
  kernels::Backend* backend = nullptr;
  std::vector<engine::PatternCandidate> candidates;
  std::vector<std::shared_ptr<const kernels::MInferenceConfig>> configs;  // one per candidate
  engine::PatternSearch* search = nullptr;
  kernels::AttentionWorkspace workspace;
  Tensor scratch;  // compute dtype [rows, heads, head_dim]
  int num_layers = 0, chunk = 0, num_chunks = 0;
  int64_t first_scored_row = 0;  // rows of the sample before it are not scored (--error-rows)
  int64_t rows_before = 0;       // the sample's rows in the chunks before this one
  absl::Time start, last_report;

  absl::Status Probe(int layer, const kernels::AttentionPlan& plan, const Tensor& q,
                     const Tensor& kv_layer, const Tensor& out) {
    kernels::Backend& be = *backend;
    Tensor dense = Tensor::Zeros(DType::kF32, out.shape());
    SS_RETURN_IF_ERROR(be.CopyToHost(out, dense));
    if (scratch.empty() || scratch.dim(0) != out.dim(0)) {
      scratch = Tensor();
      SS_ASSIGN_OR_RETURN(scratch, be.Allocate(out.dtype(), out.shape()));
    }
    Tensor sparse = Tensor::Zeros(DType::kF32, out.shape());
    const int64_t num_seqs = static_cast<int64_t>(plan.batch->sequences.size());
    Tensor stats = Tensor::Zeros(DType::kF32, {2 * num_seqs});
    for (size_t c = 0; c < candidates.size(); ++c) {
      kernels::AttentionBatch batch = *plan.batch;
      for (kernels::SequenceAttention& seq : batch.sequences) {
        seq.pattern = kernels::AttentionPattern();
        seq.pattern.kind = kernels::AttentionMethodKind::kMInference;
        seq.pattern.minference = configs[c];
      }
      SS_ASSIGN_OR_RETURN(const kernels::AttentionPlan sparse_plan,
                          be.PlanAttention(batch, plan.shape, workspace));
      SS_RETURN_IF_ERROR(be.BuildAttentionIndex(sparse_plan, q, kv_layer, layer));
      SS_RETURN_IF_ERROR(be.Attention(sparse_plan, q, kv_layer, layer, scratch));
      SS_RETURN_IF_ERROR(be.CopyToHost(scratch, sparse));
      SS_RETURN_IF_ERROR(be.CopyToHost(workspace.sparse_stats.Slice(0, 0, 2 * num_seqs), stats));
      for (int64_t s = 0; s < num_seqs; ++s) {
        search->AddWork(static_cast<int>(c), stats.data<float>()[2 * s],
                        stats.data<float>()[2 * s + 1]);
      }
      // One sequence per step (the sample), so row r of `out` is the sample's row rows_before + r.
      const int64_t rows = out.dim(0);
      const int64_t skip = std::clamp<int64_t>(first_scored_row - rows_before, 0, rows);
      const int64_t row_floats = out.dim(1) * out.dim(2);
      search->AddOutputs(layer, static_cast<int>(c), sparse.data<float>() + skip * row_floats,
                         dense.data<float>() + skip * row_floats, rows - skip,
                         static_cast<int>(out.dim(2)));
    }
    if (layer == 0) ++chunk;
    if (layer == num_layers - 1) rows_before += out.dim(0);
    const absl::Time now = absl::Now();
    if (layer == num_layers - 1 || now - last_report > absl::Seconds(2)) {
      std::fprintf(stderr, "search-patterns: chunk %d/%d, layer %d/%d, %.1f s\n", chunk, num_chunks,
                   layer + 1, num_layers, absl::ToDoubleSeconds(now - start));
      last_report = now;
    }
    return absl::OkStatus();
  }
};

void PrintSummary(const engine::PatternSearch& search,
                  const std::vector<engine::PatternCandidate>& candidates,
                  const engine::PatternSearch::Selection& selection) {
  const int num_layers = search.num_layers(), num_heads = search.num_heads();
  std::vector<int> times_chosen(candidates.size(), 0);
  for (int c : selection.chosen) ++times_chosen[c];
  std::printf("%-3s %-32s %12s %12s %10s %7s\n", "#", "candidate", "est.density%", "density%",
              "mean err", "chosen");
  for (size_t c = 0; c < candidates.size(); ++c) {
    double mean = 0;
    for (int l = 0; l < num_layers; ++l) {
      for (int h = 0; h < num_heads; ++h) mean += search.Error(l, h, static_cast<int>(c));
    }
    mean /= num_layers * num_heads;
    std::printf("%-3zu %-32s %12.2f %12.2f %10.4f %7d\n", c,
                engine::CandidateName(candidates[c].pattern).c_str(),
                100.0 * candidates[c].estimated_density,
                100.0 * search.MeasuredDensity(static_cast<int>(c)), mean, times_chosen[c]);
  }
  std::printf(
      "(est.density: the cost model's, an upper bound for vertical-slash; density: measured over "
      "every layer and chunk, heads the dense switch ran dense (a chunk covering > %.0f%% of its "
      "causal pairs, as in early chunks) counted whole)\n\n",
      100.0 * kernels::minference::kDenseSwitchFraction);
  std::printf("%-6s %6s %6s %6s %10s %10s\n", "layer", "VS", "A", "BS", "mean err", "max err");
  for (int l = 0; l < num_layers; ++l) {
    int counts[3] = {0, 0, 0};
    double sum = 0, max = 0;
    for (int h = 0; h < num_heads; ++h) {
      const size_t i = static_cast<size_t>(l) * num_heads + h;
      const HeadPatternKind kind = selection.config.heads[i].kind;
      ++counts[kind == HeadPatternKind::kVerticalSlash ? 0
               : kind == HeadPatternKind::kAShape      ? 1
                                                       : 2];
      sum += selection.scores[i];
      max = std::max(max, selection.scores[i]);
    }
    std::printf("%-6d %6d %6d %6d %10.4f %10.4f\n", l, counts[0], counts[1], counts[2],
                sum / num_heads, max);
  }
}

absl::Status SearchPatterns() {
  const std::string sample_path = absl::GetFlag(FLAGS_sample);
  const std::string out_path = absl::GetFlag(FLAGS_out);
  const double target = absl::GetFlag(FLAGS_target_density);
  const int sample_tokens = absl::GetFlag(FLAGS_sample_tokens);
  if (sample_path.empty()) return UsageError("--sample is required (see --help)");
  if (out_path.empty()) return UsageError("--out is required (see --help)");
  if (!(target > 0 && target <= 1)) {
    return UsageError(absl::StrCat("--target-density must be in (0, 1], got ", target));
  }
  if (sample_tokens < 0) return UsageError("--sample-tokens must be >= 0");
  const int error_rows = absl::GetFlag(FLAGS_error_rows);
  if (error_rows < 0) return UsageError("--error-rows must be >= 0");
  absl::StatusOr<std::string> text = ReadSample(sample_path);
  if (!text.ok()) return UsageError(text.status().message());

  SS_ASSIGN_OR_RETURN(Device device, DeviceFromFlags());
  SS_ASSIGN_OR_RETURN(engine::ModelRunnerOptions options, RunnerOptionsFromFlags());
  // The final measurement prefills the sample again: it must not come from the prefix cache.
  options.enable_prefix_cache = false;
  SS_ASSIGN_OR_RETURN(std::unique_ptr<kernels::Backend> backend, kernels::CreateBackend(device));
  SS_ASSIGN_OR_RETURN(engine::ModelSource source, engine::OpenModelSource(ModelPathFromFlags()));
  SS_ASSIGN_OR_RETURN(std::vector<int32_t> tokens,
                      source.tokenizer->Encode(*text, /*add_special=*/true));
  const int context = source.config.max_position_embeddings;
  int n = static_cast<int>(tokens.size());
  if (sample_tokens > 0 && sample_tokens < n) n = sample_tokens;
  if (n > context - 1) {
    std::fprintf(stderr, "search-patterns: the sample's %d tokens cut to the model's context: %d\n",
                 n, context - 1);
    n = context - 1;
  }
  tokens.resize(n);
  absl::StatusOr<std::vector<engine::PatternCandidate>> candidates =
      engine::PatternCandidates(n, target);
  if (!candidates.ok()) {
    return UsageError(
        absl::StrCat("--sample '", sample_path, "': ", candidates.status().message()));
  }
  SS_ASSIGN_OR_RETURN(std::unique_ptr<engine::ModelRunner> runner,
                      engine::ModelRunner::Create(source, backend.get(), options));
  const model::ModelConfig& c = runner->config();

  std::fprintf(stderr,
               "search-patterns: %d layers x %d heads, sample %d tokens in %d chunks, %zu "
               "candidates at %.1f%% of the causal pairs:\n",
               c.num_layers, c.num_heads, n, CountChunks(n, options), candidates->size(),
               100.0 * target);
  for (const engine::PatternCandidate& cand : *candidates) {
    std::fprintf(stderr, "  %-32s estimated density %.2f%%\n",
                 engine::CandidateName(cand.pattern).c_str(), 100.0 * cand.estimated_density);
  }
  engine::PatternSearch search(c.num_layers, c.num_heads, static_cast<int>(candidates->size()));
  Prober prober;
  prober.backend = backend.get();
  prober.candidates = *candidates;
  for (const engine::PatternCandidate& cand : *candidates) {
    prober.configs.push_back(std::make_shared<const kernels::MInferenceConfig>(
        kernels::MInferenceConfig::Uniform(c.num_layers, c.num_heads, cand.pattern)));
  }
  prober.search = &search;
  prober.num_layers = c.num_layers;
  prober.num_chunks = CountChunks(n, options);
  prober.first_scored_row = error_rows > 0 ? std::max(0, n - error_rows) : 0;
  prober.start = prober.last_report = absl::Now();
  runner->set_attention_probe(
      [&prober](int layer, const kernels::AttentionPlan& plan, const Tensor& q,
                const Tensor& kv_layer,
                const Tensor& out) { return prober.Probe(layer, plan, q, kv_layer, out); });
  engine::SequenceKv seq;
  SS_RETURN_IF_ERROR(runner->Prefill(tokens, seq).status());
  runner->Release(seq);
  runner->set_attention_probe(nullptr);
  const double search_s = absl::ToDoubleSeconds(absl::Now() - prober.start);

  const engine::PatternSearch::Selection selection = search.Select(*candidates);
  {
    std::ofstream f(out_path);
    f << engine::MInferenceConfigJson(selection.config, selection.scores);
    if (!f) return absl::InternalError(absl::StrCat("cannot write --out file '", out_path, "'"));
  }
  PrintSummary(search, *candidates, selection);

  // The chosen config's own work on the sample: one MInference prefill under it.
  kernels::AttentionPattern pattern;
  pattern.kind = kernels::AttentionMethodKind::kMInference;
  pattern.minference = std::make_shared<const kernels::MInferenceConfig>(selection.config);
  kernels::SamplingBatch greedy;
  greedy.rows.resize(1);
  SS_RETURN_IF_ERROR(runner->PrefillSampled(tokens, seq, greedy, pattern).status());
  const double density = seq.prefill_attention_density();
  runner->Release(seq);
  std::printf(
      "\nwrote %s: %d layers x %d heads; at %d tokens the chosen patterns compute %.2f%% "
      "of the causal pairs; search %.1f s\n",
      out_path.c_str(), c.num_layers, c.num_heads, n, 100.0 * density, search_s);
  return absl::OkStatus();
}

}  // namespace

int RunSearchPatternsCommand(const std::vector<char*>& positional) {
  if (positional.size() > 1) {
    std::fprintf(stderr, "error: unexpected argument '%s' (flags start with --)\n", positional[1]);
    return 2;
  }
  absl::Status s = SearchPatterns();
  if (!s.ok()) {
    std::fprintf(stderr, "error: %s\n", s.ToString().c_str());
    // Bad flags and unusable inputs (a missing or too-short sample, a missing model) are usage
    // errors; anything failing during the run is not.
    return absl::IsInvalidArgument(s) || absl::IsNotFound(s) ? 2 : 1;
  }
  return 0;
}

}  // namespace sparseserve::tools
