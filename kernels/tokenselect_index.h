// TokenSelect sparse decode (papers/tokenselect.md): which keys a row sees, how a layer selects
// them and when it may reuse its last selection — one semantics, compiled into the CPU reference
// and the CUDA kernels alike (as attention_visibility.h and minference_index.h).
//
// A sequence with AttentionMethodKind::kTokenSelect adds q_len rows (one decode token, a prompt
// chunk, or verified draft rows with a mask) over kv_len keys; its cached prefix is
// P = kv_len - q_len. With parameters (k, initial, local, θ):
//   - candidates are the cached keys [initial, P - local): the first `initial` and the last
//     `local` cached keys are always attended (§3: 128 initial + k selected + 512 local), and the
//     step's own new rows are attended as attention_plan.h says (causal, or the query mask);
//   - when there are at most k candidates the step attends every key (dense: exactly the dense
//     result); otherwise it selects k of them:
//   - the head soft vote (Eq. 10) scores each candidate t as Σ_h softmax_t(scale · q̄_h · k_t)
//     over the query heads h, where q̄_h is head h's query averaged over the step's rows (the
//     chunked-prefill rule, §3.3: one selection per chunk; for a decode row q̄ is its query), k_t
//     the key of h's KV head (h / group, the GQA mapping), and scale the attention's softmax
//     scale (the released code scores unscaled logits; with the scale the vote is the heads'
//     attention mass). The k best scores win, ties to the smaller index; stored ascending;
//   - per KV head (`per_kv_head`, TokenSwift's dynamic partial KV, papers/tokenswift.md: chosen
//     "per layer and KV head"): each KV head g keeps its own k tokens, scored by the same soft
//     vote summed over g's query heads only (TokenSwift sums raw q·k over the group; the soft
//     vote keeps one scoring rule, and ranks identically for one query head per KV head). The
//     query heads of g attend g's list; everything else below is per layer as before;
//   - the selection cache (Alg. 1, a decode feature): a one-row step reuses the selection of
//     (sequence, layer) while cos(q̄, q̄_sel) >= θ, where q̄_sel is the query of the step that last
//     selected (all heads concatenated), and the selection is at most `local` tokens old
//     (P - P_sel <= local; the
//     keys that left the local window since, [P_sel - local, P - local), stay attended, so a
//     reused selection never loses recent tokens — the paper's Alg. 1 is silent on them).
//     Multi-row steps (prompt chunks, verified drafts) always select, and their selections are
//     never reused, so a prompt's chunks select the same whether or not its leading chunks came
//     from the prefix cache, and a decode starts the same whether its prompt was prefilled here
//     or on a prefill worker;
//   - a row then sees [0, initial) ∪ selected ∪ [P_sel - local, P) ∪ its visible new rows, all
//     disjoint and ascending (P_sel = P on a fresh selection). Keys keep their true RoPE
//     positions (the KV contract): no re-rotation at compacted positions.
// The state lives in the sequence's row of AttentionBatch::sequence_state (engine::
// SequenceStateTable), one area of StateWordsPerLayer words per layer, so a decode step that
// selects or reuses replays as a CUDA graph. A fresh slot is zeros: no selection yet.
#ifndef SPARSESERVE_KERNELS_TOKENSELECT_INDEX_H_
#define SPARSESERVE_KERNELS_TOKENSELECT_INDEX_H_

#include <cstdint>

#include "kernels/attention_visibility.h"  // SS_HOST_DEVICE

