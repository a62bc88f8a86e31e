// Dense causal attention for prompt chunks over the paged KV layout, on tensor cores.
//
// FlashAttention structure (papers/kernel-references.md): a warpgroup (4 warps) owns a 64-row
// query tile of one head (16 rows per warp); it walks the 64-key tiles the tile can see, each key
// row gathered through the block table with cp.async, computes S = QKᵀ and O += PV on the tensor
// cores and keeps an online softmax in registers. On Hopper the products are wgmma
// (wgmma_tile.cuh) and a CTA holds up to 4 query heads of one GQA group, a warpgroup each, over
// the same K/V tiles; mma.sync m16n8k16 with one head per CTA stays as the A/B alternative
// ($SPARSESERVE_PREFILL_MMA=sync). GQA K/V rows are read in place (never repeated in memory). K/V
// tiles are double-buffered: the next tile's copies are queued before this tile's products.
// Masks and sliding windows (kernels/attention_visibility.h) apply per score; tiles no row of the
// CTA can see through its window are never loaded. The tile math is shared with the sparse
// kernel (prefill_tile.cuh's TileMath). Split-KV tiles (PrefillSplit) walk one part of the keys
// and leave partial states for the split-KV merge (flash-decoding's split, for few-row chunks).
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "kernels/attention_visibility.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/per_device_once.cuh"
#include "kernels/cuda/prefill_tile.cuh"
#include "kernels/cuda/prefill_ws.cuh"
#include "kernels/cuda/wgmma_tile.cuh"
#include "kernels/minference_index.h"

namespace sparseserve::kernels::cuda {
namespace {

// The tile math shared with the sparse prefill kernel.
using prefill_tile::kKeys;
using prefill_tile::kLog2e;
using prefill_tile::kRows;
using prefill_tile::kThreads;
using prefill_tile::ScoreKey;
using prefill_tile::SoftmaxStep;
using prefill_tile::StoreRows;
using prefill_tile::TileMath;

// Queues the copy of the 64 key and value rows [first_key, first_key + 64), zeros from kv_end on.
template <class Math>
__device__ __forceinline__ void LoadKvTile(unsigned char* k_dst, unsigned char* v_dst,
                                           const __nv_bfloat16* kv, const int32_t* table,
                                           int first_key, int kv_end, const AttentionDims& dims,
                                           int64_t token_stride, int kv_head) {
  Math::LoadKv(
      k_dst, v_dst, kv, table,
      [&](int r) {
        const int pos = first_key + r;
        return pos < kv_end ? pos : -1;
      },
      dims, token_stride, kv_head);
}

// kMasked: the variant for batches with masks or windows (kernels/attention_visibility.h per
// score, windowed tiles skipped); the dense variant keeps only the causal bound, so dense
// prefill pays nothing for the rule.
// kHeads: query heads of one KV head per CTA (2 or 4 on wgmma when they divide the GQA group),
// one warpgroup each, sharing every K/V tile copied: 1 / kHeads of the copies per product, and
// warpgroups whose softmax and tensor-core work interleave.
// Several heads are held to 128 registers a thread (two CTAs of 2 heads, or one of 4, per SM).
// A split part's rows: normalised f32 outputs and their log-sum-exp (natural log, scaled
// scores) at slot `slot0` + r * `row_stride` for tile row r, as the split-KV merge reads them. A
// row that saw no key in this part writes zeros and -inf (weight 0 in the merge).
template <int D>
__device__ __forceinline__ void StorePartialRows(const PrefillSplit& split,
                                                 const float (&o)[D / 8][4],
                                                 const float (&row_max)[2],
                                                 const float (&row_sum)[2], int64_t slot0,
                                                 int64_t row_stride, int rows, int heads, int head,
                                                 float scale, int warp, int lane) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float sum = prefill_tile::QuadRowSum(row_sum[h]);
    const int r = prefill_tile::FragmentRow(warp, lane, h);
    if (r >= rows) continue;
    const int64_t slot = slot0 + r * row_stride;
    const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
    float* dst = split.partial_out + (slot * heads + head) * D;
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt) {
      const int col = dt * 8 + (lane % 4) * 2;
      *reinterpret_cast<float2*>(dst + col) =
          make_float2(o[dt][2 * h] * inv, o[dt][2 * h + 1] * inv);
    }
    if (lane % 4 == 0) {
      split.partial_lse[slot * heads + head] =
          sum > 0.0f ? row_max[h] * scale + __logf(sum) : -INFINITY;
    }
  }
}

