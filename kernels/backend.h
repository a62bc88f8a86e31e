// Backend: the one interface every numeric op of the model goes through.
//
// Model, scheduler and service code see only this interface and Tensor views; the CPU reference
// backend (kernels/cpu) and the CUDA backend (kernels/cuda) implement it with one semantics, so a
// CPU test pins what a GPU kernel must reproduce. Every op checks dtypes and shapes and returns
// kInvalidArgument on a mismatch, kUnimplemented for a dtype/pattern the backend lacks.
// Outputs may alias inputs only where an op says so. A Backend is used by one engine thread.
#ifndef SPARSESERVE_KERNELS_BACKEND_H_
#define SPARSESERVE_KERNELS_BACKEND_H_

#include <memory>

#include "absl/status/statusor.h"
#include "common/tensor/tensor.h"
#include "kernels/attention_plan.h"

namespace sparseserve::kernels {

class Backend {
 public:
  virtual ~Backend() = default;

  virtual Device device() const = 0;
  // The dtype this backend computes activations and KV in (f32 on CPU, bf16 on CUDA).
  virtual DType compute_dtype() const = 0;

  // A zero-filled tensor in this backend's memory. kResourceExhausted when out of memory.
  virtual absl::StatusOr<Tensor> Allocate(DType dtype, Shape shape) = 0;
  // Copies a host tensor of any float dtype into `dst` (this backend's memory), converting dtype.
  virtual absl::Status CopyFromHost(const Tensor& src, const Tensor& dst) = 0;
  // Copies `src` (this backend's memory) into a host tensor of the same shape, converting dtype.
  virtual absl::Status CopyToHost(const Tensor& src, const Tensor& dst) = 0;

  // out[i, :] = table[ids[i], :]. table [vocab, hidden], ids i32 [n], out [n, hidden].
  // kInvalidArgument if an id is outside [0, vocab).
  virtual absl::Status Embedding(const Tensor& table, const Tensor& ids, const Tensor& out) = 0;

  // out = x / rms(x) * weight, per row. x, out [n, d]; weight [d]. out may alias x.
  virtual absl::Status RmsNorm(const Tensor& x, const Tensor& weight, float eps,
                               const Tensor& out) = 0;

  // residual += x, then out = RmsNorm(residual) (the pre-norm transformer's fused step).
  // residual, x, out [n, d]; out may alias x.
  virtual absl::Status AddRmsNorm(const Tensor& residual, const Tensor& x, const Tensor& weight,
                                  float eps, const Tensor& out) = 0;

  // out = x · wᵀ (+ bias). x [n, in], w [out_features, in], bias [out_features] or empty,
  // out [n, out_features]. out must not alias x.
  virtual absl::Status Linear(const Tensor& x, const Tensor& w, const Tensor& bias,
                              const Tensor& out) = 0;

  // Rotates q [n, heads, head_dim] and k [n, kv_heads, head_dim] in place at i32 positions [n],
  // pairing dimensions (i, i + head_dim/2) with angle pos * inv_freq[i]; inv_freq f32 [head_dim/2].
  virtual absl::Status Rope(const Tensor& q, const Tensor& k, const Tensor& positions,
                            const Tensor& inv_freq) = 0;

  // out = silu(gate) * up. gate, up, out [n, ffn]; out may alias gate.
  virtual absl::Status SiluMul(const Tensor& gate, const Tensor& up, const Tensor& out) = 0;

  // Writes new keys and values into their KV slots. k, v [n, kv_heads, head_dim]; slots i32 [n]
  // (block_id * block_tokens + offset); kv_layer [num_blocks, 2, block_tokens, kv_heads, head_dim]
  // flattened to 4 dims as [num_blocks * 2, block_tokens, kv_heads, head_dim].
  virtual absl::Status WriteKv(const Tensor& k, const Tensor& v, const Tensor& slots,
                               const Tensor& kv_layer) = 0;

  // Multi-head attention with GQA over the paged KV of each sequence in `batch`.
  // q [n, heads, head_dim], out [n, heads, head_dim]; kv_layer as in WriteKv.
  virtual absl::Status Attention(const Tensor& q, const Tensor& kv_layer,
                                 const AttentionBatch& batch, const Tensor& out) = 0;

  // out[i, :] = x[rows[i], :]. x [n, d], rows i32 [m], out [m, d].
  virtual absl::Status GatherRows(const Tensor& x, const Tensor& rows, const Tensor& out) = 0;
};

// Creates the backend for `device`. Returns kUnimplemented for kCuda when the binary was built
// without the CUDA backend or it does not exist yet, kUnavailable when no GPU is present.
absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(Device device);

}  // namespace sparseserve::kernels

#endif  // SPARSESERVE_KERNELS_BACKEND_H_
