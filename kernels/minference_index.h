// MInference sparse prefill (papers/minference.md): the per-head patterns, the index each layer
// builds from its own queries and keys, and which keys a row sees under it — one semantics,
// compiled into the CPU reference and the CUDA kernels alike (as attention_visibility.h).
//
// A sequence with AttentionMethodKind::kMInference prefills a chunk of q_len rows over kv_len
// keys (prefix P = kv_len - q_len, row r at KV index P + r, causal, no query mask). Each query
// head h of layer l has a HeadPattern from the MInferenceConfig:
//   - A-shape(v, s): row p sees keys k <= p with k < v (sinks) or k > p - s (local window).
//   - Vertical-slash(v, s): from the chunk's last min(64, q_len) rows (paper §3.2, last_q = 64)
//     the builder computes a_r = softmax over k <= p_r of q_r·k·scale, column sums col[k] and
//     diagonal sums diag[o] = Σ_r a_r[p_r - o], and keeps the top n_columns = min(kv_len,
//     max(v, 30)) columns and top n_slashes = min(kv_len, max(s, 100)) diagonal offsets, columns
//     0..29 and offsets 0..99 always first ([code]: sinks and the local band; without offset 0
//     a row could see no key). Ties go to the smaller index; both lists are stored ascending.
//     The chunk is cut into query blocks of 64 rows (rows [64b, min(64b + 64, q_len))); over a
//     block with absolute rows [B, E) a slash o covers the keys [B - o, E - o) (the diagonal's
//     run for every row of the block, as MInference's index converter makes 64-wide runs), and a
//     column c covers key c. Row p sees the covered keys k <= p.
//   - Block-sparse(v): queries mean-pooled over each 64-row query block, keys over each KV block
//     of 64 keys (the last one partial), scores q̂·k̂; each query block keeps the top min(v, ...)
//     key blocks among those starting at or before its last row, block 0 and the blocks holding
//     the query block's own rows always first. Row p sees the selected blocks' keys k <= p.
// After building, a head whose visible (row, key) pairs exceed kDenseSwitchFraction of the
// chunk's causal pairs runs dense instead (HeadKind::kDense): its sparse kernel would do nearly
// the dense work at a lower FLOP rate (issue 12 item 3). A vertical-slash head whose sizes alone
// force that switch (MInferenceSizesForceDense: its distinct lines give every row at least
// max(n_columns, n_slashes) - (kv_len - 1 - p) keys) runs dense without building its index at
// all (its area is zeros but the kind): the build costs more than the attention it would save. A
// planted config (issue 16) replaces estimation by seeded lines: every head is VS(1000, 6096) with
// the 30 sinks plus stratified uniform columns and the 100 local offsets plus stratified
// log-uniform offsets — for speed runs on random weights only.
#ifndef SPARSESERVE_KERNELS_MINFERENCE_INDEX_H_
#define SPARSESERVE_KERNELS_MINFERENCE_INDEX_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/attention_visibility.h"  // SS_HOST_DEVICE
#include "kernels/uniform_random.h"

namespace sparseserve::kernels {

namespace minference {
inline constexpr int32_t kBlockRows = 64;            // query rows per block = keys per key block
inline constexpr int32_t kEstimateRows = 64;         // last_q (§3.2)
inline constexpr int32_t kSinkColumns = 30;          // always-kept columns [code]
inline constexpr int32_t kLocalSlashes = 100;        // always-kept diagonal offsets [code]
inline constexpr float kDenseSwitchFraction = 0.6f;  // see the header comment
inline constexpr int32_t kHeaderWords = 4;           // per (sequence, head) index area header
}  // namespace minference

enum class HeadPatternKind : int32_t {
  kAShape = 0,
  kVerticalSlash = 1,
  kBlockSparse = 2,
  kDense = 3
};

// One head's pattern and sizes (MInference's [type, v, s]). Block-sparse uses v only.
struct HeadPattern {
  HeadPatternKind kind = HeadPatternKind::kVerticalSlash;
  int32_t v = 1000;
  int32_t s = 6096;
  bool operator==(const HeadPattern&) const = default;
};

// The per-(layer, query head) patterns of a model; immutable once built and shared by every
// sequence that uses it (AttentionPattern::minference).
struct MInferenceConfig {
  int num_layers = 0;
  int num_heads = 0;
  std::vector<HeadPattern> heads;  // [layer * num_heads + head]
  // Seeded planted lines instead of estimation (speed runs on random weights; see above).
  bool planted = false;
  uint64_t planted_seed = 0x91a7;