template <int D, bool kMasked, bool kWgmma, int kHeads>
__global__ void __launch_bounds__(kThreads* kHeads, kHeads == 2 ? 2 : 1)
    PrefillAttentionKernel(const __nv_bfloat16* __restrict__ q,
                           const __nv_bfloat16* __restrict__ kv, AttentionSeqs seq_arrays,
                           const int2* tiles, AttentionDims dims, PrefillTileGates gates,
                           PrefillSplit split, __nv_bfloat16* __restrict__ out) {
  using Math = TileMath<D, kWgmma, 2, kHeads>;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const auto smem = Math::Carve(smem_raw);
  const int group = threadIdx.x / kThreads;  // this warpgroup's head among the CTA's
  unsigned char* q_s = smem.q + group * Math::kQBytes;

  const int2 tile = tiles[blockIdx.x];
  const int head = blockIdx.y * kHeads + group;
  bool active = true;  // this warpgroup computes (uniform over it)
  if (gates.areas != nullptr) {
    // An MInference tile runs here only for heads its index switched to dense; the sparse heads
    // are another kernel's. A CTA none of whose heads runs leaves at once (all together, before
    // any barrier); a warpgroup whose head does not still copies and joins the barriers.
    const int2 area = gates.areas[blockIdx.x];
    auto runs_here = [&](int h) {
      return area.x < 0 || gates.index[area.x + int64_t{h} * area.y] ==
                               static_cast<int32_t>(HeadPatternKind::kDense);
    };
    bool any = false;
#pragma unroll
    for (int g = 0; g < kHeads; ++g) {
      const bool runs = runs_here(blockIdx.y * kHeads + g);
      any = any || runs;
      if (g == group) active = runs;
    }
    if (!any) return;
  }
  const AttentionSeqInfo seq = seq_arrays.seqs[tile.x];
  KeyVisibility vis;
  vis.q_len = seq.q_len;
  vis.kv_len = seq.kv_len;
  vis.window = seq.window;
  vis.sink_tokens = seq.sink_tokens;
  vis.mask = seq.mask_begin >= 0 ? seq_arrays.masks + seq.mask_begin : nullptr;
  const int q0 = tile.y;  // first query row of this tile within the sequence
  const int kv_head = head / (dims.heads / dims.kv_heads);
  const int warp = (threadIdx.x / 32) % 4;  // within the warpgroup
  const int lane = threadIdx.x % 32;
  const int rows = min(kRows, seq.q_len - q0);
  const int first_pos = seq.kv_len - seq.q_len + q0;  // absolute position of tile row 0
  // Keys any row of the tile may see: the last valid row's causal bound, every key under a mask.
  const int kv_end = kMasked && vis.mask != nullptr ? seq.kv_len : first_pos + rows;
  const int num_tiles = (kv_end + kKeys - 1) / kKeys;
  // With a window the tiles between the sinks and the first row's window are skipped: the loop
  // visits tiles [0, lead) and then [start_tile, num_tiles).
  const int start_tile = kMasked ? WindowBegin(vis, q0) / kKeys : 0;
  const int lead =
      kMasked && vis.window > 0 ? min((vis.sink_tokens + kKeys - 1) / kKeys, start_tile) : 0;
  const int tile_count = lead + num_tiles - start_tile;
  auto tile_at = [&](int jj) { return jj < lead ? jj : start_tile + jj - lead; };
  // Scores checked key by key (mask or window), not only against the causal bound.
  const bool per_key = kMasked && (vis.window > 0 || vis.mask != nullptr);
  const int64_t token_stride = int64_t{dims.kv_heads} * D;
  const int32_t* table = seq_arrays.block_tables + seq.table_begin;
  // A split part walks visited tiles [jj_begin, jj_end) of the tile's (no window: tile_at(jj) =
  // jj); one without any leaves empty partials.
  int jj_begin = 0, jj_end = tile_count;
  // Part z of tile t: its row r's partial state at slot (t * splits + z) + r * tiles * splits.
  auto slot0 = [&] { return int64_t{blockIdx.x} * split.splits + blockIdx.z; };
  auto row_stride = [&] { return int64_t{gridDim.x} * split.splits; };
  if (split.splits > 1) {
    jj_begin = static_cast<int>(int64_t{tile_count} * blockIdx.z / split.splits);
    jj_end = static_cast<int>(int64_t{tile_count} * (blockIdx.z + 1) / split.splits);
    if (jj_begin == jj_end) {
      if (!active) return;
      float zeros[D / 8][4] = {};
      const float no_max[2] = {-INFINITY, -INFINITY}, no_sum[2] = {0.0f, 0.0f};
      StorePartialRows<D>(split, zeros, no_max, no_sum, slot0(), row_stride(), rows, dims.heads,
                          head, dims.scale, warp, lane);
      return;
    }
  }

  // The Q tile and the first K and V tiles form one copy group; each iteration queues the next
  // tile's into the other stage while it computes on this one.
  Math::LoadQ(q_s, q, seq.q_begin + q0, rows, dims.heads, head);
  LoadKvTile<Math>(smem.k(0), smem.v(0), kv, table, tile_at(jj_begin) * kKeys, kv_end, dims,
                   token_stride, kv_head);
  CpAsyncCommit();

  uint32_t q_frag[D / 16][4];
  float o[D / 8][4];
#pragma unroll
  for (int i = 0; i < D / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
  float row_max[2] = {-INFINITY, -INFINITY};
  float row_sum[2] = {0.0f, 0.0f};  // this thread's share; summed over the 4-lane quad at the end
  const float scale_log2 = dims.scale * kLog2e;
  // Absolute positions of the two rows this thread holds (fragment rows lane/4 and lane/4 + 8).
  const int my_pos0 = first_pos + warp * 16 + lane / 4;
  const int my_pos1 = my_pos0 + 8;
  const int my_row0 = q0 + warp * 16 + lane / 4;  // the same rows within the sequence's chunk
  const int my_row1 = my_row0 + 8;
  const int warp_first_pos = first_pos + warp * 16;

  for (int jj = jj_begin; jj < jj_end; ++jj) {
    const int j = tile_at(jj);
    const int stage = (jj - jj_begin) & 1;
    CpAsyncWait<0>();  // tile j's K and V (the only group in flight) have landed
    Math::Landed();
    __syncthreads();  // ... for every warp, and every warp is done with the other stage
    if (jj == jj_begin) Math::QFragments(q_frag, q_s, warp, lane);  // first visited tile
    if (jj + 1 < jj_end) {
      LoadKvTile<Math>(smem.k(stage ^ 1), smem.v(stage ^ 1), kv, table, tile_at(jj + 1) * kKeys,
                       kv_end, dims, token_stride, kv_head);
      CpAsyncCommit();
    }
    if (!active) continue;
    float s[8][4];
    Math::Scores(s, q_frag, q_s, smem.k(stage), lane);

    // Causal mask (only tiles reaching past this warp's first row need it), online softmax.
    const int tile_first_key = j * kKeys;
    const bool needs_mask = per_key || tile_first_key + kKeys - 1 > warp_first_pos;
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float v = s[nt][e];
        if (needs_mask) {
          const int key = tile_first_key + ScoreKey(nt, e, lane);
          if (per_key) {
            const int row = e < 2 ? my_row0 : my_row1;
            if (row >= seq.q_len || key >= seq.kv_len || !KeyVisible(vis, row, key)) v = -INFINITY;
          } else if (key > (e < 2 ? my_pos0 : my_pos1)) {
            v = -INFINITY;
          }
        }
        s[nt][e] = v;
      }
    }
    SoftmaxStep<D>(s, o, row_max, row_sum, scale_log2);
    Math::Pv(o, s, smem.v(stage), lane);
  }

  if (!active) return;
  if (split.splits > 1) {
    StorePartialRows<D>(split, o, row_max, row_sum, slot0(), row_stride(), rows, dims.heads, head,
                        dims.scale, warp, lane);
  } else {
    StoreRows<D>(out, o, row_sum, seq.q_begin + q0, rows, dims.heads, head, warp, lane);
  }
}

