// MInference sparse attention on tensor cores (head_dim 64/128): a CTA of 4 warps per (64-row
// query block, query head), like the dense prefill kernel, whose tile math it shares
// (prefill_tile.cuh). Its 64-key tiles are packed from the head's cover of the query block
// (kernels/minference_index.h): vertical-slash's merged slash runs, then the gathered columns
// outside them (PIT, papers/minference.md "Kernels"); block-sparse's selected key blocks; or
// A-shape's sinks and window. Keys are packed across run boundaries, so a tile is full except
// the last; each key row is loaded through the block table (runs start anywhere), the next
// tile's rows while this tile's products run (two K/V stages; warp 0 packs two tiles ahead). The
// causal bound (and A-shape's rule) apply per score (the warp-specialised variant below skips the
// test on full tiles every row of a warp sees). Heads the dense switch fired for leave at once:
// the dense prefill kernel runs them.
#include <cuda_bf16.h>

#include <type_traits>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/minference_cover.cuh"
#include "kernels/cuda/per_device_once.cuh"
#include "kernels/cuda/prefill_tile.cuh"
#include "kernels/cuda/prefill_ws.cuh"
#include "kernels/minference_index.h"

namespace sparseserve::kernels::cuda {
namespace {

using prefill_tile::kKeys;
using prefill_tile::kLog2e;
using prefill_tile::kRows;
using prefill_tile::kThreads;
using prefill_tile::ScoreKey;
using prefill_tile::SoftmaxStep;
using prefill_tile::StoreRows;
using prefill_tile::TileMath;

static_assert(kRows == minference::kBlockRows, "a CTA's rows are one MInference query block");

// Packs the cover of one query block into 64-key tiles. Run by the 32 lanes of one warp with
// warp-uniform state: ranges (runs, blocks, sinks, window) are written lane-parallel, gathered
// columns are tested 32 at a time (binary search of the slash offsets) and compacted by ballot.
struct CoverPacker {
  HeadPatternKind kind;
  int32_t row_begin, row_end;  // absolute rows of the block: keys < row_end
  const int32_t* columns;      // VS: ascending columns [n_columns]
  const int32_t* slashes;      // VS: ascending offsets [n_slashes]
  const int32_t* blocks;       // BS: selected key blocks [n_blocks], ascending
  int32_t n_columns, n_slashes, n_blocks;
  int32_t sinks, window;  // A-shape
  // The range being emitted [cur_b, cur_e) and the next source: VS slash / BS block / A-shape
  // range index, then VS's next column.
  int32_t cur_b = 0, cur_e = 0;
  int32_t next = 0;
  int32_t next_column = 0;
  // VS run merging (ForEachVsCover's state): the run still open.
  bool open = false;
  int32_t open_b = 0, open_e = 0;
  // With aligned_blocks (the warp-specialised kernel, whose producer copies whole 64-key blocks
  // by TMA), block-sparse blocks and ranges of at least kAlignedRunKeys keys are emitted as tiles
  // that are each one aligned 64-key block, the keys outside the range listed as -1 (loaded but
  // masked: at most 63 wasted keys at each end of a long range); shorter ranges and the columns
  // are packed and gathered. tile_block: after Fill, the first key of the tile's block, or -1.
  static constexpr int32_t kAlignedRunKeys = 192;
  bool aligned_blocks = false;
  bool range_aligned = false;
  int32_t tile_block = -1;

  // The packer of a (sequence, head) index area's cover of the query block of `rows` rows from
  // chunk row q0 (absolute position first_pos).
  static __device__ CoverPacker Of(const MInferenceSeqInfo& seq, const int32_t* area, int q0,
                                   int first_pos, int rows) {
    CoverPacker packer;
    const int32_t* body = area + minference::kHeaderWords;
    packer.kind = static_cast<HeadPatternKind>(area[0]);
    packer.row_begin = first_pos;
    packer.row_end = first_pos + rows;
    packer.columns = body;
    packer.n_columns = area[1];
    packer.slashes = body + seq.cap_columns;
    packer.n_slashes = area[2];
    packer.blocks = body + int64_t{q0 / minference::kBlockRows} * (1 + seq.cap_blocks) + 1;
    packer.n_blocks = packer.kind == HeadPatternKind::kBlockSparse ? packer.blocks[-1] : 0;
    packer.sinks = area[1];
    packer.window = area[2];
    return packer;
  }

