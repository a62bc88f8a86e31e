// MInference's per-layer index built on the device (kernels/minference_index.h is the contract,
// kernels/cpu/cpu_minference.cc the reference this matches): no host round trip, so a layer's
// index costs only its kernels and a step stays graph-capturable.
//
// Five launches over (work item, head, MInference sequence) grids:
//   1. EstimateKernel<0>: per 64-key tile, the vertical-slash heads' last-rows logits reduced to
//      a per-row (max, sum of exp) partial; block-sparse heads mean-pool the tile's keys.
//   2. MergeKernel: zeroes the head's index area and its diagonal sums, merges the row partials.
//   3. EstimateKernel<1>: recomputes the logits, normalises them and adds them into the column
//      sums (one tile owns a column: plain stores) and the diagonal sums (float atomics: a
//      diagonal crosses two tiles).
//   4. SelectKernel: top-n columns and slashes per vertical-slash head (one CTA, radix select on
//      TopKey then an ordered compaction, so the lists come out ascending), the planted lines,
//      or per 64-row query block the block-sparse key blocks.
//   5. FinishKernel: the head's visible pairs, the dense switch, the header and the stats.
// The estimation parallelises over key tiles, so a 128K context keeps every SM busy; the selection
// is one CTA per head (kv_len scores, nine passes).
#include <cuda_bf16.h>

#include <cfloat>

#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/cuda_async_copy.cuh"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/minference_cover.cuh"
#include "kernels/cuda/per_device_once.cuh"
#include "kernels/cuda/row_chunks.cuh"
#include "kernels/minference_index.h"

namespace sparseserve::kernels::cuda {
namespace {

using minference::kBlockRows;
constexpr int kTile = kBlockRows;  // keys per estimation tile = rows per query block
constexpr int kEstimateThreads = 256;
constexpr int kSelectThreads = 1024;
constexpr int kFinishThreads = 256;
constexpr int kPairsThreads = 1024;  // FinishKernel: 32 warps, a query block each at a time
static_assert(minference::kEstimateRows == kTile, "the estimation tile holds the last rows");

struct HeadInfo {
  HeadPatternKind kind;  // before the dense switch; planted configs are vertical-slash
  int32_t v, s;
  bool estimated;  // vertical-slash from scores (not planted)
};

__device__ __forceinline__ HeadInfo HeadOf(const MInferenceSeqInfo& seq, int layer, int head,
                                           int heads) {
  HeadInfo h;
  if (seq.planted) {
    h.kind = HeadPatternKind::kVerticalSlash;
    h.v = 1000;  // HeadPattern's defaults, as the CPU's planted path uses
    h.s = 6096;
    h.estimated = false;
  } else {
    const int32_t* p = seq.heads + (int64_t{layer} * heads + head) * 3;
    h.kind = static_cast<HeadPatternKind>(p[0]);
    h.v = p[1];
    h.s = p[2];
    h.estimated = h.kind == HeadPatternKind::kVerticalSlash;
  }
  // Sizes that force the dense switch: nothing to build (the area stays zeros but the kind).
  if (MInferenceSizesForceDense(h.kind, h.v, h.s, seq.q_len, seq.kv_len)) {
    h.kind = HeadPatternKind::kDense;
    h.estimated = false;
  }
  return h;
}

__device__ __forceinline__ float* HeadScratch(const MInferenceIndexParams& p,
                                              const MInferenceSeqInfo& seq, int head) {
  return p.scratch + seq.scratch_offset +
         int64_t{head} * MInferenceScratchFloatsPerHead(seq.kv_len, p.dims.head_dim);
}

struct ScratchView {
  float *columns, *diagonals, *partials, *row_stats, *pooled_keys;
};
__device__ __forceinline__ ScratchView ViewOf(float* base, int32_t kv_len) {
  const int64_t tiles = (int64_t{kv_len} + kTile - 1) / kTile;
  ScratchView v;
  v.columns = base;
  v.diagonals = base + kv_len;
  v.partials = base + 2 * int64_t{kv_len};
  v.row_stats = v.partials + 2 * kTile * tiles;
  v.pooled_keys = v.row_stats + 2 * kTile;
  return v;
}

__device__ __forceinline__ int32_t* HeadArea(const MInferenceIndexParams& p,
                                             const MInferenceSeqInfo& seq, int head) {
  return p.index + seq.index_offset + int64_t{head} * seq.words_per_head;
}

__device__ __forceinline__ const __nv_bfloat16* KeyRow(const MInferenceIndexParams& p,
                                                       const MInferenceSeqInfo& seq, int kv_head,
                                                       int32_t key) {
  const int64_t token_stride = int64_t{p.dims.kv_heads} * p.dims.head_dim;
  return reinterpret_cast<const __nv_bfloat16*>(p.kv_layer) +
         KeyRowOffset(p.block_tables + seq.table_begin, key, p.dims.block_tokens,
                      p.dims.block_shift, token_stride) +
         int64_t{kv_head} * p.dims.head_dim;
}

// Shared memory of EstimateKernel: Q rows and K rows as f32 [64][head_dim + 1] (the +1, an odd
// stride for the head dims in use, keeps consecutive rows in distinct banks), then the 64 x 64
// logits [64][65].
size_t EstimateSmemBytes(int head_dim) {
  return (size_t{2} * kTile * (head_dim + 1) + size_t{kTile} * (kTile + 1)) * sizeof(float);
}

// Grid (key tile, head, sequence). kPass 0: per-row (max, sum exp) partials of the estimation
// rows over this tile (and the block-sparse pooled keys); kPass 1: column and diagonal sums.
template <int kPass>
__global__ void __launch_bounds__(kEstimateThreads)
    EstimateKernel(const __grid_constant__ MInferenceIndexParams p) {
  const MInferenceSeqInfo seq = p.seqs[blockIdx.z];
  const int head = blockIdx.y;
  const int tile = blockIdx.x;
  const int32_t kv_len = seq.kv_len;
  const int tiles = (kv_len + kTile - 1) / kTile;
  if (tile >= tiles || seq.scratch_offset < 0) return;
  const HeadInfo info = HeadOf(seq, p.layer, head, p.dims.heads);
  const int hd = p.dims.head_dim;
  const int kv_head = head / (p.dims.heads / p.dims.kv_heads);
  const ScratchView scratch = ViewOf(HeadScratch(p, seq, head), kv_len);
  const int32_t k0 = tile * kTile;
  const int32_t k_count = min(kTile, kv_len - k0);

  if (info.kind == HeadPatternKind::kBlockSparse) {
    if constexpr (kPass == 1) return;
    // The CPU's mean: keys summed in order, then times 1 / count.
    const float inv = 1.0f / static_cast<float>(k_count);
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
      float sum = 0.0f;
      for (int32_t k = 0; k < k_count; ++k)
        sum += __bfloat162float(KeyRow(p, seq, kv_head, k0 + k)[d]);
      scratch.pooled_keys[int64_t{tile} * hd + d] = sum * inv;
    }
    return;
  }
  if (!info.estimated) return;

