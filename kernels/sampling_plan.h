// Sampling plans: how each logits row of a step turns into a token id, for Backend::Sample.
//
// The engine builds one SamplingBatch per decode step (host memory, owned by the caller) from each
// sequence's Sampler (common/sampling): the row's knobs, its uniform draw and the distinct token
// ids its repetition penalty applies to. Every backend applies one pipeline per row, pinned by the
// host reference kernels/sampling_reference.h (SampleRow):
//   1. l_i = logits[i], NaN read as -inf; for each penalised id, l > 0 ? l / θ : l * θ.
//   2. temperature == 0, or the largest l not finite: the argmax (lowest id on ties). Done.
//   3. weight w_i = SamplingWeight((l_i - max) * (1 / temperature)) in [0, 1] (the max has 1),
//      mass q_i = floor(w_i * 2^40) (integer: sums are exact in any order, so every backend finds
//      the same cut-offs and draws).
//   4. Order: weight descending, then id ascending. Each filter keeps a prefix of it: top-k the
//      first k; min-p the tokens with w >= min_p; top-p the shortest prefix whose mass reaches
//      ceil(top_p * mass of the top-k prefix) (HF order: top-p measured after top-k). The kept
//      set is the shortest of the three prefixes (never empty: the max is first).
//   5. Draw: r = min(floor(uniform * M), M - 1) for the kept mass M; the token is the first kept
//      id, walking ids in ascending order, at which the running mass exceeds r.
// A plain struct; thread-safe when not mutated.
#ifndef SPARSESERVE_KERNELS_SAMPLING_PLAN_H_
#define SPARSESERVE_KERNELS_SAMPLING_PLAN_H_

#include <cstdint>
#include <vector>

namespace sparseserve::kernels {

// One logits row's sampling knobs (common/sampling/sampling_params.h documents each one's source).
struct SamplingRow {
  float temperature = 0;         // 0 = greedy argmax; finite and >= 0
  int top_k = 0;                 // 0 = off; >= 0
  float top_p = 1;               // 1 = off; in (0, 1]
  float min_p = 0;               // 0 = off; in [0, 1]
  float repetition_penalty = 1;  // θ of the penalised ids; finite and > 0
  double uniform = 0;            // in [0, 1): the row's draw, taken by the caller from the
                                 // sequence's seeded RNG (ignored when greedy)
};

struct SamplingBatch {
  std::vector<SamplingRow> rows;  // [m], one per logits row
  // int32 [penalized_begin.back()] ids each row's repetition penalty applies to, rows
  // concatenated, each in [0, vocab). An id listed twice for a row is penalised once.
  std::vector<int32_t> penalized_ids;
  // int32 [m + 1] offsets into penalized_ids: row i's ids are [begin[i], begin[i + 1]); begin[0]
  // is 0 and offsets never decrease. Empty is allowed when penalized_ids is (no penalties).
  std::vector<int32_t> penalized_begin;
};

// Most alternatives Backend::TokenLogprobs lists per row (the OpenAI API allows 5).
inline constexpr int kMaxTopLogprobs = 8;

// Largest vocabulary Backend::Sample accepts: keeps the integer masses of a row within 64 bits.
inline constexpr int64_t kMaxSamplingVocab = int64_t{1} << 23;

}  // namespace sparseserve::kernels

#endif  // SPARSESERVE_KERNELS_SAMPLING_PLAN_H_
