// TensorParallelShard: which part of a Llama model one tensor-parallel rank holds (issue 19),
// Megatron-style (papers/serving.md): QKV and gate/up split by output rows (column-parallel: a
// rank computes its own heads and FFN columns), o_proj and down split by input columns
// (row-parallel: each rank's partial sum, joined by an all-reduce), the LM head split by
// vocabulary rows (each rank's logits, gathered once for sampling). The embedding and the norms
// are replicated. KV heads split with their query heads; with more ranks than KV heads each rank
// keeps the one KV head its query heads read (replicated, as vLLM does).
#ifndef SPARSESERVE_COMMON_MODEL_TENSOR_PARALLEL_SHARD_H_
#define SPARSESERVE_COMMON_MODEL_TENSOR_PARALLEL_SHARD_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "common/model/model_config.h"
#include "kernels/collective.h"

namespace sparseserve::model {

struct TensorParallelShard {
  int rank = 0;
  int size = 1;                               // 1 = the whole model, no collective
  kernels::Collective* collective = nullptr;  // borrowed; required when size > 1
};

// The slices of one rank, in the model's global indices.
struct ShardDims {
  int heads = 0, head_begin = 0;        // query heads
  int kv_heads = 0, kv_head_begin = 0;  // KV heads (kv_heads = 1 when replicated)
  int64_t ffn = 0, ffn_begin = 0;       // intermediate (gate/up rows, down columns)
  // LM head rows: vocab_begin + [0, vocab); the vocabulary is padded to a multiple of the ranks,
  // so the last ranks may hold fewer real rows (vocab_rows) than `vocab`, padded with zeros.
  int64_t vocab = 0, vocab_begin = 0, vocab_rows = 0;
};

// kInvalidArgument (saying which sizes do not divide) when the heads, the FFN width or the KV
// heads cannot be split over `size` ranks: heads and FFN must divide by it, and KV heads must
// divide by it or it by them.
absl::StatusOr<ShardDims> ShardDimsOf(const ModelConfig& config, int rank, int size);

}  // namespace sparseserve::model

#endif  // SPARSESERVE_COMMON_MODEL_TENSOR_PARALLEL_SHARD_H_
