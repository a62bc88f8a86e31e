#include "prefill_svc/kv_staging_ring.h"

#include <algorithm>
#include <numeric>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/core/status.h"
#include "common/engine/kv_block_copy.h"

namespace sparseserve::prefill {

absl::StatusOr<std::unique_ptr<KvStagingRing>> KvStagingRing::Create(
    transfer::KvTransferSource& source, const model::PagedKvCacheShape& shape, DType dtype,
    int num_blocks) {
  if (num_blocks < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("KV staging ring needs at least one block, got ", num_blocks));
  }
  Tensor buffer = Tensor::Zeros(dtype, Shape{int64_t{2} * num_blocks, shape.block_tokens,
                                             shape.num_kv_heads, shape.head_dim});
  SS_RETURN_IF_ERROR(source.RegisterSharedLocal(buffer.raw_data(), buffer.nbytes()));
  return std::unique_ptr<KvStagingRing>(new KvStagingRing(std::move(buffer)));
}

void KvStagingRing::Reset() {
  num_used_ = 0;
  num_wrap_flushes_ = 0;
  copy_time_ = absl::ZeroDuration();
}

absl::Status KvStagingRing::StageAndPut(kernels::Backend& backend, const Tensor& kv_layer,
                                        int layer, absl::Span<const int32_t> local_blocks,
                                        absl::Span<const int32_t> remote_blocks,
                                        transfer::KvWriteSession& session, absl::Time deadline) {
  if (local_blocks.size() != remote_blocks.size()) {
    return absl::InvalidArgumentError(absl::StrCat("KV staging: ", local_blocks.size(),
                                                   " local blocks for ", remote_blocks.size(),
                                                   " remote blocks"));
  }
  const size_t total = local_blocks.size();
  std::vector<int32_t> slots;
  for (size_t done = 0; done < total;) {
    if (num_used_ == num_blocks()) {
      // Every slot is a pending PUT's source: wait until they have landed, then reuse them.
      const absl::Duration left = deadline - absl::Now();
      if (left <= absl::ZeroDuration()) {
        return absl::DeadlineExceededError(absl::StrCat("KV staging ring full at layer ", layer,
                                                        " and the request's deadline has passed"));
      }
      SS_RETURN_IF_ERROR(session.Flush(left));
      num_used_ = 0;
      ++num_wrap_flushes_;
    }
    const size_t count = std::min(total - done, static_cast<size_t>(num_blocks() - num_used_));
    slots.resize(count);
    std::iota(slots.begin(), slots.end(), num_used_);
    const absl::Time copy_start = absl::Now();
    SS_RETURN_IF_ERROR(engine::CopyKvBlocksToHost(
        backend, kv_layer, local_blocks.subspan(done, count), buffer_, slots));
    copy_time_ += absl::Now() - copy_start;
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat("KV transfer stopped at layer ", layer,
                                                      ": the request's deadline has passed"));
    }
    SS_RETURN_IF_ERROR(
        session.PutBlocks(layer, buffer_.raw_data(), slots, remote_blocks.subspan(done, count)));
    num_used_ += static_cast<int>(count);
    done += count;
  }
  return absl::OkStatus();
}

}  // namespace sparseserve::prefill