// The warp-specialised dense variant (prefill_ws.cuh): two query heads of one KV head per CTA, a
// consumer warpgroup each, over one stream of the tile's key tiles that the producer warpgroup
// copies once for both — whole tiles by TMA (its thread 0), the partial last one gathered (all of
// it). Unmasked chunks only (the causal bound; split parts too): masks and windows stay on
// PrefillAttentionKernel.
constexpr int kProducerRegisters = 56;  // the producer mostly issues TMA copies

template <int D, int kStages>
__global__ void __launch_bounds__(prefill_ws::Layout<D, 2, 1, kStages>::kThreads, 1)
    PrefillWsKernel(const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ kv,
                    AttentionSeqs seq_arrays, const int2* tiles, AttentionDims dims,
                    PrefillTileGates gates, PrefillSplit split, __nv_bfloat16* __restrict__ out,
                    const __grid_constant__ prefill_ws::KvTensorMap kv_map, bool take_turns) {
  using St = prefill_ws::Stages<D, 2, 1, kStages>;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const St st = St::Carve(smem_raw, 0);
  const int role = threadIdx.x / prefill_ws::kConsumerThreads;      // 0, 1: consumers; 2: producer
  const int ptid = threadIdx.x - 2 * prefill_ws::kConsumerThreads;  // within the producer
  const int2 tile = tiles[blockIdx.x];
  const int head = blockIdx.y * 2 + role;  // a consumer's
  bool active = true, both_active = true;
  if (gates.areas != nullptr) {
    // As PrefillAttentionKernel: only heads the MInference index switched to dense run here; a
    // CTA none of whose heads runs leaves at once, all together.
    const int2 area = gates.areas[blockIdx.x];
    auto runs_here = [&](int h) {
      return area.x < 0 || gates.index[area.x + int64_t{h} * area.y] ==
                               static_cast<int32_t>(HeadPatternKind::kDense);
    };
    const bool first = runs_here(blockIdx.y * 2), second = runs_here(blockIdx.y * 2 + 1);
    if (!first && !second) return;
    active = role == 0 ? first : second;
    both_active = first && second;
  }
  const AttentionSeqInfo seq = seq_arrays.seqs[tile.x];
  const int q0 = tile.y;
  const int kv_head = (blockIdx.y * 2) / (dims.heads / dims.kv_heads);
  const int rows = min(kRows, seq.q_len - q0);
  const int first_pos = seq.kv_len - seq.q_len + q0;
  const int kv_end = first_pos + rows;  // the last row's causal bound
  const int tile_count = (kv_end + kKeys - 1) / kKeys;
  int jj_begin = 0, jj_end = tile_count;
  const int warp = (threadIdx.x / 32) % 4;
  const int lane = threadIdx.x % 32;
  const int64_t slot0 = int64_t{blockIdx.x} * split.splits + blockIdx.z;
  const int64_t row_stride = int64_t{gridDim.x} * split.splits;
  if (split.splits > 1) {
    jj_begin = static_cast<int>(int64_t{tile_count} * blockIdx.z / split.splits);
    jj_end = static_cast<int>(int64_t{tile_count} * (blockIdx.z + 1) / split.splits);
    if (jj_begin == jj_end) {
      if (role == 2 || !active) return;
      float zeros[D / 8][4] = {};
      const float no_max[2] = {-INFINITY, -INFINITY}, no_sum[2] = {0.0f, 0.0f};
      StorePartialRows<D>(split, zeros, no_max, no_sum, slot0, row_stride, rows, dims.heads, head,
                          dims.scale, warp, lane);
      return;
    }
  }
  if (threadIdx.x == 0) st.Init();
  __syncthreads();

  const int32_t* table = seq_arrays.block_tables + seq.table_begin;
  const int64_t token_stride = int64_t{dims.kv_heads} * D;
  if (role == 2) {
    prefill_ws::ShrinkRegisters<kProducerRegisters>();
    const bool tma_ok = kv_map.box_rows > 0;
    if (ptid == 0 && tma_ok) PrefetchTensorMap(&kv_map.map);
    const int64_t value_offset = int64_t{dims.block_tokens} * token_stride;
    int t = 0;
    for (int jj = jj_begin; jj < jj_end; ++jj, ++t) {
      const prefill_ws::RingSlot<kStages> ring(t);
      const int first_key = jj * kKeys;
      const bool whole = tma_ok && first_key + kKeys <= kv_end;
      prefill_ws::TileRows<D, St::L::kCopiers> gathered;
      if (!whole) {
        gathered.Resolve(
            table, [&](int r) { return first_key + r < kv_end ? first_key + r : -1; }, dims, ptid);
      }
      auto load = [&](unsigned char* dst, uint64_t* full, bool values) {
        if (whole) {
          if (ptid == 0) {
            prefill_ws::TmaTile<D>(dst, &kv_map.map, kv_map.box_rows, table, first_key, values,
                                   dims, kv_head, full);
          }
        } else {
          gathered.Copy(dst, kv, token_stride, values ? value_offset : 0, kv_head);
          prefill_ws::ArriveWhenGathered<St::L::kCopiers>(full, 0, ptid);
        }
      };
      MbarrierWait(st.empty_k(ring.slot), ring.empty_parity);
      if (ptid == 0) {
        const int count = min(kKeys, kv_end - first_key);
        *st.header(ring.slot) = make_int4(first_key, count, first_key, first_key + count - 1);
      }
      load(st.k(ring.slot), st.full_k(ring.slot), false);
      MbarrierWait(st.empty_v(ring.slot), ring.empty_parity);
      load(st.v(ring.slot), st.full_v(ring.slot), true);
    }
    const prefill_ws::RingSlot<kStages> end(t);
    MbarrierWait(st.empty_k(end.slot), end.empty_parity);
    if (ptid == 0) {
      *st.header(end.slot) = make_int4(0, 0, 0, 0);
      MbarrierArrive(st.full_k(end.slot));
    }
    // No wait: every gather completes a full barrier some consumer waits on before the CTA ends.
    return;
  }

  prefill_ws::GrowRegisters<prefill_ws::ConsumerRegisters(2, kProducerRegisters)>();
  prefill_ws::ConsumerRows mine{q, seq.q_begin + q0, rows, dims.heads, head, first_pos, false, 0,
                                0};
  prefill_ws::ConsumerState<D> state;
  // Both heads computing: they take turns at the tensor cores (unless the A/B switch says not).
  const prefill_ws::ProductTurns turns{take_turns && both_active, role};
  prefill_ws::ConsumeTiles<D, false>(st, role, st.q(role), mine, dims.scale * kLog2e, active, turns,
                                     state);
  if (!active) return;
  if (split.splits > 1) {
    StorePartialRows<D>(split, state.o, state.row_max, state.row_sum, slot0, row_stride, rows,
                        dims.heads, head, dims.scale, warp, lane);
  } else {
    StoreRows<D>(out, state.o, state.row_sum, seq.q_begin + q0, rows, dims.heads, head, warp, lane);
  }
}

