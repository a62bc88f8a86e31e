// Backend: the one interface every numeric op of the model goes through.
//
// Model, scheduler and service code see only this interface and Tensor views; the CPU reference
// backend (kernels/cpu) and the CUDA backend (kernels/cuda) implement it with one semantics, so a
// CPU test pins what a GPU kernel must reproduce. Every op checks dtypes and shapes and returns
// kInvalidArgument on a mismatch, kUnimplemented for a dtype/pattern the backend lacks.
// Outputs may alias inputs only where an op says so. A Backend is used by one engine thread.
#ifndef SPARSESERVE_KERNELS_BACKEND_H_
#define SPARSESERVE_KERNELS_BACKEND_H_

#include <cstdint>
#include <functional>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "common/core/status.h"
#include "common/tensor/tensor.h"
#include "kernels/attention_plan.h"
#include "kernels/sampling_plan.h"

namespace sparseserve::kernels {

// A recorded run of a backend's ops (a CUDA graph), replayed by Backend::LaunchGraph. Owned by
// whoever captured it; must not outlive its backend.
class StepGraph {
 public:
  virtual ~StepGraph() = default;
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual Device device() const = 0;
  // The dtype this backend computes activations and KV in (f32 on CPU, bf16 on CUDA).
  virtual DType compute_dtype() const = 0;

  // A zero-filled tensor in this backend's memory. kResourceExhausted when out of memory.
  virtual absl::StatusOr<Tensor> Allocate(DType dtype, Shape shape) = 0;
  // As Allocate, in memory another process on this node can map: on CUDA a plain cudaMalloc
  // allocation, which CUDA IPC (UCX's cuda_ipc transport) can export and the stream-ordered
  // pool's cannot. For buffers that live as long as the backend, such as the KV cache a peer PUTs
  // into GPU to GPU. Host memory on the CPU (Allocate).
  virtual absl::StatusOr<Tensor> AllocateShareable(DType dtype, Shape shape) {
    return Allocate(dtype, shape);
  }
  // Copies a host tensor of any float dtype into `dst` (this backend's memory), converting dtype.
  virtual absl::Status CopyFromHost(const Tensor& src, const Tensor& dst) = 0;
  // Copies `src` (this backend's memory) into a host tensor of the same shape, converting dtype.
  // Waits for all queued work first, so it also reports errors of earlier asynchronous ops.
  virtual absl::Status CopyToHost(const Tensor& src, const Tensor& dst) = 0;
  // Copies between two tensors of this backend with the same shape and dtype (no conversion).
  virtual absl::Status Copy(const Tensor& src, const Tensor& dst) = 0;
  // Fills a float tensor of this backend with values uniform in [lo, hi) from a counter-based
  // generator: the same (seed, element index) gives the same value on every backend up to the
  // dtype's rounding. Used for synthetic weights and KV in benchmarks and tests.
  virtual absl::Status FillUniform(const Tensor& t, uint64_t seed, float lo, float hi) = 0;
  // Waits until every op queued so far has finished; returns the first asynchronous error.
  virtual absl::Status Synchronize() = 0;
  // Makes the calling thread's current device this backend's (a tensor-parallel rank's thread
  // calls it before its ops: CUDA launches go to the thread's current GPU). No-op on the CPU.
  virtual absl::Status BindThread() { return absl::OkStatus(); }
  // Free and total bytes of this backend's memory (kUnimplemented where it is not bounded by a
  // device, i.e. on the CPU). Sizes the KV pool from --gpu-memory-fraction.
  struct MemoryInfo {
    int64_t free_bytes = 0;   // free for this backend's allocations now
    int64_t total_bytes = 0;  // the device's capacity
    int64_t used_bytes = 0;   // held by this backend's live allocations (weights, KV, ...)
  };
  virtual absl::StatusOr<MemoryInfo> GetMemoryInfo() = 0;

  // out[i, :] = table[ids[i], :]. table [vocab, hidden], ids i32 [n], out [n, hidden] (in the
  // compute dtype or f32: the model keeps its residual stream in f32).
  // kInvalidArgument if an id is outside [0, vocab).
  virtual absl::Status Embedding(const Tensor& table, const Tensor& ids, const Tensor& out) = 0;

