// TokenSelect's per-layer selection built on the device (kernels/tokenselect_index.h is the
// contract, kernels/cpu/cpu_tokenselect.cc the reference this matches): no host round trip, so a
// step that selects or reuses replays as a CUDA graph.
//
// Ten launches, each over (chunk of candidates, ..., TokenSelect record[, list]) grids; every
// kernel of a record that reuses its selection (or runs dense) exits at once after the first. A
// record selecting per KV head (tokenselect::ListsOf) runs steps 3-10 once per list, each over
// its KV head's query heads, with its own scores, histograms, control words and counts:
//   1. DecideKernel: the step's mean query per head, its cosine with the selecting query in the
//      state slot, the selection-cache decision, the state header, the stats.
//   2. ScoreKernel: logits scale · q̄_h · k_t of every candidate for the query heads of one KV
//      head (each key row read once, 64-token tiles through shared memory with cp.async), stored
//      per head, with each chunk's per-head (max, sum of exp).
//   3. NormaliseKernel: the per-head softmax normalisers merged from the chunks, the soft vote
//      score[t] = Σ_h exp(l_h[t] - m_h) / Z_h, and a histogram of the scores' top 12 bits.
//   4-8. PickKernel / HistogramKernel: a radix select for the k-th largest score over its
//      order-preserving bits, 12 + 12 + 8 bits, each level's histogram built by many CTAs and
//      read by one CTA per record.
//   9-10. CountKernel / CompactKernel: per chunk the scores above and equal to the k-th, then an
//      ordered compaction (scores above it, and the smallest indices equal to it, as the CPU's
//      score-desc / index-asc rule) writing the k indices ascending into the state slot.
// Bytes: the candidates' keys once (the bulk), logits written and read once (4 bytes per head and
// candidate), the scores read by four more passes (4 bytes per candidate each).
#include <cuda_bf16.h>

#include "kernels/attention_visibility.h"
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/cuda_async_copy.cuh"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/decode_tile.cuh"
#include "kernels/cuda/grid_dependency.cuh"
#include "kernels/cuda/per_device_once.cuh"
#include "kernels/tokenselect_index.h"

