// PatternSearch: the arithmetic of MInference's offline kernel-aware pattern search (paper Alg. 1,
// papers/minference.md): the candidate patterns at one work budget, and for every (layer, query
// head) the candidate whose attention output is closest to dense attention's on a sample.
//
// No backend here: `sparseserve search-patterns` (tools/search_patterns_command.cc) prefills the
// sample densely, runs every candidate on each layer's queries and keys through a model probe
// (LlamaModel::set_attention_probe) and hands both outputs, copied to the host, to AddOutputs.
// The budget is a share of the causal (row, key) pairs at the sample length; each candidate's
// sizes are the largest whose estimated visible pairs (EstimatedPairs, the cost model below) stay
// within it. A plain value class; not thread-safe.
#ifndef SPARSESERVE_COMMON_ENGINE_PATTERN_SEARCH_H_
#define SPARSESERVE_COMMON_ENGINE_PATTERN_SEARCH_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "kernels/minference_index.h"

namespace sparseserve::engine {

// One pattern every head of a model could take, with its estimated share of the causal pairs of
// the sample (EstimatedPairs / causal pairs).
struct PatternCandidate {
  kernels::HeadPattern pattern;
  double estimated_density = 0;
};

// The (row, key) pairs a head under `pattern` computes over rows [0, n) of a prompt prefilled
// whole, as the kernels count them (kernels/minference_index.h; before the dense switch):
//   - A-shape(v, s): exact: each row p sees min(s, p + 1) local keys and the sinks before them.
//   - Vertical-slash(v, s): an upper bound: the forced offsets 0..99 make one run [B - 99, p] per
//     row of a query block starting at B; each further slash adds at most one 64-key run (its
//     run of the query block; less where it touches another, as clustered diagonals do) and each
//     column one key; never more than the p + 1 causal keys.
//   - Block-sparse(v): query block b sees min(max(v, 3), b + 1) key blocks, its own causally.
int64_t EstimatedPairs(const kernels::HeadPattern& pattern, int64_t n);

// The candidate space at `target_density` (a share of the causal pairs of a sample of
// `sample_tokens` tokens), in this order (ties in the search go to the earlier one):
//   - vertical-slash in four splits of the budget left after the forced 30 columns and 100
//     slashes: all of it to slashes (at 64 keys each), 2/3, 1/3, none (all to columns);
//   - A-shape with min(64, budget keys per row / 4) sinks and the widest window within budget;
//   - block-sparse with the most key blocks per query block within budget (at least 3).
// Sizes never go below the kernels' minimums (VS (30, 100), BS 3), so a budget smaller than
// those gives candidates above it. Duplicates are dropped. kInvalidArgument for a target outside
// (0, 1] or fewer than 2 query blocks (128 tokens).
absl::StatusOr<std::vector<PatternCandidate>> PatternCandidates(int64_t sample_tokens,
                                                                double target_density);

// "vertical_and_slash(30, 612)", "stream_llm(64, 350)", "block_sparse(7)".
std::string CandidateName(const kernels::HeadPattern& pattern);

// The index of the smallest error; ties go to the earlier candidate. REQUIRES: non-empty.
int SelectCandidate(absl::Span<const double> errors);

class PatternSearch {
 public:
  // REQUIRES: every argument > 0.
  PatternSearch(int num_layers, int num_heads, int num_candidates);

  // Adds one step's outputs of `layer` under candidate `candidate`: sparse and dense are host f32
  // [rows, num_heads, head_dim] (the rows of every sequence of the step). Per head it accumulates
  // ||sparse - dense||² and ||dense||² over every step added, so Error is the relative L2 error
  // over the whole sample, not a mean over chunks.
  void AddOutputs(int layer, int candidate, const float* sparse, const float* dense, int64_t rows,
                  int head_dim);
  // Adds one index build's work of `candidate` (AttentionWorkspace::sparse_stats: pairs computed
  // after the dense switch, and the causal pairs of the same rows and heads).
  void AddWork(int candidate, double computed_pairs, double causal_pairs);

  // sqrt(Σ||sparse - dense||² / Σ||dense||²) of (layer, head) under `candidate`: 0 when nothing
  // differs, 1 when the dense output is zero and the sparse one is not.
  double Error(int layer, int head, int candidate) const;
  // Σ computed / Σ causal pairs of `candidate` (0 before any AddWork).
  double MeasuredDensity(int candidate) const;

  struct Selection {
    kernels::MInferenceConfig config;  // every head's chosen candidate's pattern
    std::vector<double> scores;        // [layer * num_heads + head]: its Error
    std::vector<int> chosen;           // [layer * num_heads + head]: its candidate index
  };
  // Every (layer, head)'s SelectCandidate over its errors. REQUIRES: candidates.size() ==
  // num_candidates.
  Selection Select(const std::vector<PatternCandidate>& candidates) const;

  int num_layers() const { return num_layers_; }
  int num_heads() const { return num_heads_; }
  int num_candidates() const { return num_candidates_; }

 private:
  size_t Slot(int layer, int head, int candidate) const {
    return (static_cast<size_t>(layer) * num_heads_ + head) * num_candidates_ + candidate;
  }

  int num_layers_, num_heads_, num_candidates_;
  std::vector<double> diff_sq_, ref_sq_;               // [layer][head][candidate]
  std::vector<double> computed_pairs_, causal_pairs_;  // [candidate]
};

}  // namespace sparseserve::engine

#endif  // SPARSESERVE_COMMON_ENGINE_PATTERN_SEARCH_H_