template <int D>
cudaError_t LaunchWs(const bf16_t* q, const bf16_t* kv_layer, const AttentionSeqs& seqs,
                     const int2* tiles, int num_tiles, const AttentionDims& dims,
                     const PrefillTileGates& gates, const PrefillSplit& split, bf16_t* out,
                     cudaStream_t stream) {
  constexpr int kStages = 4;
  using L = prefill_ws::Layout<D, 2, 1, kStages>;
  static std::atomic<uint64_t> configured{0};
  const cudaError_t attr = OncePerDevice(configured, [] {
    return cudaFuncSetAttribute(PrefillWsKernel<D, kStages>,
                                cudaFuncAttributeMaxDynamicSharedMemorySize, L::kBytes);
  });
  if (attr != cudaSuccess) return attr;
  static const bool take_turns = PrefillWsOption("SPARSESERVE_PREFILL_WS_TURNS", true);
  const prefill_ws::KvTensorMap map = prefill_ws::KvTensorMapOf(kv_layer, dims);
  const dim3 grid(num_tiles, dims.heads / 2, split.splits);
  PrefillWsKernel<D, kStages><<<grid, L::kThreads, L::kBytes, stream>>>(
      reinterpret_cast<const __nv_bfloat16*>(q), reinterpret_cast<const __nv_bfloat16*>(kv_layer),
      seqs, tiles, dims, gates, split, reinterpret_cast<__nv_bfloat16*>(out), map, take_turns);
  return cudaGetLastError();
}

