// CudaBackend: kernels::Backend on one NVIDIA Hopper GPU — bf16 weights, activations and KV with
// f32 accumulation; GEMMs through cuBLASLt, everything else through the kernels of kernels/cuda.
//
// All work is queued on one CUDA stream in call order; ops return as soon as their kernels are
// queued, and CopyToHost / Synchronize wait and surface asynchronous errors. Memory comes from the
// stream-ordered allocator (cudaMallocAsync), so the per-step activations of a forward pass cost
// no device-wide synchronisation. Used by one engine thread at a time.
#ifndef SPARSESERVE_KERNELS_CUDA_CUDA_BACKEND_H_
#define SPARSESERVE_KERNELS_CUDA_CUDA_BACKEND_H_

#include <cuda_runtime_api.h>

#include <atomic>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "kernels/backend.h"
#include "kernels/cuda/cuda_device.h"

namespace sparseserve::kernels {

namespace cuda {
class CudnnPrefill;
}  // namespace cuda
struct CudaMInferencePlan;

class CudaBackend final : public Backend {
 public:
  // Creates the backend on `info`'s device. With `use_legacy_stream`, work goes to the legacy
  // default stream (so PyTorch's default stream orders it; the C API uses this), else to a stream
  // of its own.
  static absl::StatusOr<std::unique_ptr<CudaBackend>> Create(const CudaDeviceInfo& info,
                                                             bool use_legacy_stream = false);
  ~CudaBackend() override;

  Device device() const override { return Device::kCuda; }
  DType compute_dtype() const override { return DType::kBf16; }
  absl::StatusOr<Tensor> Allocate(DType dtype, Shape shape) override;
  absl::StatusOr<Tensor> AllocateShareable(DType dtype, Shape shape) override;
  absl::Status CopyFromHost(const Tensor& src, const Tensor& dst) override;
  absl::Status CopyToHost(const Tensor& src, const Tensor& dst) override;
  absl::Status Copy(const Tensor& src, const Tensor& dst) override;
  absl::Status FillUniform(const Tensor& t, uint64_t seed, float lo, float hi) override;
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
  absl::Status LinearSiluMul(const Tensor& x, const Tensor& w_gate_up, const Tensor& gate_up,
                             const Tensor& out) override;
  absl::Status LinearRopeWriteKv(const Tensor& x, const Tensor& w_qkv, const Tensor& bias,
                                 const Tensor& qkv, const Tensor& positions, const Tensor& inv_freq,
                                 const Tensor& slots, const Tensor& q,
                                 const Tensor& kv_layer) override;
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
  // One kernel for every layer, slots passed by value (no copies, no scratch): a commit's KV
  // moves cost one launch instead of two per layer plus allocations and an upload.
  absl::Status MoveKvRows(absl::Span<const Tensor> kv_layers, absl::Span<const int32_t> src,
                          absl::Span<const int32_t> dst) override;
  absl::Status GatherRows(const Tensor& x, const Tensor& rows, const Tensor& out) override;
  absl::Status RelativeL2Error(const Tensor& actual, const Tensor& expected, const Tensor& ranges,
                               const Tensor& out) override;
  absl::StatusOr<std::unique_ptr<StepGraph>> CaptureGraph(
      const std::function<absl::Status()>& record) override;
  absl::Status LaunchGraph(const StepGraph& graph) override;
  absl::Status Sample(const Tensor& logits, const SamplingBatch& batch, const Tensor& out) override;
  absl::Status TokenLogprobs(const Tensor& logits, const Tensor& tokens, int top_n,
                             const Tensor& values, const Tensor& ids) override;

  absl::Status BindThread() override;
  absl::Status Synchronize() override;
  cudaStream_t stream() const { return stream_->stream; }
  int device_index() const { return device_idx_; }

 private:
  // Owns the stream; shared with every allocation's deleter so frees stay stream-ordered even
  // after the backend is gone.
  struct StreamHolder {
    cudaStream_t stream = nullptr;
    bool owned = false;
    ~StreamHolder();
  };
  struct GemmCache;
  struct SamplingState;
  struct MInferenceState;

  explicit CudaBackend(std::shared_ptr<StreamHolder> stream);
  absl::Status CheckEmbeddingFlag();
  // kFailedPrecondition naming `op` while a graph capture is under way (ops that allocate, copy
  // to or from the host or synchronise cannot be recorded).
  absl::Status CheckNotCapturing(const char* op) const;
  // The device records of `batch`'s kMInference sequences (cuda_minference.cc); table_begins
  // holds each sequence's offset in the plan's concatenated block tables. Uploads a config's
  // head patterns the first time it is seen (kFailedPrecondition during a graph capture).
  absl::Status PlanMInference(const AttentionBatch& batch, const AttentionShape& shape,
                              const std::vector<int32_t>& table_begins, CudaMInferencePlan* plan);

  // Layer `layer`'s TokenSelect selections (cuda_attention.cc): kInvalidArgument when a
  // selecting sequence's state slot is too small for the layer.
  absl::Status BuildTokenSelectIndex(const AttentionPlan& plan, const Tensor& q,
                                     const Tensor& kv_layer, int layer);
  // The cuDNN runner of dense prefill chunks (cudnn_prefill.h), created on first use; null when
  // $SPARSESERVE_PREFILL_ATTENTION=kernel or cuDNN cannot run here (logged once).
  cuda::CudnnPrefill* Cudnn();

  std::shared_ptr<StreamHolder> stream_;
  std::unique_ptr<GemmCache> gemm_;
  Tensor error_flag_;  // i32 [1]: set by kernels that meet invalid indices
  int sm_count_ = 0;
  int device_idx_ = 0;  // the GPU
  // Bytes held by live AllocateShareable tensors (outside the stream-ordered pool, so
  // GetMemoryInfo adds them to used_bytes). Shared with their deleters, which may run on any
  // thread after the backend is gone.
  std::shared_ptr<std::atomic<int64_t>> shareable_bytes_ =
      std::make_shared<std::atomic<int64_t>>(0);
  bool capturing_ = false;                       // inside CaptureGraph's `record`
  std::unique_ptr<SamplingState> sampling_;      // created by the first Sample call
  std::unique_ptr<MInferenceState> minference_;  // created by the first MInference plan
  std::unique_ptr<cuda::CudnnPrefill> cudnn_;
  bool cudnn_tried_ = false;
  Tensor cudnn_workspace_;  // i32 words: the largest prepared cuDNN graph's workspace
};

// The backend on GPU `ordinal` (kernels::CreateBackend(kCuda, ordinal) calls this).
absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(int ordinal = 0);

}  // namespace sparseserve::kernels

#endif  // SPARSESERVE_KERNELS_CUDA_CUDA_BACKEND_H_