  // out = x / rms(x) * weight, per row. x, out [n, d]; weight [d]. out may alias x. x may be f32
  // (the residual stream) while out is in the compute dtype.
  virtual absl::Status RmsNorm(const Tensor& x, const Tensor& weight, float eps,
                               const Tensor& out) = 0;

  // residual += x, then out = RmsNorm(residual) (the pre-norm transformer's fused step).
  // residual, x, out [n, d]; out may alias x. residual may be f32: summing every sub-block's
  // output into a bf16 residual would round away its low bits layer after layer.
  virtual absl::Status AddRmsNorm(const Tensor& residual, const Tensor& x, const Tensor& weight,
                                  float eps, const Tensor& out) = 0;

  // out = x · wᵀ (+ bias). x [n, in], w [out_features, in], bias [out_features] or empty,
  // out [n, out_features]. out must not alias x. out may be f32 while x and w are in the compute
  // dtype (the logits: greedy argmax must not see bf16 ties).
  virtual absl::Status Linear(const Tensor& x, const Tensor& w, const Tensor& bias,
                              const Tensor& out) = 0;

  // Rotates q [n, heads, head_dim] and k [n, kv_heads, head_dim] in place at i32 positions [n],
  // pairing dimensions (i, i + head_dim/2) with angle pos * inv_freq[i]; inv_freq f32 [head_dim/2].
  virtual absl::Status Rope(const Tensor& q, const Tensor& k, const Tensor& positions,
                            const Tensor& inv_freq) = 0;

  // out = silu(gate) * up. gate, up, out [n, ffn]; out may alias gate. gate and up may be column
  // ranges of a wider tensor (rows strided, columns contiguous): the model reads them from the
  // fused gate/up projection's output.
  virtual absl::Status SiluMul(const Tensor& gate, const Tensor& up, const Tensor& out) = 0;

  // out = silu(x · w_gateᵀ) · (x · w_upᵀ): the SwiGLU feed-forward's first half. w_gate_up
  // [2 * ffn, in] holds the gate rows then the up rows; gate_up [n, 2 * ffn] is scratch the
  // backend may use (this default writes the projection there, then SiluMul reads it); out
  // [n, ffn]. Backends that fuse the two must give the same values.
  virtual absl::Status LinearSiluMul(const Tensor& x, const Tensor& w_gate_up,
                                     const Tensor& gate_up, const Tensor& out) {
    const int64_t ffn = out.ndim() == 2 ? out.dim(1) : 0;
    if (gate_up.ndim() != 2 || gate_up.dim(1) != 2 * ffn) {
      return absl::InvalidArgumentError(absl::StrCat("LinearSiluMul: gate_up ",
                                                     gate_up.DebugString(), " must be [n, 2 * ",
                                                     ffn, "] for out ", out.DebugString()));
    }
    SS_RETURN_IF_ERROR(Linear(x, w_gate_up, Tensor(), gate_up));
    return SiluMul(gate_up.Slice(1, 0, ffn), gate_up.Slice(1, ffn, 2 * ffn), out);
  }

  // The attention block's input side as one op: qkv = x · w_qkvᵀ (+ bias), then
  // RopeWriteKv(qkv, positions, inv_freq, slots, q, kv_layer). qkv is scratch the backend may skip
  // (this default writes it); a fused backend must give the same q and K/V.
  virtual absl::Status LinearRopeWriteKv(const Tensor& x, const Tensor& w_qkv, const Tensor& bias,
                                         const Tensor& qkv, const Tensor& positions,
                                         const Tensor& inv_freq, const Tensor& slots,
                                         const Tensor& q, const Tensor& kv_layer) {
    SS_RETURN_IF_ERROR(Linear(x, w_qkv, bias, qkv));
    return RopeWriteKv(qkv, positions, inv_freq, slots, q, kv_layer);
  }

