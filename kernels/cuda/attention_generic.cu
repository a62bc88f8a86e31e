// Attention for any head_dim up to 256 and any query length: one warp per (query row, head),
// visiting the keys the row sees (kernels/attention_visibility.h) in order with an online softmax.
// Slow but simple: it serves models whose head_dim the tensor-core kernels do not cover
// (stories260K: 8) and is the plainest statement of the semantics the fast kernels must match.
#include <cuda_bf16.h>

#include "kernels/attention_visibility.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/warp_row_attention.cuh"

namespace sparseserve::kernels::cuda {
namespace {

__global__ void GenericAttentionKernel(const bf16_t* q, const bf16_t* kv_layer,
                                       AttentionSeqs seq_arrays, int total_q,
                                       const int32_t* row_seq, AttentionDims dims, bf16_t* out) {
  const int warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
  if (warp >= total_q * dims.heads) return;
  const int row = warp / dims.heads;
  const int head = warp % dims.heads;
  const int32_t seq_idx = row_seq[row];
  if (seq_idx < 0) return;  // a row no sequence owns
  const AttentionSeqInfo seq = seq_arrays.seqs[seq_idx];
  KeyVisibility vis;
  vis.q_len = seq.q_len;
  vis.kv_len = seq.kv_len;
  vis.window = seq.window;
  vis.sink_tokens = seq.sink_tokens;
  vis.mask = seq.mask_begin >= 0 ? seq_arrays.masks + seq.mask_begin : nullptr;
  const int32_t* block_tables = seq_arrays.block_tables;
  const int kv_head = head / (dims.heads / dims.kv_heads);
  const int hd = dims.head_dim;
  const int64_t token_stride = int64_t{dims.kv_heads} * hd;
  const int chunk_row = row - seq.q_begin;
  const auto* qh =
      reinterpret_cast<const __nv_bfloat16*>(q) + (int64_t{row} * dims.heads + head) * hd;
  const auto* kv = reinterpret_cast<const __nv_bfloat16*>(kv_layer);

  WarpRowAttention attention(qh, hd, dims.scale);
  const int key_end = KeyEnd(vis, chunk_row);
  for (int pos = 0; pos < key_end; ++pos) {
    if (!KeyVisible(vis, chunk_row, pos)) continue;
    const int64_t block = block_tables[seq.table_begin + pos / dims.block_tokens];
    const int64_t key_base =
        ((2 * block) * dims.block_tokens + pos % dims.block_tokens) * token_stride +
        int64_t{kv_head} * hd;
    attention.Attend(kv, key_base, key_base + int64_t{dims.block_tokens} * token_stride);
  }
  attention.Store(reinterpret_cast<__nv_bfloat16*>(out) + (int64_t{row} * dims.heads + head) * hd);
}

}  // namespace

cudaError_t LaunchGenericAttention(const bf16_t* q, const bf16_t* kv_layer,
                                   const AttentionSeqs& seqs, int total_q, const int32_t* row_seq,
                                   const AttentionDims& dims, bf16_t* out, cudaStream_t stream) {
  if (dims.head_dim > 32 * kWarpRowMaxDimsPerLane) return cudaErrorInvalidValue;
  const int64_t warps = int64_t{total_q} * dims.heads;
  if (warps == 0) return cudaSuccess;
  constexpr int kThreads = 256;
  const int64_t blocks = (warps * 32 + kThreads - 1) / kThreads;
  GenericAttentionKernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      q, kv_layer, seqs, total_q, row_seq, dims, out);
  return cudaGetLastError();
}

}  // namespace sparseserve::kernels::cuda
