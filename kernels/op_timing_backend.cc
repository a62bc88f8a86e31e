#include "kernels/op_timing_backend.h"

#include "absl/strings/str_cat.h"
#include "common/core/status.h"

namespace sparseserve::kernels {

template <typename Op>
absl::Status OpTimingBackend::Timed(const std::string& name, Op op) {
  if (!enabled_) return op();
  SS_RETURN_IF_ERROR(inner_->Synchronize());
  const auto start = std::chrono::steady_clock::now();
  SS_RETURN_IF_ERROR(op());
  SS_RETURN_IF_ERROR(inner_->Synchronize());
  OpTotal& total = totals_[name];
  total.calls += 1;
  total.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return absl::OkStatus();
}

absl::StatusOr<Tensor> OpTimingBackend::Allocate(DType dtype, Shape shape) {
  absl::StatusOr<Tensor> out;
  SS_RETURN_IF_ERROR(Timed("Allocate", [&] {
    out = inner_->Allocate(dtype, shape);
    return out.status();
  }));
  return out;
}

absl::Status OpTimingBackend::CopyFromHost(const Tensor& src, const Tensor& dst) {
  return Timed("CopyFromHost", [&] { return inner_->CopyFromHost(src, dst); });
}

absl::Status OpTimingBackend::CopyToHost(const Tensor& src, const Tensor& dst) {
  return Timed("CopyToHost", [&] { return inner_->CopyToHost(src, dst); });
}

absl::Status OpTimingBackend::Copy(const Tensor& src, const Tensor& dst) {
  return Timed("Copy", [&] { return inner_->Copy(src, dst); });
}

absl::Status OpTimingBackend::FillUniform(const Tensor& t, uint64_t seed, float lo, float hi) {
  return Timed("FillUniform", [&] { return inner_->FillUniform(t, seed, lo, hi); });
}

absl::Status OpTimingBackend::Embedding(const Tensor& table, const Tensor& ids, const Tensor& out) {
  return Timed("Embedding", [&] { return inner_->Embedding(table, ids, out); });
}

absl::Status OpTimingBackend::RmsNorm(const Tensor& x, const Tensor& weight, float eps,
                                      const Tensor& out) {
  return Timed("RmsNorm", [&] { return inner_->RmsNorm(x, weight, eps, out); });
}

absl::Status OpTimingBackend::AddRmsNorm(const Tensor& residual, const Tensor& x,
                                         const Tensor& weight, float eps, const Tensor& out) {
  return Timed("AddRmsNorm", [&] { return inner_->AddRmsNorm(residual, x, weight, eps, out); });
}

absl::Status OpTimingBackend::Linear(const Tensor& x, const Tensor& w, const Tensor& bias,
                                     const Tensor& out) {
  // Per GEMM shape: the projections differ by orders of magnitude.
  return Timed(absl::StrCat("Linear ", x.dim(0), "x", x.dim(1), "x", w.dim(0)),
               [&] { return inner_->Linear(x, w, bias, out); });
}

absl::Status OpTimingBackend::Rope(const Tensor& q, const Tensor& k, const Tensor& positions,
                                   const Tensor& inv_freq) {
  return Timed("Rope", [&] { return inner_->Rope(q, k, positions, inv_freq); });
}

absl::Status OpTimingBackend::SiluMul(const Tensor& gate, const Tensor& up, const Tensor& out) {
  return Timed("SiluMul", [&] { return inner_->SiluMul(gate, up, out); });
}

absl::Status OpTimingBackend::LinearSiluMul(const Tensor& x, const Tensor& w_gate_up,
                                            const Tensor& gate_up, const Tensor& out) {
  return Timed(absl::StrCat("LinearSiluMul ", x.dim(0), "x", x.dim(1), "x", w_gate_up.dim(0)),
               [&] { return inner_->LinearSiluMul(x, w_gate_up, gate_up, out); });
}

absl::Status OpTimingBackend::LinearRopeWriteKv(const Tensor& x, const Tensor& w_qkv,
                                                const Tensor& bias, const Tensor& qkv,
                                                const Tensor& positions, const Tensor& inv_freq,
                                                const Tensor& slots, const Tensor& q,
                                                const Tensor& kv_layer) {
  return Timed(absl::StrCat("LinearRopeWriteKv ", x.dim(0), "x", x.dim(1), "x", w_qkv.dim(0)), [&] {
    return inner_->LinearRopeWriteKv(x, w_qkv, bias, qkv, positions, inv_freq, slots, q, kv_layer);
  });
}

absl::Status OpTimingBackend::WriteKv(const Tensor& k, const Tensor& v, const Tensor& slots,
                                      const Tensor& kv_layer) {
  return Timed("WriteKv", [&] { return inner_->WriteKv(k, v, slots, kv_layer); });
}

absl::Status OpTimingBackend::SupportsAttention(const AttentionPattern& pattern,
                                                int head_dim) const {
  return inner_->SupportsAttention(pattern, head_dim);
}

absl::Status OpTimingBackend::BuildAttentionIndex(const AttentionPlan& plan, const Tensor& q,
                                                  const Tensor& kv_layer, int layer) {
  return Timed("BuildAttentionIndex",
               [&] { return inner_->BuildAttentionIndex(plan, q, kv_layer, layer); });
}

absl::Status OpTimingBackend::Attention(const AttentionPlan& plan, const Tensor& q,
                                        const Tensor& kv_layer, int layer, const Tensor& out) {
  return Timed("Attention", [&] { return inner_->Attention(plan, q, kv_layer, layer, out); });
}

absl::Status OpTimingBackend::ReadKv(const Tensor& kv_layer, const Tensor& slots, const Tensor& k,
                                     const Tensor& v) {
  return Timed("ReadKv", [&] { return inner_->ReadKv(kv_layer, slots, k, v); });
}

absl::Status OpTimingBackend::MoveKvRows(absl::Span<const Tensor> kv_layers,
                                         absl::Span<const int32_t> src,
                                         absl::Span<const int32_t> dst) {
  return Timed("MoveKvRows", [&] { return inner_->MoveKvRows(kv_layers, src, dst); });
}

absl::Status OpTimingBackend::GatherRows(const Tensor& x, const Tensor& rows, const Tensor& out) {
  return Timed("GatherRows", [&] { return inner_->GatherRows(x, rows, out); });
}

absl::Status OpTimingBackend::RelativeL2Error(const Tensor& actual, const Tensor& expected,
                                              const Tensor& ranges, const Tensor& out) {
  return Timed("RelativeL2Error",
               [&] { return inner_->RelativeL2Error(actual, expected, ranges, out); });
}

absl::StatusOr<AttentionPlan> OpTimingBackend::PlanAttention(const AttentionBatch& batch,
                                                             const AttentionShape& shape,
                                                             AttentionWorkspace& workspace) {
  absl::StatusOr<AttentionPlan> plan;
  const absl::Status timed = Timed("PlanAttention", [&] {
    plan = inner_->PlanAttention(batch, shape, workspace);
    return plan.status();
  });
  if (!timed.ok()) return timed;
  return plan;
}

absl::StatusOr<std::unique_ptr<StepGraph>> OpTimingBackend::CaptureGraph(
    const std::function<absl::Status()>& record) {
  // Timing synchronises around every op, which a capture forbids: profiled steps run eagerly.
  if (enabled_) return absl::UnimplementedError("CaptureGraph: op timing is on");
  return inner_->CaptureGraph(record);
}

absl::Status OpTimingBackend::LaunchGraph(const StepGraph& graph) {
  // One graph hides its ops' times: the caller runs the step op by op instead.
  if (enabled_) return absl::UnimplementedError("LaunchGraph: op timing is on");
  return inner_->LaunchGraph(graph);
}

absl::Status OpTimingBackend::RopeWriteKv(const Tensor& qkv, const Tensor& positions,
                                          const Tensor& inv_freq, const Tensor& slots,
                                          const Tensor& q, const Tensor& kv_layer) {
  return Timed("RopeWriteKv",
               [&] { return inner_->RopeWriteKv(qkv, positions, inv_freq, slots, q, kv_layer); });
}

absl::Status OpTimingBackend::Sample(const Tensor& logits, const SamplingBatch& batch,
                                     const Tensor& out) {
  return Timed("Sample", [&] { return inner_->Sample(logits, batch, out); });
}

absl::Status OpTimingBackend::TokenLogprobs(const Tensor& logits, const Tensor& tokens, int top_n,
                                            const Tensor& values, const Tensor& ids) {
  return Timed("TokenLogprobs",
               [&] { return inner_->TokenLogprobs(logits, tokens, top_n, values, ids); });
}

}  // namespace sparseserve::kernels