  // The next range; false when the ranges are exhausted.
  __device__ bool NextRange() {
    switch (kind) {
      case HeadPatternKind::kVerticalSlash:
        // Ascending offsets give descending starts: walk back, merging overlapping runs.
        while (next < n_slashes) {
          const int32_t slash = slashes[n_slashes - 1 - next++];
          const int32_t e = row_end - slash;
          if (e <= 0) continue;
          const int32_t b = row_begin - slash > 0 ? row_begin - slash : 0;
          if (open && b <= open_e) {
            open_e = max(open_e, e);
            continue;
          }
          const bool had = open;
          cur_b = open_b;
          cur_e = open_e;
          open = true;
          open_b = b;
          open_e = e;
          if (had) return true;
        }
        if (!open) return false;
        open = false;
        cur_b = open_b;
        cur_e = open_e;
        return true;
      case HeadPatternKind::kBlockSparse:
        if (next >= n_blocks) return false;
        cur_b = blocks[next++] * minference::kBlockRows;
        cur_e = min(cur_b + minference::kBlockRows, row_end);
        return true;
      case HeadPatternKind::kAShape: {
        // k < sinks or k > p - window over the block's rows: the sinks below the first row's
        // window, then that window up to the last row.
        const int32_t window_begin = max(row_begin - window + 1, 0);
        if (next == 0) {
          next = 1;
          cur_b = 0;
          cur_e = min(sinks, window_begin);
          return true;
        }
        if (next == 1) {
          next = 2;
          cur_b = window_begin;
          cur_e = row_end;
          return true;
        }
        return false;
      }
      default: return false;
    }
  }

  __device__ bool InRun(int32_t c) const {
    return InSlashRun(slashes, n_slashes, row_begin, row_end, c);
  }