  const HeadPattern& at(int layer, int head) const { return heads[layer * num_heads + head]; }
  // Every head `pattern` (the fallback is the default HeadPattern, VS(1000, 6096)).
  static MInferenceConfig Uniform(int num_layers, int num_heads, HeadPattern pattern = {}) {
    MInferenceConfig c;
    c.num_layers = num_layers;
    c.num_heads = num_heads;
    c.heads.assign(static_cast<size_t>(num_layers) * num_heads, pattern);
    return c;
  }
};

// How big one sequence's index is, per head, for every layer of a config (the plan sizes the
// workspace once per step): the caps clamp each head's sizes to the context.
//   words [0, kHeaderWords): kind (HeadPatternKind after the dense switch), a, b, unused — a/b are
//     n_columns/n_slashes (VS), sinks/window (A-shape), blocks per query block (BS);
//   VS: columns [cap_columns] then slashes [cap_slashes], ascending;
//   BS: per query block, its count then blocks [cap_blocks] ascending.
struct MInferenceIndexShape {
  int32_t num_query_blocks = 0;
  int32_t cap_columns = 0;
  int32_t cap_slashes = 0;
  int32_t cap_blocks = 0;
  int32_t words_per_head = 0;
};

SS_HOST_DEVICE int32_t MInferenceColumns(int32_t v, int32_t kv_len) {
  const int32_t n = v > minference::kSinkColumns ? v : minference::kSinkColumns;
  return n < kv_len ? n : kv_len;
}
SS_HOST_DEVICE int32_t MInferenceSlashes(int32_t s, int32_t kv_len) {
  const int32_t n = s > minference::kLocalSlashes ? s : minference::kLocalSlashes;
  return n < kv_len ? n : kv_len;
}
// Key blocks a block-sparse query block keeps at most: v, but never fewer than its forced
// blocks (block 0 and at most two blocks holding its rows), nor more than the context has.
SS_HOST_DEVICE int32_t MInferenceBlocks(int32_t v, int32_t kv_len) {
  const int32_t kv_blocks = (kv_len + minference::kBlockRows - 1) / minference::kBlockRows;
  const int32_t n = v > 3 ? v : 3;
  return n < kv_blocks ? n : kv_blocks;
}

inline MInferenceIndexShape MInferenceIndexShapeOf(const MInferenceConfig& config, int32_t q_len,
                                                   int32_t kv_len) {
  MInferenceIndexShape shape;
  shape.num_query_blocks = (q_len + minference::kBlockRows - 1) / minference::kBlockRows;
  for (const HeadPattern& p : config.heads) {
    if (config.planted || p.kind == HeadPatternKind::kVerticalSlash) {
      const HeadPattern vs = config.planted ? HeadPattern() : p;
      shape.cap_columns = std::max(shape.cap_columns, MInferenceColumns(vs.v, kv_len));
      shape.cap_slashes = std::max(shape.cap_slashes, MInferenceSlashes(vs.s, kv_len));
    } else if (p.kind == HeadPatternKind::kBlockSparse) {
      shape.cap_blocks = std::max(shape.cap_blocks, MInferenceBlocks(p.v, kv_len));
    }
  }
  const int32_t vs = shape.cap_columns + shape.cap_slashes;
  const int32_t bs = shape.num_query_blocks * (1 + shape.cap_blocks);
  shape.words_per_head = minference::kHeaderWords + (vs > bs ? vs : bs);
  return shape;
}

// The planted lines of (layer, head) at context kv_len: column i of n (ascending, duplicates
// possible when n exceeds the context) and slash offset i of n.
SS_HOST_DEVICE int32_t PlantedColumn(uint64_t seed, int layer, int head, int32_t i, int32_t n,
                                     int32_t kv_len) {
  if (i < minference::kSinkColumns || n <= minference::kSinkColumns) return i;
  const int32_t m = n - minference::kSinkColumns;
  const int32_t j = i - minference::kSinkColumns;
  const float u = UniformAt(seed ^ (uint64_t(layer) << 40) ^ (uint64_t(head) << 20), 2 * j);
  const int32_t span = kv_len - minference::kSinkColumns;
  const int32_t c =
      minference::kSinkColumns + static_cast<int32_t>((static_cast<double>(j) + u) * span / m);
  return c < kv_len ? c : kv_len - 1;
}
SS_HOST_DEVICE int32_t PlantedSlash(uint64_t seed, int layer, int head, int32_t i, int32_t n,
                                    int32_t kv_len) {
  if (i < minference::kLocalSlashes || n <= minference::kLocalSlashes) return i;
  const int32_t m = n - minference::kLocalSlashes;
  const int32_t j = i - minference::kLocalSlashes;
  const float u = UniformAt(seed ^ (uint64_t(layer) << 40) ^ (uint64_t(head) << 20), 2 * j + 1);
  const double span = static_cast<double>(kv_len - minference::kLocalSlashes);
  // Log-uniform over [1, span]: offset kLocalSlashes - 1 + exp(t · ln(span)).
  const double t = (static_cast<double>(j) + u) / m;
  const int32_t o = minference::kLocalSlashes - 1 + static_cast<int32_t>(::exp(t * ::log(span)));
  return o < kv_len ? o : kv_len - 1;
}

// The keys a vertical-slash index covers over one query block with absolute rows [row_begin,
// row_end): merged runs [run_begin[i], run_end[i]) (ascending, disjoint, clipped to [0,
// row_end)) from the slashes, then the columns outside every run (ascending, distinct, < row_end).
// Arrays hold n_slashes runs and n_columns columns at most. Returns the counts. The causal bound
// k <= p of each row is left to the caller.
struct VsBlockCover {
  int32_t num_runs = 0;
  int32_t num_columns = 0;
};
SS_HOST_DEVICE VsBlockCover CoverVsBlock(const int32_t* columns, int32_t n_columns,
                                         const int32_t* slashes, int32_t n_slashes,
                                         int32_t row_begin, int32_t row_end, int32_t* run_begin,
                                         int32_t* run_end, int32_t* gathered) {
  VsBlockCover cover;
  // Ascending slash offsets give descending run starts: walk them from the last.
  for (int32_t i = n_slashes - 1; i >= 0; --i) {
    int32_t b = row_begin - slashes[i];
    const int32_t e = row_end - slashes[i];
    if (e <= 0) continue;
    if (b < 0) b = 0;
    if (cover.num_runs > 0 && b <= run_end[cover.num_runs - 1]) {
      if (e > run_end[cover.num_runs - 1]) run_end[cover.num_runs - 1] = e;
    } else {
      run_begin[cover.num_runs] = b;
      run_end[cover.num_runs] = e;
      ++cover.num_runs;
    }
  }
  int32_t run = 0;
  int32_t last = -1;
  for (int32_t i = 0; i < n_columns; ++i) {
    const int32_t c = columns[i];
    if (c >= row_end || c == last) continue;
    last = c;
    while (run < cover.num_runs && run_end[run] <= c) ++run;
    if (run < cover.num_runs && run_begin[run] <= c) continue;
    gathered[cover.num_columns++] = c;
  }
  return cover;
}

// Visible pairs of one query block under its cover: Σ over rows p in [row_begin, row_end) of
// the covered keys k <= p.
SS_HOST_DEVICE int64_t VsBlockPairs(const int32_t* run_begin, const int32_t* run_end,
                                    int32_t num_runs, const int32_t* gathered, int32_t num_columns,
                                    int32_t row_begin, int32_t row_end) {
  // A key k < row_end is seen by the rows max(k, row_begin) .. row_end - 1.
  int64_t pairs = 0;
  for (int32_t i = 0; i < num_runs; ++i) {
    const int32_t b = run_begin[i];
    const int32_t e = run_end[i];
    const int32_t split = e < row_begin ? e : (b > row_begin ? b : row_begin);
    if (split > b) pairs += int64_t{split - b} * (row_end - row_begin);
    // Keys [split, e): (row_end - split) + ... + (row_end - e + 1).
    const int64_t n = e - split;
    if (n > 0) pairs += n * (row_end - split) - n * (n - 1) / 2;
  }
  for (int32_t i = 0; i < num_columns; ++i) {
    const int32_t k = gathered[i];
    pairs += row_end - (k > row_begin ? k : row_begin);
  }
  return pairs;
}

// Causal pairs of rows [row_begin, row_end): Σ (p + 1).
SS_HOST_DEVICE int64_t CausalPairs(int32_t row_begin, int32_t row_end) {
  return (int64_t{row_end} * (row_end + 1) - int64_t{row_begin} * (row_begin + 1)) / 2;
}

// True when a head of `kind` with sizes (v, s) must switch to dense on the chunk of q_len rows
// over kv_len keys whatever its lines: n distinct lines (columns or diagonal offsets, all below
// kv_len) leave row p at least n - (kv_len - 1 - p) of them at or before it, each a distinct
// key, so the head sees at least Σ_p max(0, p + 1 - (kv_len - n)) pairs. Vertical-slash only
// (planted configs are vertical-slash too).
SS_HOST_DEVICE bool MInferenceSizesForceDense(HeadPatternKind kind, int32_t v, int32_t s,
                                              int32_t q_len, int32_t kv_len) {
  if (kind != HeadPatternKind::kVerticalSlash || q_len < 1) return false;
  const int32_t nc = MInferenceColumns(v, kv_len), ns = MInferenceSlashes(s, kv_len);
  const int64_t gap = int64_t{kv_len} - (nc > ns ? nc : ns);  // rows p < gap may see none
  const int64_t first = kv_len - q_len;
  const int64_t from = first > gap ? first : gap;  // first row with a positive bound
  // Σ_{p=from}^{kv_len-1} (p + 1 - gap) = Σ_{t=from+1-gap}^{kv_len-gap} t.
  const int64_t lo = from + 1 - gap, hi = kv_len - gap;
  const int64_t bound = hi >= lo ? (lo + hi) * (hi - lo + 1) / 2 : 0;
  return static_cast<double>(bound) >
         minference::kDenseSwitchFraction * static_cast<double>(CausalPairs(first, kv_len));
}

}  // namespace sparseserve::kernels

#endif  // SPARSESERVE_KERNELS_MINFERENCE_INDEX_H_
