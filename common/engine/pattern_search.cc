#include "common/engine/pattern_search.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/engine/minference_config.h"

namespace sparseserve::engine {
namespace {

using kernels::HeadPattern;
using kernels::HeadPatternKind;
namespace mi = kernels::minference;

HeadPattern Pattern(HeadPatternKind kind, int32_t v, int32_t s) {
  HeadPattern p;
  p.kind = kind;
  p.v = v;
  p.s = s;
  return p;
}

// The largest x in [lo, hi] whose pattern stays within `budget` pairs, or lo when none does
// (pairs grow with x for every family below).
template <typename MakePattern>
int64_t LargestWithin(int64_t lo, int64_t hi, int64_t n, int64_t budget, MakePattern make) {
  if (EstimatedPairs(make(lo), n) > budget) return lo;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo + 1) / 2;
    if (EstimatedPairs(make(mid), n) <= budget) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

}  // namespace

int64_t EstimatedPairs(const HeadPattern& pattern, int64_t n) {
  int64_t pairs = 0;
  switch (pattern.kind) {
    case HeadPatternKind::kDense: return n * (n + 1) / 2;
    case HeadPatternKind::kAShape:
      for (int64_t p = 0; p < n; ++p) {
        const int64_t local = std::min<int64_t>(pattern.s, p + 1);
        pairs += local + std::min<int64_t>(pattern.v, p + 1 - local);
      }
      return pairs;
    case HeadPatternKind::kVerticalSlash: {
      const int64_t extra_slashes =
          std::max<int64_t>(pattern.s, mi::kLocalSlashes) - mi::kLocalSlashes;
      const int64_t columns = std::max<int64_t>(pattern.v, mi::kSinkColumns);
      for (int64_t p = 0; p < n; ++p) {
        const int64_t block_begin = p - p % mi::kBlockRows;
        const int64_t band = p - std::max<int64_t>(0, block_begin - (mi::kLocalSlashes - 1)) + 1;
        pairs += std::min(p + 1, band + extra_slashes * mi::kBlockRows + columns);
      }
      return pairs;
    }
    case HeadPatternKind::kBlockSparse: {
      const int64_t blocks = std::max<int64_t>(pattern.v, 3);
      for (int64_t b = 0; b * mi::kBlockRows < n; ++b) {
        const int64_t r0 = b * mi::kBlockRows, r1 = std::min(r0 + mi::kBlockRows, n);
        const int64_t rows = r1 - r0;
        pairs += rows * (rows + 1) / 2 + (std::min(blocks, b + 1) - 1) * mi::kBlockRows * rows;
      }
      return pairs;
    }
  }
  return pairs;
}

absl::StatusOr<std::vector<PatternCandidate>> PatternCandidates(int64_t sample_tokens,
                                                                double target_density) {
  if (!(target_density > 0 && target_density <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("the target density must be in (0, 1], got ", target_density));
  }
  const int64_t n = sample_tokens;
  if (n < 2 * mi::kBlockRows) {
    return absl::InvalidArgumentError(
        absl::StrCat("a sample of ", n, " tokens is too short: ", "the search needs at least ",
                     2 * mi::kBlockRows, " (two query blocks)"));
  }
  const int64_t causal = n * (n + 1) / 2;
  const int64_t budget = static_cast<int64_t>(target_density * static_cast<double>(causal));
  std::vector<HeadPattern> patterns;
  // Vertical-slash: the budget beyond the forced lines, as x keys per row, split between
  // slashes (64 keys each) and columns (1 each).
  for (const double column_share : {0.0, 1.0 / 3, 2.0 / 3, 1.0}) {
    auto make = [column_share](int64_t x) {
      const auto columns = static_cast<int64_t>(std::llround(column_share * x));
      const int64_t slashes = (x - columns) / mi::kBlockRows;
      return Pattern(HeadPatternKind::kVerticalSlash,
                     static_cast<int32_t>(mi::kSinkColumns + columns),
                     static_cast<int32_t>(mi::kLocalSlashes + slashes));
    };
    patterns.push_back(make(LargestWithin(0, n, n, budget, make)));
  }
  // A-shape: a quarter of the row's keys as sinks (64 at most, as StreamingLLM's few), the rest
  // as the local window.
  const int64_t keys_per_row = budget / n;
  const auto sinks = static_cast<int32_t>(std::clamp<int64_t>(keys_per_row / 4, 1, 64));
  auto a_shape = [sinks](int64_t window) {
    return Pattern(HeadPatternKind::kAShape, sinks, static_cast<int32_t>(window));
  };
  patterns.push_back(a_shape(LargestWithin(1, n, n, budget, a_shape)));
  auto block_sparse = [](int64_t blocks) {
    return Pattern(HeadPatternKind::kBlockSparse, static_cast<int32_t>(blocks), 0);
  };
  const int64_t kv_blocks = (n + mi::kBlockRows - 1) / mi::kBlockRows;
  patterns.push_back(block_sparse(LargestWithin(3, kv_blocks, n, budget, block_sparse)));

  std::vector<PatternCandidate> candidates;
  for (const HeadPattern& p : patterns) {
    const bool seen = std::any_of(candidates.begin(), candidates.end(),
                                  [&](const PatternCandidate& c) { return c.pattern == p; });
    if (seen) continue;
    candidates.push_back(
        {p, static_cast<double>(EstimatedPairs(p, n)) / static_cast<double>(causal)});
  }
  return candidates;
}

std::string CandidateName(const HeadPattern& pattern) {
  if (pattern.kind == HeadPatternKind::kBlockSparse) {
    return absl::StrCat(HeadPatternTypeName(pattern.kind), "(", pattern.v, ")");
  }
  return absl::StrCat(HeadPatternTypeName(pattern.kind), "(", pattern.v, ", ", pattern.s, ")");
}

int SelectCandidate(absl::Span<const double> errors) {
  int best = 0;
  for (int i = 1; i < static_cast<int>(errors.size()); ++i) {
    if (errors[i] < errors[best]) best = i;  // strictly smaller: ties stay with the earlier one
  }
  return best;
}

PatternSearch::PatternSearch(int num_layers, int num_heads, int num_candidates)
    : num_layers_(num_layers),
      num_heads_(num_heads),
      num_candidates_(num_candidates),
      diff_sq_(static_cast<size_t>(num_layers) * num_heads * num_candidates, 0.0),
      ref_sq_(diff_sq_.size(), 0.0),
      computed_pairs_(num_candidates, 0.0),
      causal_pairs_(num_candidates, 0.0) {}

void PatternSearch::AddOutputs(int layer, int candidate, const float* sparse, const float* dense,
                               int64_t rows, int head_dim) {
  for (int h = 0; h < num_heads_; ++h) {
    double diff = 0, ref = 0;
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t at = (r * num_heads_ + h) * head_dim;
      for (int d = 0; d < head_dim; ++d) {
        const double x = dense[at + d];
        const double e = static_cast<double>(sparse[at + d]) - x;
        diff += e * e;
        ref += x * x;
      }
    }
    diff_sq_[Slot(layer, h, candidate)] += diff;
    ref_sq_[Slot(layer, h, candidate)] += ref;
  }
}