  // Fills keys[0, 64) with the next tile (-1 past the cover) and returns its key count.
  __device__ int Fill(int32_t* keys, int lane) {
    int n = 0;
    tile_block = -1;
    while (n < kKeys) {
      if (cur_b >= cur_e) {
        if (!NextRange()) break;
        range_aligned = aligned_blocks &&
                        (kind == HeadPatternKind::kBlockSparse || cur_e - cur_b >= kAlignedRunKeys);
        continue;
      }
      if (range_aligned) {
        if (n > 0) break;  // the packed tile first (columns may still fill it)
        const int32_t block = cur_b / kKeys * kKeys;
        for (int t = lane; t < kKeys; t += 32) {
          keys[t] = block + t >= cur_b && block + t < cur_e ? block + t : -1;
        }
        const int32_t end = min(cur_e, block + kKeys);
        n = end - cur_b;
        cur_b = end;
        tile_block = block;
        return n;
      }
      const int take = min(kKeys - n, cur_e - cur_b);
      for (int t = lane; t < take; t += 32) keys[n + t] = cur_b + t;
      n += take;
      cur_b += take;
    }
    if (kind == HeadPatternKind::kVerticalSlash) {
      while (n < kKeys && next_column < n_columns) {
        const int32_t i = next_column + lane;
        bool keep = false;
        int32_t c = 0;
        if (i < n_columns) {
          c = columns[i];
          keep = c < row_end && (i == 0 || columns[i - 1] != c) && !InRun(c);
        }
        const unsigned ballot = __ballot_sync(0xffffffffu, keep);
        const int rank = __popc(ballot & ((1u << lane) - 1u));
        const int room = kKeys - n;
        if (keep && rank < room) keys[n + rank] = c;
        const int found = __popc(ballot);
        const bool past_end = __any_sync(0xffffffffu, i < n_columns && c >= row_end);
        if (found > room) {
          // Resume after the last column taken.
          const unsigned cut = __ballot_sync(0xffffffffu, keep && rank == room - 1);
          next_column += __ffs(cut);
          n = kKeys;
        } else {
          // Ascending columns: once one reaches row_end the rest do too.
          next_column = past_end ? n_columns : next_column + 32;
          n += found;
        }
      }
    }
    for (int t = n + lane; t < kKeys; t += 32) keys[t] = -1;
    return n;
  }
};

template <int D, bool kWgmma>
__global__ void __launch_bounds__(kThreads)
    MInferenceTileKernel(const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ kv,
                         const MInferenceSeqInfo* seqs, const int32_t* block_tables,
                         const int2* tiles, const int32_t* index, AttentionDims dims,
                         __nv_bfloat16* __restrict__ out) {
  using Math = TileMath<D, kWgmma, 2>;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const auto smem = Math::Carve(smem_raw);
  unsigned char* q_s = smem.q;
  // Key positions of tiles jj, jj + 1 (being copied) and jj + 2 (being packed) in iteration jj.
  __shared__ int32_t keys_s[3][kKeys];
  __shared__ int32_t count_s[3];

  const int2 tile = tiles[blockIdx.x];
  const int head = blockIdx.y;
  const MInferenceSeqInfo seq = seqs[tile.x];
  const int32_t* area = index + seq.index_offset + int64_t{head} * seq.words_per_head;
  const auto kind = static_cast<HeadPatternKind>(area[0]);
  if (kind == HeadPatternKind::kDense) return;  // the dense prefill kernel's (whole CTA)
  const int q0 = tile.y;
  const int kv_head = head / (dims.heads / dims.kv_heads);
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int rows = min(kRows, seq.q_len - q0);
  const int first_pos = seq.kv_len - seq.q_len + q0;
  const int64_t token_stride = int64_t{dims.kv_heads} * D;
  const int32_t* table = block_tables + seq.table_begin;

  CoverPacker packer = CoverPacker::Of(seq, area, q0, first_pos, rows);

  if (warp == 0) {
    for (int t = 0; t < 2; ++t) {
      const int n = packer.Fill(keys_s[t], lane);
      if (lane == 0) count_s[t] = n;
    }
  }
  __syncthreads();
  const bool any_keys = count_s[0] > 0;
  Math::LoadQ(q_s, q, seq.q_begin + q0, rows, dims.heads, head);
  Math::LoadKv(
      smem.k(0), smem.v(0), kv, table, [&](int r) { return keys_s[0][r]; }, dims, token_stride,
      kv_head);
  CpAsyncCommit();

  uint32_t q_frag[D / 16][4];
  float o[D / 8][4];
#pragma unroll
  for (int i = 0; i < D / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
  float row_max[2] = {-INFINITY, -INFINITY};
  float row_sum[2] = {0.0f, 0.0f};
  const float scale_log2 = dims.scale * kLog2e;
  const int my_pos0 = first_pos + warp * 16 + lane / 4;
  const int my_pos1 = my_pos0 + 8;
  const bool ashape = kind == HeadPatternKind::kAShape;

  // A block with no key at all (cannot happen with the forced lines, but stays safe) stores zeros.
  for (int jj = 0; any_keys; ++jj) {
    const int cur = jj % 3;
    const int nxt = (jj + 1) % 3;
    const int stage = jj & 1;
    CpAsyncWait<0>();  // tile jj's keys and values (the only group in flight) have landed
    Math::Landed();
    // ... for every warp; and every warp is done with tile jj - 1: its stage and its key list,
    // which warp 0 refills below with tile jj + 2's.
    __syncthreads();
    const bool more = count_s[nxt] > 0;
    if (jj == 0) Math::QFragments(q_frag, q_s, warp, lane);
    if (more) {
      Math::LoadKv(
          smem.k(stage ^ 1), smem.v(stage ^ 1), kv, table, [&](int r) { return keys_s[nxt][r]; },
          dims, token_stride, kv_head);
      CpAsyncCommit();
      if (warp == 0) {
        const int after = (jj + 2) % 3;
        const int n = packer.Fill(keys_s[after], lane);
        if (lane == 0) count_s[after] = n;
      }
    }
    float s[8][4];
    Math::Scores(s, q_frag, q_s, smem.k(stage), lane);
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = keys_s[cur][ScoreKey(nt, e, lane)];
        const int pos = e < 2 ? my_pos0 : my_pos1;
        bool visible = key >= 0 && key <= pos;
        if (ashape) visible = visible && (key < packer.sinks || key > pos - packer.window);
        s[nt][e] = visible ? s[nt][e] : -INFINITY;
      }
    }
    SoftmaxStep<D>(s, o, row_max, row_sum, scale_log2);
    Math::Pv(o, s, smem.v(stage), lane);
    if (!more) break;
  }
  CpAsyncWait<0>();  // nothing stays in flight past the kernel (the empty-cover case)
  StoreRows<D>(out, o, row_sum, seq.q_begin + q0, rows, dims.heads, head, warp, lane);
}

// The warp-specialised variant (prefill_ws.cuh), the default on wgmma: a CTA per (query block,
// pair of query heads), each head's consumer warpgroup draining its own stream of tiles (the heads'
// covers differ). For each stream, half of the producer warpgroup: its first warp packs the cover
// into tiles as above and writes each tile's keys into its stage's list; a tile that is one
// aligned 64-key block (long ranges, block-sparse blocks: CoverPacker::aligned_blocks) is copied
// by TMA, the others (short runs and columns, packed across their boundaries) gathered by both
// warps. Each tile's header carries its smallest and largest key, so the consumers skip the
// per-score test on full tiles every row of a warp sees (ConsumeTiles).
constexpr int kProducerRegisters = 96;  // the cover packer's state and its rows' addresses

template <int D, int kStages>
__global__ void __launch_bounds__(prefill_ws::Layout<D, 2, 2, kStages>::kThreads, 1)
    MInferenceWsKernel(const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ kv,
                       const MInferenceSeqInfo* seqs, const int32_t* block_tables,
                       const int2* tiles, const int32_t* index, AttentionDims dims,
                       __nv_bfloat16* __restrict__ out,
                       const __grid_constant__ prefill_ws::KvTensorMap kv_map, bool aligned_tiles) {
  using St = prefill_ws::Stages<D, 2, 2, kStages>;
  constexpr int kCopiers = St::L::kCopiers;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const int role = threadIdx.x / prefill_ws::kConsumerThreads;      // 0, 1: consumers; 2: producer
  const int ptid = threadIdx.x - 2 * prefill_ws::kConsumerThreads;  // within the producer
  // Consumer c's stream, or the one the producer thread serves.
  const int stream = role < 2 ? role : ptid / kCopiers;
  const St st = St::Carve(smem_raw, stream);
  const int2 tile = tiles[blockIdx.x];
  const int head = blockIdx.y * 2 + stream;
  const MInferenceSeqInfo seq = seqs[tile.x];
  // A head's kind; heads the dense switch fired for (and a missing second head of an odd count)
  // are the dense prefill kernel's. A CTA with neither head to compute leaves at once.
  auto kind_of = [&](int h) {
    return h < dims.heads ? static_cast<HeadPatternKind>(
                                index[seq.index_offset + int64_t{h} * seq.words_per_head])
                          : HeadPatternKind::kDense;
  };
  if (kind_of(blockIdx.y * 2) == HeadPatternKind::kDense &&
      kind_of(blockIdx.y * 2 + 1) == HeadPatternKind::kDense) {
    return;
  }
  const HeadPatternKind kind = kind_of(head);
  const int32_t* area = index + seq.index_offset + int64_t{head} * seq.words_per_head;
  const int q0 = tile.y;
  const int kv_head = head / (dims.heads / dims.kv_heads);
  const int rows = min(kRows, seq.q_len - q0);
  const int first_pos = seq.kv_len - seq.q_len + q0;
  if (threadIdx.x == 0) st.Init();
  __syncthreads();

  if (role == 2) {
    prefill_ws::ShrinkRegisters<kProducerRegisters>();
    const int sptid = ptid % kCopiers;  // within the stream's producer threads
    const int lane = sptid % 32;
    // A dense stream's head may not exist (the second of an odd count): its area is not read.
    const bool dense = kind == HeadPatternKind::kDense;  // an empty stream
    CoverPacker packer{};
    if (!dense) packer = CoverPacker::Of(seq, area, q0, first_pos, rows);
    packer.aligned_blocks = aligned_tiles && kv_map.box_rows > 0;
    if (sptid == 0 && kv_map.box_rows > 0) PrefetchTensorMap(&kv_map.map);
    const int64_t token_stride = int64_t{dims.kv_heads} * D;
    const int64_t value_offset = int64_t{dims.block_tokens} * token_stride;
    const int32_t* table = block_tables + seq.table_begin;
    for (int t = 0;; ++t) {
      const prefill_ws::RingSlot<kStages> ring(t);
      MbarrierWait(st.empty_k(ring.slot), ring.empty_parity);
      int32_t* keys = st.keys(ring.slot);
      if (sptid < 32) {  // the packer's warp-uniform state lives in the stream's first warp
        const int n = dense ? 0 : packer.Fill(keys, lane);
        int lo = 0, hi = -1;  // the tile's smallest and largest key (lo -1 where rows are masked)
        if (n > 0) {
          __syncwarp();
          const int k0 = keys[lane], k1 = keys[lane + 32];
          lo = __reduce_min_sync(0xffffffffu, min(k0, k1));
          hi = __reduce_max_sync(0xffffffffu, max(k0, k1));
        }
        if (lane == 0) *st.header(ring.slot) = make_int4(packer.tile_block, n, lo, hi);
      }
      NamedBarrierSync(prefill_ws::kProducerBarrier + stream, kCopiers);
      const int4 header = *st.header(ring.slot);
      if (header.y == 0) {
        if (sptid == 0) MbarrierArrive(st.full_k(ring.slot));
        break;
      }
      // An aligned block by TMA when its 64 keys lie in the sequence's blocks, else gathered.
      const bool whole = header.x >= 0 && header.x + kKeys <= seq.kv_len;
      prefill_ws::TileRows<D, kCopiers> gathered;
      if (!whole) {
        gathered.Resolve(
            table, [&](int r) { return keys[r]; }, dims, sptid);
      }
      auto load = [&](unsigned char* dst, uint64_t* full, bool values) {
        if (whole) {
          if (sptid == 0) {
            prefill_ws::TmaTile<D>(dst, &kv_map.map, kv_map.box_rows, table, header.x, values, dims,
                                   kv_head, full);
          }
        } else {
          gathered.Copy(dst, kv, token_stride, values ? value_offset : 0, kv_head);
          prefill_ws::ArriveWhenGathered<kCopiers>(full, stream, sptid);
        }
      };
      load(st.k(ring.slot), st.full_k(ring.slot), false);
      MbarrierWait(st.empty_v(ring.slot), ring.empty_parity);
      load(st.v(ring.slot), st.full_v(ring.slot), true);
    }
    // No wait: every gather completes a full barrier some consumer waits on before the CTA ends.
    return;
  }

  prefill_ws::GrowRegisters<prefill_ws::ConsumerRegisters(2, kProducerRegisters)>();
  if (kind == HeadPatternKind::kDense) return;  // its stream is empty; the dense kernel's head
  const bool ashape = kind == HeadPatternKind::kAShape;
  prefill_ws::ConsumerRows mine{q,         seq.q_begin + q0, rows,    dims.heads, head,
                                first_pos, ashape,           area[1], area[2]};
  prefill_ws::ConsumerState<D> state;
  // Each consumer drains its stream through a view whose stream is a compile-time constant, so
  // that the stages' addresses, and the wgmma descriptors made from them, stay in uniform
  // registers (from a runtime stream they were computed per thread and moved over, R2UR by R2UR:
  // ~20% more consumer instructions a tile than the dense kernel's, ncu, bench/RESULTS.md).
  auto consume = [&](auto stream_constant) {
    constexpr int kStream = decltype(stream_constant)::value;
    const St view = St::Carve(smem_raw, kStream);
    prefill_ws::ConsumeTiles<D, true>(view, kStream, view.q(kStream), mine, dims.scale * kLog2e,
                                      true, prefill_ws::ProductTurns{false, kStream}, state);
  };
  if (role == 0) {
    consume(std::integral_constant<int, 0>{});
  } else {
    consume(std::integral_constant<int, 1>{});
  }
  // A block with no key at all (cannot happen with the forced lines, but stays safe) stores zeros.
  StoreRows<D>(out, state.o, state.row_sum, seq.q_begin + q0, rows, dims.heads, head,
               (threadIdx.x / 32) % 4, threadIdx.x % 32);
}

template <int D>
cudaError_t LaunchWs(const bf16_t* q, const bf16_t* kv_layer, const MInferenceSeqInfo* seqs,
                     const int32_t* block_tables, const int2* tiles, int num_tiles,
                     const int32_t* index, const AttentionDims& dims, bf16_t* out,
                     cudaStream_t stream) {
  // Two streams: as many stages each as fit.
  constexpr int kStages = D == 128 ? 3 : 4;
  using L = prefill_ws::Layout<D, 2, 2, kStages>;
  static std::atomic<uint64_t> configured{0};
  const cudaError_t attr = OncePerDevice(configured, [] {
    return cudaFuncSetAttribute(MInferenceWsKernel<D, kStages>,
                                cudaFuncAttributeMaxDynamicSharedMemorySize, L::kBytes);
  });
  if (attr != cudaSuccess) return attr;
  const dim3 grid(num_tiles, (dims.heads + 1) / 2);
  static const bool aligned_tiles = PrefillWsOption("SPARSESERVE_PREFILL_WS_ALIGNED", true);
  const prefill_ws::KvTensorMap map = prefill_ws::KvTensorMapOf(kv_layer, dims);
  MInferenceWsKernel<D, kStages><<<grid, L::kThreads, L::kBytes, stream>>>(
      reinterpret_cast<const __nv_bfloat16*>(q), reinterpret_cast<const __nv_bfloat16*>(kv_layer),
      seqs, block_tables, tiles, index, dims, reinterpret_cast<__nv_bfloat16*>(out), map,
      aligned_tiles);
  return cudaGetLastError();
}

template <int D, bool kWgmma>
cudaError_t Launch(const bf16_t* q, const bf16_t* kv_layer, const MInferenceSeqInfo* seqs,
                   const int32_t* block_tables, const int2* tiles, int num_tiles,
                   const int32_t* index, const AttentionDims& dims, bf16_t* out,
                   cudaStream_t stream) {
  constexpr size_t kSmem = TileMath<D, kWgmma, 2>::kSmemBytes;
  static std::atomic<uint64_t> configured{0};
  const cudaError_t attr = OncePerDevice(configured, [] {
    return cudaFuncSetAttribute(MInferenceTileKernel<D, kWgmma>,
                                cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  });
  if (attr != cudaSuccess) return attr;
  const dim3 grid(num_tiles, dims.heads);
  MInferenceTileKernel<D, kWgmma><<<grid, kThreads, kSmem, stream>>>(
      reinterpret_cast<const __nv_bfloat16*>(q), reinterpret_cast<const __nv_bfloat16*>(kv_layer),
      seqs, block_tables, tiles, index, dims, reinterpret_cast<__nv_bfloat16*>(out));
  return cudaGetLastError();
}

// The kernel chosen at run time (PrefillTilesOnWgmma, PrefillWarpSpecialized), the rest at
// compile time.
template <int D, class... Args>
cudaError_t LaunchMath(bool wgmma, Args... args) {
  if (wgmma && PrefillWarpSpecialized()) return LaunchWs<D>(args...);
  return wgmma ? Launch<D, true>(args...) : Launch<D, false>(args...);
}

}  // namespace

cudaError_t LaunchMInferenceTileAttention(const bf16_t* q, const bf16_t* kv_layer,
                                          const MInferenceSeqInfo* seqs,
                                          const int32_t* block_tables, const int2* tiles,
                                          int num_tiles, const int32_t* index,
                                          const AttentionDims& dims, bf16_t* out,
                                          cudaStream_t stream) {
  if (num_tiles == 0) return cudaSuccess;
  switch (dims.head_dim) {
    case 64:
      return LaunchMath<64>(PrefillTilesOnWgmma(), q, kv_layer, seqs, block_tables, tiles,
                            num_tiles, index, dims, out, stream);
    case 128:
      return LaunchMath<128>(PrefillTilesOnWgmma(), q, kv_layer, seqs, block_tables, tiles,
                             num_tiles, index, dims, out, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace sparseserve::kernels::cuda
