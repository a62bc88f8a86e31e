// SamplingParams: how one sequence turns logits into tokens, and their validation.
//
// The pipeline is: repetition penalty over a window of the history, then greedy argmax if
// temperature == 0, else temperature, top-k, top-p, min-p and a seeded draw. This is the order of
// TokenSwift's contextual penalty (papers/tokenswift.md, "Contextual penalty") and of HF
// transformers' logits processors. kernels/sampling_plan.h states it exactly; the host reference
// (kernels/sampling_reference.h) and every backend's Backend::Sample compute it, fed per token by
// the sequence's Sampler (sampler.h). A value type; thread-safe when not mutated.
#ifndef SPARSESERVE_COMMON_SAMPLING_SAMPLING_PARAMS_H_
#define SPARSESERVE_COMMON_SAMPLING_SAMPLING_PARAMS_H_

#include <cstdint>

#include "absl/status/status.h"

namespace sparseserve::sampling {

struct SamplingParams {
  // Softmax temperature (logits are divided by it); default 1.0; 0 = greedy argmax (ties go
  // to the lowest token id). Must be finite and >= 0.
  float temperature = 1.0f;
  // Keep only the k most probable tokens; default 0 = off. Must be >= 0.
  int top_k = 0;
  // Nucleus sampling (Holtzman et al. 2020): keep the smallest most-probable set whose mass
  // reaches top_p (at least one token); default 1.0 = off. Must be in (0, 1].
  float top_p = 1.0f;
  // Keep tokens with p >= min_p * p_max; default 0.0 = off; TokenSwift uses 0.1. In [0, 1].
  float min_p = 0.0f;
  // Repetition penalty θ (CTRL, Keskar et al. 2019; HF semantics): a logit l of a token seen
  // in the window becomes l / θ if l > 0, else l * θ. Default 1.0 = off; > 1 penalises;
  // TokenSwift uses 1.2 for Llama-3.1, 1.13-1.15 for others. Must be > 0.
  float repetition_penalty = 1.0f;
  // Tokens of history the penalty looks back over; default 0 = the whole history; TokenSwift's
  // contextual penalty uses the last W = 1024. Must be >= 0.
  int penalty_window = 0;
  // Seed of the sequence's own RNG (std::mt19937_64); same seed and logits → same tokens.
  uint64_t seed = 0;
};

// Returns kInvalidArgument naming the field for: temperature < 0, NaN or infinite; top_k < 0;
// top_p outside (0, 1]; min_p outside [0, 1]; repetition_penalty <= 0 or NaN;
// penalty_window < 0.
absl::Status Validate(const SamplingParams& params);

}  // namespace sparseserve::sampling

#endif  // SPARSESERVE_COMMON_SAMPLING_SAMPLING_PARAMS_H_