  extern __shared__ float smem[];
  const int stride = hd + 1;
  float* q_s = smem;
  float* k_s = q_s + kTile * stride;
  float* s_s = k_s + kTile * stride;  // [64][65] logits, then weights
  const int rows = min(minference::kEstimateRows, seq.q_len);
  const int32_t first_row = seq.q_len - rows;  // chunk row of estimation row 0
  const int32_t first_pos = kv_len - rows;     // its absolute position
  const auto* q = reinterpret_cast<const __nv_bfloat16*>(p.q);
  // Q's estimation rows and the tile's keys as f32 (zeros past them), 8 elements (16 bytes) a
  // load where head_dim allows, each key row looked up once for its 8.
  const int per_load = hd % 8 == 0 ? 8 : 1;
  const int loads_per_row = hd / per_load;
  auto fill = [&](float* dst, int row, const __nv_bfloat16* src, int chunk) {
    float* out = dst + row * stride + chunk * per_load;
    if (src == nullptr) {
      for (int i = 0; i < per_load; ++i) out[i] = 0.0f;
    } else if (per_load == 8) {
      float v[8];
      UnpackBf16x8(*reinterpret_cast<const uint4*>(src + chunk * 8), v);  // one 16-byte load
#pragma unroll
      for (int i = 0; i < 8; ++i) out[i] = v[i];
    } else {
      out[0] = __bfloat162float(src[chunk]);
    }
  };
  for (int e = threadIdx.x; e < kTile * loads_per_row; e += blockDim.x) {
    const int r = e / loads_per_row, chunk = e % loads_per_row;
    fill(q_s, r,
         r < rows ? q + (int64_t{seq.q_begin + first_row + r} * p.dims.heads + head) * hd : nullptr,
         chunk);
    fill(k_s, r, r < k_count ? KeyRow(p, seq, kv_head, k0 + r) : nullptr, chunk);
  }
  __syncthreads();
  // Logits of row r (position first_pos + r) and key k0 + c; -inf past the causal bound. A
  // thread computes 4 rows x 4 keys (keys 16 apart; a warp's 16 consecutive first keys fall in
  // distinct banks), 8 shared loads for 16 products where one logit a thread had taken 2 a
  // product — the loads had bound the estimation (~3.6 ms a pass at 32K, 32 heads, H100, ncu,
  // bench/RESULTS.md). Each dot product is still summed over d in order, as before.
  static_assert(kEstimateThreads * 16 == kTile * kTile, "a 4 x 4 block of logits a thread");
  {
    const int r0 = threadIdx.x / 16 * 4;
    const int c0 = threadIdx.x % 16;
    float dot[4][4] = {};
    for (int d = 0; d < hd; ++d) {
      float qv[4], kv[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        qv[i] = q_s[(r0 + i) * stride + d];
        kv[i] = k_s[(c0 + 16 * i) * stride + d];
      }
#pragma unroll
      for (int i = 0; i < 4; ++i) {
#pragma unroll
        for (int j = 0; j < 4; ++j) dot[i][j] += qv[i] * kv[j];
      }
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int r = r0 + i, c = c0 + 16 * j;
        s_s[r * (kTile + 1) + c] =
            r < rows && k0 + c <= first_pos + r ? dot[i][j] * p.dims.scale : -INFINITY;
      }
    }
  }
  __syncthreads();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  constexpr int kWarps = kEstimateThreads / 32;
  if constexpr (kPass == 0) {
    for (int r = warp; r < rows; r += kWarps) {
      const float a = s_s[r * (kTile + 1) + lane], b = s_s[r * (kTile + 1) + lane + 32];
      float m = fmaxf(a, b);
      m = WarpReduce<ReduceOp::kMax>(m);
      float l = m == -INFINITY ? 0.0f : expf(a - m) + expf(b - m);
      l = WarpReduce<ReduceOp::kSum>(l);
      if (lane == 0) {
        scratch.partials[(int64_t{tile} * kTile + r) * 2] = m;
        scratch.partials[(int64_t{tile} * kTile + r) * 2 + 1] = l;
      }
    }
  } else {
    // kPass 1: weights a_r[k] = exp(logit - max_r) / sum_r, as the CPU's softmax.
    for (int e = threadIdx.x; e < kTile * kTile; e += blockDim.x) {
      const int r = e / kTile, c = e % kTile;
      float& v = s_s[r * (kTile + 1) + c];
      v = v == -INFINITY ? 0.0f : expf(v - scratch.row_stats[2 * r]) / scratch.row_stats[2 * r + 1];
    }
    __syncthreads();
    // Column k0 + c belongs to this tile alone; rows summed in the CPU's order.
    if (threadIdx.x < k_count) {
      const int c = threadIdx.x;
      float sum = 0.0f;
      for (int r = 0; r < rows; ++r) sum += s_s[r * (kTile + 1) + c];
      scratch.columns[k0 + c] = sum;
    }
    // Diagonal offset o = first_pos + r - (k0 + c) = base + t with t = r - c + 63 in [0, 127).
    const int32_t base = first_pos - k0 - (kTile - 1);
    for (int t = threadIdx.x; t < rows + kTile - 1; t += blockDim.x) {
      const int32_t o = base + t;
      if (o < 0 || o >= kv_len) continue;
      float sum = 0.0f;
      for (int r = max(0, t - (kTile - 1)); r <= min(rows - 1, t); ++r) {
        sum += s_s[r * (kTile + 1) + (r - t + kTile - 1)];
      }
      if (sum != 0.0f) atomicAdd(&scratch.diagonals[o], sum);
    }
  }
}