  // Writes new keys and values into their KV slots. k, v [n, kv_heads, head_dim]; slots i32 [n]
  // (block_id * block_tokens + offset); kv_layer [num_blocks, 2, block_tokens, kv_heads, head_dim]
  // flattened to 4 dims as [num_blocks * 2, block_tokens, kv_heads, head_dim].
  virtual absl::Status WriteKv(const Tensor& k, const Tensor& v, const Tensor& slots,
                               const Tensor& kv_layer) = 0;

  // Rope then WriteKv on the packed output of a fused QKV projection, in one pass: qkv
  // [n, (heads + 2 * kv_heads) * head_dim] holds each row's queries, keys and values in that
  // order; the rotated queries go to q [n, heads, head_dim], the rotated keys and the values into
  // their KV slots. positions, inv_freq and slots as in Rope and WriteKv.
  virtual absl::Status RopeWriteKv(const Tensor& qkv, const Tensor& positions,
                                   const Tensor& inv_freq, const Tensor& slots, const Tensor& q,
                                   const Tensor& kv_layer) = 0;

  // kOk when this backend runs `pattern` at `head_dim`; kUnimplemented naming the method or the
  // size it lacks. The engine asks before it builds a step, so an unsupported request fails
  // with a clear error instead of deep inside a forward.
  virtual absl::Status SupportsAttention(const AttentionPattern& pattern, int head_dim) const = 0;

  // Attention's per-step work (attention_plan.h): checks `batch` against `shape` (sizes, block
  // ids, masks, pattern parameters; kInvalidArgument naming the sequence, kUnimplemented as
  // SupportsAttention) and lays its index arrays into `workspace` (growing it, outside a graph
  // capture only). Runs on the host before a step (before LaunchGraph for a replayed step).
  virtual absl::StatusOr<AttentionPlan> PlanAttention(const AttentionBatch& batch,
                                                      const AttentionShape& shape,
                                                      AttentionWorkspace& workspace) = 0;

  // The per-layer index-building step the model runs between RopeWriteKv and Attention: methods
  // whose indices depend on the layer's queries and keys (MInference, TokenSelect) compute them
  // here, on the device, into the plan's workspace. Dense and sliding-window attention need no
  // index, so for them this only checks the tensors. Graph-safe.
  virtual absl::Status BuildAttentionIndex(const AttentionPlan& plan, const Tensor& q,
                                           const Tensor& kv_layer, int layer) = 0;

  // Multi-head attention with GQA over the paged KV of each planned sequence, for layer `layer`.
  // q [n, heads, head_dim], out [n, heads, head_dim]; kv_layer as in WriteKv. Allocation-free
  // and graph-safe. kInvalidArgument when the tensors do not match the plan's shape.
  virtual absl::Status Attention(const AttentionPlan& plan, const Tensor& q, const Tensor& kv_layer,
                                 int layer, const Tensor& out) = 0;

  // WriteKv's inverse: k, v [n, kv_heads, head_dim] = the keys and values at slots i32 [n].
  virtual absl::Status ReadKv(const Tensor& kv_layer, const Tensor& slots, const Tensor& k,
                              const Tensor& v) = 0;

  // Moves KV rows between slots in every layer of `kv_layers` (each as in WriteKv): the keys and
  // values at slot src[i] go to slot dst[i], every move reading the values from before the call
  // (a speculative commit keeps its accepted rows). REQUIRES: no move reads a slot an earlier
  // move writes (src[i] != dst[j] for j < i) — true of a commit, whose kept rows move down in
  // order. This default runs ReadKv and WriteKv per layer through scratch tensors; a backend may
  // move every layer in one pass.
  virtual absl::Status MoveKvRows(absl::Span<const Tensor> kv_layers, absl::Span<const int32_t> src,
                                  absl::Span<const int32_t> dst);

  // out[i, :] = x[rows[i], :]. x [n, d], rows i32 [m], out [m, d].
  virtual absl::Status GatherRows(const Tensor& x, const Tensor& rows, const Tensor& out) = 0;

