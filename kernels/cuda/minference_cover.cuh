// Device building blocks of the MInference kernels: CoverVsBlock's cover visited as a stream
// (no arrays: a CTA or a warp walks a query block's merged slash runs and gathered columns in
// O(1) state, where the host version needs n_slashes + n_columns words), the top-n key order
// of the CPU's TopIndices as one 64-bit key, and a paged key-row lookup.
#ifndef SPARSESERVE_KERNELS_CUDA_MINFERENCE_COVER_CUH_
#define SPARSESERVE_KERNELS_CUDA_MINFERENCE_COVER_CUH_

#include <cstdint>

#include "kernels/minference_index.h"

namespace sparseserve::kernels::cuda {

// Calls on_run(b, e) for every merged run and on_column(c) for every gathered column of
// CoverVsBlock(columns, n_columns, slashes, n_slashes, row_begin, row_end): the same runs and
// columns in the same order (a column between two runs is visited before the later run).
template <class RunFn, class ColumnFn>
__device__ __forceinline__ void ForEachVsCover(const int32_t* columns, int32_t n_columns,
                                               const int32_t* slashes, int32_t n_slashes,
                                               int32_t row_begin, int32_t row_end, RunFn&& on_run,
                                               ColumnFn&& on_column) {
  int32_t next_slash = n_slashes - 1;  // ascending offsets give descending starts: walk back
  bool open = false;
  int32_t open_begin = 0, open_end = 0;
  int32_t run_begin = 0, run_end = 0;
  // Advances to the next finished run (run_begin, run_end); false when there is none left.
  auto next_run = [&]() -> bool {
    while (next_slash >= 0) {
      const int32_t slash = slashes[next_slash--];
      const int32_t e = row_end - slash;
      if (e <= 0) continue;
      const int32_t b = row_begin - slash > 0 ? row_begin - slash : 0;
      if (open && b <= open_end) {
        if (e > open_end) open_end = e;
        continue;
      }
      if (open) {
        run_begin = open_begin;
        run_end = open_end;
        open_begin = b;
        open_end = e;
        return true;
      }
      open = true;
      open_begin = b;
      open_end = e;
    }
    if (!open) return false;
    run_begin = open_begin;
    run_end = open_end;
    open = false;
    return true;
  };
  bool have = next_run();
  int32_t last = -1;
  for (int32_t i = 0; i < n_columns; ++i) {
    const int32_t c = columns[i];
    if (c >= row_end || c == last) continue;
    last = c;
    while (have && run_end <= c) {
      on_run(run_begin, run_end);
      have = next_run();
    }
    if (have && run_begin <= c) continue;
    on_column(c);
  }
  while (have) {
    on_run(run_begin, run_end);
    have = next_run();
  }
}

// Pairs of one run [b, e) over the rows [row_begin, row_end) (VsBlockPairs' per-run term).
__device__ __forceinline__ int64_t RunPairs(int32_t b, int32_t e, int32_t row_begin,
                                            int32_t row_end) {
  int64_t pairs = 0;
  const int32_t split = e < row_begin ? e : (b > row_begin ? b : row_begin);
  if (split > b) pairs += int64_t{split - b} * (row_end - row_begin);
  const int64_t n = e - split;
  if (n > 0) pairs += n * (row_end - split) - n * (n - 1) / 2;
  return pairs;
}

// True when column c lies in a merged run of the query block [row_begin, row_end): some offset o
// of the ascending `slashes` has row_begin - c <= o < row_end - c (a binary search).
__device__ __forceinline__ bool InSlashRun(const int32_t* slashes, int32_t n_slashes,
                                           int32_t row_begin, int32_t row_end, int32_t c) {
  int32_t lo = 0, hi = n_slashes;  // first offset >= row_begin - c
  const int32_t want = row_begin - c;
  while (lo < hi) {
    const int32_t mid = (lo + hi) / 2;
    if (slashes[mid] < want) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo < n_slashes && slashes[lo] < row_end - c;
}

// VsBlockPairs of one query block by the 32 lanes of a warp (lane: 0..31), each lane's share
// returned to it (their sum is the block's pairs). Walked back, the offsets give intervals
// [max(row_begin - o, 0), row_end - o) whose starts and ends both ascend, so their union is the
// disjoint pieces [max(b_i, largest end before i), e_i) — the previous end, 32 offsets a step —
// and a key's pairs (row_end - max(k, row_begin)) add over pieces as over merged runs. Columns
// count where no run holds them (InSlashRun), once each. Walking the cover as a stream
// (ForEachVsCover) takes n_slashes + n_columns dependent steps per block; this, 1/32 of them.
__device__ __forceinline__ int64_t WarpVsBlockPairs(const int32_t* columns, int32_t n_columns,
                                                    const int32_t* slashes, int32_t n_slashes,
                                                    int32_t row_begin, int32_t row_end, int lane) {
  int64_t pairs = 0;
  int32_t carry = 0;  // the largest end so far (0: none; every start is >= 0)
  for (int32_t base = 0; base < n_slashes; base += 32) {
    const int32_t i = base + lane;
    const int32_t o = i < n_slashes ? slashes[n_slashes - 1 - i] : row_end;  // past: empty
    const int32_t e = row_end - o;
    const int32_t b = row_begin - o > 0 ? row_begin - o : 0;
    // The ends ascend along the walk (those <= 0, the largest offsets, come first), so the largest
    // end before this lane is the previous lane's, or the previous step's last.
    const int32_t end = e > 0 ? e : 0;
    int32_t before = __shfl_up_sync(0xffffffffu, end, 1);
    if (lane == 0 || carry > before) before = carry;
    const int32_t lo = b > before ? b : before;
    if (e > lo) pairs += RunPairs(lo, e, row_begin, row_end);
    const int32_t last = __shfl_sync(0xffffffffu, end, 31);  // 0 when no lane's run has a key
    if (last > carry) carry = last;
  }
  for (int32_t base = 0; base < n_columns; base += 32) {
    const int32_t i = base + lane;
    const int32_t c = i < n_columns ? columns[i] : row_end;
    if (c < row_end && (i == 0 || columns[i - 1] != c) &&
        !InSlashRun(slashes, n_slashes, row_begin, row_end, c)) {
      pairs += row_end - (c > row_begin ? c : row_begin);
    }
    if (__any_sync(0xffffffffu, c >= row_end)) break;  // ascending: the rest lie past the block
  }
  return pairs;
}

// The CPU's TopIndices order as one unsigned key (larger = better; all keys distinct): forced
// indices first, then the higher score (any float; -0 counts as +0), ties to the smaller index.
// REQUIRES: 0 <= index < 2^31.
__device__ __forceinline__ uint64_t TopKey(float score, int32_t index, bool forced) {
  uint32_t bits = __float_as_uint(score == 0.0f ? 0.0f : score);
  bits = (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);  // float order as unsigned order
  return (uint64_t{forced} << 63) | (uint64_t{bits} << 31) | uint64_t(0x7fffffff - index);
}

}  // namespace sparseserve::kernels::cuda

#endif  // SPARSESERVE_KERNELS_CUDA_MINFERENCE_COVER_CUH_
