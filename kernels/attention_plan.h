// Attention plans: what each sequence of a batch attends to, for every attention kernel.
//
// The model builds one AttentionBatch per forward step (host memory, owned by the caller) and
// passes it to Backend::Attention for every layer. A sequence's pattern says which keys each query
// sees; all patterns share one semantics on every backend:
//   kDense      causal attention over the sequence's whole KV (cached blocks + this chunk).
//   kBlockSparse MInference (papers/minference.md §3): per query block of 64 rows, runs of key
//               blocks plus gathered key columns, per head; sinks/local window are part of the
//               runs.
//   kTokenIndex TokenSelect (papers/tokenselect.md §3): one sorted list of key positions per layer
//               (shared by all heads) for single-token decode queries, plus the query's own token.
//   kTreeMask   speculative verification: query rows carry explicit positions and an ancestor
//               mask over the query rows themselves; every row sees the whole cached prefix.
// Only kDense is implemented so far; the others are rejected with kUnimplemented by the kernels.
#ifndef SPARSESERVE_KERNELS_ATTENTION_PLAN_H_
#define SPARSESERVE_KERNELS_ATTENTION_PLAN_H_

#include <cstdint>
#include <vector>

namespace sparseserve::kernels {

enum class AttentionPatternKind { kDense, kBlockSparse, kTokenIndex, kTreeMask };

// MInference's per-head sparse index for one sequence of one layer.
struct BlockSparseIndex {
  int block_rows = 64;  // query/key block size (MInference default 64x64)
  // int32 [num_heads][num_query_blocks + 1] offsets into `key_block_runs` (pairs begin,end).
  std::vector<int32_t> run_indptr;
  // int32 [num_runs][2] half-open ranges of key blocks.
  std::vector<int32_t> key_block_runs;
  // int32 [num_heads][num_query_blocks + 1] offsets into `key_columns`.
  std::vector<int32_t> column_indptr;
  // int32 [num_columns] individual key positions (vertical lines).
  std::vector<int32_t> key_columns;
};

struct AttentionPattern {
  AttentionPatternKind kind = AttentionPatternKind::kDense;
  BlockSparseIndex block_sparse;         // kBlockSparse
  std::vector<int32_t> token_positions;  // kTokenIndex: sorted key positions
  // kTreeMask: uint8 [q_len][q_len], 1 where row i may attend to query row j (j's own key).
  std::vector<uint8_t> tree_mask;
};

// One sequence's slice of a batched attention call.
struct SequenceAttention {
  int32_t q_begin = 0;  // first row of this sequence in the packed query tensor
  int32_t q_len = 0;    // number of query rows (chunk length; 1 for plain decode)
  int32_t kv_len = 0;   // tokens in its KV cache after this step's write (cached + new)
  // int32 [q_len] positions of the query rows; empty = the last q_len positions of the KV
  // (kv_len - q_len ... kv_len - 1), the ordinary causal case.
  std::vector<int32_t> q_positions;
  // int32 [ceil(kv_len / block_tokens)] KV block ids holding positions 0..kv_len-1 in order.
  std::vector<int32_t> block_table;
  AttentionPattern pattern;
};

struct AttentionBatch {
  int block_tokens = 64;  // tokens per KV block
  float scale = 0.0f;     // softmax scale; 0 means 1/sqrt(head_dim)
  std::vector<SequenceAttention> sequences;
  // Identity of this batch's contents: nonzero ids are unique per distinct batch (NewPlanId), so a
  // backend may keep its per-batch work (validation, device metadata) across the layers of one
  // forward step. 0 = no identity: the backend treats every call as a new batch.
  uint64_t plan_id = 0;
};

// A process-wide unique nonzero AttentionBatch::plan_id. Thread-safe.
uint64_t NewPlanId();

}  // namespace sparseserve::kernels

#endif  // SPARSESERVE_KERNELS_ATTENTION_PLAN_H_
