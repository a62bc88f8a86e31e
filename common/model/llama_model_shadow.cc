// LlamaModel's shadow-dense quality monitor (set_shadow_dense): which steps are shadowed, their
// dense reference batch, and reading their errors back. RunLayers runs the per-layer part.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/core/status.h"
#include "common/model/llama_model.h"

namespace sparseserve::model {

void LlamaModel::set_shadow_dense(double rate, uint64_t seed) {
  const bool was_on = shadow_rate_ > 0;
  shadow_rate_ = std::clamp(rate, 0.0, 1.0);
  shadow_rng_.seed(seed);
  if (was_on == (shadow_rate_ > 0)) return;  // a new rate keeps the buffers and graphs
  // Step buffers gain (or lose) the shadow tensors; graphs captured with the old ones go.
  graphs_.Clear();
  graph_step_ = StepBuffers();
  step_ = StepBuffers();
}

void LlamaModel::PlanShadow(StepInputs& in) {
  if (shadow_rate_ <= 0) return;
  const auto sparse = [](const kernels::SequenceAttention& sa) {
    return sa.pattern.kind != kernels::AttentionMethodKind::kDense;
  };
  if (std::none_of(in.attn.sequences.begin(), in.attn.sequences.end(), sparse)) return;
  // 53 random bits as a double in [0, 1): the same draws on every standard library.
  const double draw = static_cast<double>(shadow_rng_() >> 11) * 0x1.0p-53;
  if (draw >= shadow_rate_) return;
  in.shadow = true;
  in.shadow_attn.block_tokens = in.attn.block_tokens;
  in.shadow_attn.scale = in.attn.scale;
  for (size_t s = 0; s < in.attn.sequences.size(); ++s) {
    const kernels::SequenceAttention& sa = in.attn.sequences[s];
    if (!sparse(sa)) continue;
    // Only the sparse sequences: dense ones would be recomputed for nothing. (On the GPU the
    // reference's split-KV chunks then depend on the sparse sequences alone, so a window covering
    // everything may differ from the main pass in the last bf16 bit when dense sequences share
    // the step; alone, or on the CPU, it is exactly 0.)
    kernels::SequenceAttention dense = sa;
    dense.pattern = kernels::AttentionPattern();
    dense.state_slot = -1;  // dense needs no state (the shadow batch carries none)
    in.shadow_attn.sequences.push_back(std::move(dense));
    in.shadow_ranges.insert(in.shadow_ranges.end(), {sa.q_begin, sa.q_len});
    ShadowAttentionError record;
    record.sequence = static_cast<int>(s);
    record.method = sa.pattern.kind;
    in.shadow_records.push_back(record);
  }
}

absl::StatusOr<LlamaModel::ShadowPass> LlamaModel::PrepareShadow(
    const StepInputs& in, const StepBuffers& buffers, const kernels::AttentionPlan& plan) {
  const int64_t n = static_cast<int64_t>(in.ids.size());
  const int64_t k = static_cast<int64_t>(in.shadow_records.size());
  if (buffers.shadow_out.empty() || buffers.shadow_out.dim(0) < n || k > n) {
    return absl::InternalError(absl::StrCat("shadow monitor: step buffers of ", buffers.rows,
                                            " rows have no room for ", n, " rows, ", k,
                                            " shadowed sequences"));
  }
  ShadowPass pass;
  pass.plan = &plan;
  pass.count = k;
  pass.out = buffers.shadow_out.Slice(0, 0, n);
  pass.ranges = buffers.shadow_ranges.Slice(0, 0, k);
  pass.errors = buffers.shadow_errors.Slice(0, 0, config_.num_layers * k);
  Tensor host = Tensor::Zeros(DType::kI32, {k, 2});
  std::copy(in.shadow_ranges.begin(), in.shadow_ranges.end(), host.data<int32_t>());
  SS_RETURN_IF_ERROR(backend_->CopyFromHost(host, pass.ranges));
  shadow_pending_ = in.shadow_records;
  shadow_pending_errors_ = pass.errors;
  return pass;
}

absl::Status LlamaModel::ReadShadowErrors() {
  if (shadow_pending_.empty()) return absl::OkStatus();
  const int64_t k = static_cast<int64_t>(shadow_pending_.size());
  Tensor host = Tensor::Zeros(DType::kF32, shadow_pending_errors_.shape());
  SS_RETURN_IF_ERROR(backend_->CopyToHost(shadow_pending_errors_, host));
  shadow_errors_.clear();
  for (int l = 0; l < config_.num_layers; ++l) {
    for (int64_t i = 0; i < k; ++i) {
      ShadowAttentionError e = shadow_pending_[i];
      e.layer = l;
      e.relative_l2 = host.data<float>()[l * k + i];
      shadow_errors_.push_back(e);
    }
  }
  shadow_pending_.clear();
  shadow_pending_errors_ = Tensor();
  return absl::OkStatus();
}

}  // namespace sparseserve::model