template <int D, bool kMasked, bool kWgmma, int kHeads>
cudaError_t Launch(const bf16_t* q, const bf16_t* kv_layer, const AttentionSeqs& seqs,
                   const int2* tiles, int num_tiles, const AttentionDims& dims,
                   const PrefillTileGates& gates, const PrefillSplit& split, bf16_t* out,
                   cudaStream_t stream) {
  constexpr size_t kSmem = TileMath<D, kWgmma, 2, kHeads>::kSmemBytes;
  static std::atomic<uint64_t> configured{0};
  const cudaError_t attr = OncePerDevice(configured, [] {
    return cudaFuncSetAttribute(PrefillAttentionKernel<D, kMasked, kWgmma, kHeads>,
                                cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  });
  if (attr != cudaSuccess) return attr;
  const dim3 grid(num_tiles, dims.heads / kHeads, split.splits);
  PrefillAttentionKernel<D, kMasked, kWgmma, kHeads><<<grid, kThreads * kHeads, kSmem, stream>>>(
      reinterpret_cast<const __nv_bfloat16*>(q), reinterpret_cast<const __nv_bfloat16*>(kv_layer),
      seqs, tiles, dims, gates, split, reinterpret_cast<__nv_bfloat16*>(out));
  return cudaGetLastError();
}

// The tile math and the heads per CTA chosen at run time, the rest at compile time.
template <int D, bool kMasked, class... Args>
cudaError_t LaunchVariant(bool wgmma, int heads, Args... args) {
  if (!wgmma) return Launch<D, kMasked, false, 1>(args...);
  switch (heads) {
    case 4: return Launch<D, kMasked, true, 4>(args...);
    case 2: return Launch<D, kMasked, true, 2>(args...);
    default: return Launch<D, kMasked, true, 1>(args...);
  }
}

}  // namespace