void PatternSearch::AddWork(int candidate, double computed_pairs, double causal_pairs) {
  computed_pairs_[candidate] += computed_pairs;
  causal_pairs_[candidate] += causal_pairs;
}

double PatternSearch::Error(int layer, int head, int candidate) const {
  const double diff = diff_sq_[Slot(layer, head, candidate)];
  const double ref = ref_sq_[Slot(layer, head, candidate)];
  if (diff == 0) return 0;
  if (ref == 0) return 1;
  return std::sqrt(diff / ref);
}

double PatternSearch::MeasuredDensity(int candidate) const {
  return causal_pairs_[candidate] > 0 ? computed_pairs_[candidate] / causal_pairs_[candidate] : 0;
}

PatternSearch::Selection PatternSearch::Select(
    const std::vector<PatternCandidate>& candidates) const {
  Selection s;
  s.config = kernels::MInferenceConfig::Uniform(num_layers_, num_heads_);
  std::vector<double> errors(num_candidates_);
  for (int l = 0; l < num_layers_; ++l) {
    for (int h = 0; h < num_heads_; ++h) {
      for (int c = 0; c < num_candidates_; ++c) errors[c] = Error(l, h, c);
      const int best = SelectCandidate(errors);
      s.config.heads[static_cast<size_t>(l) * num_heads_ + h] = candidates[best].pattern;
      s.scores.push_back(errors[best]);
      s.chosen.push_back(best);
    }
  }
  return s;
}

}  // namespace sparseserve::engine