namespace sparseserve::kernels::cuda {
namespace {

using tokenselect::kHeaderWords;

constexpr int kThreads = 256;
constexpr int kTile = 64;       // candidates per shared-memory tile of the scoring kernel
constexpr int kTopBins = 4096;  // radix levels 1 and 2: 12 bits each
constexpr int kLowBins = 256;   // level 3: the last 8 bits
constexpr int kControlWords = 16;

// Control words at the start of a record's scratch (written by one kernel, read by the next).
enum ControlWord : int {
  kSelect = 0,  // 1: this step selects; 0: it reuses the selection
  kLevel1Prefix = 1,
  kLevel1Remaining = 2,
  kLevel2Prefix = 3,
  kLevel2Remaining = 4,
  kThresholdBits = 5,  // the k-th largest score's ordered bits
  kThresholdTake = 6,  // how many of the scores equal to it are selected (smallest indices)
};

// A selecting record's scratch (TokenSelectScratchFloats in all): the step's shared areas, then
// one area per selection list.
struct ScratchView {
  int32_t* decision;     // list 0's control words: kSelect is the layer's decision
  int32_t* control;      // [kControlWords] this list's
  float* query;          // [heads * head_dim] the step's mean query (unscaled)
  float* partials;       // [chunks, heads, 2] each chunk's (max, sum of exp) of the logits
  float* logits;         // [heads, candidate_cap]
  float* scores;         // [candidate_cap] this list's
  uint32_t* histograms;  // [kTopBins] level 1, [kTopBins] level 2, [kLowBins] level 3
  int32_t* counts;       // [chunks, 2] (scores above the threshold, scores equal to it)
};

__device__ __forceinline__ ScratchView ViewOf(const TokenSelectIndexParams& p,
                                              const TokenSelectSeqInfo& seq, int list = 0) {
  float* base = p.scratch + seq.scratch_offset;
  const int heads = p.dims.heads;
  const int chunks = p.candidate_cap / p.chunk_tokens;
  ScratchView v;
  v.query = base;
  v.partials = v.query + int64_t{heads} * p.dims.head_dim;
  v.logits = v.partials + int64_t{2} * chunks * heads;
  float* lists = v.logits + int64_t{heads} * p.candidate_cap;
  const int64_t per_list = kControlWords + p.candidate_cap + 2 * kTopBins + kLowBins + 2 * chunks;
  v.decision = reinterpret_cast<int32_t*>(lists);
  float* mine = lists + list * per_list;
  v.control = reinterpret_cast<int32_t*>(mine);
  v.scores = mine + kControlWords;
  v.histograms = reinterpret_cast<uint32_t*>(v.scores + p.candidate_cap);
  v.counts = reinterpret_cast<int32_t*>(v.histograms + 2 * kTopBins + kLowBins);
  return v;
}

__device__ __forceinline__ TokenSelectParams ParamsOf(const TokenSelectSeqInfo& seq) {
  TokenSelectParams p;
  p.k = seq.k;
  p.initial = seq.initial;
  p.local = seq.local;
  p.theta = seq.theta;
  p.per_kv_head = seq.lists > 1;
  return p;
}

__device__ __forceinline__ int32_t* LayerState(const TokenSelectIndexParams& p,
                                               const TokenSelectSeqInfo& seq) {
  const int64_t width = int64_t{p.dims.heads} * p.dims.head_dim;
  return p.state + seq.state_slot * p.slot_words +
         p.layer * tokenselect::StateWordsPerLayer(width, seq.k, seq.lists);
}

// Float order as unsigned order (a score is >= 0, but any float sorts right); -0 counts as +0,
// as the CPU's float comparison has them equal.
__device__ __forceinline__ uint32_t OrderedBits(float x) {
  const uint32_t bits = __float_as_uint(x == 0.0f ? 0.0f : x);
  return (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
}

// True when the record selects this step: it has candidates to choose from and the decision
// kernel found its selection not reusable.
__device__ __forceinline__ bool Selects(const TokenSelectSeqInfo& seq, const ScratchView& v) {
  return seq.dense == 0 && v.decision[kSelect] == 1;
}

__device__ double BlockSumDouble(double x, double* scratch) {
  x = WarpReduce<ReduceOp::kSum>(x);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) scratch[warp] = x;
  __syncthreads();
  x = lane < kThreads / 32 ? scratch[lane] : 0.0;
  x = WarpReduce<ReduceOp::kSum>(x);
  __syncthreads();
  return x;
}

// Grid (record): the decision, the state header and query, the stats; zeroes the histograms of
// a selecting record.
__global__ void __launch_bounds__(kThreads)
    DecideKernel(const __grid_constant__ TokenSelectIndexParams p) {
  __shared__ double reduce_s[32];
  __shared__ int select_s;
  WaitForPrecedingKernels();
  AllowNextKernelLaunch();
  const TokenSelectSeqInfo seq = p.seqs[blockIdx.x];
  const TokenSelectParams params = ParamsOf(seq);
  const tokenselect::KeyRegions regions = tokenselect::RegionsOf(params, seq.q_len, seq.kv_len);
  const int heads = p.dims.heads;
  // The new rows the step's rows see, summed: causal, or the mask's ones.
  double visible_new = 0.5 * seq.q_len * (seq.q_len + 1.0);
  if (seq.mask_begin >= 0) {
    const uint8_t* mask = p.masks + seq.mask_begin;
    double ones = 0;
    for (int64_t i = threadIdx.x; i < int64_t{seq.q_len} * seq.q_len; i += kThreads) {
      ones += mask[i];
    }
    visible_new = BlockSumDouble(ones, reduce_s);
  }
  const double dense_pairs = double{1.0} * seq.q_len * regions.prefix + visible_new;
  if (seq.dense) {
    if (threadIdx.x == 0) {
      const float pairs = static_cast<float>(dense_pairs * heads);
      atomicAdd(&p.pair_stats[2 * seq.seq], pairs);
      atomicAdd(&p.pair_stats[2 * seq.seq + 1], pairs);
    }
    return;
  }
  const ScratchView v = ViewOf(p, seq);
  int32_t* state = LayerState(p, seq);
  const float* selecting = reinterpret_cast<const float*>(state + kHeaderWords);
  const int64_t width = int64_t{heads} * p.dims.head_dim;
  const auto* q = reinterpret_cast<const __nv_bfloat16*>(p.q) + int64_t{seq.q_begin} * width;
  double dot = 0, query_norm = 0, selecting_norm = 0;
  // kDecideBatch elements per thread at a time, every load issued before the first store (the
  // store to v.query could alias them, so a plain loop waits out one memory latency per element).
  constexpr int kDecideBatch = 8;
  for (int64_t base = threadIdx.x; base < width; base += int64_t{kThreads} * kDecideBatch) {
    float mean[kDecideBatch], old[kDecideBatch];
#pragma unroll
    for (int j = 0; j < kDecideBatch; ++j) {
      const int64_t i = base + int64_t{j} * kThreads;
      if (i >= width) break;
      // The CPU's mean: rows summed in order in f32, then divided.
      float sum = 0.0f;
      for (int32_t r = 0; r < seq.q_len; ++r) sum += __bfloat162float(q[r * width + i]);
      mean[j] = sum / static_cast<float>(seq.q_len);
      old[j] = selecting[i];
    }
#pragma unroll
    for (int j = 0; j < kDecideBatch; ++j) {
      const int64_t i = base + int64_t{j} * kThreads;
      if (i >= width) break;
      v.query[i] = mean[j];
      dot += double{mean[j]} * old[j];
      query_norm += double{mean[j]} * mean[j];
      selecting_norm += double{old[j]} * old[j];
    }
  }
  dot = BlockSumDouble(dot, reduce_s);
  query_norm = BlockSumDouble(query_norm, reduce_s);
  selecting_norm = BlockSumDouble(selecting_norm, reduce_s);
  if (threadIdx.x == 0) {
    const float cosine = query_norm > 0 && selecting_norm > 0
                             ? static_cast<float>(dot / sqrt(query_norm * selecting_norm))
                             : 0.0f;
    const bool reuse =
        tokenselect::SelectionReusable(params, state, seq.q_len, regions.prefix, cosine);
    atomicAdd(&p.cache_stats[2 * seq.seq + 1], 1.0f);
    if (reuse) {
      atomicAdd(&p.cache_stats[2 * seq.seq], 1.0f);
      state[tokenselect::kLastHit] = 1;
    } else {
      state[tokenselect::kValid] =
          seq.q_len == 1 ? tokenselect::kReusable : tokenselect::kChunkSelection;
      state[tokenselect::kPrefix] = regions.prefix;
      state[tokenselect::kSelected] = seq.k;
      state[tokenselect::kLastHit] = 0;
    }
    const int32_t local_begin = tokenselect::LocalBegin(params, state, regions.initial_end);
    const double sparse_pairs =
        double{1.0} * seq.q_len * (regions.initial_end + seq.k + (regions.prefix - local_begin)) +
        visible_new;
    atomicAdd(&p.pair_stats[2 * seq.seq], static_cast<float>(sparse_pairs * heads));
    atomicAdd(&p.pair_stats[2 * seq.seq + 1], static_cast<float>(dense_pairs * heads));
    v.decision[kSelect] = reuse ? 0 : 1;
    select_s = reuse ? 0 : 1;
  }
  __syncthreads();
  if (select_s == 0) return;
  // Each thread overwrites only the query words it read above.
  for (int64_t i = threadIdx.x; i < width; i += kThreads) {
    state[kHeaderWords + i] = __float_as_int(v.query[i]);
  }
  for (int list = 0; list < seq.lists; ++list) {
    uint32_t* histograms = ViewOf(p, seq, list).histograms;
    for (int i = threadIdx.x; i < 2 * kTopBins + kLowBins; i += kThreads) histograms[i] = 0;
  }
}

// Grid (chunk, kv head, record). Thread -> (candidate threadIdx % 64 of the tile, head slot
// threadIdx / 64); slot s scores the group's heads s, s + 4, ... (kHeadsPerThread of them).
template <int D, int kHeadsPerThread>
__global__ void __launch_bounds__(kThreads)
    ScoreKernel(const __grid_constant__ TokenSelectIndexParams p) {
  constexpr int kStride = D + 8;  // 16-byte rows offset by 16 bytes: conflict-free 128-bit reads
  constexpr int kSlots = kThreads / kTile;
  constexpr int kMaxGroup = kSlots * kHeadsPerThread;
  constexpr int kChunks = D / 8;
  constexpr int kRowsPerPass = kThreads / kChunks;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  auto* k_s = reinterpret_cast<__nv_bfloat16*>(smem_raw);            // [2][kTile][kStride]
  float* q_s = reinterpret_cast<float*>(k_s + 2 * kTile * kStride);  // [kMaxGroup][D]
  float* reduce_s = q_s + kMaxGroup * D;                             // [warps][kHeadsPerThread][2]

  WaitForPrecedingKernels();
  AllowNextKernelLaunch();
  const TokenSelectSeqInfo seq = p.seqs[blockIdx.z];
  if (seq.dense) return;
  const ScratchView v = ViewOf(p, seq);
  if (!Selects(seq, v)) return;
  const tokenselect::KeyRegions regions =
      tokenselect::RegionsOf(ParamsOf(seq), seq.q_len, seq.kv_len);
  const int32_t n = regions.candidate_end - regions.candidate_begin;
  const int32_t first = blockIdx.x * p.chunk_tokens;
  if (first >= n) return;
  const int32_t end = min(n, first + p.chunk_tokens);
  const int kv_head = blockIdx.y;
  const int group = p.dims.heads / p.dims.kv_heads;
  const int64_t token_stride = int64_t{p.dims.kv_heads} * D;
  const int32_t* table = p.block_tables + seq.table_begin;
  const auto* kv = reinterpret_cast<const __nv_bfloat16*>(p.kv_layer);
  const int col = (threadIdx.x % kChunks) * 8;
  auto load_tile = [&](int stage, int32_t tile_first) {
#pragma unroll
    for (int r = threadIdx.x / kChunks; r < kTile; r += kRowsPerPass) {
      const int32_t t = tile_first + r;
      const bool valid = t < end;
      const __nv_bfloat16* src = kv;
      if (valid) {
        src = kv +
              KeyRowOffset(table, regions.candidate_begin + t, p.dims.block_tokens,
                           p.dims.block_shift, token_stride) +
              int64_t{kv_head} * D + col;
      }
      CpAsync16(k_s + (stage * kTile + r) * kStride + col, src, valid);
    }
  };
  load_tile(0, first);
  CpAsyncCommit();
  for (int i = threadIdx.x; i < kMaxGroup * D; i += kThreads) {
    const int g = i / D;
    q_s[i] = g < group ? v.query[int64_t{kv_head * group + g} * D + i % D] : 0.0f;
  }
  const int token = threadIdx.x % kTile;
  const int slot = threadIdx.x / kTile;
  float run_max[kHeadsPerThread], run_sum[kHeadsPerThread];
#pragma unroll
  for (int j = 0; j < kHeadsPerThread; ++j) {
    run_max[j] = -INFINITY;
    run_sum[j] = 0.0f;
  }
  const int num_tiles = (end - first + kTile - 1) / kTile;
  for (int t = 0; t < num_tiles; ++t) {
    const int stage = t % 2;
    if (t + 1 < num_tiles) {
      load_tile((t + 1) % 2, first + (t + 1) * kTile);
      CpAsyncCommit();
      CpAsyncWait<1>();
    } else {
      CpAsyncWait<0>();
    }
    __syncthreads();
    const __nv_bfloat16* key = k_s + (stage * kTile + token) * kStride;
    float dots[kHeadsPerThread];
#pragma unroll
    for (int j = 0; j < kHeadsPerThread; ++j) dots[j] = 0.0f;
    AddQueryKeyDots<D, kHeadsPerThread, kSlots>(key, q_s, slot, dots);
    const int32_t candidate = first + t * kTile + token;
    if (candidate < end) {
#pragma unroll
      for (int j = 0; j < kHeadsPerThread; ++j) {
        const int g = slot + kSlots * j;
        if (g >= group) continue;
        const float logit = dots[j] * p.dims.scale;
        v.logits[int64_t{kv_head * group + g} * p.candidate_cap + candidate] = logit;
        if (logit > run_max[j]) {
          run_sum[j] = run_sum[j] * expf(run_max[j] - logit) + 1.0f;
          run_max[j] = logit;
        } else {
          run_sum[j] += expf(logit - run_max[j]);
        }
      }
    }
    __syncthreads();  // the stage is refilled by the next iteration's prefetch
  }
  // (max, sum) over the 64 candidates of a slot: two warps, shuffles then shared memory.
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  auto combine = [](float& m, float& s, float m2, float s2) {
    const float nm = fmaxf(m, m2);
    if (nm == -INFINITY) return;
    s = (m == -INFINITY ? 0.0f : s * expf(m - nm)) + (m2 == -INFINITY ? 0.0f : s2 * expf(m2 - nm));
    m = nm;
  };
#pragma unroll
  for (int j = 0; j < kHeadsPerThread; ++j) {
    float m = run_max[j], s = run_sum[j];
    for (int o = 16; o > 0; o >>= 1) {
      const float m2 = __shfl_xor_sync(0xffffffffu, m, o);
      const float s2 = __shfl_xor_sync(0xffffffffu, s, o);
      combine(m, s, m2, s2);
    }
    if (lane == 0) {
      reduce_s[(warp * kHeadsPerThread + j) * 2] = m;
      reduce_s[(warp * kHeadsPerThread + j) * 2 + 1] = s;
    }
  }
  __syncthreads();
  if (threadIdx.x < kSlots * kHeadsPerThread) {
    const int s_slot = threadIdx.x / kHeadsPerThread, j = threadIdx.x % kHeadsPerThread;
    const int g = s_slot + kSlots * j;
    if (g < group) {
      const int w0 = 2 * s_slot;  // the slot's two warps
      float m = reduce_s[(w0 * kHeadsPerThread + j) * 2];
      float s = reduce_s[(w0 * kHeadsPerThread + j) * 2 + 1];
      combine(m, s, reduce_s[((w0 + 1) * kHeadsPerThread + j) * 2],
              reduce_s[((w0 + 1) * kHeadsPerThread + j) * 2 + 1]);
      float* out = v.partials + (int64_t{blockIdx.x} * p.dims.heads + kv_head * group + g) * 2;
      out[0] = m;
      out[1] = s;
    }
  }
}

constexpr int kNormaliseSplit = 4;

// Grid (chunk part, record, list): the soft vote of a quarter chunk's candidates by the list's
// query heads (all of them, or one KV head's group) and the list's level-1 histogram.
__global__ void __launch_bounds__(kThreads)
    NormaliseKernel(const __grid_constant__ TokenSelectIndexParams p) {
  extern __shared__ float norm_s[];  // [heads] max, [heads] 1 / sum of exp
  __shared__ uint32_t histogram_s[kTopBins];
  WaitForPrecedingKernels();
  AllowNextKernelLaunch();
  const TokenSelectSeqInfo seq = p.seqs[blockIdx.y];
  if (seq.dense || static_cast<int>(blockIdx.z) >= seq.lists) return;
  const ScratchView v = ViewOf(p, seq, blockIdx.z);
  if (!Selects(seq, v)) return;
  const tokenselect::KeyRegions regions =
      tokenselect::RegionsOf(ParamsOf(seq), seq.q_len, seq.kv_len);
  const int32_t n = regions.candidate_end - regions.candidate_begin;
  // kNormaliseSplit CTAs per scoring chunk: one per chunk left most SMs idle (ncu: 57 us of
  // a 128K re-selection at B = 1 on 64 CTAs).
  const int32_t part = (p.chunk_tokens + kNormaliseSplit - 1) / kNormaliseSplit;
  const int32_t first = blockIdx.x * part;
  if (first >= n) return;
  const int32_t end = min(n, first + part);
  const int heads = p.dims.heads;
  const int list_heads = heads / seq.lists;
  const int h_begin = blockIdx.z * list_heads, h_end = h_begin + list_heads;
  const int used_chunks = (n + p.chunk_tokens - 1) / p.chunk_tokens;
  for (int h = h_begin + threadIdx.x; h < h_end; h += kThreads) {
    float m = -INFINITY;
    for (int c = 0; c < used_chunks; ++c) m = fmaxf(m, v.partials[(int64_t{c} * heads + h) * 2]);
    double sum = 0;
    for (int c = 0; c < used_chunks; ++c) {
      const float cm = v.partials[(int64_t{c} * heads + h) * 2];
      if (cm != -INFINITY) sum += v.partials[(int64_t{c} * heads + h) * 2 + 1] * exp(cm - m);
    }
    norm_s[h] = m;
    norm_s[heads + h] = static_cast<float>(1.0 / sum);  // the CPU's inverse, rounded once
  }
  for (int i = threadIdx.x; i < kTopBins; i += kThreads) histogram_s[i] = 0;
  __syncthreads();
  for (int32_t t = first + threadIdx.x; t < end; t += kThreads) {
    float score = 0.0f;  // heads in order, as the CPU adds them
    for (int h = h_begin; h < h_end; ++h) {
      score += expf(v.logits[int64_t{h} * p.candidate_cap + t] - norm_s[h]) * norm_s[heads + h];
    }
    v.scores[t] = score;
    atomicAdd(&histogram_s[OrderedBits(score) >> 20], 1u);
  }
  __syncthreads();
  for (int i = threadIdx.x; i < kTopBins; i += kThreads) {
    if (histogram_s[i] != 0) atomicAdd(&v.histograms[i], histogram_s[i]);
  }
}

// Grid (record, list): one radix level. Finds the bin holding the `remaining`-th largest score
// among those matching the previous levels' prefix, and how many of it are still to take.
template <int kLevel>
__global__ void __launch_bounds__(kThreads)
    PickKernel(const __grid_constant__ TokenSelectIndexParams p) {
  constexpr int kBins = kLevel == 3 ? kLowBins : kTopBins;
  constexpr int kBits = kLevel == 3 ? 8 : 12;
  constexpr int kPerThread = kBins / kThreads;
  __shared__ uint32_t suffix_s[kThreads];
  WaitForPrecedingKernels();
  AllowNextKernelLaunch();
  const TokenSelectSeqInfo seq = p.seqs[blockIdx.x];
  if (seq.dense || static_cast<int>(blockIdx.y) >= seq.lists) return;
  const ScratchView v = ViewOf(p, seq, blockIdx.y);
  if (!Selects(seq, v)) return;
  const uint32_t* histogram = v.histograms + (kLevel - 1) * kTopBins;
  const uint32_t prefix = kLevel == 1   ? 0u
                          : kLevel == 2 ? static_cast<uint32_t>(v.control[kLevel1Prefix])
                                        : static_cast<uint32_t>(v.control[kLevel2Prefix]);
  const uint32_t remaining = kLevel == 1   ? static_cast<uint32_t>(seq.k)
                             : kLevel == 2 ? static_cast<uint32_t>(v.control[kLevel1Remaining])
                                           : static_cast<uint32_t>(v.control[kLevel2Remaining]);
  uint32_t mine[kPerThread];
  uint32_t local = 0;
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    mine[i] = histogram[threadIdx.x * kPerThread + i];
    local += mine[i];
  }
  suffix_s[threadIdx.x] = local;
  __syncthreads();
  for (int offset = 1; offset < kThreads; offset <<= 1) {  // inclusive suffix sums
    const uint32_t add = threadIdx.x + offset < kThreads ? suffix_s[threadIdx.x + offset] : 0u;
    __syncthreads();
    suffix_s[threadIdx.x] += add;
    __syncthreads();
  }
  const uint32_t above = suffix_s[threadIdx.x] - local;  // scores in higher threads' bins
  if (above >= remaining || remaining > above + local) return;
  uint32_t count = above;
#pragma unroll
  for (int i = kPerThread - 1; i >= 0; --i) {
    if (count + mine[i] >= remaining) {
      const uint32_t bin = threadIdx.x * kPerThread + i;
      const uint32_t bits = (prefix << kBits) | bin;
      const int32_t left = static_cast<int32_t>(remaining - count);
      if (kLevel == 1) {
        v.control[kLevel1Prefix] = static_cast<int32_t>(bits);
        v.control[kLevel1Remaining] = left;
      } else if (kLevel == 2) {
        v.control[kLevel2Prefix] = static_cast<int32_t>(bits);
        v.control[kLevel2Remaining] = left;
      } else {
        v.control[kThresholdBits] = static_cast<int32_t>(bits);
        v.control[kThresholdTake] = left;
      }
      return;
    }
    count += mine[i];
  }
}

// Grid (chunk, record, list): the level-2 (bits 19..8 of the scores with the level-1 prefix) or
// level-3 (bits 7..0 of those with the level-2 prefix) histogram.
template <int kLevel>
__global__ void __launch_bounds__(kThreads)
    HistogramKernel(const __grid_constant__ TokenSelectIndexParams p) {
  constexpr int kBins = kLevel == 3 ? kLowBins : kTopBins;
  __shared__ uint32_t histogram_s[kBins];
  WaitForPrecedingKernels();
  AllowNextKernelLaunch();
  const TokenSelectSeqInfo seq = p.seqs[blockIdx.y];
  if (seq.dense || static_cast<int>(blockIdx.z) >= seq.lists) return;
  const ScratchView v = ViewOf(p, seq, blockIdx.z);
  if (!Selects(seq, v)) return;
  const tokenselect::KeyRegions regions =
      tokenselect::RegionsOf(ParamsOf(seq), seq.q_len, seq.kv_len);
  const int32_t n = regions.candidate_end - regions.candidate_begin;
  const int32_t first = blockIdx.x * p.chunk_tokens;
  if (first >= n) return;
  const int32_t end = min(n, first + p.chunk_tokens);
  const uint32_t prefix =
      static_cast<uint32_t>(v.control[kLevel == 2 ? kLevel1Prefix : kLevel2Prefix]);
  for (int i = threadIdx.x; i < kBins; i += kThreads) histogram_s[i] = 0;
  __syncthreads();
  for (int32_t t = first + threadIdx.x; t < end; t += kThreads) {
    const uint32_t bits = OrderedBits(v.scores[t]);
    if (kLevel == 2 ? (bits >> 20) == prefix : (bits >> 8) == prefix) {
      atomicAdd(&histogram_s[kLevel == 2 ? (bits >> 8) & 0xfffu : bits & 0xffu], 1u);
    }
  }
  __syncthreads();
  uint32_t* histogram = v.histograms + (kLevel - 1) * kTopBins;
  for (int i = threadIdx.x; i < kBins; i += kThreads) {
    if (histogram_s[i] != 0) atomicAdd(&histogram[i], histogram_s[i]);
  }
}

// Grid (chunk, record, list): the chunk's scores above the threshold and equal to it.
__global__ void __launch_bounds__(kThreads)
    CountKernel(const __grid_constant__ TokenSelectIndexParams p) {
  WaitForPrecedingKernels();
  AllowNextKernelLaunch();
  const TokenSelectSeqInfo seq = p.seqs[blockIdx.y];
  if (seq.dense || static_cast<int>(blockIdx.z) >= seq.lists) return;
  const ScratchView v = ViewOf(p, seq, blockIdx.z);
  if (!Selects(seq, v)) return;
  const tokenselect::KeyRegions regions =
      tokenselect::RegionsOf(ParamsOf(seq), seq.q_len, seq.kv_len);
  const int32_t n = regions.candidate_end - regions.candidate_begin;
  const int32_t first = blockIdx.x * p.chunk_tokens;
  if (first >= n) return;
  const int32_t end = min(n, first + p.chunk_tokens);
  const uint32_t threshold = static_cast<uint32_t>(v.control[kThresholdBits]);
  int32_t above = 0, equal = 0;
  for (int32_t base = first; base < end; base += kThreads) {  // the same trips for every thread
    const int32_t t = base + threadIdx.x;
    const uint32_t bits = t < end ? OrderedBits(v.scores[t]) : 0u;
    above += __syncthreads_count(t < end && bits > threshold);
    equal += __syncthreads_count(t < end && bits == threshold);
  }
  if (threadIdx.x == 0) {
    v.counts[2 * blockIdx.x] = above;
    v.counts[2 * blockIdx.x + 1] = equal;
  }
}

// The number of threads before this one (in thread order) with `flag` set, and in *total the
// block's count. Every thread calls it; `warp_s` holds kThreads / 32 ints of shared memory.
__device__ __forceinline__ int32_t BlockRank(bool flag, int32_t* warp_s, int32_t* total) {
  const unsigned ballot = __ballot_sync(0xffffffffu, flag);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) warp_s[warp] = __popc(ballot);
  __syncthreads();
  int32_t before = 0, all = 0;
#pragma unroll
  for (int w = 0; w < kThreads / 32; ++w) {
    const int32_t c = warp_s[w];
    if (w < warp) before += c;
    all += c;
  }
  __syncthreads();  // warp_s is rewritten by the next call
  *total = all;
  return before + __popc(ballot & ((1u << lane) - 1u));
}

