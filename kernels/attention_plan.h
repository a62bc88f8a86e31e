// Attention plans: what each sequence of a batch attends to, planned once per forward step and run
// per layer (FlashInfer's plan/run split).
//
// The model describes a step as an AttentionBatch (host memory, owned by the caller).
// Backend::PlanAttention checks it and lays its index arrays into an AttentionWorkspace that the
// caller owns (one upload on a GPU), returning a small AttentionPlan; Backend::Attention takes that
// plan and the layer. There is no hidden "last plan" inside a backend: a plan is valid while its
// batch and workspace live and the workspace is not planned into again.
//
// One semantics on every backend (kernels/attention_visibility.h states it as code). A sequence
// has q_len new rows whose K/V occupy KV indices [kv_len - q_len, kv_len); row i sits at KV index
// p_i = kv_len - q_len + i. Row i sees key k when
//   - k is in the cached prefix [0, kv_len - q_len), or k is new row j = k - (kv_len - q_len) with
//     mask[i][j] = 1 (no mask: j <= i, the causal case), and
//   - the pattern's method admits it: kDense admits every key; kSlidingWindow admits the keys
//     k > p_i - window and the sinks k < sink_tokens (Xiao et al., StreamingLLM §3; keys keep
//     their true RoPE positions, no re-indexing).
// A row that sees no key gets a zero output (never NaN). RoPE positions are not part of attention:
// the model rotates Q and K at each row's own position before writing K (positions may repeat and
// need not be monotone, as in tree verification and Lookahead's mask).
// kMInference (issue 12) adds per-head sparse patterns whose indices each layer builds from its
// own queries and keys (Backend::BuildAttentionIndex); kernels/minference_index.h states which
// keys a row sees under them. kTokenSelect (issue 13) selects one token set per layer and step
// from the layer's queries, kept in the sequence's state slot; kernels/tokenselect_index.h states
// which keys a row sees under it.
#ifndef SPARSESERVE_KERNELS_ATTENTION_PLAN_H_
#define SPARSESERVE_KERNELS_ATTENTION_PLAN_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "common/tensor/tensor.h"
#include "kernels/minference_index.h"
#include "kernels/tokenselect_index.h"

namespace sparseserve::kernels {

enum class AttentionMethodKind { kDense, kSlidingWindow, kMInference, kTokenSelect };

// A sequence's attention method and its parameters.
struct AttentionPattern {
  AttentionMethodKind kind = AttentionMethodKind::kDense;
  // kSlidingWindow: keys per query counting itself (>= 1), and leading positions that stay
  // visible (>= 0). Mistral/Qwen2 configs give the window with 0 sinks; a request choosing
  // sliding-window gets 4 sinks by default (engine::AttentionChoice).
  int32_t window = 0;
  int32_t sink_tokens = 0;
  // kMInference: the per-(layer, head) patterns (shared, immutable; never null for kMInference).
  // A chunk under kMInference has no query mask.
  std::shared_ptr<const MInferenceConfig> minference;
  // kTokenSelect: its budget and selection-cache threshold. A kTokenSelect sequence needs a state
  // slot (SequenceAttention::state_slot) of at least tokenselect::StateWords words.
  TokenSelectParams tokenselect;

