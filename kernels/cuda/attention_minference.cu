// MInference sparse attention (kernels/minference_index.h) over the index BuildAttentionIndex
// built: one warp per (query row, head), any head_dim up to 256, online softmax over the keys the
// row's head pattern admits — A-shape's sinks and window, vertical-slash's merged slash runs and
// gathered columns (ForEachVsCover: no per-row arrays), block-sparse's selected key blocks, or
// every causal key after the dense switch. The work is proportional to the visible keys, so the
// sparsity pays off even on CUDA cores; the tensor-core prefill kernel stays the dense path.
#include <cuda_bf16.h>

#include "kernels/cuda/cuda_async_copy.cuh"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/minference_cover.cuh"
#include "kernels/cuda/warp_row_attention.cuh"
#include "kernels/minference_index.h"

namespace sparseserve::kernels::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads)
    MInferenceAttentionKernel(const bf16_t* q_ptr, const bf16_t* kv_ptr,
                              const MInferenceSeqInfo* seqs, const int32_t* block_tables,
                              const int2* rows, int num_rows, const int32_t* index,
                              AttentionDims dims, bool skip_dense, bf16_t* out_ptr) {
  const int64_t warp = (int64_t{blockIdx.x} * blockDim.x + threadIdx.x) / 32;
  if (warp >= int64_t{num_rows} * dims.heads) return;
  const int2 item = rows[warp / dims.heads];
  const int head = static_cast<int>(warp % dims.heads);
  const MInferenceSeqInfo seq = seqs[item.x];
  const int32_t row = item.y;  // within the chunk
  const int32_t prefix = seq.kv_len - seq.q_len;
  const int32_t pos = prefix + row;
  const int hd = dims.head_dim;
  const int kv_head = head / (dims.heads / dims.kv_heads);
  const int64_t token_stride = int64_t{dims.kv_heads} * hd;
  const int32_t* table = block_tables + seq.table_begin;
  const auto* q = reinterpret_cast<const __nv_bfloat16*>(q_ptr) +
                  (int64_t{seq.q_begin + row} * dims.heads + head) * hd;
  const auto* kv = reinterpret_cast<const __nv_bfloat16*>(kv_ptr);
  const int32_t* area = index + seq.index_offset + int64_t{head} * seq.words_per_head;
  const int32_t* body = area + minference::kHeaderWords;
  // A dense-switched head is the tensor-core prefill kernel's (it gates its tiles on this word).
  if (skip_dense && area[0] == static_cast<int32_t>(HeadPatternKind::kDense)) return;

  WarpRowAttention attention(q, hd, dims.scale);
  auto attend = [&](int32_t key) {
    const int64_t key_base =
        KeyRowOffset(table, key, dims.block_tokens, dims.block_shift, token_stride) +
        int64_t{kv_head} * hd;
    attention.Attend(kv, key_base, key_base + int64_t{dims.block_tokens} * token_stride);
  };
  // Keys [begin, end) clipped to the causal bound.
  auto attend_range = [&](int32_t begin, int32_t end) {
    end = min(end, pos + 1);
    for (int32_t k = begin; k < end; ++k) attend(k);
  };
  switch (static_cast<HeadPatternKind>(area[0])) {
    case HeadPatternKind::kDense: attend_range(0, pos + 1); break;
    case HeadPatternKind::kAShape: {
      // k < sinks or k > pos - window: the sinks below the window, then the window.
      const int32_t window_begin = max(pos - area[2] + 1, 0);
      attend_range(0, min(area[1], window_begin));
      attend_range(window_begin, pos + 1);
      break;
    }
    case HeadPatternKind::kVerticalSlash: {
      const int32_t block_begin = prefix + row / minference::kBlockRows * minference::kBlockRows;
      const int32_t block_end = min(block_begin + minference::kBlockRows, seq.kv_len);
      ForEachVsCover(
          body, area[1], body + seq.cap_columns, area[2], block_begin, block_end,
          [&](int32_t b, int32_t e) { attend_range(b, e); },
          [&](int32_t c) {
            if (c <= pos) attend(c);
          });
      break;
    }
    case HeadPatternKind::kBlockSparse: {
      const int32_t* blocks = body + int64_t{row / minference::kBlockRows} * (1 + seq.cap_blocks);
      for (int32_t i = 0; i < blocks[0]; ++i) {
        const int32_t k0 = blocks[1 + i] * minference::kBlockRows;
        attend_range(k0, k0 + minference::kBlockRows);
      }
      break;
    }
  }
  attention.Store(reinterpret_cast<__nv_bfloat16*>(out_ptr) +
                  (int64_t{seq.q_begin + row} * dims.heads + head) * hd);
}

}  // namespace

cudaError_t LaunchMInferenceAttention(const bf16_t* q, const bf16_t* kv_layer,
                                      const MInferenceSeqInfo* seqs, const int32_t* block_tables,
                                      const int2* rows, int num_rows, const int32_t* index,
                                      const AttentionDims& dims, bool skip_dense, bf16_t* out,
                                      cudaStream_t stream) {
  if (dims.head_dim > 32 * kWarpRowMaxDimsPerLane) return cudaErrorInvalidValue;
  const int64_t warps = int64_t{num_rows} * dims.heads;
  if (warps == 0) return cudaSuccess;
  const int64_t blocks = (warps * 32 + kThreads - 1) / kThreads;
  MInferenceAttentionKernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      q, kv_layer, seqs, block_tables, rows, num_rows, index, dims, skip_dense, out);
  return cudaGetLastError();
}

}  // namespace sparseserve::kernels::cuda
