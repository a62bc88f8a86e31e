// Sampler: turns one sequence's logits into its next token (see sampling_params.h for the
// pipeline and each knob's source).
//
// Each sequence owns one Sampler: it keeps the sequence's RNG (std::mt19937_64 seeded from
// SamplingParams::seed) across calls, so a run of draws is reproducible, and scratch buffers
// sized to the vocabulary that are reused (no allocation per call after the first, or after
// the vocabulary grows). Uniform variates are built from the raw 64-bit engine output, not a
// std distribution, so draws are identical across standard libraries. Not thread-safe.
#ifndef SPARSESERVE_COMMON_SAMPLING_SAMPLER_H_
#define SPARSESERVE_COMMON_SAMPLING_SAMPLER_H_

#include <cstdint>
#include <random>
#include <vector>

#include "absl/types/span.h"
#include "common/sampling/sampling_params.h"

namespace sparseserve::sampling {

class Sampler {
 public:
  // REQUIRES: Validate(params).ok() (checked: a violation is a caller bug).
  explicit Sampler(const SamplingParams& params);
  Sampler(const Sampler&) = delete;
  Sampler& operator=(const Sampler&) = delete;

  const SamplingParams& params() const { return params_; }

  // Picks the next token. `logits`: f32 [vocab_size] (not modified); `history`: the token ids
  // so far (prompt + generated), of which the last penalty_window (0 = all) are penalised,
  // each distinct id once. Greedy when temperature == 0; otherwise advances the RNG once.
  // REQUIRES: vocab_size > 0; every id in the penalty window is in [0, vocab_size).
  int32_t Sample(const float* logits, int vocab_size, absl::Span<const int32_t> history);

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
  // Copies logits into logits_ and applies the repetition penalty over the history window.
  void PenalizeInto(const float* logits, int vocab_size, absl::Span<const int32_t> history);
  // Lowest id among the largest of logits_[0, vocab_size).
  int32_t Argmax(int vocab_size) const;
  // Fills weights_ (unnormalised probabilities, max 1) and puts the surviving token ids in
  // order_[0, return value) after temperature, top-k, top-p and min-p. Requires PenalizeInto.
  int Filter(int vocab_size);
  // Uniform double in [0, 1) from 53 bits of the engine.
  double NextUniform();

  SamplingParams params_;
  std::mt19937_64 rng_;
  std::vector<float> logits_;   // f32 [vocab] penalised copy of the input logits
  std::vector<float> weights_;  // f32 [vocab] exp((logit - max) / temperature)
  std::vector<int32_t> order_;  // int32 [vocab] candidate token ids; prefix = survivors
  std::vector<uint8_t> seen_;   // [vocab] 1 while a token is marked as penalised this call
};

}  // namespace sparseserve::sampling

#endif  // SPARSESERVE_COMMON_SAMPLING_SAMPLER_H_
