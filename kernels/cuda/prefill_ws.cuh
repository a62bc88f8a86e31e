// Warp-specialised building blocks of the Hopper prefill kernels (FlashAttention-3's structure,
// papers/kernel-references.md): a producer warpgroup fills K and V stages in shared memory — a
// TMA box copy for a whole, contiguous 64-key tile of the paged cache, else a cp.async gather
// through the block table by its 128 threads (a partial tile, or a sparse method's packed key
// list) — and consumer warpgroups drain them, each over its own 64-row Q tile, with no CTA-wide
// barrier: every stage hands over through mbarriers (async_pipeline.cuh). The producer gives its
// registers to the consumers (setmaxnreg). A consumer overlaps its tensor cores with its softmax:
// the scores of tile t and the P V product of tile t - 1 are issued together, and the softmax of
// tile t runs while P V still does.
//
// The stream of tiles is the producer's to decide; each K stage carries a header {first key of a
// contiguous 64-key tile (copied by TMA when whole), or -1; key count, 0 = end of the stream;
// smallest and largest key}, so the consumers need not know how many tiles there are. A list
// stream (a sparse method's) also lists each tile's keys in the stage (-1 for a row to mask),
// which its consumers read only for tiles the header does not show wholly visible. Several
// consumers may share one stream (the query heads of one KV head: every tile is copied once for all
// of them).
//
// The tile maths, softmax and stores are prefill_tile.cuh's and wgmma_tile.cuh's, so the scores a
// consumer computes and masks are the ones the other prefill kernels compute.
#ifndef SPARSESERVE_KERNELS_CUDA_PREFILL_WS_CUH_
#define SPARSESERVE_KERNELS_CUDA_PREFILL_WS_CUH_

#include <cuda.h>
#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/async_pipeline.cuh"
#include "kernels/cuda/cuda_async_copy.cuh"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/prefill_tile.cuh"
#include "kernels/cuda/wgmma_tile.cuh"

namespace sparseserve::kernels::cuda::prefill_ws {

using prefill_tile::kKeys;
constexpr int kConsumerThreads = 128;  // a warpgroup
constexpr int kProducerThreads = 128;  // a warpgroup
constexpr int kProducerBarrier = 5;    // the producer's named barriers, one per stream from here
                                       // (consumers use 1-4)

// Moves registers between warpgroups (sm_90a; the kernel needs a register cap at entry, from
// __launch_bounds__ with its minimum of blocks): the producer gives up what the consumers take.
template <int kRegisters>
__device__ __forceinline__ void ShrinkRegisters() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
}
template <int kRegisters>
__device__ __forceinline__ void GrowRegisters() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
}
// Registers a thread of a consumer holds when the producer's hold `producer` (56 do for TMA
// copies; a gathering, key-packing producer needs more), with `consumers` consumer warpgroups and
// one producer warpgroup per CTA, one CTA per SM. setmaxnreg.inc only takes registers the CTA's
// warps gave back, so the warpgroups share what the CTA was launched with — every thread starts
// at 64 K / threads rounded down to 8 (168 for 384 threads: 504 per producer-and-consumers
// slice, not the SM's 512) — and asking for more blocks the consumers for ever.
__host__ __device__ constexpr int ConsumerRegisters(int consumers, int producer) {
  const int threads = (consumers + 1) * 128;
  const int at_launch = 65536 / threads / 8 * 8;
  return ((consumers + 1) * at_launch - producer) / consumers / 8 * 8;
}
static_assert(ConsumerRegisters(2, 56) == 224 && ConsumerRegisters(2, 96) == 200);

// Shared memory of a CTA with kConsumers Q tiles and kStreams streams (1: the consumers share
// one; kConsumers: one each) of kStages K and V slots of head_dim D, from a 1024-byte aligned
// base (the swizzled tiles' alignment): Q tiles, K slots, V slots, then the full/empty barriers of
// K and V, the stage headers and the stages' key lists, stream after stream within each.
template <int D, int kConsumers, int kStreams, int kStages>
struct Layout {
  static_assert(kStreams == 1 || kStreams == kConsumers, "one shared stream or one each");
  static constexpr int kSlots = kStreams * kStages;
  static constexpr int kTile = wgmma_tile::TileBytes<D>();
  static constexpr int kK = kConsumers * kTile;
  static constexpr int kV = kK + kSlots * kTile;
  static constexpr int kBarriers = kV + kSlots * kTile;
  static constexpr int kHeaders = kBarriers + 4 * kSlots * 8;
  static constexpr int kKeyLists = kHeaders + kSlots * 16;
  static constexpr int kEnd = kKeyLists + kSlots * kKeys * 4;
  static constexpr size_t kBytes = kEnd + wgmma_tile::kAlign;  // + the base's alignment
  static_assert(kBytes <= 227 * 1024, "more shared memory than a CTA may have");
  static constexpr int kThreads = kConsumers * kConsumerThreads + kProducerThreads;
  // Producer threads per stream, and consumer warps releasing each stage.
  static constexpr int kCopiers = kProducerThreads / kStreams;
  static constexpr int kReleasers = 4 * kConsumers / kStreams;
};

