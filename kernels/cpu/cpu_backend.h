// CpuBackend: the reference implementation of kernels::Backend (f32 math, f32 activations/KV).
//
// GEMMs go through OpenBLAS (single-threaded per call; parallelism comes from the process's one
// core::ThreadPool splitting the work), everything else is plain C++ over the pool. Every op is
// batch-invariant: a row's result is bitwise independent of the other rows of its call, so a
// verify step of k rows equals k single-row steps exactly (speculation is lossless in CI). Weights
// and activations must be f32 on this backend. Used by one engine thread at a time.
#ifndef SPARSESERVE_KERNELS_CPU_CPU_BACKEND_H_
#define SPARSESERVE_KERNELS_CPU_CPU_BACKEND_H_

#include "common/core/thread_pool.h"
#include "kernels/backend.h"
#include "kernels/sampling_reference.h"

namespace sparseserve::kernels {

class CpuBackend final : public Backend {
 public:
  // `pool` is borrowed and must outlive the backend.
  explicit CpuBackend(core::ThreadPool* pool);

  Device device() const override { return Device::kHost; }
  DType compute_dtype() const override { return DType::kF32; }
  absl::StatusOr<Tensor> Allocate(DType dtype, Shape shape) override;
  absl::Status CopyFromHost(const Tensor& src, const Tensor& dst) override;
  absl::Status CopyToHost(const Tensor& src, const Tensor& dst) override;
  absl::Status Copy(const Tensor& src, const Tensor& dst) override;
  absl::Status FillUniform(const Tensor& t, uint64_t seed, float lo, float hi) override;
  absl::Status Synchronize() override { return absl::OkStatus(); }
  absl::StatusOr<MemoryInfo> GetMemoryInfo() override;

  absl::Status Embedding(const Tensor& table, const Tensor& ids, const Tensor& out) override;
  absl::Status RmsNorm(const Tensor& x, const Tensor& weight, float eps,
                       const Tensor& out) override;
  absl::Status AddRmsNorm(const Tensor& residual, const Tensor& x, const Tensor& weight, float eps,
                          const Tensor& out) override;
  absl::Status Linear(const Tensor& x, const Tensor& w, const Tensor& bias,
                      const Tensor& out) override;
  absl::Status Rope(const Tensor& q, const Tensor& k, const Tensor& positions,
                    const Tensor& inv_freq) override;
  absl::Status SiluMul(const Tensor& gate, const Tensor& up, const Tensor& out) override;
  absl::Status WriteKv(const Tensor& k, const Tensor& v, const Tensor& slots,
                       const Tensor& kv_layer) override;
  absl::Status RopeWriteKv(const Tensor& qkv, const Tensor& positions, const Tensor& inv_freq,
                           const Tensor& slots, const Tensor& q, const Tensor& kv_layer) override;
  absl::Status SupportsAttention(const AttentionPattern& pattern, int head_dim) const override;
  absl::StatusOr<AttentionPlan> PlanAttention(const AttentionBatch& batch,
                                              const AttentionShape& shape,
                                              AttentionWorkspace& workspace) override;
  absl::Status BuildAttentionIndex(const AttentionPlan& plan, const Tensor& q,
                                   const Tensor& kv_layer, int layer) override;
  absl::Status Attention(const AttentionPlan& plan, const Tensor& q, const Tensor& kv_layer,
                         int layer, const Tensor& out) override;
  absl::Status ReadKv(const Tensor& kv_layer, const Tensor& slots, const Tensor& k,
                      const Tensor& v) override;
  absl::Status GatherRows(const Tensor& x, const Tensor& rows, const Tensor& out) override;
  absl::Status RelativeL2Error(const Tensor& actual, const Tensor& expected, const Tensor& ranges,
                               const Tensor& out) override;
  absl::StatusOr<std::unique_ptr<StepGraph>> CaptureGraph(
      const std::function<absl::Status()>& record) override;
  absl::Status LaunchGraph(const StepGraph& graph) override;
  absl::Status Sample(const Tensor& logits, const SamplingBatch& batch, const Tensor& out) override;
  absl::Status TokenLogprobs(const Tensor& logits, const Tensor& tokens, int top_n,
                             const Tensor& values, const Tensor& ids) override;

 private:
  core::ThreadPool* pool_;
  SamplingScratch sampling_scratch_;  // Sample's buffers, reused across calls
};

}  // namespace sparseserve::kernels

#endif  // SPARSESERVE_KERNELS_CPU_CPU_BACKEND_H_
