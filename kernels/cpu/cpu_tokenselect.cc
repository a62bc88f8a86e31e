#include "kernels/cpu/cpu_tokenselect.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "kernels/attention_visibility.h"

namespace sparseserve::kernels::cpu_internal {
namespace {

using tokenselect::kHeaderWords;

// The new rows row `row` sees (its causal or masked part of the step).
int32_t VisibleNewRows(const SequenceAttention& seq, int32_t row) {
  if (seq.mask.empty()) return row + 1;
  int32_t n = 0;
  for (int32_t j = 0; j < seq.q_len; ++j) n += seq.mask[row * seq.q_len + j];
  return n;
}

float Cosine(const std::vector<float>& a, const float* b) {
  double dot = 0, na = 0, nb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    dot += double{a[i]} * b[i];
    na += double{a[i]} * a[i];
    nb += double{b[i]} * b[i];
  }
  return na > 0 && nb > 0 ? static_cast<float>(dot / std::sqrt(na * nb)) : 0.0f;
}

// The head soft vote (Eq. 10) over the candidates [begin, end) by query heads [h0, h1) (every
// head, or one KV head's group): the k best, ascending.
void Select(const SequenceAttention& seq, const AttentionShape& shape, int block_tokens,
            float scale, const float* kv, const std::vector<float>& query, int64_t h0, int64_t h1,
            int32_t begin, int32_t end, core::ThreadPool* pool, int32_t* selected) {
  const int64_t hd = shape.head_dim;
  const int64_t group = shape.num_heads / shape.num_kv_heads;
  const int64_t token_stride = shape.num_kv_heads * hd;
  const int64_t heads = h1 - h0;
  const int32_t n = end - begin;
  std::vector<float> logits(heads * n);
  pool->ParallelFor(n, 256, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int32_t key = begin + static_cast<int32_t>(t);
      const float* keys = kv + (int64_t{seq.block_table[key / block_tokens]} * 2 * block_tokens +
                                key % block_tokens) *
                                   token_stride;
      for (int64_t h = h0; h < h1; ++h) {
        const float* k = keys + (h / group) * hd;
        const float* qh = query.data() + h * hd;
        float dot = 0;
        for (int64_t d = 0; d < hd; ++d) dot += qh[d] * k[d];
        logits[(h - h0) * n + t] = dot * scale;
      }
    }
  });
  std::vector<float> score(n, 0.0f);
  for (int64_t h = 0; h < heads; ++h) {
    const float* l = logits.data() + h * n;
    const float m = *std::max_element(l, l + n);
    double sum = 0;
    for (int32_t t = 0; t < n; ++t) sum += std::exp(l[t] - m);
    const float inv = static_cast<float>(1.0 / sum);
    for (int32_t t = 0; t < n; ++t) score[t] += std::exp(l[t] - m) * inv;
  }
  std::vector<int32_t> order(n);
  for (int32_t t = 0; t < n; ++t) order[t] = t;
  const int32_t k = seq.pattern.tokenselect.k;
  auto better = [&](int32_t a, int32_t b) {
    return score[a] != score[b] ? score[a] > score[b] : a < b;
  };
  std::nth_element(order.begin(), order.begin() + k, order.end(), better);
  std::sort(order.begin(), order.begin() + k);
  for (int32_t i = 0; i < k; ++i) selected[i] = begin + order[i];
}

}  // namespace

int32_t* TokenSelectLayerState(const AttentionBatch& batch, const SequenceAttention& seq,
                               const AttentionShape& shape, int layer) {
  if (seq.state_slot < 0 || batch.sequence_state.empty()) return nullptr;
  const int64_t per_layer = tokenselect::LayerWords(
      seq.pattern.tokenselect, int64_t{shape.num_heads} * shape.head_dim, shape.num_kv_heads);
  const int64_t slot_words = batch.sequence_state.dim(1);
  if ((layer + 1) * per_layer > slot_words) return nullptr;
  return batch.sequence_state.data<int32_t>() + seq.state_slot * slot_words + layer * per_layer;
}

