// CudaBackend::Attention — turns an AttentionBatch into work lists for the attention kernels.
//
// The plan is flattened into one int32 array on the host (sequence records, block tables, prefill
// tiles, decode split-KV items and their merges), uploaded once and reused while the next layers
// pass the same batch. Single-query sequences go to the split-KV decode kernel, longer chunks to
// the tensor-core prefill kernel; head dims other than 64/128 take the generic kernel.
#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/core/status.h"
#include "kernels/attention_plan_check.h"
#include "kernels/cuda/cuda_backend_state.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cuda_status.h"

namespace sparseserve::kernels {
namespace {

bool HasTensorCoreKernel(int head_dim, int group) {
  return (head_dim == 64 || head_dim == 128) && group <= 16;
}

}  // namespace

absl::Status CudaBackend::UploadAttentionMetadata(const AttentionBatch& batch, int head_dim,
                                                  int heads, int kv_heads) {
  AttentionMetadata& m = *attn_;
  const int bt = batch.block_tokens;
  const int num_seqs = static_cast<int>(batch.sequences.size());
  const bool generic = !HasTensorCoreKernel(head_dim, heads / kv_heads);

  std::vector<int32_t> seqs, tables, tiles, items, merges, merge_seqs, row_seq;
  std::vector<std::pair<int, int2>> tile_work;  // (keys visible, tile) for heaviest-first order
  int total_q = 0, decode_seqs = 0;
  int64_t decode_tiles = 0;
  for (int s = 0; s < num_seqs; ++s) {
    const SequenceAttention& sa = batch.sequences[s];
    const int table_begin = static_cast<int>(tables.size());
    seqs.insert(seqs.end(), {sa.q_begin, sa.q_len, sa.kv_len, table_begin});
    const int blocks = (sa.kv_len + bt - 1) / bt;
    tables.insert(tables.end(), sa.block_table.begin(), sa.block_table.begin() + blocks);
    total_q = std::max(total_q, sa.q_begin + sa.q_len);
    if (generic || sa.q_len == 0) continue;
    if (sa.q_len == 1) {
      decode_tiles += (sa.kv_len + cuda::kDecodeTileTokens - 1) / cuda::kDecodeTileTokens;
      ++decode_seqs;
    } else {
      for (int q0 = 0; q0 < sa.q_len; q0 += cuda::kPrefillTileRows) {
        const int keys = sa.kv_len - sa.q_len + std::min(sa.q_len, q0 + cuda::kPrefillTileRows);
        tile_work.push_back({keys, make_int2(s, q0)});
      }
    }
  }
  std::stable_sort(tile_work.begin(), tile_work.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  for (const auto& [keys, tile] : tile_work) tiles.insert(tiles.end(), {tile.x, tile.y});

  // Split-KV: chunks of whole 64-key tiles, as many as give ~4 CTAs per SM over all KV heads.
  // With per_chunk tiles per chunk, sequence s gets ceil(tiles_s / per_chunk) chunks, so the
  // total is at most target / kv_heads + decode_seqs whatever the lengths: that bound is the
  // grid, which then stays fixed while a batch's contexts grow (step graphs replay it).
  const int64_t target = int64_t{4} * std::max(sm_count_, 1);
  const int max_items = decode_seqs == 0 ? 0 : static_cast<int>(target / kv_heads) + decode_seqs;
  int chunk_tokens = 0;
  if (decode_seqs > 0) {
    const int64_t per_chunk = std::max<int64_t>(1, (decode_tiles * kv_heads + target - 1) / target);
    chunk_tokens = static_cast<int>(per_chunk * cuda::kDecodeTileTokens);
    for (int s = 0; s < num_seqs; ++s) {
      const SequenceAttention& sa = batch.sequences[s];
      if (sa.q_len != 1) continue;
      const int first = static_cast<int>(items.size() / 2);
      int count = 0;
      for (int k0 = 0; k0 < sa.kv_len; k0 += chunk_tokens, ++count) {
        items.insert(items.end(), {s, k0});
      }
      merges.insert(merges.end(), {first, count});
      merge_seqs.push_back(s);
    }
    if (static_cast<int>(items.size() / 2) > max_items) {
      return absl::InternalError(absl::StrCat("Attention: ", items.size() / 2,
                                              " split-KV chunks exceed the bound ", max_items));
    }
  }
  const int num_items = static_cast<int>(items.size() / 2);
  items.resize(size_t{2} * max_items, 0);  // fixed size, so the sections after it do not move
  if (generic) {
    row_seq.assign(total_q, 0);
    for (int s = 0; s < num_seqs; ++s) {
      const SequenceAttention& sa = batch.sequences[s];
      for (int r = 0; r < sa.q_len; ++r) row_seq[sa.q_begin + r] = s;
    }
  }

  std::vector<int32_t> host = {head_dim, heads, kv_heads, bt};  // the key includes the dims
  auto append = [&host](const std::vector<int32_t>& v) {
    host.resize((host.size() + 3) / 4 * 4, 0);  // 16-byte aligned sections (int2 / int4 reads)
    const int64_t at = static_cast<int64_t>(host.size());
    host.insert(host.end(), v.begin(), v.end());
    return at;
  };
  // Sections whose sizes depend only on the batch's shape come first and the block tables
  // (which grow with the contexts) last, so a decode batch keeps its offsets step after step.
  AttentionMetadata next;
  next.decode_header = append({num_items, chunk_tokens});
  next.seqs = append(seqs);
  next.decode_items = append(items);
  next.merges = append(merges);
  next.merge_seqs = append(merge_seqs);
  next.prefill_tiles = append(tiles);
  next.row_seq = append(row_seq);
  next.tables = append(tables);
  next.num_prefill_tiles = static_cast<int>(tiles.size() / 2);
  next.max_decode_items = max_items;
  next.num_merges = static_cast<int>(merge_seqs.size());
  next.total_q = total_q;
  next.generic = generic;
  if (host == m.host) return absl::OkStatus();  // an identical plan is already on the device
  if (capturing_) {
    return absl::FailedPreconditionError(
        "Attention: the batch was not planned before the graph capture (call PlanAttention)");
  }

  next.device = std::move(m.device);
  next.partial = std::move(m.partial);
  if (next.device.numel() < static_cast<int64_t>(host.size())) {
    SS_ASSIGN_OR_RETURN(next.device,
                        Allocate(DType::kI32, {std::max<int64_t>(1024, 2 * host.size())}));
    ++graph_epoch_;  // graphs captured before hold the old address
  }
  const int64_t partial_floats = int64_t{max_items} * heads * (head_dim + 1);
  if (next.partial.numel() < partial_floats) {
    SS_ASSIGN_OR_RETURN(next.partial, Allocate(DType::kF32, {2 * partial_floats}));
    ++graph_epoch_;
  }
  SS_RETURN_IF_ERROR(
      CudaStatus(cudaMemcpyAsync(next.device.raw_data(), host.data(), host.size() * sizeof(int32_t),
                                 cudaMemcpyHostToDevice, stream()),
                 "Attention metadata upload"));
  next.host = std::move(host);
  m = std::move(next);
  return absl::OkStatus();
}

absl::Status CudaBackend::PlanAttention(const Tensor& q, const Tensor& kv_layer,
                                        const AttentionBatch& batch) {
  if (q.device() != Device::kCuda || q.dtype() != DType::kBf16 || q.ndim() != 3 ||
      !q.is_contiguous() || kv_layer.device() != Device::kCuda ||
      kv_layer.dtype() != DType::kBf16 || kv_layer.ndim() != 4 || !kv_layer.is_contiguous()) {
    return absl::InvalidArgumentError(
        absl::StrCat("Attention: needs contiguous CUDA bf16 q [n, heads, head_dim] and kv_layer, "
                     "got q ",
                     q.DebugString(), " kv_layer ", kv_layer.DebugString()));
  }
  const int heads = static_cast<int>(q.dim(1));
  const int hd = static_cast<int>(q.dim(2));
  const int kv_heads = static_cast<int>(kv_layer.dim(2));
  if (kv_layer.dim(3) != hd || kv_heads == 0 || heads % kv_heads != 0 ||
      kv_layer.dim(1) != batch.block_tokens || hd > 256 || hd % 8 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Attention: shape mismatch q ", q.DebugString(), " kv_layer ", kv_layer.DebugString(),
        " block_tokens ", batch.block_tokens, " (head_dim a multiple of 8, at most 256)"));
  }
  // Layers after the first of a forward step pass the same batch: its checks and device plan
  // are done (O(blocks) host work per layer otherwise).
  if (batch.plan_id != 0 && batch.plan_id == attn_->plan_id) return absl::OkStatus();
  const int64_t num_blocks = kv_layer.dim(0) / 2;
  for (size_t i = 0; i < batch.sequences.size(); ++i) {
    const SequenceAttention& sa = batch.sequences[i];
    SS_RETURN_IF_ERROR(
        ValidateSequenceAttention(sa, q.dim(0), batch.block_tokens, num_blocks, i, "CUDA"));
    if (!sa.q_positions.empty()) {
      return absl::UnimplementedError(
          "Attention: explicit query positions (tree verification) are not in the CUDA "
          "backend yet");
    }
  }
  SS_RETURN_IF_ERROR(UploadAttentionMetadata(batch, hd, heads, kv_heads));
  attn_->plan_id = batch.plan_id;
  return absl::OkStatus();
}

