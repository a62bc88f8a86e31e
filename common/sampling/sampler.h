// Sampler: one sequence's side of sampling — its seeded random stream and its penalty window.
// The math that turns a logits row into a token lives once, in kernels/sampling_reference.h
// (the host reference every backend's Backend::Sample matches); see sampling_params.h for the
// pipeline and each knob's source.
//
// Each sequence owns one Sampler: it keeps the sequence's RNG (std::mt19937_64 seeded from
// SamplingParams::seed) across calls, so a run of draws is reproducible, and scratch buffers
// sized to the vocabulary that are reused (no allocation per call after the first, or after the
// vocabulary grows). Uniform variates are built from the raw 64-bit engine output, not a std
// distribution, so draws are identical across standard libraries. Every token drawn at a nonzero
// temperature takes exactly one variate, whether it is sampled here (Sample) or on a backend
// (NextRow + Backend::Sample). Not thread-safe.
#ifndef SPARSESERVE_COMMON_SAMPLING_SAMPLER_H_
#define SPARSESERVE_COMMON_SAMPLING_SAMPLER_H_

#include <cstdint>
#include <random>
#include <vector>

#include "absl/types/span.h"
#include "common/sampling/sampling_params.h"
#include "kernels/sampling_plan.h"
#include "kernels/sampling_reference.h"

namespace sparseserve::sampling {

class Sampler {
 public:
  // REQUIRES: Validate(params).ok() (checked: a violation is a caller bug).
  explicit Sampler(const SamplingParams& params);
  Sampler(const Sampler&) = delete;
  Sampler& operator=(const Sampler&) = delete;

  const SamplingParams& params() const { return params_; }

  // The next token's sampling row, for Backend::Sample: the knobs, and a uniform draw that
  // advances the RNG exactly as Sample would (once, unless greedy). Appends to `penalized_ids`
  // the distinct ids of the last penalty_window (0 = all) tokens of `history` (prompt +
  // generated) in order of first occurrence; none when repetition_penalty is 1.
  // REQUIRES: every id in the penalty window is in [0, kernels::kMaxSamplingVocab) (checked: a
  // violation is a caller bug); the backend checks them against the vocabulary.
  kernels::SamplingRow NextRow(absl::Span<const int32_t> history,
                               std::vector<int32_t>* penalized_ids);

  // Picks the next token on the host: NextRow, then kernels::SampleRow on `logits` (f32
  // [vocab_size], not modified). Greedy when temperature == 0; otherwise advances the RNG once.
  // REQUIRES: vocab_size > 0; every id in the penalty window is in [0, vocab_size).
  int32_t Sample(const float* logits, int vocab_size, absl::Span<const int32_t> history);

  // Speculative decoding (common/spec/draft.h) samples several rows of one step, each with the
  // draw plain decoding would give its token, then keeps the draws of the tokens it emitted:
  // PeekUniform(i) is the draw i places ahead, without taking it (0 when greedy: no draws), then
  // SkipDraw takes as many as were kept. RowWithDraw builds a row from a given draw for the token
  // after `history` followed by `continuation` (a draft row's path: the penalty window spans
  // both). (Peeked draws wait in a small queue: saving and rewinding the 2.5 KB engine state
  // instead cost a batch-64 step more host time than its sampling.)
  double PeekUniform(int i);
  kernels::SamplingRow RowWithDraw(absl::Span<const int32_t> history,
                                   absl::Span<const int32_t> continuation, double uniform,
                                   std::vector<int32_t>* penalized_ids);

  // Advances the random stream exactly as one Sample call would (no-op when greedy), without
  // sampling: for a sequence whose first token was drawn elsewhere from the same seed (the
  // prefill worker), so that its later draws match a single-process run.
  void SkipDraw();

  // The distribution Sample draws from: f32 [vocab_size], 0 for filtered tokens, summing to 1
  // (one-hot at the argmax when greedy). Does not touch the RNG. For tests and logprobs.
  // REQUIRES: as for Sample.
  std::vector<float> Probabilities(const float* logits, int vocab_size,
                                   absl::Span<const int32_t> history);

 private:
  // The row's knobs without a draw.
  kernels::SamplingRow Row() const;
  // Appends the distinct ids of the history's penalty window to `ids` (see NextRow).
  void AppendPenalizedIds(absl::Span<const int32_t> history, std::vector<int32_t>* ids);
  // The next uniform double in [0, 1): the first peeked one, else 53 bits of the engine.
  double NextUniform();
  double EngineUniform();

  SamplingParams params_;
  std::mt19937_64 rng_;
  std::vector<double> peeked_;  // draws PeekUniform took from rng_ ahead of their turn
  kernels::SamplingScratch scratch_;
  std::vector<int32_t> ids_;     // penalised ids of the current call
  std::vector<uint8_t> seen_;    // 1 while an id is in ids_ (grown to the largest id seen)
  std::vector<int32_t> window_;  // RowWithDraw's history tail + continuation
};

}  // namespace sparseserve::sampling

#endif  // SPARSESERVE_COMMON_SAMPLING_SAMPLER_H_