// Grid (chunk, record, list): writes the chunk's selected candidates, ascending, at their place
// among the list's k (after every earlier chunk's).
__global__ void __launch_bounds__(kThreads)
    CompactKernel(const __grid_constant__ TokenSelectIndexParams p) {
  __shared__ int32_t warp_s[kThreads / 32];
  __shared__ int32_t before_s[2];
  WaitForPrecedingKernels();
  AllowNextKernelLaunch();
  const TokenSelectSeqInfo seq = p.seqs[blockIdx.y];
  if (seq.dense || static_cast<int>(blockIdx.z) >= seq.lists) return;
  const ScratchView v = ViewOf(p, seq, blockIdx.z);
  if (!Selects(seq, v)) return;
  const tokenselect::KeyRegions regions =
      tokenselect::RegionsOf(ParamsOf(seq), seq.q_len, seq.kv_len);
  const int32_t n = regions.candidate_end - regions.candidate_begin;
  const int32_t first = blockIdx.x * p.chunk_tokens;
  if (first >= n) return;
  const int32_t end = min(n, first + p.chunk_tokens);
  const uint32_t threshold = static_cast<uint32_t>(v.control[kThresholdBits]);
  const int32_t take = v.control[kThresholdTake];
  if (threadIdx.x < 2) before_s[threadIdx.x] = 0;
  __syncthreads();
  int32_t above_before = 0, equal_before = 0;
  for (int c = threadIdx.x; c < static_cast<int>(blockIdx.x); c += kThreads) {
    above_before += v.counts[2 * c];
    equal_before += v.counts[2 * c + 1];
  }
  atomicAdd(&before_s[0], above_before);
  atomicAdd(&before_s[1], equal_before);
  __syncthreads();
  int32_t equal_seen = before_s[1];
  int32_t out = before_s[0] + min(equal_seen, take);
  int32_t* selected =
      LayerState(p, seq) + tokenselect::ListOffset(int64_t{p.dims.heads} * p.dims.head_dim, seq.k,
                                                   seq.lists, blockIdx.z);
  for (int32_t base = first; base < end; base += kThreads) {
    const int32_t t = base + threadIdx.x;
    const uint32_t bits = t < end ? OrderedBits(v.scores[t]) : 0u;
    const bool equal = t < end && bits == threshold;
    int32_t equal_count = 0, keep_count = 0;
    const int32_t equal_rank = equal_seen + BlockRank(equal, warp_s, &equal_count);
    const bool keep = t < end && (bits > threshold || (equal && equal_rank < take));
    const int32_t place = out + BlockRank(keep, warp_s, &keep_count);
    if (keep) selected[place] = regions.candidate_begin + t;
    equal_seen += equal_count;
    out += keep_count;
  }
}