  bool operator==(const AttentionPattern&) const = default;
};

// One sequence's slice of a batched attention call.
struct SequenceAttention {
  int32_t q_begin = 0;  // first row of this sequence in the packed query tensor
  int32_t q_len = 0;    // new rows (chunk length; 1 for plain decode)
  int32_t kv_len = 0;   // KV entries after this step's write (cached + new)
  // uint8 [q_len * q_len] row-major, or empty: row i sees new row j where mask[i * q_len + j] is
  // 1. Empty = causal among the new rows (j <= i).
  std::vector<uint8_t> mask;
  // int32 [ceil(kv_len / block_tokens)] KV block ids holding indices 0..kv_len-1 in order.
  std::vector<int32_t> block_table;
  AttentionPattern pattern;
  // Row of AttentionBatch::sequence_state holding this sequence's persistent state, or -1 (none).
  // Keyed by the sequence, not by its place in the batch (engine::SequenceStateTable), so an
  // index builder finds the same state whatever row the sequence has in this step.
  int32_t state_slot = -1;
};

struct AttentionBatch {
  int block_tokens = 64;  // tokens per KV block
  float scale = 0.0f;     // softmax scale; 0 means 1/sqrt(head_dim)
  std::vector<SequenceAttention> sequences;
  // i32 [num_slots, slot_words] in the backend's memory, or empty: per-sequence state that
  // index builders read and write at row SequenceAttention::state_slot (a view; the engine's
  // SequenceStateTable owns the memory and keeps it alive across steps).
  Tensor sequence_state;
};

// Caller-owned memory a plan lives in (in the backend's memory). PlanAttention grows its tensors
// when a batch needs more and then bumps `generation`: a step graph captured with the old buffers
// reads freed memory and must be captured again.
struct AttentionWorkspace {
  Tensor metadata;  // i32: the plan's index arrays (sequence records, block tables, work lists)
  Tensor partial;   // f32: split-KV partial outputs and their log-sum-exps
  // i32: the indices BuildAttentionIndex builds per layer for data-dependent methods (MInference:
  // one area of MInferenceIndexShape::words_per_head per (sequence, head)).
  Tensor sparse_index;
  // f32 [sequences, 2]: per sequence of the plan, the (row, key) pairs its attention computed and
  // the causal pairs of its rows, summed over the layers and heads built since PlanAttention
  // zeroed them; zeros for sequences without a data-dependent method. Read after a step for
  // sparseserve_sparse_attention_density.
  Tensor sparse_stats;
  // f32 [sequences, 2]: per sequence of the plan, the TokenSelect selection-cache hits and queries
  // (steps that had to choose: more candidates than k) summed over the layers built since
  // PlanAttention zeroed them. Read after a step for the
  // sparseserve_tokenselect_selection_cache_* counters.
  Tensor selection_stats;
  // f32: TokenSelect's per-layer selection scratch on a GPU (the mean queries, per-head logits of
  // the candidates, the soft-vote scores and the radix top-k's histograms of each selecting
  // sequence; cuda::TokenSelectScratchFloats each). Sized by PlanAttention for the batch's
  // largest candidate count rounded up to a power of two, so it grows rarely; dead between
  // BuildAttentionIndex calls. Unused by the CPU.
  Tensor selection_scratch;
  uint64_t generation = 0;
};

// The shapes an attention call runs at.
struct AttentionShape {
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  int64_t num_rows = 0;    // query rows of the step
  int64_t num_blocks = 0;  // blocks of the KV pool
};

// What PlanAttention made: a few numbers. The batch and the workspace are borrowed and must
// outlive every Attention call with this plan.
struct AttentionPlan {
  const AttentionBatch* batch = nullptr;
  AttentionWorkspace* workspace = nullptr;
  AttentionShape shape;
  float scale = 0;  // resolved softmax scale
  // Where the backend put its index arrays: int32 offsets into workspace->metadata and counts,
  // filled and read only by the backend that made the plan (the CPU reads `batch` instead).
  // A step graph bakes the layout in and is captured again when it changes, so nothing here
  // may follow the contexts' growth within a step shape: the block tables (whose length does)
  // are the last section, and counts that grow with the keys are read on the device.
  struct Layout {
    int64_t seqs = 0, tables = 0, masks = 0, decode_items = 0, merges = 0, merge_rows = 0,
            prefill_tiles = 0, prefill_tile_areas = 0, row_seq = 0;
    // Per decode item the first merge of its row group, and the merge counters (decode merges,
    // then TokenSelect rows, kv_heads each) of the kernels that merge in their last chunk.
    int64_t decode_item_merges = 0, merge_counters = 0;
    int max_decode_items = 0, num_merges = 0, num_prefill_tiles = 0;
    // Split-KV prefill tiles (CUDA, cuda_kernels.h's PrefillSplit): every prefill tile's keys in
    // prefill_splits parts, whose partial states (at split_partial floats into `partial`) the
    // split merges (first part, parts) combine into their output rows.
    int64_t split_merges = 0, split_merge_rows = 0, split_partial = 0;
    int prefill_splits = 1, num_split_merges = 0;
    // The most query rows of a decode-kernel sequence (1, or up to a few for speculative verify
    // steps): the decode partials hold that many planes of max_decode_items slots.
    int decode_rows = 1;
    int total_q = 0;
    bool generic = false;  // every row on the generic kernel (head dims without a fast kernel)
    // Some prefill tiles belong to kMInference sequences: prefill_tile_areas holds one (index
    // offset, words per head) pair per tile, and the kernel runs only their kDense heads.
    bool prefill_gated = false;
    // Some prefill-kernel (decode-kernel) sequence has a mask or a window: the kernel variant
    // that checks every key runs; dense batches keep the plain one.
    bool prefill_masked = false, decode_masked = false;
    // Dense prefill sequences on cuDNN's SDPA (CUDA, cudnn_prefill.h) instead of the prefill
    // kernel: per sequence its query rows, keys and first element, and its block table padded
    // to cudnn_max_kv / block_tokens entries; the graph's bucketed shape.
    int64_t cudnn_seq_q = 0, cudnn_seq_kv = 0, cudnn_offsets = 0, cudnn_tables = 0;
    int cudnn_batch = 0, cudnn_max_q = 0, cudnn_max_kv = 0;
    // kMInference sequences (their own kernels): records and (record, row) pairs in metadata,
    // and the grid bounds of the index build.
    // Rows go to the CUDA-core kernel (head dims without tensor-core kernels), tiles (record,
    // first row of a 64-row block) to the tensor-core one.
    int64_t minference_seqs = 0, minference_rows = 0, minference_tiles = 0;
    int num_minference_seqs = 0, num_minference_rows = 0, num_minference_tiles = 0;
    int minference_key_tiles = 0, minference_query_blocks = 0;
    // kTokenSelect sequences with rows: records (all of them; those at most k candidates run
    // dense here, on the kernels above), and for the selecting ones their (record, row) pairs
    // with one split-KV merge (first item, items) and output row each. Grid bounds: the most
    // selection lists of a record (1, or the KV heads), the candidates of the selection, a power of
    // two >= 4096 and >= every sequence's, scored in chunks of tokenselect_chunk_tokens; the
    // attention's items per row and list positions per item; and where its partials start in
    // `partial` (floats).
    int64_t tokenselect_seqs = 0, tokenselect_rows = 0, tokenselect_merges = 0,
            tokenselect_merge_rows = 0, tokenselect_partial = 0;
    int num_tokenselect_seqs = 0, num_tokenselect_rows = 0;
    int tokenselect_candidates = 0, tokenselect_chunk_tokens = 0, tokenselect_lists = 1;
    int tokenselect_items = 0, tokenselect_item_tokens = 0;
    bool operator==(const Layout&) const = default;
  } layout;
};

}  // namespace sparseserve::kernels

#endif  // SPARSESERVE_KERNELS_ATTENTION_PLAN_H_
