#include "common/model/tensor_parallel_shard.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace sparseserve::model {

absl::StatusOr<ShardDims> ShardDimsOf(const ModelConfig& c, int rank, int size) {
  if (size < 1 || rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(absl::StrCat("tensor parallel rank ", rank, " of ", size));
  }
  if (c.num_heads % size != 0 || c.intermediate_size % size != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tensor-parallel ", size, " must divide the model's ", c.num_heads,
                     " attention heads and its FFN width ", c.intermediate_size));
  }
  if (c.num_kv_heads % size != 0 && size % c.num_kv_heads != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tensor-parallel ", size, " and the model's ", c.num_kv_heads,
                     " KV heads: one must divide the other (KV heads are split, or replicated "
                     "when there are fewer than ranks)"));
  }
  ShardDims d;
  d.heads = c.num_heads / size;
  d.head_begin = rank * d.heads;
  if (c.num_kv_heads % size == 0) {
    d.kv_heads = c.num_kv_heads / size;
    d.kv_head_begin = rank * d.kv_heads;
  } else {  // more ranks than KV heads: the one KV head this rank's query heads read
    d.kv_heads = 1;
    d.kv_head_begin = d.head_begin / (c.num_heads / c.num_kv_heads);
  }
  d.ffn = c.intermediate_size / size;
  d.ffn_begin = rank * d.ffn;
  d.vocab = (c.vocab_size + size - 1) / size;
  d.vocab_begin = rank * d.vocab;
  d.vocab_rows = std::clamp<int64_t>(c.vocab_size - d.vocab_begin, 0, d.vocab);
  return d;
}

}  // namespace sparseserve::model
