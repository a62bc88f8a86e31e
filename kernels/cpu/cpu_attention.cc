// CpuBackend attention — the reference paged GQA attention (fp32, exact softmax per row) with the
// visibility rule of kernels/attention_visibility.h. Each (row, KV head) item is computed alone,
// keys in index order, so a row's result does not depend on the other rows of its step (batch
// invariance: a verify step's rows equal the single-token steps they replace, bit for bit).
#include <algorithm>
#include <cmath>
#include <vector>

#include "common/core/status.h"
#include "kernels/attention_plan_check.h"
#include "kernels/attention_visibility.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_checks.h"
#include "kernels/cpu/cpu_minference.h"
#include "kernels/cpu/cpu_tokenselect.h"

namespace sparseserve::kernels {

using cpu_internal::CheckTensor;

absl::Status CpuBackend::SupportsAttention(const AttentionPattern& pattern, int head_dim) const {
  if (head_dim < 1) return absl::InvalidArgumentError("Attention: head_dim must be >= 1");
  return CheckPatternSupported(pattern);
}

absl::StatusOr<AttentionPlan> CpuBackend::PlanAttention(const AttentionBatch& batch,
                                                        const AttentionShape& shape,
                                                        AttentionWorkspace& workspace) {
  SS_RETURN_IF_ERROR(ValidateAttentionBatch(batch, shape));
  AttentionPlan plan;
  plan.batch = &batch;  // the reference reads the host batch directly
  plan.workspace = &workspace;
  plan.shape = shape;
  plan.scale = batch.scale > 0 ? batch.scale : 1.0f / std::sqrt(static_cast<float>(shape.head_dim));
  // The MInference index areas (written per layer by BuildAttentionIndex) and the zeroed stats.
  int64_t index_words = 0;
  cpu_internal::SparseIndexOffsets(batch, &index_words);
  if (workspace.sparse_index.numel() < index_words) {
    workspace.sparse_index = Tensor::Zeros(DType::kI32, {index_words});
    ++workspace.generation;
  }
  const int64_t stats = 2 * std::max<int64_t>(1, static_cast<int64_t>(batch.sequences.size()));
  if (workspace.sparse_stats.numel() < stats) {
    workspace.sparse_stats = Tensor::Zeros(DType::kF32, {stats});
    ++workspace.generation;
  }
  if (workspace.selection_stats.numel() < stats) {
    workspace.selection_stats = Tensor::Zeros(DType::kF32, {stats});
    ++workspace.generation;
  }
  std::fill_n(workspace.sparse_stats.data<float>(), workspace.sparse_stats.numel(), 0.0f);
  std::fill_n(workspace.selection_stats.data<float>(), workspace.selection_stats.numel(), 0.0f);
  return plan;
}

namespace {

absl::Status CheckAttentionInputs(const AttentionPlan& plan, const Tensor& q,
                                  const Tensor& kv_layer, int layer) {
  if (plan.batch == nullptr) return absl::InvalidArgumentError("Attention: empty plan");
  SS_RETURN_IF_ERROR(CheckTensor(q, DType::kF32, 3, "Attention", "q"));
  SS_RETURN_IF_ERROR(CheckTensor(kv_layer, DType::kF32, 4, "Attention", "kv_layer"));
  if (layer < 0) return absl::InvalidArgumentError("Attention: negative layer");
  const AttentionShape& shape = plan.shape;
  if (q.dim(0) != shape.num_rows || q.dim(1) != shape.num_heads || q.dim(2) != shape.head_dim ||
      kv_layer.dim(0) != 2 * shape.num_blocks || kv_layer.dim(1) != plan.batch->block_tokens ||
      kv_layer.dim(2) != shape.num_kv_heads || kv_layer.dim(3) != shape.head_dim) {
    return absl::InvalidArgumentError(
        absl::StrCat("Attention: q ", q.DebugString(), " and kv_layer ", kv_layer.DebugString(),
                     " do not match the plan (", shape.num_rows, " rows, ", shape.num_heads, "/",
                     shape.num_kv_heads, " heads, head_dim ", shape.head_dim, ")"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CpuBackend::BuildAttentionIndex(const AttentionPlan& plan, const Tensor& q,
                                             const Tensor& kv_layer, int layer) {
  SS_RETURN_IF_ERROR(CheckAttentionInputs(plan, q, kv_layer, layer));
  // Dense and sliding-window attention have no index; MInference builds one per layer and head,
  // TokenSelect selects (or reuses) one token set per layer.
  SS_RETURN_IF_ERROR(cpu_internal::BuildMInferenceIndex(plan, q, kv_layer, layer, pool_));
  return cpu_internal::BuildTokenSelectIndex(plan, q, kv_layer, layer, pool_);
}

absl::Status CpuBackend::Attention(const AttentionPlan& plan, const Tensor& q,
                                   const Tensor& kv_layer, int layer, const Tensor& out) {
  SS_RETURN_IF_ERROR(CheckAttentionInputs(plan, q, kv_layer, layer));
  SS_RETURN_IF_ERROR(CheckTensor(out, DType::kF32, 3, "Attention", "out"));
  const AttentionShape& shape = plan.shape;
  const AttentionBatch& batch = *plan.batch;
  if (!(out.shape() == q.shape())) {
    return absl::InvalidArgumentError(
        absl::StrCat("Attention: out ", out.DebugString(), " does not match q ", q.DebugString()));
  }
  const int64_t num_heads = shape.num_heads;
  const int64_t hd = shape.head_dim;
  const int64_t kv_heads = shape.num_kv_heads;
  const int64_t group = num_heads / kv_heads;
  const float scale = plan.scale;
  const int64_t bt = batch.block_tokens;
  const int64_t token_stride = kv_heads * hd;  // floats between consecutive tokens of a block
  const float* kv = kv_layer.data<float>();
  int64_t index_words = 0;
  const std::vector<int64_t> index_offsets = cpu_internal::SparseIndexOffsets(batch, &index_words);
  // TokenSelect sequences' layer areas, found and checked once (the items below read them).
  std::vector<const int32_t*> tokenselect_state(batch.sequences.size(), nullptr);
  for (size_t s = 0; s < batch.sequences.size(); ++s) {
    const SequenceAttention& seq = batch.sequences[s];
    if (seq.pattern.kind == AttentionMethodKind::kTokenSelect && seq.q_len > 0 &&
        !tokenselect::RegionsOf(seq.pattern.tokenselect, seq.q_len, seq.kv_len).dense) {
      const int32_t* state = cpu_internal::TokenSelectLayerState(batch, seq, shape, layer);
      tokenselect_state[s] = state;
      if (state == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat(
            "Attention: sequence ", s, "'s state slot is too small for TokenSelect layer ", layer));
      }
      SS_RETURN_IF_ERROR(AnnotateStatus(cpu_internal::CheckTokenSelectLists(seq, state, shape),
                                        absl::StrCat("sequence ", s, ", layer ", layer)));
    }
  }

  // Work items: (sequence, query row, kv head) — one item computes the `group` query heads that
  // share a kv head, so each key/value row is read once per group.
  struct Item {
    int32_t seq;
    int32_t row;
  };
  std::vector<Item> items;
  for (size_t s = 0; s < batch.sequences.size(); ++s) {
    for (int32_t r = 0; r < batch.sequences[s].q_len; ++r) {
      items.push_back({static_cast<int32_t>(s), r});
    }
  }
  const int64_t num_items = static_cast<int64_t>(items.size()) * kv_heads;
  pool_->ParallelFor(num_items, 1, [&](int64_t begin, int64_t end) {
    std::vector<int32_t> keys;  // visible key indices, ascending
    std::vector<float> scores;
    std::vector<float> acc(group * hd);
    std::vector<float> qs(group * hd);
    for (int64_t it = begin; it < end; ++it) {
      const Item item = items[it / kv_heads];
      const int64_t kvh = it % kv_heads;
      const SequenceAttention& seq = batch.sequences[item.seq];
      KeyVisibility vis;
      vis.q_len = seq.q_len;
      vis.kv_len = seq.kv_len;
      vis.mask = seq.mask.empty() ? nullptr : seq.mask.data();
      if (seq.pattern.kind == AttentionMethodKind::kSlidingWindow) {
        vis.window = seq.pattern.window;
        vis.sink_tokens = seq.pattern.sink_tokens;
      }
      const int64_t row = seq.q_begin + item.row;
      auto row_of = [&](int32_t k, int kv_part) {  // kv_part 0 = key, 1 = value
        return kv + ((seq.block_table[k / bt] * 2 + kv_part) * bt + k % bt) * token_stride +
               kvh * hd;
      };
      // Attends the query heads [g0, g1) of the group over `keys` into acc.
      auto attend = [&](int64_t g0, int64_t g1) {
        const int64_t num_keys = static_cast<int64_t>(keys.size());
        const int64_t ng = g1 - g0;
        std::fill(acc.begin() + g0 * hd, acc.begin() + g1 * hd, 0.0f);
        if (num_keys == 0) return;
        scores.resize(ng * num_keys);
        // The query heads, pre-scaled, contiguous [group][hd].
        for (int64_t g = g0; g < g1; ++g) {
          const float* qh = q.data<float>() + (row * num_heads + kvh * group + g) * hd;
          for (int64_t d = 0; d < hd; ++d) qs[g * hd + d] = qh[d] * scale;
        }
        for (int64_t t = 0; t < num_keys; ++t) {
          const float* k = row_of(keys[t], 0);
          for (int64_t g = g0; g < g1; ++g) {
            const float* qg = qs.data() + g * hd;
            float dot = 0;
            for (int64_t d = 0; d < hd; ++d) dot += qg[d] * k[d];
            scores[(g - g0) * num_keys + t] = dot;
          }
        }
        for (int64_t g = 0; g < ng; ++g) {
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
        for (int64_t t = 0; t < num_keys; ++t) {
          const float* v = row_of(keys[t], 1);
          for (int64_t g = g0; g < g1; ++g) {
            const float w = scores[(g - g0) * num_keys + t];
            float* a = acc.data() + g * hd;
            for (int64_t d = 0; d < hd; ++d) a[d] += w * v[d];
          }
        }
      };
      if (seq.pattern.kind == AttentionMethodKind::kMInference) {
        // Each query head has its own index: the heads of a group attend one at a time.
        const MInferenceIndexShape ishape =
            MInferenceIndexShapeOf(*seq.pattern.minference, seq.q_len, seq.kv_len);
        for (int64_t g = 0; g < group; ++g) {
          const int32_t* area = plan.workspace->sparse_index.data<int32_t>() +
                                index_offsets[item.seq] +
                                (kvh * group + g) * int64_t{ishape.words_per_head};
          cpu_internal::MInferenceKeys(seq, ishape, area, item.row, &keys);
          attend(g, g + 1);
        }
      } else if (seq.pattern.kind == AttentionMethodKind::kTokenSelect) {
        // One token set per layer (§3.2's soft vote) or per KV head, shared by the group's
        // query heads: no repeated K/V.
        cpu_internal::TokenSelectKeys(seq, tokenselect_state[item.seq], shape,
                                      static_cast<int32_t>(kvh), item.row, &keys);
        attend(0, group);
      } else {
        keys.clear();
        const int32_t key_end = KeyEnd(vis, item.row);
        for (int32_t k = 0; k < key_end; ++k) {
          if (KeyVisible(vis, item.row, k)) keys.push_back(k);
        }
        attend(0, group);
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