cudaError_t LaunchPrefillAttention(const bf16_t* q, const bf16_t* kv_layer,
                                   const AttentionSeqs& seqs, const int2* tiles, int num_tiles,
                                   const AttentionDims& dims, bool masked,
                                   const PrefillTileGates& gates, const PrefillSplit& split,
                                   bf16_t* out, cudaStream_t stream) {
  if (num_tiles == 0) return cudaSuccess;
  if (split.splits < 1 || split.splits > 65535 ||
      (split.splits > 1 && (split.partial_out == nullptr || split.partial_lse == nullptr))) {
    return cudaErrorInvalidValue;
  }
  const bool wgmma = PrefillTilesOnWgmma();
  const int group = dims.heads / dims.kv_heads;
  if (PrefillOnWarpSpecialized(group, masked)) {
    switch (dims.head_dim) {
      case 64:
        return LaunchWs<64>(q, kv_layer, seqs, tiles, num_tiles, dims, gates, split, out, stream);
      case 128:
        return LaunchWs<128>(q, kv_layer, seqs, tiles, num_tiles, dims, gates, split, out, stream);
      default: return cudaErrorInvalidValue;
    }
  }
  const int heads = PrefillCtaHeads(group, masked);
  switch (dims.head_dim) {
    case 64:
      return masked ? LaunchVariant<64, true>(wgmma, heads, q, kv_layer, seqs, tiles, num_tiles,
                                              dims, gates, split, out, stream)
                    : LaunchVariant<64, false>(wgmma, heads, q, kv_layer, seqs, tiles, num_tiles,
                                               dims, gates, split, out, stream);
    case 128:
      return masked ? LaunchVariant<128, true>(wgmma, heads, q, kv_layer, seqs, tiles, num_tiles,
                                               dims, gates, split, out, stream)
                    : LaunchVariant<128, false>(wgmma, heads, q, kv_layer, seqs, tiles, num_tiles,
                                                dims, gates, split, out, stream);
    default: return cudaErrorInvalidValue;
  }
}

