#include "kernels/cpu/cpu_minference.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "kernels/attention_plan_check.h"

namespace sparseserve::kernels::cpu_internal {
namespace {

using minference::kBlockRows;

// The `n` best indices of `scores` (forced ones first, then the highest score, ties to the smaller
// index), ascending.
void TopIndices(const std::vector<float>& scores, int32_t forced, int32_t n, int32_t* out) {
  const int32_t size = static_cast<int32_t>(scores.size());
  std::vector<int32_t> order(size);
  for (int32_t i = 0; i < size; ++i) order[i] = i;
  auto better = [&](int32_t a, int32_t b) {
    const bool fa = a < forced, fb = b < forced;
    if (fa != fb) return fa;
    if (!fa && scores[a] != scores[b]) return scores[a] > scores[b];
    return a < b;
  };
  std::partial_sort(order.begin(), order.begin() + n, order.end(), better);
  std::sort(order.begin(), order.begin() + n);
  std::copy(order.begin(), order.begin() + n, out);
}

// Reads one sequence's paged keys and values of one KV head.
struct PagedKv {
  const float* kv;
  const std::vector<int32_t>* block_table;
  int64_t block_tokens, token_stride, head_offset;
  const float* row(int32_t k, int part) const {
    return kv +
           (((*block_table)[k / block_tokens] * 2 + part) * block_tokens + k % block_tokens) *
               token_stride +
           head_offset;
  }
};

// A-shape pairs of rows [row_begin, row_end): each row p sees min(s, p + 1) local keys and the
// sinks before them.
int64_t AShapePairs(int32_t sinks, int32_t window, int32_t row_begin, int32_t row_end) {
  int64_t pairs = 0;
  for (int32_t p = row_begin; p < row_end; ++p) {
    const int32_t local = std::min(window, p + 1);
    pairs += local + std::min(sinks, p + 1 - local);
  }
  return pairs;
}

struct HeadInputs {
  const SequenceAttention* seq;
  const float* q;  // the sequence's rows of the whole q tensor
  int64_t q_row_stride;
  PagedKv kv;
  int head_dim;
  float scale;
};

const float* QueryRow(const HeadInputs& in, int32_t row) {
  return in.q + row * in.q_row_stride;
}

// Vertical-slash estimation (§3.2): the last rows' softmax, summed per column and per diagonal.
void VerticalSlashScores(const HeadInputs& in, std::vector<float>* columns,
                         std::vector<float>* diagonals) {
  const SequenceAttention& seq = *in.seq;
  const int32_t prefix = seq.kv_len - seq.q_len;
  columns->assign(seq.kv_len, 0.0f);
  diagonals->assign(seq.kv_len, 0.0f);
  std::vector<float> a;
  const int32_t rows = std::min(minference::kEstimateRows, seq.q_len);
  for (int32_t r = seq.q_len - rows; r < seq.q_len; ++r) {
    const int32_t p = prefix + r;
    const float* qr = QueryRow(in, r);
    a.resize(p + 1);
    float m = -std::numeric_limits<float>::infinity();
    for (int32_t k = 0; k <= p; ++k) {
      const float* kr = in.kv.row(k, 0);
      float dot = 0;
      for (int d = 0; d < in.head_dim; ++d) dot += qr[d] * kr[d];
      a[k] = dot * in.scale;
      m = std::max(m, a[k]);
    }
    float sum = 0;
    for (int32_t k = 0; k <= p; ++k) sum += (a[k] = std::exp(a[k] - m));
    for (int32_t k = 0; k <= p; ++k) {
      const float w = a[k] / sum;
      (*columns)[k] += w;
      (*diagonals)[p - k] += w;
    }
  }
}

// Builds one head's area; returns its visible pairs.
int64_t BuildHead(const HeadInputs& in, const HeadPattern& pattern, bool planted, uint64_t seed,
                  int layer, int head, const MInferenceIndexShape& shape, int32_t* area) {
  const SequenceAttention& seq = *in.seq;
  const int32_t prefix = seq.kv_len - seq.q_len;
  const int32_t first = prefix, last = seq.kv_len;  // absolute rows of the chunk
  int64_t pairs = 0;
  HeadPatternKind kind = planted ? HeadPatternKind::kVerticalSlash : pattern.kind;
  std::fill(area, area + shape.words_per_head, 0);
  const HeadPattern sizes = planted ? HeadPattern() : pattern;
  if (MInferenceSizesForceDense(kind, sizes.v, sizes.s, seq.q_len, seq.kv_len)) {
    area[0] = static_cast<int32_t>(HeadPatternKind::kDense);
    return CausalPairs(first, last);
  }
  int32_t* body = area + minference::kHeaderWords;
  if (kind == HeadPatternKind::kAShape) {
    area[1] = pattern.v;
    area[2] = pattern.s;
    pairs = AShapePairs(pattern.v, pattern.s, first, last);
  } else if (kind == HeadPatternKind::kVerticalSlash) {
    const HeadPattern vs = planted ? HeadPattern() : pattern;
    const int32_t nc = MInferenceColumns(vs.v, seq.kv_len);
    const int32_t ns = MInferenceSlashes(vs.s, seq.kv_len);
    int32_t* columns = body;
    int32_t* slashes = body + shape.cap_columns;
    if (planted) {
      for (int32_t i = 0; i < nc; ++i) {
        columns[i] = PlantedColumn(seed, layer, head, i, nc, seq.kv_len);
      }
      for (int32_t i = 0; i < ns; ++i) {
        slashes[i] = PlantedSlash(seed, layer, head, i, ns, seq.kv_len);
      }
    } else {
      std::vector<float> col_scores, diag_scores;
      VerticalSlashScores(in, &col_scores, &diag_scores);
      TopIndices(col_scores, minference::kSinkColumns, nc, columns);
      TopIndices(diag_scores, minference::kLocalSlashes, ns, slashes);
    }
    area[1] = nc;
    area[2] = ns;
    std::vector<int32_t> rb(ns), re(ns), gathered(nc);
    for (int32_t b = first; b < last; b += kBlockRows) {
      const int32_t e = std::min(b + kBlockRows, last);
      const VsBlockCover cover =
          CoverVsBlock(columns, nc, slashes, ns, b, e, rb.data(), re.data(), gathered.data());
      pairs += VsBlockPairs(rb.data(), re.data(), cover.num_runs, gathered.data(),
                            cover.num_columns, b, e);
    }
  } else {  // block-sparse
    const int32_t kv_blocks = (seq.kv_len + kBlockRows - 1) / kBlockRows;
    const int hd = in.head_dim;
    std::vector<float> pooled_k(static_cast<size_t>(kv_blocks) * hd, 0.0f);
    for (int32_t j = 0; j < kv_blocks; ++j) {
      const int32_t end = std::min((j + 1) * kBlockRows, seq.kv_len);
      for (int32_t k = j * kBlockRows; k < end; ++k) {
        const float* kr = in.kv.row(k, 0);
        for (int d = 0; d < hd; ++d) pooled_k[j * hd + d] += kr[d];
      }
      const float inv = 1.0f / static_cast<float>(end - j * kBlockRows);
      for (int d = 0; d < hd; ++d) pooled_k[j * hd + d] *= inv;
    }
    const int32_t cap = MInferenceBlocks(pattern.v, seq.kv_len);
    area[1] = cap;
    std::vector<float> pooled_q(hd), scores;
    std::vector<int32_t> rb(cap), re(cap);
    for (int32_t qb = 0; qb < shape.num_query_blocks; ++qb) {
      const int32_t r0 = qb * kBlockRows, r1 = std::min(r0 + kBlockRows, seq.q_len);
      std::fill(pooled_q.begin(), pooled_q.end(), 0.0f);
      for (int32_t r = r0; r < r1; ++r) {
        const float* qr = QueryRow(in, r);
        for (int d = 0; d < hd; ++d) pooled_q[d] += qr[d];
      }
      const int32_t b = prefix + r0, e = prefix + r1;  // absolute rows
      const int32_t valid = (e - 1) / kBlockRows + 1;  // blocks starting at or before row e - 1
      scores.assign(valid, 0.0f);
      for (int32_t j = 0; j < valid; ++j) {
        float dot = 0;
        for (int d = 0; d < hd; ++d) dot += pooled_q[d] * pooled_k[j * hd + d];
        // Forced blocks: 0 and those holding the block's own rows rank first.
        const bool forced = j == 0 || j >= b / kBlockRows;
        scores[j] = forced ? std::numeric_limits<float>::infinity() : dot;
      }
      const int32_t n = std::min(cap, valid);
      int32_t* out = body + qb * (1 + shape.cap_blocks);
      out[0] = n;
      TopIndices(scores, 0, n, out + 1);
      for (int32_t i = 0; i < n; ++i) {
        rb[i] = out[1 + i] * kBlockRows;
        re[i] = std::min(rb[i] + kBlockRows, e);
      }
      pairs += VsBlockPairs(rb.data(), re.data(), n, nullptr, 0, b, e);
    }
  }
  const int64_t causal = CausalPairs(first, last);
  if (static_cast<double>(pairs) > minference::kDenseSwitchFraction * static_cast<double>(causal)) {
    kind = HeadPatternKind::kDense;
    pairs = causal;
  }
  area[0] = static_cast<int32_t>(kind);
  return pairs;
}

}  // namespace

std::vector<int64_t> SparseIndexOffsets(const AttentionBatch& batch, int64_t* total) {
  std::vector<int64_t> offsets(batch.sequences.size(), -1);
  *total = 0;
  for (size_t s = 0; s < batch.sequences.size(); ++s) {
    const int64_t words = SparseIndexWords(batch.sequences[s]);
    if (words == 0) continue;
    offsets[s] = *total;
    *total += words;
  }
  return offsets;
}

absl::Status BuildMInferenceIndex(const AttentionPlan& plan, const Tensor& q,
                                  const Tensor& kv_layer, int layer, core::ThreadPool* pool) {
  const AttentionBatch& batch = *plan.batch;
  int64_t total = 0;
  const std::vector<int64_t> offsets = SparseIndexOffsets(batch, &total);
  if (total == 0) return absl::OkStatus();
  if (plan.workspace->sparse_index.numel() < total ||
      plan.workspace->sparse_stats.numel() < 2 * static_cast<int64_t>(offsets.size())) {
    return absl::FailedPreconditionError("Attention: the MInference index was not planned");
  }
  struct Item {
    int32_t seq, head;
  };
  std::vector<Item> items;
  for (size_t s = 0; s < batch.sequences.size(); ++s) {
    if (offsets[s] < 0) continue;
    const MInferenceConfig& c = *batch.sequences[s].pattern.minference;
    if (layer >= c.num_layers) {
      return absl::InvalidArgumentError(absl::StrCat("Attention: layer ", layer,
                                                     " outside the MInference config's ",
                                                     c.num_layers, " layers"));
    }
    for (int h = 0; h < c.num_heads; ++h) items.push_back({static_cast<int32_t>(s), h});
  }
  const AttentionShape& shape = plan.shape;
  const int64_t group = shape.num_heads / shape.num_kv_heads;
  std::vector<int64_t> pairs(items.size());
  int32_t* index = plan.workspace->sparse_index.data<int32_t>();
  pool->ParallelFor(static_cast<int64_t>(items.size()), 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const SequenceAttention& seq = batch.sequences[items[i].seq];
      const MInferenceConfig& c = *seq.pattern.minference;
      const int head = items[i].head;
      const MInferenceIndexShape ishape = MInferenceIndexShapeOf(c, seq.q_len, seq.kv_len);
      HeadInputs in;
      in.seq = &seq;
      in.q_row_stride = shape.num_heads * shape.head_dim;
      in.q = q.data<float>() + seq.q_begin * in.q_row_stride + head * shape.head_dim;
      in.kv = PagedKv{kv_layer.data<float>(), &seq.block_table, batch.block_tokens,
                      shape.num_kv_heads * shape.head_dim, (head / group) * shape.head_dim};
      in.head_dim = shape.head_dim;
      in.scale = plan.scale;
      pairs[i] = BuildHead(in, c.at(layer, head), c.planted, c.planted_seed, layer, head, ishape,
                           index + offsets[items[i].seq] + int64_t{head} * ishape.words_per_head);
    }
  });
  float* stats = plan.workspace->sparse_stats.data<float>();
  for (size_t i = 0; i < items.size(); ++i) {
    const SequenceAttention& seq = batch.sequences[items[i].seq];
    stats[2 * items[i].seq] += static_cast<float>(pairs[i]);
    stats[2 * items[i].seq + 1] +=
        static_cast<float>(CausalPairs(seq.kv_len - seq.q_len, seq.kv_len));
  }
  return absl::OkStatus();
}