size_t ScoreSmemBytes(int head_dim, int heads_per_thread) {
  const int max_group = (kThreads / kTile) * heads_per_thread;
  return size_t{2} * kTile * (head_dim + 8) * sizeof(__nv_bfloat16) +
         static_cast<size_t>(max_group) * head_dim * sizeof(float) +
         size_t{kThreads / 32} * heads_per_thread * 2 * sizeof(float);
}

template <int D, int kHeadsPerThread>
cudaError_t LaunchScore(const TokenSelectIndexParams& p, dim3 grid, cudaStream_t stream) {
  const size_t smem = ScoreSmemBytes(D, kHeadsPerThread);
  static std::atomic<uint64_t> configured{0};
  const cudaError_t attr = OncePerDevice(configured, [smem] {
    return cudaFuncSetAttribute(ScoreKernel<D, kHeadsPerThread>,
                                cudaFuncAttributeMaxDynamicSharedMemorySize,
                                static_cast<int>(smem));
  });
  if (attr != cudaSuccess) return attr;
  return LaunchOverlapping(ScoreKernel<D, kHeadsPerThread>, grid, kThreads, smem, stream, p);
}

}  // namespace

cudaError_t LaunchTokenSelectIndex(const TokenSelectIndexParams& p, cudaStream_t stream) {
  if (p.num_seqs == 0) return cudaSuccess;
  const int group = p.dims.heads / p.dims.kv_heads;
  if (group > 16 || (p.dims.head_dim != 64 && p.dims.head_dim != 128)) {
    return cudaErrorInvalidValue;
  }
  if (p.max_lists < 1 || p.dims.heads % p.max_lists != 0) return cudaErrorInvalidValue;
  const dim3 records(p.num_seqs);
  if (cudaError_t e = LaunchOverlapping(DecideKernel, records, kThreads, 0, stream, p);
      e != cudaSuccess) {
    return e;
  }
  if (p.candidate_cap == 0) return cudaSuccess;  // every record runs dense this step
  if (p.chunk_tokens < kTile || p.candidate_cap % p.chunk_tokens != 0) {
    return cudaErrorInvalidValue;
  }
  const int chunks = p.candidate_cap / p.chunk_tokens;
  const dim3 scores(chunks, p.dims.kv_heads, p.num_seqs);
  cudaError_t e = cudaSuccess;
  const int per_thread = group <= 4 ? 1 : (group <= 8 ? 2 : 4);
  switch (p.dims.head_dim * 8 + per_thread) {
    case 64 * 8 + 1: e = LaunchScore<64, 1>(p, scores, stream); break;
    case 64 * 8 + 2: e = LaunchScore<64, 2>(p, scores, stream); break;
    case 64 * 8 + 4: e = LaunchScore<64, 4>(p, scores, stream); break;
    case 128 * 8 + 1: e = LaunchScore<128, 1>(p, scores, stream); break;
    case 128 * 8 + 2: e = LaunchScore<128, 2>(p, scores, stream); break;
    case 128 * 8 + 4: e = LaunchScore<128, 4>(p, scores, stream); break;
    default: return cudaErrorInvalidValue;
  }
  if (e != cudaSuccess) return e;
  const dim3 chunked(chunks, p.num_seqs, p.max_lists);
  const dim3 normalise(chunks * kNormaliseSplit, p.num_seqs, p.max_lists);
  const dim3 picks(p.num_seqs, p.max_lists);
  const size_t norm_smem = size_t{2} * p.dims.heads * sizeof(float);
  if ((e = LaunchOverlapping(NormaliseKernel, normalise, kThreads, norm_smem, stream, p)) !=
          cudaSuccess ||
      (e = LaunchOverlapping(PickKernel<1>, picks, kThreads, 0, stream, p)) != cudaSuccess ||
      (e = LaunchOverlapping(HistogramKernel<2>, chunked, kThreads, 0, stream, p)) != cudaSuccess ||
      (e = LaunchOverlapping(PickKernel<2>, picks, kThreads, 0, stream, p)) != cudaSuccess ||
      (e = LaunchOverlapping(HistogramKernel<3>, chunked, kThreads, 0, stream, p)) != cudaSuccess ||
      (e = LaunchOverlapping(PickKernel<3>, picks, kThreads, 0, stream, p)) != cudaSuccess ||
      (e = LaunchOverlapping(CountKernel, chunked, kThreads, 0, stream, p)) != cudaSuccess) {
    return e;
  }
  return LaunchOverlapping(CompactKernel, chunked, kThreads, 0, stream, p);
}

}  // namespace sparseserve::kernels::cuda
