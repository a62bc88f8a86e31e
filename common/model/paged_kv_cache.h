// PagedKvCache: the per-layer KV block storage of one model instance on one backend.
//
// Layer l's tensor is [num_blocks * 2, block_tokens, kv_heads, head_dim] in the backend's compute
// dtype: block b's keys are row 2b, its values row 2b + 1 (ARCHITECTURE.md KV layout contract;
// keys stored after RoPE). Which blocks belong to which sequence is decided by kv::KvBlockPool;
// this class only holds memory. Not thread-safe: written by the engine thread's forward passes.
#ifndef SPARSESERVE_COMMON_MODEL_PAGED_KV_CACHE_H_
#define SPARSESERVE_COMMON_MODEL_PAGED_KV_CACHE_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/tensor/tensor.h"
#include "kernels/backend.h"

namespace sparseserve::model {

struct PagedKvCacheShape {
  int num_layers = 0;
  int num_blocks = 0;
  int block_tokens = 64;  // tokens per block; a multiple of 16 (ARCHITECTURE.md default 64)
  int num_kv_heads = 0;
  int head_dim = 0;
};

class PagedKvCache {
 public:
  // Allocates all layers on `backend`. kInvalidArgument for a bad shape, kResourceExhausted
  // when the backend is out of memory.
  static absl::StatusOr<std::unique_ptr<PagedKvCache>> Create(const PagedKvCacheShape& shape,
                                                              kernels::Backend& backend);
  PagedKvCache(const PagedKvCache&) = delete;
  PagedKvCache& operator=(const PagedKvCache&) = delete;

  const PagedKvCacheShape& shape() const { return shape_; }
  DType dtype() const { return layers_.front().dtype(); }
  // [num_blocks * 2, block_tokens, kv_heads, head_dim]
  const Tensor& layer(int idx) const { return layers_[idx]; }
  // Every layer (an early-exit adapter's too: PagedKvCacheShape::num_layers of them).
  absl::Span<const Tensor> layers() const { return layers_; }

 private:
  PagedKvCache(PagedKvCacheShape shape, std::vector<Tensor> layers)
      : shape_(shape), layers_(std::move(layers)) {}
  PagedKvCacheShape shape_;
  std::vector<Tensor> layers_;
};

}  // namespace sparseserve::model

#endif  // SPARSESERVE_COMMON_MODEL_PAGED_KV_CACHE_H_