namespace sparseserve::kernels {

// A TokenSelect sequence's parameters (request_options.h's tokenselect_* fields).
struct TokenSelectParams {
  int32_t k = 2048;          // selected tokens per step (§4.1 default)
  int32_t initial = 128;     // leading tokens always attended
  int32_t local = 512;       // trailing cached tokens always attended
  float theta = 0.9f;        // selection cache threshold; > 1 never reuses ([code] default 0.9)
  bool per_kv_head = false;  // one selection per KV head instead of one per layer
  bool operator==(const TokenSelectParams&) const = default;
};

namespace tokenselect {

// A layer's state area, in int32 words: a header, the selecting query (f32 bits, [heads, hd]),
// then `lists` lists of k selected key indices each (ascending): one list, or one per KV head.
inline constexpr int32_t kHeaderWords = 4;
inline constexpr int32_t kValid = 0;     // kNone, kReusable or kChunkSelection
inline constexpr int32_t kPrefix = 1;    // P_sel: the cached prefix when it selected
inline constexpr int32_t kSelected = 2;  // indices stored (k)
inline constexpr int32_t kLastHit = 3;   // 1 when the last step reused the selection
// kValid's values: no selection yet, a one-row step's (reusable), a multi-row step's (never
// reused).
inline constexpr int32_t kNone = 0, kReusable = 1, kChunkSelection = 2;

// The selection lists of a layer: one, or one per KV head.
SS_HOST_DEVICE int32_t ListsOf(const TokenSelectParams& p, int32_t kv_heads) {
  return p.per_kv_head ? kv_heads : 1;
}
SS_HOST_DEVICE int64_t StateWordsPerLayer(int64_t query_width, int64_t k, int64_t lists = 1) {
  return kHeaderWords + query_width + lists * k;
}
// Words of a sequence's state slot for `layers` layers (query_width = heads * head_dim).
SS_HOST_DEVICE int64_t StateWords(int64_t layers, int64_t query_width, int64_t k,
                                  int64_t lists = 1) {
  return layers * StateWordsPerLayer(query_width, k, lists);
}
// Where KV head `kv_head`'s list starts in a layer's area (`lists` lists of k).
SS_HOST_DEVICE int64_t ListOffset(int64_t query_width, int64_t k, int32_t lists, int32_t kv_head) {
  return kHeaderWords + query_width + (lists > 1 ? int64_t{kv_head} * k : 0);
}
// A layer's area for a sequence with parameters `p` on a model of `kv_heads` KV heads.
SS_HOST_DEVICE int64_t LayerWords(const TokenSelectParams& p, int64_t query_width,
                                  int32_t kv_heads) {
  return StateWordsPerLayer(query_width, p.k, ListsOf(p, kv_heads));
}

// The step's key regions; every key a row may see outside them is one of its new rows.
struct KeyRegions {
  int32_t prefix = 0;           // P: cached keys before the step's rows
  bool dense = false;           // at most k candidates: every key
  int32_t initial_end = 0;      // [0, initial_end) always
  int32_t candidate_begin = 0;  // candidates of a fresh selection: [candidate_begin,
  int32_t candidate_end = 0;    //   candidate_end)
};

SS_HOST_DEVICE KeyRegions RegionsOf(const TokenSelectParams& p, int32_t q_len, int32_t kv_len) {
  KeyRegions r;
  r.prefix = kv_len - q_len;
  r.initial_end = p.initial < r.prefix ? p.initial : r.prefix;
  r.candidate_begin = r.initial_end;
  const int32_t end = r.prefix - p.local;
  r.candidate_end = end > r.candidate_begin ? end : r.candidate_begin;
  r.dense = r.candidate_end - r.candidate_begin <= p.k;
  return r;
}

// The selection of `layer_state` (a layer's area) may serve a step of `q_len` rows with cached
// prefix `prefix` and cosine `cosine` between its query and the selecting one.
SS_HOST_DEVICE bool SelectionReusable(const TokenSelectParams& p, const int32_t* layer_state,
                                      int32_t q_len, int32_t prefix, float cosine) {
  const int32_t selected_at = layer_state[kPrefix];
  return q_len == 1 && layer_state[kValid] == kReusable && layer_state[kSelected] == p.k &&
         selected_at <= prefix && prefix - selected_at <= p.local && cosine >= p.theta;
}

// Whether entry i of a stored list may be attended: at least initial_end, below local_begin
// (LocalBegin) and above the entry before it. State slots are checked, not trusted: the CPU
// refuses a list with an entry that is not, the CUDA kernel skips it, so a corrupt or foreign
// state never reads outside the sequence or counts a key twice.
SS_HOST_DEVICE bool ListEntryValid(const int32_t* list, int32_t i, int32_t initial_end,
                                   int32_t local_begin) {
  const int32_t key = list[i];
  return key >= initial_end && key < local_begin && (i == 0 || list[i - 1] < key);
}

// Where a row's trailing cached keys start under the layer's (valid) selection: P_sel - local.
SS_HOST_DEVICE int32_t LocalBegin(const TokenSelectParams& p, const int32_t* layer_state,
                                  int32_t initial_end) {
  const int32_t begin = layer_state[kPrefix] - p.local;
  return begin > initial_end ? begin : initial_end;
}

}  // namespace tokenselect
}  // namespace sparseserve::kernels

#endif  // SPARSESERVE_KERNELS_TOKENSELECT_INDEX_H_
