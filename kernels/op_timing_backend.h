// OpTimingBackend: a Backend decorator that, while enabled, times every op (waiting for the device
// before and after it) and sums the seconds per op name — where a forward step's time goes, for
// `sparseserve bench model --op-profile`. Disabled, it only forwards (one virtual call per op).
// Synchronising around each op removes the overlap of launches with device work, so the totals
// are device time per op plus launch latency, not the step time. Single-threaded like a Backend.
#ifndef SPARSESERVE_KERNELS_OP_TIMING_BACKEND_H_
#define SPARSESERVE_KERNELS_OP_TIMING_BACKEND_H_

#include <chrono>
#include <map>
#include <string>

#include "kernels/backend.h"

namespace sparseserve::kernels {

class OpTimingBackend final : public Backend {
 public:
  struct OpTotal {
    int64_t calls = 0;
    double seconds = 0;
  };

  explicit OpTimingBackend(Backend* inner) : inner_(inner) {}  // borrowed

  void set_enabled(bool enabled) { enabled_ = enabled; }
  void Reset() { totals_.clear(); }
  const std::map<std::string, OpTotal>& totals() const { return totals_; }

  Device device() const override { return inner_->device(); }
  DType compute_dtype() const override { return inner_->compute_dtype(); }
  absl::StatusOr<Tensor> Allocate(DType dtype, Shape shape) override;
  absl::StatusOr<Tensor> AllocateShareable(DType dtype, Shape shape) override {
    return inner_->AllocateShareable(dtype, shape);  // once per buffer: not worth a timing row
  }
  absl::Status CopyFromHost(const Tensor& src, const Tensor& dst) override;
  absl::Status CopyToHost(const Tensor& src, const Tensor& dst) override;
  absl::Status Copy(const Tensor& src, const Tensor& dst) override;
  absl::Status FillUniform(const Tensor& t, uint64_t seed, float lo, float hi) override;
  absl::Status Synchronize() override { return inner_->Synchronize(); }
  absl::Status BindThread() override { return inner_->BindThread(); }
  absl::StatusOr<MemoryInfo> GetMemoryInfo() override { return inner_->GetMemoryInfo(); }
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
  absl::Status BuildAttentionIndex(const AttentionPlan& plan, const Tensor& q,
                                   const Tensor& kv_layer, int layer) override;
  absl::Status Attention(const AttentionPlan& plan, const Tensor& q, const Tensor& kv_layer,
                         int layer, const Tensor& out) override;
  absl::Status ReadKv(const Tensor& kv_layer, const Tensor& slots, const Tensor& k,
                      const Tensor& v) override;
  absl::Status MoveKvRows(absl::Span<const Tensor> kv_layers, absl::Span<const int32_t> src,
                          absl::Span<const int32_t> dst) override;
  absl::StatusOr<AttentionPlan> PlanAttention(const AttentionBatch& batch,
                                              const AttentionShape& shape,
                                              AttentionWorkspace& workspace) override;
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
  // Runs `op`, timing it under `name` when enabled.
  template <typename Op>
  absl::Status Timed(const std::string& name, Op op);

  Backend* inner_;
  bool enabled_ = false;
  std::map<std::string, OpTotal> totals_;
};

}  // namespace sparseserve::kernels

#endif  // SPARSESERVE_KERNELS_OP_TIMING_BACKEND_H_