  // The shadow-dense quality monitor's comparison: out[i] = ||a[R_i] - b[R_i]|| / ||b[R_i]||
  // (Frobenius norms, f32 accumulation) over the rows R_i = [ranges[i][0], ranges[i][0] +
  // ranges[i][1]) of `actual` and `expected`, all their columns. 0 when the rows are equal
  // (whatever their norm); 1 when `expected` is zero there but `actual` is not. actual, expected
  // [n, ...] (same shape, compute dtype); ranges i32 [k, 2] (first row, row count); out f32 [k].
  // Allocation-free and graph-safe. kInvalidArgument for shapes or dtypes that do not match.
  virtual absl::Status RelativeL2Error(const Tensor& actual, const Tensor& expected,
                                       const Tensor& ranges, const Tensor& out) = 0;

  // Step graphs: `record` queues a forward step's ops once and they are captured into a graph
  // instead of running; LaunchGraph then replays them in one launch (a decode step has ~15 small
  // ops per layer, and launching them one by one leaves the GPU idle between them). A replay
  // reads the same tensors the capture saw, so the caller rewrites their contents (token ids,
  // positions, slots, via CopyFromHost) and plans the attention into the same workspace before
  // each launch. Inside
  // `record` no op may allocate, copy to or from the host or synchronise (they fail with
  // kFailedPrecondition, and so does the capture). kUnimplemented on backends without graphs
  // (the CPU) and on the CUDA backend's legacy-stream mode.
  virtual absl::StatusOr<std::unique_ptr<StepGraph>> CaptureGraph(
      const std::function<absl::Status()>& record) = 0;
  // Replays `graph` (from this backend's CaptureGraph) after the work queued so far. The caller
  // keeps every buffer the capture read alive and in place (an attention workspace that grew,
  // see AttentionWorkspace::generation, means capturing again).
  virtual absl::Status LaunchGraph(const StepGraph& graph) = 0;
  // out[i] = the token row i of `logits` samples under batch.rows[i] (sampling_plan.h: penalty,
  // greedy or temperature, top-k, top-p, min-p and the row's draw), the whole pipeline on the
  // backend, so a step returns token ids instead of [rows, vocab] logits. Every backend picks the
  // token kernels/sampling_reference.h's SampleRow picks. logits f32 [m, vocab] (not modified),
  // out i32 [m]. kInvalidArgument for a shape or dtype mismatch and as ValidateSamplingBatch
  // (kernels/sampling_plan_check.h): rows != m, bad offsets, ids outside [0, vocab), bad knobs.
  virtual absl::Status Sample(const Tensor& logits, const SamplingBatch& batch,
                              const Tensor& out) = 0;
  // Log probabilities of sampled tokens (the OpenAI API's logprobs), computed where the logits
  // are, so a step still copies only a few numbers per row to the host. For row i, over the raw
  // logits (no penalty, temperature or filter; NaN read as -inf; kernels::TokenLogprobsRow is the
  // reference): values[i, 0] = log_softmax(logits[i])[tokens[i]]; for k < top_n, ids[i, k] = the
  // id of the k-th largest logit (larger first, lower id on ties) and values[i, 1 + k] its log
  // probability. logits f32 [m, vocab], tokens i32 [m] (each in [0, vocab)), values f32
  // [m, >= 1 + top_n], ids i32 [m, >= max(top_n, 1)]; kInvalidArgument for a shape or dtype
  // mismatch, or top_n outside [0, min(kMaxTopLogprobs, vocab)].
  virtual absl::Status TokenLogprobs(const Tensor& logits, const Tensor& tokens, int top_n,
                                     const Tensor& values, const Tensor& ids) = 0;
};

// Plans `batch` into a workspace of its own and runs it for one layer: for tests and one-off
// calls (a forward step plans once and runs every layer with one plan).
absl::Status RunAttention(Backend& backend, const AttentionBatch& batch, const Tensor& q,
                          const Tensor& kv_layer, const Tensor& out);

// Creates the backend for `device` (for kCuda on GPU `ordinal`; a tensor-parallel worker makes
// one per rank). Returns kUnimplemented for kCuda when the binary was built without the CUDA
// backend, kUnavailable when no GPU is present, kInvalidArgument when GPU `ordinal` is not.
absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(Device device, int ordinal = 0);

}  // namespace sparseserve::kernels

#endif  // SPARSESERVE_KERNELS_BACKEND_H_
