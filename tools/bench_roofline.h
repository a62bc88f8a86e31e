// The roofline of Llama-block forward steps for `sparseserve bench model`: the bytes a step must
// move and the FLOPs it must do, from the model config alone, and the time floors these give at a
// memory bandwidth and a peak FLOP rate. A measured time divided into its floor says how close a
// backend gets to the hardware. Pure functions; thread-safe.
#ifndef SPARSESERVE_TOOLS_BENCH_ROOFLINE_H_
#define SPARSESERVE_TOOLS_BENCH_ROOFLINE_H_

#include <cstdint>

#include "common/model/model_config.h"
#include "common/tensor/dtype.h"

namespace sparseserve::tools {

// What a piece of work costs at the least. Multiply-add counts as 2 FLOPs.
struct WorkCost {
  double bytes = 0;  // weights + KV read and written, in the compute dtype (activations left out)
  double flops = 0;  // matmuls + attention (Q·Kᵀ and P·V)
};

// Bytes of the weights one forward step reads: every layer tensor, the final norm and lm_head
// (the embedding only has rows gathered, left out).
double StepWeightBytes(const model::ModelConfig& c, DType dtype);

// Bytes of one token's keys and values over all layers.
double KvBytesPerToken(const model::ModelConfig& c, DType dtype);

// Prefill of `num_tokens` from an empty cache in steps of `chunk_tokens`, logits of each step's
// last token only. Every step reads the weights once, reads the KV of all tokens up to its end
// and writes its own; attention is causal (token p looks at p + 1 keys).
WorkCost PrefillCost(const model::ModelConfig& c, DType dtype, int64_t num_tokens,
                     int64_t chunk_tokens);

// One decode step of `batch` sequences, each adding one token after `context` cached ones: the
// weights once, every sequence's context + 1 KV rows read — at most `visible_keys` of them when
// the request attends a window (its sinks included; 0 = the whole context).
WorkCost DecodeStepCost(const model::ModelConfig& c, DType dtype, int64_t batch, int64_t context,
                        int64_t visible_keys = 0);

// The time floors of a WorkCost.
struct RooflineFloor {
  double bytes_s = 0;      // bytes / bandwidth
  double flops_s = 0;      // flops / peak; 0 when the peak is unknown
  double floor_s = 0;      // the larger of the two: no implementation can be faster
  const char* bound = "";  // "memory" or "compute", whichever floor is larger
};

// `bandwidth_gbps` in 1e9 bytes/s (> 0); `peak_tflops` in 1e12 FLOP/s, 0 = unknown.
RooflineFloor FloorOf(const WorkCost& cost, double bandwidth_gbps, double peak_tflops);

}  // namespace sparseserve::tools

#endif  // SPARSESERVE_TOOLS_BENCH_ROOFLINE_H_