// A view of one stream's ring of stages (and the CTA's Q tiles).
template <int D, int kConsumers, int kStreams, int kStages>
struct Stages {
  using L = Layout<D, kConsumers, kStreams, kStages>;
  static constexpr int kNumStages = kStages;
  unsigned char* base;
  int stream;

  static __device__ __forceinline__ Stages Carve(unsigned char* smem, int stream) {
    const uint32_t misalign = SharedAddress(smem) % wgmma_tile::kAlign;
    return Stages{smem + (misalign == 0 ? 0 : wgmma_tile::kAlign - misalign), stream};
  }
  __device__ __forceinline__ int slot(int s) const { return stream * kStages + s; }
  __device__ __forceinline__ unsigned char* q(int c) const { return base + c * L::kTile; }
  __device__ __forceinline__ unsigned char* k(int s) const {
    return base + L::kK + slot(s) * L::kTile;
  }
  __device__ __forceinline__ unsigned char* v(int s) const {
    return base + L::kV + slot(s) * L::kTile;
  }
  __device__ __forceinline__ uint64_t* barrier(int which, int s) const {
    return reinterpret_cast<uint64_t*>(base + L::kBarriers) + which * L::kSlots + slot(s);
  }
  __device__ __forceinline__ uint64_t* full_k(int s) const { return barrier(0, s); }
  __device__ __forceinline__ uint64_t* full_v(int s) const { return barrier(1, s); }
  __device__ __forceinline__ uint64_t* empty_k(int s) const { return barrier(2, s); }
  __device__ __forceinline__ uint64_t* empty_v(int s) const { return barrier(3, s); }
  // {first key of a contiguous tile, or -1; key count, 0 = end of stream; smallest key; largest
  // key} (see the top)
  __device__ __forceinline__ int4* header(int s) const {
    return reinterpret_cast<int4*>(base + L::kHeaders) + slot(s);
  }
  __device__ __forceinline__ int32_t* keys(int s) const {
    return reinterpret_cast<int32_t*>(base + L::kKeyLists) + slot(s) * kKeys;
  }

  // By one thread, before the CTA barrier that starts the kernel's work, for every stream: a full
  // barrier completes on one arrival (plus a TMA's bytes), an empty one on one arrival per
  // consumer warp of the stream.
  __device__ __forceinline__ void Init() const {
    for (int b = 0; b < 2 * L::kSlots; ++b) {
      MbarrierInit(reinterpret_cast<uint64_t*>(base + L::kBarriers) + b, 1);
    }
    for (int b = 2 * L::kSlots; b < 4 * L::kSlots; ++b) {
      MbarrierInit(reinterpret_cast<uint64_t*>(base + L::kBarriers) + b, L::kReleasers);
    }
    FenceMbarrierInit();
  }
};

// The producer's position in the ring: tile t uses slot t % kStages, and the producer waits for
// the slot's previous round to be drained (parity of round - 1; the first round passes at once).
template <int kStages>
struct RingSlot {
  int slot;
  uint32_t empty_parity;  // producer side
  uint32_t full_parity;   // consumer side
  __device__ __forceinline__ explicit RingSlot(int t)
      : slot(t % kStages), empty_parity(((t / kStages) & 1) ^ 1), full_parity((t / kStages) & 1) {}
};