// Grid (1, head, sequence): zeroes the head's area (the CPU fills it with zeros first) and, for
// an estimated vertical-slash head, its diagonal sums, and merges the row partials.
__global__ void __launch_bounds__(kFinishThreads)
    MergeKernel(const __grid_constant__ MInferenceIndexParams p) {
  const MInferenceSeqInfo seq = p.seqs[blockIdx.z];
  const int head = blockIdx.y;
  int32_t* area = HeadArea(p, seq, head);
  for (int i = threadIdx.x; i < seq.words_per_head; i += blockDim.x) area[i] = 0;
  const HeadInfo info = HeadOf(seq, p.layer, head, p.dims.heads);
  if (!info.estimated || seq.scratch_offset < 0) return;
  const ScratchView scratch = ViewOf(HeadScratch(p, seq, head), seq.kv_len);
  for (int32_t i = threadIdx.x; i < seq.kv_len; i += blockDim.x) scratch.diagonals[i] = 0.0f;
  const int rows = min(minference::kEstimateRows, seq.q_len);
  const int tiles = (seq.kv_len + kTile - 1) / kTile;
  for (int r = threadIdx.x; r < rows; r += blockDim.x) {
    float m = -INFINITY;
    for (int t = 0; t < tiles; ++t) m = fmaxf(m, scratch.partials[(int64_t{t} * kTile + r) * 2]);
    float l = 0.0f;
    for (int t = 0; t < tiles; ++t) {
      const float mt = scratch.partials[(int64_t{t} * kTile + r) * 2];
      if (mt != -INFINITY) l += scratch.partials[(int64_t{t} * kTile + r) * 2 + 1] * expf(mt - m);
    }
    scratch.row_stats[2 * r] = m;
    scratch.row_stats[2 * r + 1] = l;
  }
}

