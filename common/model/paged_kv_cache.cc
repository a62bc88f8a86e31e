#include "common/model/paged_kv_cache.h"

#include "absl/strings/str_cat.h"
#include "common/core/status.h"

namespace sparseserve::model {

absl::StatusOr<std::unique_ptr<PagedKvCache>> PagedKvCache::Create(const PagedKvCacheShape& shape,
                                                                   kernels::Backend& backend) {
  if (shape.num_layers <= 0 || shape.num_blocks <= 0 || shape.block_tokens <= 0 ||
      shape.block_tokens % 16 != 0 || shape.num_kv_heads <= 0 || shape.head_dim <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bad KV cache shape: layers=", shape.num_layers, " blocks=", shape.num_blocks,
        " block_tokens=", shape.block_tokens, " (multiple of 16) kv_heads=", shape.num_kv_heads,
        " head_dim=", shape.head_dim));
  }
  std::vector<Tensor> layers;
  layers.reserve(shape.num_layers);
  for (int l = 0; l < shape.num_layers; ++l) {
    // Shareable: a prefill worker on this node may PUT into it GPU to GPU (CUDA IPC).
    SS_ASSIGN_OR_RETURN(
        Tensor t, backend.AllocateShareable(backend.compute_dtype(),
                                            {int64_t{shape.num_blocks} * 2, shape.block_tokens,
                                             shape.num_kv_heads, shape.head_dim}));
    layers.push_back(std::move(t));
  }
  return std::unique_ptr<PagedKvCache>(new PagedKvCache(shape, std::move(layers)));
}

}  // namespace sparseserve::model
