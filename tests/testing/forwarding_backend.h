// ForwardingBackend: a kernels::Backend that passes every call to another backend, for tests that
// watch or alter a few calls (override them and call the base). Borrows `inner`, which must
// outlive it. Thread-compatible like the backend it wraps.
#ifndef SPARSESERVE_TESTS_TESTING_FORWARDING_BACKEND_H_
#define SPARSESERVE_TESTS_TESTING_FORWARDING_BACKEND_H_

#include <functional>
#include <memory>

#include "kernels/backend.h"

namespace sparseserve::testing {

class ForwardingBackend : public kernels::Backend {
 public:
  explicit ForwardingBackend(kernels::Backend* inner) : inner_(inner) {}

  Device device() const override { return inner_->device(); }
  DType compute_dtype() const override { return inner_->compute_dtype(); }
  absl::StatusOr<Tensor> Allocate(DType dtype, Shape shape) override {
    return inner_->Allocate(dtype, shape);
  }
  absl::StatusOr<Tensor> AllocateShareable(DType dtype, Shape shape) override {
    return inner_->AllocateShareable(dtype, shape);
  }
  absl::Status CopyFromHost(const Tensor& src, const Tensor& dst) override {
    return inner_->CopyFromHost(src, dst);
  }
  absl::Status CopyToHost(const Tensor& src, const Tensor& dst) override {
    return inner_->CopyToHost(src, dst);
  }
  absl::Status Copy(const Tensor& src, const Tensor& dst) override {
    return inner_->Copy(src, dst);
  }
  absl::Status FillUniform(const Tensor& t, uint64_t seed, float lo, float hi) override {
    return inner_->FillUniform(t, seed, lo, hi);
  }
  absl::Status Synchronize() override { return inner_->Synchronize(); }
  absl::StatusOr<MemoryInfo> GetMemoryInfo() override { return inner_->GetMemoryInfo(); }
  absl::Status Embedding(const Tensor& table, const Tensor& ids, const Tensor& out) override {
    return inner_->Embedding(table, ids, out);
  }
  absl::Status RmsNorm(const Tensor& x, const Tensor& w, float eps, const Tensor& out) override {
    return inner_->RmsNorm(x, w, eps, out);
  }
  absl::Status AddRmsNorm(const Tensor& r, const Tensor& x, const Tensor& w, float eps,
                          const Tensor& out) override {
    return inner_->AddRmsNorm(r, x, w, eps, out);
  }
  absl::Status Linear(const Tensor& x, const Tensor& w, const Tensor& b,
                      const Tensor& out) override {
    return inner_->Linear(x, w, b, out);
  }
  absl::Status Rope(const Tensor& q, const Tensor& k, const Tensor& pos,
                    const Tensor& inv_freq) override {
    return inner_->Rope(q, k, pos, inv_freq);
  }
  absl::Status SiluMul(const Tensor& g, const Tensor& u, const Tensor& out) override {
    return inner_->SiluMul(g, u, out);
  }
  absl::Status LinearSiluMul(const Tensor& x, const Tensor& w, const Tensor& gate_up,
                             const Tensor& out) override {
    return inner_->LinearSiluMul(x, w, gate_up, out);
  }
  absl::Status LinearRopeWriteKv(const Tensor& x, const Tensor& w, const Tensor& b,
                                 const Tensor& qkv, const Tensor& positions, const Tensor& inv_freq,
                                 const Tensor& slots, const Tensor& q,
                                 const Tensor& kv_layer) override {
    return inner_->LinearRopeWriteKv(x, w, b, qkv, positions, inv_freq, slots, q, kv_layer);
  }
  absl::Status WriteKv(const Tensor& k, const Tensor& v, const Tensor& slots,
                       const Tensor& kv) override {
    return inner_->WriteKv(k, v, slots, kv);
  }
  absl::Status RopeWriteKv(const Tensor& qkv, const Tensor& pos, const Tensor& inv_freq,
                           const Tensor& slots, const Tensor& q, const Tensor& kv) override {
    return inner_->RopeWriteKv(qkv, pos, inv_freq, slots, q, kv);
  }
  absl::Status SupportsAttention(const kernels::AttentionPattern& pattern,
                                 int head_dim) const override {
    return inner_->SupportsAttention(pattern, head_dim);
  }
  absl::StatusOr<kernels::AttentionPlan> PlanAttention(
      const kernels::AttentionBatch& batch, const kernels::AttentionShape& shape,
      kernels::AttentionWorkspace& workspace) override {
    return inner_->PlanAttention(batch, shape, workspace);
  }
  absl::Status BuildAttentionIndex(const kernels::AttentionPlan& plan, const Tensor& q,
                                   const Tensor& kv, int layer) override {
    return inner_->BuildAttentionIndex(plan, q, kv, layer);
  }
  absl::Status Attention(const kernels::AttentionPlan& plan, const Tensor& q, const Tensor& kv,
                         int layer, const Tensor& out) override {
    return inner_->Attention(plan, q, kv, layer, out);
  }
  absl::Status RelativeL2Error(const Tensor& actual, const Tensor& expected, const Tensor& ranges,
                               const Tensor& out) override {
    return inner_->RelativeL2Error(actual, expected, ranges, out);
  }
  absl::Status ReadKv(const Tensor& kv, const Tensor& slots, const Tensor& k,
                      const Tensor& v) override {
    return inner_->ReadKv(kv, slots, k, v);
  }
  absl::Status MoveKvRows(absl::Span<const Tensor> kv_layers, absl::Span<const int32_t> src,
                          absl::Span<const int32_t> dst) override {
    return inner_->MoveKvRows(kv_layers, src, dst);
  }
  absl::Status GatherRows(const Tensor& x, const Tensor& rows, const Tensor& out) override {
    return inner_->GatherRows(x, rows, out);
  }
  absl::Status Sample(const Tensor& logits, const kernels::SamplingBatch& batch,
                      const Tensor& out) override {
    return inner_->Sample(logits, batch, out);
  }
  absl::Status TokenLogprobs(const Tensor& logits, const Tensor& tokens, int top_n,
                             const Tensor& values, const Tensor& ids) override {
    return inner_->TokenLogprobs(logits, tokens, top_n, values, ids);
  }
  absl::StatusOr<std::unique_ptr<kernels::StepGraph>> CaptureGraph(
      const std::function<absl::Status()>& record) override {
    return inner_->CaptureGraph(record);
  }
  absl::Status LaunchGraph(const kernels::StepGraph& graph) override {
    return inner_->LaunchGraph(graph);
  }

 private:
  kernels::Backend* inner_;  // borrowed
};

}  // namespace sparseserve::testing

#endif  // SPARSESERVE_TESTS_TESTING_FORWARDING_BACKEND_H_