struct SelectShared {
  unsigned int histogram[256];
  unsigned int warp_counts[kSelectThreads / 32];
  int digit;
  int remaining;
};

// Writes to out[0, n), ascending, the n indices of [0, size) with the largest key(i) (distinct
// keys). One CTA: a radix select for the n-th largest key (8 passes of 8 bits), then an ordered
// compaction of the keys at or above it. REQUIRES: 1 <= n <= size; every thread calls it.
template <class KeyFn>
__device__ void SelectTop(int32_t size, int32_t n, KeyFn key, int32_t* out, SelectShared& sh) {
  uint64_t prefix = 0, prefix_mask = 0;
  if (threadIdx.x == 0) sh.remaining = n;
  for (int shift = 56; shift >= 0; shift -= 8) {
    for (int i = threadIdx.x; i < 256; i += blockDim.x) sh.histogram[i] = 0;
    __syncthreads();
    for (int32_t i = threadIdx.x; i < size; i += blockDim.x) {
      const uint64_t k = key(i);
      if ((k & prefix_mask) == prefix) atomicAdd(&sh.histogram[(k >> shift) & 255], 1u);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      unsigned int above = 0;
      int d = 255;
      for (; d > 0; --d) {
        if (above + sh.histogram[d] >= static_cast<unsigned int>(sh.remaining)) break;
        above += sh.histogram[d];
      }
      sh.digit = d;
      sh.remaining -= static_cast<int>(above);
    }
    __syncthreads();
    prefix |= uint64_t(sh.digit) << shift;
    prefix_mask |= uint64_t{255} << shift;
    __syncthreads();  // sh.digit is rewritten next pass
  }
  const uint64_t threshold = prefix;  // the n-th largest key
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int warps = blockDim.x / 32;
  int32_t written = 0;
  for (int32_t base = 0; base < size; base += blockDim.x) {
    const int32_t i = base + threadIdx.x;
    const bool take = i < size && key(i) >= threshold;
    const unsigned int ballot = __ballot_sync(0xffffffffu, take);
    if (lane == 0) sh.warp_counts[warp] = __popc(ballot);
    __syncthreads();
    int32_t before = written;
    int32_t total = 0;
    for (int w = 0; w < warps; ++w) {
      const int32_t c = static_cast<int32_t>(sh.warp_counts[w]);
      if (w < warp) before += c;
      total += c;
    }
    if (take) before += __popc(ballot & ((1u << lane) - 1));
    if (take && before < n) out[before] = i;
    written += total;
    __syncthreads();  // warp_counts is rewritten next round
  }
}