// The rows of a 64-key tile that one of a stream's kCopiers producer threads (ptid: its index
// among them) gathers into a swizzled tile: four threads share a row, each copying every fourth
// 16-byte chunk of it (a warp's copy reads whole 32-byte sectors of eight rows). Resolve finds the
// thread's rows through the key list and the block table once, their reads in flight together;
// Copy then queues the keys' or the values' copy from those addresses: a MInference stream's
// producer thread looks up four rows for a tile's K and V, where one chunk of every fourth row had
// cost it sixteen lookups for each (its sparse tiles 1.5-1.6x faster, bench/RESULTS.md, session
// 32).
template <int D, int kCopiers>
struct TileRows {
  static constexpr int kThreadsPerRow = 4;
  static constexpr int kChunks = D / 8;
  static constexpr int kRowsPerPass = kCopiers / kThreadsPerRow;
  static constexpr int kRows = kKeys / kRowsPerPass;  // per thread
  static_assert(kChunks % kThreadsPerRow == 0 && kKeys % kRowsPerPass == 0);
  int32_t kv_row[kRows];  // the layer's row (KeyRowOffset's unit) of each row's key; -1: zeros
  int row0;               // the thread's first row; then every kRowsPerPass-th
  int part;               // its chunks: part, part + kThreadsPerRow, ...

  // Row r holds key position key_at(r), zeros where it is < 0.
  template <class KeyAt>
  __device__ __forceinline__ void Resolve(const int32_t* table, KeyAt&& key_at,
                                          const AttentionDims& dims, int ptid) {
    row0 = ptid / kThreadsPerRow;
    part = ptid % kThreadsPerRow;
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      const int pos = key_at(row0 + i * kRowsPerPass);
      kv_row[i] = pos < 0
                      ? -1
                      : static_cast<int32_t>(KeyRowOffset(table, pos, dims.block_tokens,
                                                          dims.block_shift, /*token_stride=*/1));
    }
  }
  // The keys' copy (value_offset 0) or the values' (block_tokens * token_stride) of head kv_head.
  __device__ __forceinline__ void Copy(unsigned char* dst, const __nv_bfloat16* kv,
                                       int64_t token_stride, int64_t value_offset,
                                       int kv_head) const {
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      const bool valid = kv_row[i] >= 0;
      const __nv_bfloat16* src =
          kv + (valid ? kv_row[i] * token_stride + value_offset + int64_t{kv_head} * D : 0);
#pragma unroll
      for (int j = 0; j < kChunks / kThreadsPerRow; ++j) {
        const int c = part + j * kThreadsPerRow;
        CpAsync16(dst + wgmma_tile::SwizzledOffset(row0 + i * kRowsPerPass, c),
                  valid ? src + c * 8 : kv, valid);
      }
    }
  }
};

// Completes `full` once the gathers so far of the kCopiers producer threads of `stream` have
// landed (every thread's copies), with what its thread 0 wrote before (a stage header) released
// to the consumers. The stream's producer threads meet at named barrier kProducerBarrier + stream.
template <int kCopiers>
__device__ __forceinline__ void ArriveWhenGathered(uint64_t* full, int stream, int ptid) {
  CpAsyncArriveOnLanding(full);
  NamedBarrierSync(kProducerBarrier + stream, kCopiers);
  if (ptid == 0) MbarrierArrive(full);
}

// The TMA view of a paged KV layer for KvTileCopy: rows of kv_heads * head_dim elements (row
// 2 * block * block_tokens + t holds the keys of token t of `block`, the values block_tokens rows
// on), boxes of 64 columns x box_rows rows with the 128-byte swizzle.
struct KvTensorMap {
  CUtensorMap map;
  int box_rows;  // min(64, block_tokens); 0: no map (every tile is gathered)
};

// The map of the KV layer at kv_layer (host; defined in attention_prefill.cu): box_rows 0 when
// the driver's encoder is missing or the block size does not tile 64 keys.
KvTensorMap KvTensorMapOf(const bf16_t* kv_layer, const AttentionDims& dims);

// Queues, by thread 0 of the producer warpgroup, the copy of the whole 64-key tile of positions
// [first_key, first_key + 64) of head kv_head (keys, or values when `values`) into `dst` by TMA,
// completing on `full` (its bytes announced first). REQUIRES: the tile lies within the sequence's
// blocks, and box_rows divides 64 or 64 divides block_tokens.
template <int D>
__device__ __forceinline__ void TmaTile(unsigned char* dst, const CUtensorMap* map, int box_rows,
                                        const int32_t* table, int first_key, bool values,
                                        const AttentionDims& dims, int kv_head, uint64_t* full) {
  MbarrierArriveExpectTx(full, wgmma_tile::TileBytes<D>());
  for (int r = 0; r < kKeys; r += box_rows) {
    const int pos = first_key + r;
    const int block_index =
        dims.block_shift >= 0 ? pos >> dims.block_shift : pos / dims.block_tokens;
    const int offset = pos - block_index * dims.block_tokens;
    const int row = (2 * table[block_index] + (values ? 1 : 0)) * dims.block_tokens + offset;
#pragma unroll
    for (int half = 0; half < D / 64; ++half) {
      TmaLoad2d(dst + half * wgmma_tile::kHalfBytes + r * 128, map, kv_head * D + half * 64, row,
                full);
    }
  }
}