void MInferenceKeys(const SequenceAttention& seq, const MInferenceIndexShape& shape,
                    const int32_t* area, int32_t row, std::vector<int32_t>* keys) {
  keys->clear();
  const int32_t prefix = seq.kv_len - seq.q_len;
  const int32_t p = prefix + row;
  const auto kind = static_cast<HeadPatternKind>(area[0]);
  const int32_t* body = area + minference::kHeaderWords;
  switch (kind) {
    case HeadPatternKind::kDense:
      for (int32_t k = 0; k <= p; ++k) keys->push_back(k);
      return;
    case HeadPatternKind::kAShape:
      for (int32_t k = 0; k <= p; ++k) {
        if (k < area[1] || k > p - area[2]) keys->push_back(k);
      }
      return;
    case HeadPatternKind::kVerticalSlash: {
      const int32_t nc = area[1], ns = area[2];
      const int32_t b = prefix + row / kBlockRows * kBlockRows;
      const int32_t e = std::min(b + kBlockRows, seq.kv_len);
      std::vector<int32_t> rb(ns), re(ns), gathered(nc);
      const VsBlockCover cover = CoverVsBlock(body, nc, body + shape.cap_columns, ns, b, e,
                                              rb.data(), re.data(), gathered.data());
      int32_t c = 0;
      for (int32_t r = 0; r <= cover.num_runs; ++r) {
        const int32_t run_start = r < cover.num_runs ? rb[r] : p + 1;
        while (c < cover.num_columns && gathered[c] < run_start && gathered[c] <= p) {
          keys->push_back(gathered[c++]);
        }
        if (r == cover.num_runs) break;
        for (int32_t k = rb[r]; k < re[r] && k <= p; ++k) keys->push_back(k);
      }
      return;
    }
    case HeadPatternKind::kBlockSparse: {
      const int32_t* blocks = body + (row / kBlockRows) * (1 + shape.cap_blocks);
      for (int32_t i = 0; i < blocks[0]; ++i) {
        const int32_t k0 = blocks[1 + i] * kBlockRows;
        for (int32_t k = k0; k < k0 + kBlockRows && k <= p; ++k) keys->push_back(k);
      }
      return;
    }
  }
}

}  // namespace sparseserve::kernels::cpu_internal