// Grid (query block or 0, head, sequence).
__global__ void __launch_bounds__(kSelectThreads)
    SelectKernel(const __grid_constant__ MInferenceIndexParams p) {
  __shared__ SelectShared sh;
  extern __shared__ float dyn[];  // block-sparse: pooled query [head_dim], scores [key blocks]
  const MInferenceSeqInfo seq = p.seqs[blockIdx.z];
  const int head = blockIdx.y;
  const HeadInfo info = HeadOf(seq, p.layer, head, p.dims.heads);
  int32_t* body = HeadArea(p, seq, head) + minference::kHeaderWords;
  const int32_t kv_len = seq.kv_len;
  if (info.kind == HeadPatternKind::kVerticalSlash) {
    if (blockIdx.x != 0) return;
    const int32_t nc = MInferenceColumns(info.v, kv_len);
    const int32_t ns = MInferenceSlashes(info.s, kv_len);
    int32_t* columns = body;
    int32_t* slashes = body + seq.cap_columns;
    if (seq.planted) {
      for (int32_t i = threadIdx.x; i < nc; i += blockDim.x) {
        columns[i] = PlantedColumn(seq.planted_seed, p.layer, head, i, nc, kv_len);
      }
      for (int32_t i = threadIdx.x; i < ns; i += blockDim.x) {
        slashes[i] = PlantedSlash(seq.planted_seed, p.layer, head, i, ns, kv_len);
      }
      return;
    }
    const ScratchView scratch = ViewOf(HeadScratch(p, seq, head), kv_len);
    const float* col = scratch.columns;
    const float* diag = scratch.diagonals;
    SelectTop(
        kv_len, nc, [col](int32_t i) { return TopKey(col[i], i, i < minference::kSinkColumns); },
        columns, sh);
    SelectTop(
        kv_len, ns, [diag](int32_t i) { return TopKey(diag[i], i, i < minference::kLocalSlashes); },
        slashes, sh);
    return;
  }
  if (info.kind != HeadPatternKind::kBlockSparse) return;  // A-shape: header only
  const int qb = blockIdx.x;
  if (qb >= seq.num_query_blocks) return;
  const int hd = p.dims.head_dim;
  float* pooled_q = dyn;
  float* scores = dyn + hd;
  const int32_t prefix = kv_len - seq.q_len;
  const int32_t r0 = qb * kBlockRows, r1 = min(r0 + kBlockRows, seq.q_len);
  const auto* q = reinterpret_cast<const __nv_bfloat16*>(p.q);
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    float sum = 0.0f;
    for (int32_t r = r0; r < r1; ++r) {
      sum += __bfloat162float(q[(int64_t{seq.q_begin + r} * p.dims.heads + head) * hd + d]);
    }
    pooled_q[d] = sum;
  }
  __syncthreads();
  const int32_t b = prefix + r0, e = prefix + r1;  // absolute rows
  const int32_t valid = (e - 1) / kBlockRows + 1;  // key blocks starting at or before row e - 1
  const float* pooled_k = ViewOf(HeadScratch(p, seq, head), kv_len).pooled_keys;
  for (int32_t j = threadIdx.x; j < valid; j += blockDim.x) {
    const bool forced = j == 0 || j >= b / kBlockRows;
    float dot = 0.0f;
    if (!forced) {
      for (int d = 0; d < hd; ++d) dot += pooled_q[d] * pooled_k[int64_t{j} * hd + d];
    }
    scores[j] = forced ? INFINITY : dot;
  }
  __syncthreads();
  const int32_t n = min(MInferenceBlocks(info.v, kv_len), valid);
  int32_t* out = body + int64_t{qb} * (1 + seq.cap_blocks);
  if (threadIdx.x == 0) out[0] = n;
  SelectTop(
      valid, n, [scores](int32_t j) { return TopKey(scores[j], j, false); }, out + 1, sh);
}