// What a consumer warpgroup computes: `rows` query rows of `head` from packed row q_row0, the
// tile's row 0 at absolute position first_pos (causal: row r sees keys <= first_pos + r).
struct ConsumerRows {
  const __nv_bfloat16* q;
  int q_row0;
  int rows;
  int heads;
  int head;
  int first_pos;
  // A-shape (list streams only): a key stays visible only if < sinks or > pos - window.
  bool ashape;
  int sinks;
  int window;
};

// A consumer warpgroup's online-softmax state over the tiles it has seen.
template <int D>
struct ConsumerState {
  float o[D / 8][4];
  float row_max[2];
  float row_sum[2];
  bool any_keys;  // false: the stream was empty (o and row_sum are zeros)
};

// Two consumers of one CTA take turns issuing their products (FlashAttention-3's ping-pong), so
// that one's softmax runs while the other's products do: consumer c waits at named barrier 3 + c
// for its turn before it issues and hands the turn to the other after. Off (`on` false) for a
// lone consumer, or when one of the two only drains the stream. REQUIRES (on): both consumers
// drain the same stream of at least one tile (an empty one would leave Start's arrival behind).
struct ProductTurns {
  bool on;
  int c;
  // Consumer 1 lets consumer 0 go first.
  __device__ __forceinline__ void Start() const {
    if (on && c == 1) NamedBarrierArrive(3, 2 * kConsumerThreads);
  }
  __device__ __forceinline__ void Take() const {
    if (on) NamedBarrierSync(3 + c, 2 * kConsumerThreads);
  }
  __device__ __forceinline__ void Pass() const {
    if (on) NamedBarrierArrive(3 + (c ^ 1), 2 * kConsumerThreads);
  }
  // After the last turn: consumer 0's hand-over balances consumer 1's Start; consumer 1's would
  // be one arrival too many.
  __device__ __forceinline__ void PassLast() const {
    if (c == 0) Pass();
  }
};

