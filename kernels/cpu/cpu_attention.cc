// CpuBackend::Attention — the reference paged GQA attention (fp32, exact softmax per row).
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "common/core/status.h"
#include "kernels/attention_plan_check.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_checks.h"

namespace sparseserve::kernels {

using cpu_internal::CheckTensor;

absl::Status CpuBackend::PlanAttention(const Tensor& q, const Tensor& kv_layer,
                                       const AttentionBatch& batch) {
  SS_RETURN_IF_ERROR(CheckTensor(q, DType::kF32, 3, "Attention", "q"));
  SS_RETURN_IF_ERROR(CheckTensor(kv_layer, DType::kF32, 4, "Attention", "kv_layer"));
  const int64_t kv_heads = kv_layer.dim(2);
  if (kv_layer.dim(3) != q.dim(2) || kv_heads == 0 || q.dim(1) % kv_heads != 0 ||
      kv_layer.dim(1) != batch.block_tokens) {
    return absl::InvalidArgumentError(absl::StrCat("Attention: shape mismatch q ", q.DebugString(),
                                                   " kv_layer ", kv_layer.DebugString(),
                                                   " block_tokens ", batch.block_tokens));
  }
  const int64_t num_blocks = kv_layer.dim(0) / 2;
  for (size_t i = 0; i < batch.sequences.size(); ++i) {
    SS_RETURN_IF_ERROR(ValidateSequenceAttention(batch.sequences[i], q.dim(0), batch.block_tokens,
                                                 num_blocks, i, "CPU"));
  }
  return absl::OkStatus();
}

absl::Status CpuBackend::Attention(const Tensor& q, const Tensor& kv_layer,
                                   const AttentionBatch& batch, const Tensor& out) {
  // The reference re-checks every call: it has no device plan to keep.
  SS_RETURN_IF_ERROR(PlanAttention(q, kv_layer, batch));
  SS_RETURN_IF_ERROR(CheckTensor(out, DType::kF32, 3, "Attention", "out"));
  if (!(out.shape() == q.shape())) {
    return absl::InvalidArgumentError(
        absl::StrCat("Attention: out ", out.DebugString(), " differs from q ", q.DebugString()));
  }
  const int64_t num_heads = q.dim(1);
  const int64_t hd = q.dim(2);
  const int64_t kv_heads = kv_layer.dim(2);
  const int64_t group = num_heads / kv_heads;
  const float scale = batch.scale > 0 ? batch.scale : 1.0f / std::sqrt(static_cast<float>(hd));
  const int64_t bt = batch.block_tokens;
  const int64_t token_stride = kv_heads * hd;  // floats between consecutive tokens of a block
  const float* kv = kv_layer.data<float>();

  // Work items: (sequence, query row, kv head) — one item computes the `group` query heads that
  // share a kv head, so each key/value row is read once per group.
  struct Item {
    int32_t seq;
    int32_t row;
  };
  std::vector<Item> items;
  for (size_t s = 0; s < batch.sequences.size(); ++s) {
    for (int32_t r = 0; r < batch.sequences[s].q_len; ++r)
      items.push_back({static_cast<int32_t>(s), r});
  }
  const int64_t num_items = static_cast<int64_t>(items.size()) * kv_heads;
  pool_->ParallelFor(num_items, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> scores;
    std::vector<float> acc(group * hd);
    std::vector<float> qs(group * hd);
    for (int64_t it = begin; it < end; ++it) {
      const Item item = items[it / kv_heads];
      const int64_t kvh = it % kv_heads;
      const SequenceAttention& seq = batch.sequences[item.seq];
      const int32_t pos =
          seq.q_positions.empty() ? seq.kv_len - seq.q_len + item.row : seq.q_positions[item.row];
      const int64_t num_keys = pos + 1;  // causal: keys 0..pos
      const int64_t row = seq.q_begin + item.row;
      scores.resize(group * num_keys);
      // The group's query heads, pre-scaled, contiguous [group][hd].
      for (int64_t g = 0; g < group; ++g) {
        const float* qh = q.data<float>() + (row * num_heads + kvh * group + g) * hd;
        for (int64_t d = 0; d < hd; ++d) qs[g * hd + d] = qh[d] * scale;
      }
      // Walk the block table block by block (no per-key division).
      for (int64_t b0 = 0; b0 < num_keys; b0 += bt) {
        const int64_t count = std::min<int64_t>(bt, num_keys - b0);
        const float* kblock =
            kv + (seq.block_table[b0 / bt] * 2 + 0) * bt * token_stride + kvh * hd;
        for (int64_t t = 0; t < count; ++t) {
          const float* k = kblock + t * token_stride;
          for (int64_t g = 0; g < group; ++g) {
            const float* qg = qs.data() + g * hd;
            float dot = 0;
            for (int64_t d = 0; d < hd; ++d) dot += qg[d] * k[d];
            scores[g * num_keys + b0 + t] = dot;
          }
        }
      }
      for (int64_t g = 0; g < group; ++g) {
        float* s = scores.data() + g * num_keys;
        const float m = *std::max_element(s, s + num_keys);
        float sum = 0;
        for (int64_t p = 0; p < num_keys; ++p) {
          s[p] = std::exp(s[p] - m);
          sum += s[p];
        }
        const float inv = 1.0f / sum;
        for (int64_t p = 0; p < num_keys; ++p) s[p] *= inv;
      }
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t b0 = 0; b0 < num_keys; b0 += bt) {
        const int64_t count = std::min<int64_t>(bt, num_keys - b0);
        const float* vblock =
            kv + (seq.block_table[b0 / bt] * 2 + 1) * bt * token_stride + kvh * hd;
        for (int64_t t = 0; t < count; ++t) {
          const float* v = vblock + t * token_stride;
          for (int64_t g = 0; g < group; ++g) {
            const float w = scores[g * num_keys + b0 + t];
            float* a = acc.data() + g * hd;
            for (int64_t d = 0; d < hd; ++d) a[d] += w * v[d];
          }
        }
      }
      for (int64_t g = 0; g < group; ++g) {
        float* o = out.data<float>() + (row * num_heads + kvh * group + g) * hd;
        std::copy(acc.begin() + g * hd, acc.begin() + (g + 1) * hd, o);
      }
    }
  });
  return absl::OkStatus();
}

}  // namespace sparseserve::kernels
