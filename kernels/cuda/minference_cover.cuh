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

// VsBlockPairs of the cover of one query block, computed from the stream.
__device__ __forceinline__ int64_t VsBlockPairsStreamed(const int32_t* columns, int32_t n_columns,
                                                        const int32_t* slashes, int32_t n_slashes,
                                                        int32_t row_begin, int32_t row_end) {
  int64_t pairs = 0;
  ForEachVsCover(
      columns, n_columns, slashes, n_slashes, row_begin, row_end,
      [&](int32_t b, int32_t e) { pairs += RunPairs(b, e, row_begin, row_end); },
      [&](int32_t c) { pairs += row_end - (c > row_begin ? c : row_begin); });
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