namespace prefill_ws {

KvTensorMap KvTensorMapOf(const bf16_t* kv_layer, const AttentionDims& dims) {
  KvTensorMap m{};
  static const PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault,
                                         &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      return static_cast<PFN_cuTensorMapEncodeTiled_v12000>(nullptr);
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  // Boxes of at least 8 rows: each lands on a 1024-byte boundary, where the 128-byte swizzle
  // repeats (blocks of 1, 2 or 4 tokens, which only the C API allows, are gathered).
  const int box_rows = std::min(kKeys, dims.block_tokens);
  if (encode == nullptr || box_rows < 8 || kKeys % box_rows != 0 ||
      (dims.block_tokens > kKeys && dims.block_tokens % kKeys != 0)) {
    return m;
  }
  const cuuint64_t row_elems = static_cast<cuuint64_t>(dims.kv_heads) * dims.head_dim;
  // The row count only bounds the boxes, which always lie inside the layer's blocks.
  const cuuint64_t global_dim[2] = {row_elems, cuuint64_t{1} << 31};
  const cuuint64_t global_stride[1] = {row_elems * sizeof(bf16_t)};
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(kKeys), static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t element_stride[2] = {1, 1};
  if (encode(&m.map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<bf16_t*>(kv_layer), global_dim,
             global_stride, box, element_stride, CU_TENSOR_MAP_INTERLEAVE_NONE,
             CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
             CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) != CUDA_SUCCESS) {
    return m;
  }
  m.box_rows = box_rows;
  return m;
}

}  // namespace prefill_ws

bool PrefillWsOption(const char* name, bool fallback) {
  const char* env = std::getenv(name);
  return env == nullptr ? fallback : std::strcmp(env, "0") != 0;
}

bool PrefillWarpSpecialized() {
  static const bool enabled = [] {
    const char* env = std::getenv("SPARSESERVE_PREFILL_WS");
    return env == nullptr || std::strcmp(env, "0") != 0;
  }();
  return enabled && PrefillTilesOnWgmma();
}

bool PrefillOnWarpSpecialized(int group, bool masked) {
  return !masked && group % 2 == 0 && PrefillWarpSpecialized();
}

int PrefillCtaHeads(int group, bool masked) {
  if (PrefillOnWarpSpecialized(group, masked)) return 2;
  int heads = 1;
  while (PrefillTilesOnWgmma() && heads * 2 <= PrefillHeadsPerCta() && group % (heads * 2) == 0) {
    heads *= 2;
  }
  return heads;
}

bool PrefillSplitKv() {
  static const bool split = [] {
    const char* env = std::getenv("SPARSESERVE_PREFILL_SPLIT_KV");
    return env == nullptr || std::strcmp(env, "0") != 0;
  }();
  return split;
}

int PrefillHeadsPerCta() {
  static const int heads = [] {
    const char* env = std::getenv("SPARSESERVE_PREFILL_HEADS_PER_CTA");
    const int n = env == nullptr ? 4 : std::atoi(env);
    return n >= 4 ? 4 : n >= 2 ? 2 : 1;
  }();
  return heads;
}

bool PrefillTilesOnWgmma() {
  static const bool wgmma = [] {
    const char* env = std::getenv("SPARSESERVE_PREFILL_MMA");
    return env == nullptr || std::strcmp(env, "sync") != 0;
  }();
  return wgmma;
}

}  // namespace sparseserve::kernels::cuda
