#include "kernels/sampling_reference.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "common/core/check.h"
#include "kernels/sampling_math.h"

namespace sparseserve::kernels {
namespace {

// The pipeline up to the draw. Either `greedy` is the pick, or the kept ids are
// scratch->order[0, num_kept) in ascending id order with total mass `kept_mass` > 0.
struct KeptTokens {
  int32_t greedy = -1;
  size_t num_kept = 0;
  uint64_t kept_mass = 0;
};

KeptTokens Filter(absl::Span<const float> logits, const SamplingRow& row,
                  absl::Span<const int32_t> penalized_ids, SamplingScratch* scratch) {
  const size_t vocab = logits.size();
  SS_CHECK(vocab >= 1 && static_cast<int64_t>(vocab) <= kMaxSamplingVocab);
  if (scratch->logits.size() < vocab) {
    scratch->logits.resize(vocab);
    scratch->weights.resize(vocab);
    scratch->order.resize(vocab);
  }
  float* l = scratch->logits.data();
  for (size_t i = 0; i < vocab; ++i) l[i] = SamplingLogit(logits[i]);
  // Each penalised logit is computed from the input, so a repeated id is penalised once.
  if (row.repetition_penalty != 1.0f) {
    for (const int32_t id : penalized_ids) {
      SS_CHECK(id >= 0 && static_cast<size_t>(id) < vocab);
      const size_t u = static_cast<size_t>(id);
      l[u] = PenalizedLogit(SamplingLogit(logits[u]), row.repetition_penalty);
    }
  }
  size_t best = 0;
  for (size_t i = 1; i < vocab; ++i) {
    if (l[i] > l[best]) best = i;
  }
  KeptTokens kept;
  const float max_logit = l[best];
  // +inf or all -inf: the only sensible choice is the argmax.
  if (row.temperature == 0.0f || !std::isfinite(max_logit)) {
    kept.greedy = static_cast<int32_t>(best);
    return kept;
  }

  float* w = scratch->weights.data();
  const float inv_temperature = 1.0f / row.temperature;
  for (size_t i = 0; i < vocab; ++i) w[i] = SamplingWeight(l[i], max_logit, inv_temperature);
  // Weight descending, then id ascending: a strict total order; every filter keeps a prefix.
  const auto before = [w](int32_t a, int32_t b) {
    const float wa = w[static_cast<size_t>(a)];
    const float wb = w[static_cast<size_t>(b)];
    return wa > wb || (wa == wb && a < b);
  };
  const auto mass_of = [w](int32_t id) { return SamplingMass(w[static_cast<size_t>(id)]); };
  const auto begin = scratch->order.begin();
  std::iota(begin, begin + static_cast<ptrdiff_t>(vocab), 0);
  size_t n = vocab;
  if (row.top_k > 0 && static_cast<size_t>(row.top_k) < n) {
    n = static_cast<size_t>(row.top_k);
    std::nth_element(begin, begin + static_cast<ptrdiff_t>(n),
                     begin + static_cast<ptrdiff_t>(vocab), before);
  }
  // Integer masses: the sum does not depend on the (unspecified) order nth_element left.
  uint64_t top_k_mass = 0;
  for (size_t i = 0; i < n; ++i) top_k_mass += mass_of(scratch->order[i]);
  // min-p keeps a prefix too (the max has weight 1 >= min_p), so the set it leaves among the
  // top-k is the shorter of the two prefixes.
  if (row.min_p > 0.0f) {
    const auto end = std::partition(begin, begin + static_cast<ptrdiff_t>(n), [&](int32_t id) {
      return w[static_cast<size_t>(id)] >= row.min_p;
    });
    n = static_cast<size_t>(end - begin);
  }
  if (row.top_p < 1.0f) {
    std::sort(begin, begin + static_cast<ptrdiff_t>(n), before);
    const uint64_t target = TopPTarget(row.top_p, top_k_mass);
    uint64_t mass = 0;
    for (size_t i = 0; i < n; ++i) {
      mass += mass_of(scratch->order[i]);
      if (mass >= target) {
        n = i + 1;
        break;
      }
    }
  }
  SS_CHECK(n >= 1);
  std::sort(begin, begin + static_cast<ptrdiff_t>(n));
  kept.num_kept = n;
  for (size_t i = 0; i < n; ++i) kept.kept_mass += mass_of(scratch->order[i]);
  SS_CHECK(kept.kept_mass > 0);  // the max (weight 1, mass 2^40) is always kept
  return kept;
}

}  // namespace

int32_t SampleRow(absl::Span<const float> logits, const SamplingRow& row,
                  absl::Span<const int32_t> penalized_ids, SamplingScratch* scratch) {
  const KeptTokens kept = Filter(logits, row, penalized_ids, scratch);
  if (kept.greedy >= 0) return kept.greedy;
  // Walk the kept ids in ascending order: the first whose running mass passes the draw. The
  // running mass ends at kept_mass > threshold, so the walk always picks a token of positive mass.
  const uint64_t threshold = DrawThreshold(row.uniform, kept.kept_mass);
  const float* w = scratch->weights.data();
  uint64_t mass = 0;
  for (size_t i = 0; i < kept.num_kept; ++i) {
    const int32_t id = scratch->order[i];
    mass += SamplingMass(w[static_cast<size_t>(id)]);
    if (mass > threshold) return id;
  }
  SS_CHECK(false);  // unreachable: see above
  return scratch->order[0];
}

void SampleRowProbabilities(absl::Span<const float> logits, const SamplingRow& row,
                            absl::Span<const int32_t> penalized_ids, SamplingScratch* scratch,
                            absl::Span<float> probs) {
  SS_CHECK(probs.size() == logits.size());
  const KeptTokens kept = Filter(logits, row, penalized_ids, scratch);
  std::fill(probs.begin(), probs.end(), 0.0f);
  if (kept.greedy >= 0) {
    probs[static_cast<size_t>(kept.greedy)] = 1.0f;
    return;
  }
  const float* w = scratch->weights.data();
  const double total = static_cast<double>(kept.kept_mass);
  for (size_t i = 0; i < kept.num_kept; ++i) {
    const size_t id = static_cast<size_t>(scratch->order[i]);
    probs[id] = static_cast<float>(static_cast<double>(SamplingMass(w[id])) / total);
  }
}

void TokenLogprobsRow(absl::Span<const float> logits, int32_t token, int top_n,
                      absl::Span<float> values, absl::Span<int32_t> ids) {
  const size_t vocab = logits.size();
  SS_CHECK(token >= 0 && static_cast<size_t>(token) < vocab);
  SS_CHECK(top_n >= 0 && top_n <= kMaxTopLogprobs && static_cast<size_t>(top_n) <= vocab);
  SS_CHECK(values.size() >= static_cast<size_t>(1 + top_n) &&
           ids.size() >= static_cast<size_t>(top_n));
  auto logit = [&](size_t i) { return std::isnan(logits[i]) ? -INFINITY : logits[i]; };
  float max = -INFINITY;
  for (size_t i = 0; i < vocab; ++i) max = std::max(max, logit(i));
  double sum = 0;
  if (std::isfinite(max)) {
    for (size_t i = 0; i < vocab; ++i) sum += std::exp(static_cast<double>(logit(i)) - max);
  }
  const double lse = std::isfinite(max) ? max + std::log(sum) : INFINITY;
  auto logprob = [&](size_t i) {
    return std::isfinite(max) ? static_cast<float>(static_cast<double>(logit(i)) - lse) : -INFINITY;
  };
  values[0] = logprob(static_cast<size_t>(token));
  // The top_n largest, larger first and lower id on ties: insertion into a sorted list of at most
  // top_n ids (ids ascend, so an equal logit later in the row never displaces an earlier one).
  int count = 0;
  for (size_t i = 0; i < vocab && top_n > 0; ++i) {
    const float l = logit(i);
    if (count == top_n && !(l > logit(static_cast<size_t>(ids[static_cast<size_t>(count - 1)])))) {
      continue;
    }
    int at = count < top_n ? count++ : count - 1;
    while (at > 0 && l > logit(static_cast<size_t>(ids[static_cast<size_t>(at - 1)]))) {
      ids[static_cast<size_t>(at)] = ids[static_cast<size_t>(at - 1)];
      --at;
    }
    ids[static_cast<size_t>(at)] = static_cast<int32_t>(i);
  }
  for (int k = 0; k < top_n; ++k) {
    values[static_cast<size_t>(k) + 1] = logprob(static_cast<size_t>(ids[static_cast<size_t>(k)]));
  }
}

}  // namespace sparseserve::kernels
