// CudaBackend's TokenSelect planning (kernels/tokenselect_index.h): the device records of a
// batch's kTokenSelect sequences, their rows' split-KV work and the grid bounds of the selection
// (kernels/cuda/tokenselect_index.cu) and of the attention (attention_tokenselect.cu). Which
// sequences select is known here (RegionsOf depends only on lengths and parameters); whether a
// selecting sequence reuses its last selection is decided on the device, per layer.
#include <algorithm>
#include <cstdlib>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/core/status.h"
#include "kernels/cuda/cuda_backend_state.h"
#include "kernels/cuda/cuda_kernels.h"

namespace sparseserve::kernels {
namespace {

// Candidates of a selecting batch are rounded up to a power of two of at least this many, so a
// decode batch's grids (and a captured step graph) stay the same for thousands of steps.
constexpr int kMinCandidateCap = 4096;
// A scoring chunk holds at least this many candidates (a few 64-token tiles per CTA).
constexpr int kMinChunkTokens = 256;

int CeilDiv(int64_t a, int64_t b) {
  return static_cast<int>((a + b - 1) / b);
}

// CTAs per SM the token-list attention's items aim for over the KV heads and rows:
// $SPARSESERVE_TOKENSELECT_CTAS_PER_SM, default 2 — what fits on an SM at once (its registers
// and shared memory allow 2), so the grid is one wave: 2,688 tokens at B=1 in 21.9 µs against
// 27.8 at 4 (two waves), B=4 46.0 against 47.3 (H100, cold caches; bench/RESULTS.md).
int TokenListCtasPerSm() {
  static const int ctas = [] {
    const char* env = std::getenv("SPARSESERVE_TOKENSELECT_CTAS_PER_SM");
    return env == nullptr ? 2 : std::max(1, std::atoi(env));
  }();
  return ctas;
}

}  // namespace

absl::Status PlanTokenSelect(const AttentionBatch& batch, const AttentionShape& shape,
                             const std::vector<int32_t>& table_begins,
                             const std::vector<int32_t>& mask_begins, int sm_count,
                             CudaTokenSelectPlan* plan) {
  *plan = CudaTokenSelectPlan();
  const int heads = shape.num_heads, hd = shape.head_dim;
  int max_candidates = 0, max_list = 0, selecting = 0;
  for (size_t s = 0; s < batch.sequences.size(); ++s) {
    const SequenceAttention& sa = batch.sequences[s];
    if (sa.pattern.kind != AttentionMethodKind::kTokenSelect || sa.q_len == 0) continue;
    if (hd != 64 && hd != 128) {
      return absl::UnimplementedError(absl::StrCat(
          "Attention: TokenSelect on the CUDA backend needs head_dim 64 or 128, got ", hd));
    }
    if (heads / shape.num_kv_heads > 16) {
      return absl::UnimplementedError(
          absl::StrCat("Attention: TokenSelect on the CUDA backend needs GQA groups of at most 16, "
                       "got ",
                       heads / shape.num_kv_heads));
    }
    const TokenSelectParams& p = sa.pattern.tokenselect;
    const tokenselect::KeyRegions regions = tokenselect::RegionsOf(p, sa.q_len, sa.kv_len);
    cuda::TokenSelectSeqInfo rec{};
    rec.seq = static_cast<int32_t>(s);
    rec.q_begin = sa.q_begin;
    rec.q_len = sa.q_len;
    rec.kv_len = sa.kv_len;
    rec.table_begin = table_begins[s];
    rec.mask_begin = mask_begins[s];
    rec.state_slot = sa.state_slot;
    rec.k = p.k;
    rec.initial = p.initial;
    rec.local = p.local;
    rec.theta = p.theta;
    rec.dense = regions.dense ? 1 : 0;
    rec.lists = tokenselect::ListsOf(p, shape.num_kv_heads);
    rec.unused = 0;
    rec.scratch_offset = -1;
    if (!regions.dense) {
      rec.scratch_offset = selecting++;  // the record's scratch index until the size is known
      plan->max_lists = std::max(plan->max_lists, static_cast<int>(rec.lists));
      max_candidates = std::max(max_candidates, regions.candidate_end - regions.candidate_begin);
      // The longest list a row can have: P - LocalBegin <= 2 local while a reused selection is
      // at most `local` tokens old, plus the new rows.
      const int64_t list = int64_t{regions.initial_end} + p.k + 2 * int64_t{p.local} + sa.q_len;
      if (list > std::numeric_limits<int32_t>::max() / 2) {
        return absl::InvalidArgumentError("Attention: TokenSelect budget too large");
      }
      max_list = std::max(max_list, static_cast<int>(list));
      const int32_t record = static_cast<int32_t>(plan->seqs.size());
      for (int32_t r = 0; r < sa.q_len; ++r) {
        plan->rows.insert(plan->rows.end(), {record, r});
        plan->merge_rows.push_back(sa.q_begin + r);
      }
    }
    plan->seqs.push_back(rec);
  }
  if (selecting == 0) return absl::OkStatus();

  // Selection: chunks of candidates, as many as give ~4 CTAs per SM over the KV heads and the
  // selecting sequences (a power of two, so that it divides the power-of-two cap).
  int64_t cap = kMinCandidateCap;
  while (cap < max_candidates) cap *= 2;
  if (cap > (int64_t{1} << 30)) {
    return absl::ResourceExhaustedError(
        absl::StrCat("Attention: TokenSelect over ", max_candidates, " candidates"));
  }
  const int64_t target = int64_t{4} * std::max(sm_count, 1);
  int64_t chunks = 1;
  while (chunks * 2 * shape.num_kv_heads * selecting <= target &&
         cap / (chunks * 2) >= kMinChunkTokens) {
    chunks *= 2;
  }
  plan->candidate_cap = static_cast<int>(cap);
  plan->chunk_tokens = static_cast<int>(cap / chunks);
  const int64_t per_record = cuda::TokenSelectScratchFloats(
      cap, heads, int64_t{heads} * hd, static_cast<int>(chunks), plan->max_lists);
  for (cuda::TokenSelectSeqInfo& rec : plan->seqs) {
    if (rec.scratch_offset >= 0) rec.scratch_offset *= per_record;
  }
  plan->scratch_floats = per_record * selecting;

  // Attention: every row's list split into the same number of items of whole 64-position tiles,
  // enough for ~TokenListCtasPerSm CTAs per SM over the KV heads and rows.
  const int num_rows = static_cast<int>(plan->merge_rows.size());
  const int tiles = CeilDiv(max_list, cuda::kDecodeTileTokens);
  const int64_t list_target = int64_t{TokenListCtasPerSm()} * std::max(sm_count, 1);
  const int wanted = CeilDiv(list_target, int64_t{shape.num_kv_heads} * num_rows);
  const int per_item = CeilDiv(tiles, std::clamp(wanted, 1, tiles));
  plan->item_tokens = per_item * cuda::kDecodeTileTokens;
  plan->items_per_row = CeilDiv(tiles, per_item);
  for (int r = 0; r < num_rows; ++r) {
    plan->merges.insert(plan->merges.end(), {r * plan->items_per_row, plan->items_per_row});
  }
  plan->partial_floats = int64_t{num_rows} * plan->items_per_row * heads * (hd + 1);
  return absl::OkStatus();
}

absl::Status CheckTokenSelectState(const AttentionPlan& plan, int layer) {
  const AttentionBatch& batch = *plan.batch;
  const Tensor& state = batch.sequence_state;
  const int64_t width = int64_t{plan.shape.num_heads} * plan.shape.head_dim;
  for (size_t s = 0; s < batch.sequences.size(); ++s) {
    const SequenceAttention& sa = batch.sequences[s];
    if (sa.pattern.kind != AttentionMethodKind::kTokenSelect || sa.q_len == 0) continue;
    const TokenSelectParams& p = sa.pattern.tokenselect;
    if (tokenselect::RegionsOf(p, sa.q_len, sa.kv_len).dense) continue;
    if (state.device() != Device::kCuda || state.dtype() != DType::kI32 || state.ndim() != 2 ||
        !state.is_contiguous()) {
      return absl::InvalidArgumentError(
          absl::StrCat("Attention: TokenSelect needs a contiguous CUDA i32 sequence_state, got ",
                       state.DebugString()));
    }
    const int64_t per_layer = tokenselect::LayerWords(p, width, plan.shape.num_kv_heads);
    if ((int64_t{layer} + 1) * per_layer > state.dim(1)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Attention: sequence ", s, "'s state slot is too small for TokenSelect layer ", layer,
          " with k = ", p.k, " (", per_layer, " words per layer, ", state.dim(1), " in the slot)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace sparseserve::kernels
