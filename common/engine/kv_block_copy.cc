#include "common/engine/kv_block_copy.h"

#include "common/kv/block_runs.h"

#include "absl/strings/str_cat.h"
#include "common/core/status.h"

namespace sparseserve::engine {
namespace {

// Rows per block in the KV layout: K and V.
constexpr int64_t kRowsPerBlock = 2;

absl::Status CheckIds(absl::Span<const int32_t> ids, const Tensor& layer, const char* side) {
  const int64_t num_blocks = layer.dim(0) / kRowsPerBlock;
  for (int32_t id : ids) {
    if (id < 0 || id >= num_blocks) {
      return absl::InvalidArgumentError(
          absl::StrCat("KV block copy: ", side, " block ", id, " outside [0, ", num_blocks, ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckLayouts(const Tensor& src, absl::Span<const int32_t> src_blocks,
                          const Tensor& dst, absl::Span<const int32_t> dst_blocks) {
  if (src_blocks.size() != dst_blocks.size()) {
    return absl::InvalidArgumentError(absl::StrCat("KV block copy: ", src_blocks.size(),
                                                   " source blocks for ", dst_blocks.size(),
                                                   " destination blocks"));
  }
  bool same = src.ndim() == 4 && dst.ndim() == 4 && src.dtype() == dst.dtype() &&
              src.is_contiguous() && dst.is_contiguous() && src.dim(0) % kRowsPerBlock == 0 &&
              dst.dim(0) % kRowsPerBlock == 0;
  for (int i = 1; same && i < 4; ++i) same = src.dim(i) == dst.dim(i);
  if (!same) {
    return absl::InvalidArgumentError(absl::StrCat("KV block copy: layouts differ, ",
                                                   src.DebugString(), " vs ", dst.DebugString()));
  }
  SS_RETURN_IF_ERROR(CheckIds(src_blocks, src, "source"));
  return CheckIds(dst_blocks, dst, "destination");
}

Tensor Blocks(const Tensor& layer, int32_t first, int32_t count) {
  return layer.Slice(0, kRowsPerBlock * first, kRowsPerBlock * (int64_t{first} + count));
}

}  // namespace

absl::Status CopyKvBlocksToHost(kernels::Backend& backend, const Tensor& device_layer,
                                absl::Span<const int32_t> device_blocks, const Tensor& host_layer,
                                absl::Span<const int32_t> host_blocks) {
  SS_RETURN_IF_ERROR(CheckLayouts(device_layer, device_blocks, host_layer, host_blocks));
  for (const kv::KvBlockRun& run : kv::MergeKvBlockRuns(device_blocks, host_blocks)) {
    SS_RETURN_IF_ERROR(backend.CopyToHost(Blocks(device_layer, run.src_block, run.num_blocks),
                                          Blocks(host_layer, run.dst_block, run.num_blocks)));
  }
  return absl::OkStatus();
}

absl::Status CopyKvBlocksFromHost(kernels::Backend& backend, const Tensor& host_layer,
                                  absl::Span<const int32_t> host_blocks, const Tensor& device_layer,
                                  absl::Span<const int32_t> device_blocks) {
  SS_RETURN_IF_ERROR(CheckLayouts(host_layer, host_blocks, device_layer, device_blocks));
  for (const kv::KvBlockRun& run : kv::MergeKvBlockRuns(host_blocks, device_blocks)) {
    SS_RETURN_IF_ERROR(backend.CopyFromHost(Blocks(host_layer, run.src_block, run.num_blocks),
                                            Blocks(device_layer, run.dst_block, run.num_blocks)));
  }
  return absl::OkStatus();
}

}  // namespace sparseserve::engine