// Grid (1, head, sequence): the head's visible pairs, the dense switch, header and stats.
__global__ void __launch_bounds__(kPairsThreads)
    FinishKernel(const __grid_constant__ MInferenceIndexParams p) {
  __shared__ unsigned long long total;
  const MInferenceSeqInfo seq = p.seqs[blockIdx.z];
  const int head = blockIdx.y;
  const HeadInfo info = HeadOf(seq, p.layer, head, p.dims.heads);
  int32_t* area = HeadArea(p, seq, head);
  const int32_t* body = area + minference::kHeaderWords;
  const int32_t kv_len = seq.kv_len;
  const int32_t first = kv_len - seq.q_len, last = kv_len;  // absolute rows of the chunk
  if (threadIdx.x == 0) total = 0;
  __syncthreads();
  int64_t pairs = 0;
  int32_t a = 0, b = 0;
  if (info.kind == HeadPatternKind::kDense) {
    // Forced dense by its sizes (HeadOf): no lines, every causal pair.
  } else if (info.kind == HeadPatternKind::kAShape) {
    a = info.v;
    b = info.s;
    for (int32_t pos = first + threadIdx.x; pos < last; pos += blockDim.x) {
      const int32_t local = min(info.s, pos + 1);
      pairs += local + min(info.v, pos + 1 - local);
    }
  } else if (info.kind == HeadPatternKind::kVerticalSlash) {
    a = MInferenceColumns(info.v, kv_len);
    b = MInferenceSlashes(info.s, kv_len);
    // A warp per query block: a thread walking a block's whole cover (thousands of dependent
    // steps, 2-8 blocks a thread) made this kernel most of a planted index's build.
    const int lane = threadIdx.x % 32;
    for (int32_t qb = threadIdx.x / 32; qb < seq.num_query_blocks; qb += blockDim.x / 32) {
      const int32_t rb = first + qb * kBlockRows, re = min(rb + kBlockRows, last);
      pairs += WarpVsBlockPairs(body, a, body + seq.cap_columns, b, rb, re, lane);
    }
  } else {  // block-sparse
    a = MInferenceBlocks(info.v, kv_len);
    for (int32_t qb = threadIdx.x; qb < seq.num_query_blocks; qb += blockDim.x) {
      const int32_t rb = first + qb * kBlockRows, re = min(rb + kBlockRows, last);
      const int32_t* blocks = body + int64_t{qb} * (1 + seq.cap_blocks);
      for (int32_t i = 0; i < blocks[0]; ++i) {
        const int32_t k0 = blocks[1 + i] * kBlockRows;
        pairs += RunPairs(k0, min(k0 + kBlockRows, re), rb, re);
      }
    }
  }
  atomicAdd(&total, static_cast<unsigned long long>(pairs));
  __syncthreads();
  if (threadIdx.x != 0) return;
  pairs = static_cast<int64_t>(total);
  const int64_t causal = CausalPairs(first, last);
  HeadPatternKind kind = info.kind;
  if (kind == HeadPatternKind::kDense ||
      static_cast<double>(pairs) > minference::kDenseSwitchFraction * static_cast<double>(causal)) {
    kind = HeadPatternKind::kDense;
    pairs = causal;
  }
  area[0] = static_cast<int32_t>(kind);
  area[1] = a;
  area[2] = b;
  atomicAdd(&p.stats[2 * seq.seq], static_cast<float>(pairs));
  atomicAdd(&p.stats[2 * seq.seq + 1], static_cast<float>(causal));
}

size_t SelectSmemBytes(const MInferenceIndexParams& p) {
  return (size_t(p.dims.head_dim) + size_t(p.max_key_tiles)) * sizeof(float);
}

}  // namespace

cudaError_t LaunchMInferenceIndex(const MInferenceIndexParams& p, cudaStream_t stream) {
  if (p.num_seqs == 0) return cudaSuccess;
  if (p.dims.head_dim > 256 || p.max_key_tiles < 1) return cudaErrorInvalidValue;
  // The shared-memory limits are raised once to the largest size a launch may ask for.
  constexpr size_t kMaxDynamicSmem = 200 * 1024;
  static std::atomic<uint64_t> configured{0};
  const cudaError_t attr = OncePerDevice(configured, [] {
    const int estimate = static_cast<int>(EstimateSmemBytes(256));
    const int select = static_cast<int>(kMaxDynamicSmem - sizeof(SelectShared));
    cudaError_t e = cudaFuncSetAttribute(EstimateKernel<0>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, estimate);
    if (e == cudaSuccess) {
      e = cudaFuncSetAttribute(EstimateKernel<1>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               estimate);
    }
    if (e == cudaSuccess) {
      e = cudaFuncSetAttribute(SelectKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, select);
    }
    return e;
  });
  if (attr != cudaSuccess) return attr;
  const size_t select_smem = SelectSmemBytes(p);
  if (select_smem > kMaxDynamicSmem - sizeof(SelectShared)) return cudaErrorInvalidValue;
  const dim3 tiles(p.max_key_tiles, p.dims.heads, p.num_seqs);
  const dim3 heads(1, p.dims.heads, p.num_seqs);
  const dim3 blocks(max(1, p.max_query_blocks), p.dims.heads, p.num_seqs);
  const size_t estimate_smem = EstimateSmemBytes(p.dims.head_dim);
  EstimateKernel<0><<<tiles, kEstimateThreads, estimate_smem, stream>>>(p);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  MergeKernel<<<heads, kFinishThreads, 0, stream>>>(p);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  EstimateKernel<1><<<tiles, kEstimateThreads, estimate_smem, stream>>>(p);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  SelectKernel<<<blocks, kSelectThreads, select_smem, stream>>>(p);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  FinishKernel<<<heads, kPairsThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace sparseserve::kernels::cuda