absl::Status CudaBackend::Attention(const Tensor& q, const Tensor& kv_layer,
                                    const AttentionBatch& batch, const Tensor& out) {
  SS_RETURN_IF_ERROR(PlanAttention(q, kv_layer, batch));
  if (out.device() != Device::kCuda || out.dtype() != DType::kBf16 || !(out.shape() == q.shape()) ||
      !out.is_contiguous()) {
    return absl::InvalidArgumentError(absl::StrCat("Attention: out must be a contiguous CUDA bf16 ",
                                                   "tensor shaped like q ", q.DebugString(),
                                                   ", got ", out.DebugString()));
  }
  if (attn_->total_q > q.dim(0)) {  // the same plan with fewer query rows than it was made for
    return absl::InvalidArgumentError("Attention: q has fewer rows than the batch's plan");
  }
  const AttentionMetadata& m = *attn_;
  const int hd = static_cast<int>(q.dim(2));
  cuda::AttentionDims dims;
  dims.heads = static_cast<int>(q.dim(1));
  dims.kv_heads = static_cast<int>(kv_layer.dim(2));
  dims.head_dim = hd;
  dims.block_tokens = batch.block_tokens;
  const int bt = batch.block_tokens;
  dims.block_shift = (bt & (bt - 1)) == 0 ? __builtin_ctz(static_cast<unsigned>(bt)) : -1;
  dims.scale = batch.scale > 0 ? batch.scale : 1.0f / std::sqrt(static_cast<float>(hd));
  const int32_t* base = m.device.data<int32_t>();
  const auto* seqs = reinterpret_cast<const cuda::AttentionSeqInfo*>(base + m.seqs);
  const int32_t* tables = base + m.tables;
  const auto* q_ptr = q.data<cuda::bf16_t>();
  const auto* kv_ptr = kv_layer.data<cuda::bf16_t>();
  auto* out_ptr = out.data<cuda::bf16_t>();
  if (m.generic) {
    return CudaStatus(cuda::LaunchGenericAttention(q_ptr, kv_ptr, seqs, tables, m.total_q,
                                                   base + m.row_seq, dims, out_ptr, stream()),
                      "Attention (generic)");
  }
  SS_RETURN_IF_ERROR(
      CudaStatus(cuda::LaunchPrefillAttention(q_ptr, kv_ptr, seqs, tables,
                                              reinterpret_cast<const int2*>(base + m.prefill_tiles),
                                              m.num_prefill_tiles, dims, out_ptr, stream()),
                 "Attention (prefill)"));
  cuda::DecodeWork work;
  work.header = base + m.decode_header;
  work.items = reinterpret_cast<const int2*>(base + m.decode_items);
  work.max_items = m.max_decode_items;
  work.merges = reinterpret_cast<const int2*>(base + m.merges);
  work.merge_seqs = base + m.merge_seqs;
  work.num_merges = m.num_merges;
  work.partial_out = m.partial.data<float>();
  work.partial_lse = work.partial_out + int64_t{m.max_decode_items} * dims.heads * hd;
  return CudaStatus(
      cuda::LaunchDecodeAttention(q_ptr, kv_ptr, seqs, tables, work, dims, out_ptr, stream()),
      "Attention (decode)");
}

}  // namespace sparseserve::kernels
