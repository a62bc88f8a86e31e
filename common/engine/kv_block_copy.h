// KV block copies between a backend's paged KV cache and host memory with the same block layout,
// for moving KV through host staging memory (the UCX here cannot reach GPU memory). Runs of
// block ids that are consecutive on both sides go as one Backend::CopyToHost / CopyFromHost.
//
// Both sides are one layer's tensor in the KV layout of PagedKvCache,
// [num_blocks * 2, block_tokens, kv_heads, head_dim] (block b = rows [2b, 2b + 2)), same dtype
// and the same shape past the first dimension; the block counts may differ. Stateless; calls the
// backend, so only its engine thread may use them.
#ifndef SPARSESERVE_COMMON_ENGINE_KV_BLOCK_COPY_H_
#define SPARSESERVE_COMMON_ENGINE_KV_BLOCK_COPY_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "common/tensor/tensor.h"
#include "kernels/backend.h"

namespace sparseserve::engine {

// Copies block device_blocks[i] of `device_layer` (the backend's memory) into block
// host_blocks[i] of `host_layer` (host memory). On return the host blocks hold the data.
// kInvalidArgument for unequal id lists, mismatched layouts or dtypes, or an id out of range
// (nothing is copied then); the backend's error otherwise.
absl::Status CopyKvBlocksToHost(kernels::Backend& backend, const Tensor& device_layer,
                                absl::Span<const int32_t> device_blocks, const Tensor& host_layer,
                                absl::Span<const int32_t> host_blocks);

// Copies block host_blocks[i] of `host_layer` (host memory) into block device_blocks[i] of
// `device_layer` (the backend's memory). On return the host blocks may be reused (the backend
// has taken the bytes, though the device copy may still be queued). Same errors as above.
absl::Status CopyKvBlocksFromHost(kernels::Backend& backend, const Tensor& host_layer,
                                  absl::Span<const int32_t> host_blocks, const Tensor& device_layer,
                                  absl::Span<const int32_t> device_blocks);

}  // namespace sparseserve::engine

#endif  // SPARSESERVE_COMMON_ENGINE_KV_BLOCK_COPY_H_