absl::Status BuildTokenSelectIndex(const AttentionPlan& plan, const Tensor& q,
                                   const Tensor& kv_layer, int layer, core::ThreadPool* pool) {
  const AttentionBatch& batch = *plan.batch;
  const AttentionShape& shape = plan.shape;
  const int64_t num_seqs = static_cast<int64_t>(batch.sequences.size());
  const int64_t heads = shape.num_heads, width = heads * shape.head_dim;
  for (int64_t s = 0; s < num_seqs; ++s) {
    const SequenceAttention& seq = batch.sequences[s];
    if (seq.pattern.kind != AttentionMethodKind::kTokenSelect || seq.q_len == 0) continue;
    if (plan.workspace->sparse_stats.numel() < 2 * num_seqs ||
        plan.workspace->selection_stats.numel() < 2 * num_seqs) {
      return absl::FailedPreconditionError("Attention: the TokenSelect stats were not planned");
    }
    float* pair_stats = plan.workspace->sparse_stats.data<float>() + 2 * s;
    float* cache_stats = plan.workspace->selection_stats.data<float>() + 2 * s;
    const TokenSelectParams& p = seq.pattern.tokenselect;
    const tokenselect::KeyRegions regions = tokenselect::RegionsOf(p, seq.q_len, seq.kv_len);
    double dense_pairs = 0;
    for (int32_t r = 0; r < seq.q_len; ++r) dense_pairs += regions.prefix + VisibleNewRows(seq, r);
    if (regions.dense) {
      pair_stats[0] += static_cast<float>(dense_pairs * heads);
      pair_stats[1] += static_cast<float>(dense_pairs * heads);
      continue;
    }
    int32_t* state = TokenSelectLayerState(batch, seq, shape, layer);
    if (state == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Attention: sequence ", s, "'s state slot is too small for TokenSelect layer ", layer,
          " with k = ", p.k, " (", tokenselect::LayerWords(p, width, shape.num_kv_heads),
          " words per layer)"));
    }
    // The step's query: its rows' mean per head (§3.3; the row itself for a decode step).
    std::vector<float> query(width, 0.0f);
    for (int32_t r = 0; r < seq.q_len; ++r) {
      const float* qr = q.data<float>() + (int64_t{seq.q_begin} + r) * width;
      for (int64_t i = 0; i < width; ++i) query[i] += qr[i];
    }
    for (float& x : query) x /= static_cast<float>(seq.q_len);
    std::vector<float> selecting(width);
    std::memcpy(selecting.data(), state + kHeaderWords, width * sizeof(float));
    cache_stats[1] += 1;
    if (tokenselect::SelectionReusable(p, state, seq.q_len, regions.prefix,
                                       Cosine(query, selecting.data()))) {
      state[tokenselect::kLastHit] = 1;
      cache_stats[0] += 1;
    } else {
      const int32_t lists = tokenselect::ListsOf(p, shape.num_kv_heads);
      const int64_t heads_per_list = heads / lists;
      for (int32_t list = 0; list < lists; ++list) {
        Select(seq, shape, batch.block_tokens, plan.scale, kv_layer.data<float>(), query,
               list * heads_per_list, (list + 1) * heads_per_list, regions.candidate_begin,
               regions.candidate_end, pool,
               state + tokenselect::ListOffset(width, p.k, lists, list));
      }
      state[tokenselect::kValid] =
          seq.q_len == 1 ? tokenselect::kReusable : tokenselect::kChunkSelection;
      state[tokenselect::kPrefix] = regions.prefix;
      state[tokenselect::kSelected] = p.k;
      state[tokenselect::kLastHit] = 0;
      std::memcpy(state + kHeaderWords, query.data(), width * sizeof(float));
    }
    const int32_t local_begin = tokenselect::LocalBegin(p, state, regions.initial_end);
    double sparse_pairs = 0;
    for (int32_t r = 0; r < seq.q_len; ++r) {
      sparse_pairs +=
          regions.initial_end + p.k + (regions.prefix - local_begin) + VisibleNewRows(seq, r);
    }
    pair_stats[0] += static_cast<float>(sparse_pairs * heads);
    pair_stats[1] += static_cast<float>(dense_pairs * heads);
  }
  return absl::OkStatus();
}

absl::Status CheckTokenSelectLists(const SequenceAttention& seq, const int32_t* layer_state,
                                   const AttentionShape& shape) {
  const TokenSelectParams& p = seq.pattern.tokenselect;
  const tokenselect::KeyRegions regions = tokenselect::RegionsOf(p, seq.q_len, seq.kv_len);
  if (regions.dense) return absl::OkStatus();
  if (layer_state[tokenselect::kSelected] != p.k) {
    return absl::InternalError(absl::StrCat("Attention: TokenSelect state holds ",
                                            layer_state[tokenselect::kSelected],
                                            " selected tokens, not k = ", p.k));
  }
  const int64_t width = int64_t{shape.num_heads} * shape.head_dim;
  const int32_t lists = tokenselect::ListsOf(p, shape.num_kv_heads);
  const int32_t local_begin = tokenselect::LocalBegin(p, layer_state, regions.initial_end);
  for (int32_t list = 0; list < lists; ++list) {
    const int32_t* selected = layer_state + tokenselect::ListOffset(width, p.k, lists, list);
    for (int32_t i = 0; i < p.k; ++i) {
      if (!tokenselect::ListEntryValid(selected, i, regions.initial_end, local_begin)) {
        return absl::InternalError(absl::StrCat(
            "Attention: TokenSelect list ", list, " has key ", selected[i], " at place ", i,
            " (keys must ascend within [", regions.initial_end, ", ", local_begin, "))"));
      }
    }
  }
  return absl::OkStatus();
}

void TokenSelectKeys(const SequenceAttention& seq, const int32_t* layer_state,
                     const AttentionShape& shape, int32_t kv_head, int32_t row,
                     std::vector<int32_t>* keys) {
  keys->clear();
  const TokenSelectParams& p = seq.pattern.tokenselect;
  const tokenselect::KeyRegions regions = tokenselect::RegionsOf(p, seq.q_len, seq.kv_len);
  KeyVisibility vis;
  vis.q_len = seq.q_len;
  vis.kv_len = seq.kv_len;
  vis.mask = seq.mask.empty() ? nullptr : seq.mask.data();
  int32_t first_new = 0;  // the first key still to list by the visibility rule
  if (!regions.dense) {
    for (int32_t k = 0; k < regions.initial_end; ++k) keys->push_back(k);
    const int64_t width = int64_t{shape.num_heads} * shape.head_dim;
    const int32_t lists = tokenselect::ListsOf(p, shape.num_kv_heads);
    const int32_t* selected = layer_state + tokenselect::ListOffset(width, p.k, lists, kv_head);
    keys->insert(keys->end(), selected, selected + layer_state[tokenselect::kSelected]);
    first_new = tokenselect::LocalBegin(p, layer_state, regions.initial_end);
  }
  const int32_t end = KeyEnd(vis, row);
  for (int32_t k = first_new; k < end; ++k) {
    if (KeyVisible(vis, row, k)) keys->push_back(k);
  }
}

}  // namespace sparseserve::kernels::cpu_internal
