// The host reference of the sampling pipeline (kernels/sampling_plan.h): one logits row, its
// SamplingRow and its penalised ids in, one token id (or its distribution) out. CpuBackend::Sample
// and common/sampling's Sampler both call it, and the CUDA kernel must reproduce it bit for bit,
// so the pipeline's math exists once on the host. The per-element formulas are in
// kernels/sampling_math.h, shared with the device.
//
// SamplingScratch is owned by the caller and reused across calls (no allocation after the first
// call with the largest vocabulary); a scratch is used by one thread at a time.
#ifndef SPARSESERVE_KERNELS_SAMPLING_REFERENCE_H_
#define SPARSESERVE_KERNELS_SAMPLING_REFERENCE_H_

#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "kernels/sampling_plan.h"

namespace sparseserve::kernels {

// Buffers of SampleRow, grown to the largest vocabulary seen; contents between calls unspecified.
struct SamplingScratch {
  std::vector<float> logits;   // f32 [vocab] the penalised logits
  std::vector<float> weights;  // f32 [vocab] SamplingWeight of each logit
  std::vector<int32_t> order;  // int32 [vocab] candidate ids; a prefix holds the kept ones
};

// The token the pipeline picks from `logits` (f32 [vocab], not modified) under `row`, with the
// repetition penalty applied to `penalized_ids` (an id listed twice is penalised once).
// REQUIRES: ValidateSamplingRow(row).ok(); 1 <= vocab <= kMaxSamplingVocab; every penalised id in
// [0, vocab) (checked: a violation is a caller bug).
int32_t SampleRow(absl::Span<const float> logits, const SamplingRow& row,
                  absl::Span<const int32_t> penalized_ids, SamplingScratch* scratch);

// The distribution SampleRow draws from, into `probs` (f32 [vocab]): each kept token's mass over
// the kept mass, 0 for the others; one-hot at the argmax when greedy. Ignores row.uniform.
// REQUIRES: as for SampleRow, and probs.size() == logits.size().
void SampleRowProbabilities(absl::Span<const float> logits, const SamplingRow& row,
                            absl::Span<const int32_t> penalized_ids, SamplingScratch* scratch,
                            absl::Span<float> probs);

// Backend::TokenLogprobs for one row: the log-softmax of the raw `logits` (NaN read as -inf,
// accumulated in double) at `token` into values[0], and the `top_n` largest logits (larger first,
// lower id on ties) into ids[0, top_n) with their log probabilities in values[1, 1 + top_n).
// A row with no finite logit gives -inf everywhere (and ids 0, 1, ...).
// REQUIRES: 0 <= token < logits.size(); 0 <= top_n <= min(kMaxTopLogprobs, logits.size());
// values.size() >= 1 + top_n; ids.size() >= top_n (checked: a violation is a caller bug).
void TokenLogprobsRow(absl::Span<const float> logits, int32_t token, int top_n,
                      absl::Span<float> values, absl::Span<int32_t> ids);

}  // namespace sparseserve::kernels

#endif  // SPARSESERVE_KERNELS_SAMPLING_REFERENCE_H_