// Drains the stream of tiles for warpgroup `c` (0-based, named barrier 1 + c) over its Q tile
// `q_tile`: loads Q, then per tile the scores, the causal bound (and with kList the stage's key
// list and A-shape's rule), the online softmax and P V, releasing each stage as soon as it is
// read. An inactive consumer (a head another kernel computes) only releases the stages.
template <int D, bool kList, class St>
__device__ __forceinline__ void ConsumeTiles(const St& st, int c, unsigned char* q_tile,
                                             const ConsumerRows& r, float scale_log2, bool active,
                                             const ProductTurns& turns, ConsumerState<D>& state) {
  using prefill_tile::ScoreKey;
  constexpr int kStages = St::kNumStages;
  const int tid = threadIdx.x % kConsumerThreads;
  const int warp = tid / 32;
  const int lane = tid % 32;
  auto release = [&](uint64_t* empty) {
    __syncwarp();
    if (lane == 0) MbarrierArrive(empty);
  };
#pragma unroll
  for (int i = 0; i < D / 8; ++i) state.o[i][0] = state.o[i][1] = state.o[i][2] = state.o[i][3] = 0;
  state.row_max[0] = state.row_max[1] = -INFINITY;
  state.row_sum[0] = state.row_sum[1] = 0.0f;
  state.any_keys = false;
  if (!active) {
    for (int t = 0;; ++t) {
      const RingSlot<kStages> ring(t);
      MbarrierWait(st.full_k(ring.slot), ring.full_parity);
      if (st.header(ring.slot)->y == 0) return;
      release(st.empty_k(ring.slot));
      MbarrierWait(st.full_v(ring.slot), ring.full_parity);
      release(st.empty_v(ring.slot));
    }
  }

  wgmma_tile::LoadQTile<D>(q_tile, r.q, r.q_row0, r.rows, r.heads, r.head, tid);
  CpAsyncCommit();
  CpAsyncWait<0>();
  wgmma_tile::FenceForTensorCores();
  NamedBarrierSync(1 + c, kConsumerThreads);
  turns.Start();

  const int my_pos0 = r.first_pos + warp * 16 + lane / 4;
  const int my_pos1 = my_pos0 + 8;
  const int warp_first_pos = r.first_pos + warp * 16;
  // The causal bound (and the stage's keys) on a tile of scores.
  auto mask = [&](float(&s)[8][4], int slot) {
    const int4 h = *st.header(slot);
    if constexpr (kList) {
      // A full tile whose keys every row of the warp sees (causal; A-shape: all sinks, or all
      // within the last row's window) needs no per-score test: most tiles of a long range or of
      // far columns (the test was over a third of a consumer's instructions). The smallest key
      // is checked too: a full tile has no -1 (masked) key with today's packer, but the skip
      // should not depend on it.
      const int warp_last_pos = warp_first_pos + 15;
      if (h.y == kKeys && h.z >= 0 && h.w <= warp_first_pos &&
          (!r.ashape || h.w < r.sinks || h.z > warp_last_pos - r.window)) {
        return;
      }
      const int32_t* keys = st.keys(slot);
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = keys[ScoreKey(nt, e, lane)];
          const int pos = e < 2 ? my_pos0 : my_pos1;
          bool visible = key >= 0 && key <= pos;
          if (r.ashape) visible = visible && (key < r.sinks || key > pos - r.window);
          s[nt][e] = visible ? s[nt][e] : -INFINITY;
        }
      }
    } else if (h.x + kKeys - 1 > warp_first_pos) {  // only tiles reaching past the warp's rows
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          if (h.x + ScoreKey(nt, e, lane) > (e < 2 ? my_pos0 : my_pos1)) s[nt][e] = -INFINITY;
        }
      }
    }
  };

  float s[8][4];
  float correction[2];
  uint32_t p[4][4];
  {
    const RingSlot<kStages> ring(0);
    MbarrierWait(st.full_k(0), ring.full_parity);
    if (st.header(0)->y == 0) return;
    wgmma_tile::FenceForTensorCores();  // gathered rows, ordered for the tensor cores
    turns.Take();
    wgmma_tile::IssueScores<D>(s, q_tile, st.k(0));
    wgmma_tile::WgmmaCommit();
    turns.Pass();
    wgmma_tile::WgmmaWait<0>();
    wgmma_tile::FenceAccumulators(s);
    mask(s, 0);
    release(st.empty_k(0));
    prefill_tile::SoftmaxScores<kKeys, true>(s, state.row_max, state.row_sum, scale_log2,
                                             correction);
    wgmma_tile::PackProbabilities(p, s);
  }
  state.any_keys = true;
  RingSlot<kStages> prev(0);
  for (int t = 1;; ++t) {
    const RingSlot<kStages> ring(t);
    MbarrierWait(st.full_k(ring.slot), ring.full_parity);
    if (st.header(ring.slot)->y == 0) break;
    MbarrierWait(st.full_v(prev.slot), prev.full_parity);
    wgmma_tile::FenceForTensorCores();
    turns.Take();
    wgmma_tile::IssueScores<D>(s, q_tile, st.k(ring.slot));
    wgmma_tile::WgmmaCommit();
    wgmma_tile::IssuePv<D>(state.o, p, st.v(prev.slot));
    wgmma_tile::WgmmaCommit();
    turns.Pass();
    // The scores of tile t are ready while P V of tile t - 1 still runs.
    wgmma_tile::WgmmaWait<1>();
    wgmma_tile::FenceAccumulators(s);
    mask(s, ring.slot);
    release(st.empty_k(ring.slot));
    prefill_tile::SoftmaxScores<kKeys, true>(s, state.row_max, state.row_sum, scale_log2,
                                             correction);
    wgmma_tile::WgmmaWait<0>();
    wgmma_tile::FenceAccumulators(state.o);
    wgmma_tile::FenceFragments(p);
    release(st.empty_v(prev.slot));
    prefill_tile::RescaleRows<D>(state.o, correction);
    wgmma_tile::PackProbabilities(p, s);
    prev = ring;
  }
  MbarrierWait(st.full_v(prev.slot), prev.full_parity);
  wgmma_tile::FenceForTensorCores();
  turns.Take();
  wgmma_tile::IssuePv<D>(state.o, p, st.v(prev.slot));
  wgmma_tile::WgmmaCommit();
  turns.PassLast();
  wgmma_tile::WgmmaWait<0>();
  wgmma_tile::FenceAccumulators(state.o);
  wgmma_tile::FenceFragments(p);
  release(st.empty_v(prev.slot));
}

}  // namespace sparseserve::kernels::cuda::prefill_ws

#endif  // SPARSESERVE_KERNELS_CUDA_PREFILL_WS_CUH_
