#include "prefill_svc/kv_staging_ring.h"

#include <algorithm>
#include <numeric>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/core/status.h"

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
  std::unique_ptr<KvStagingRing> ring(new KvStagingRing(std::move(buffer)));
  SS_RETURN_IF_ERROR(ring->Reset(1));  // one lane until the first round says otherwise
  return ring;
}

absl::Status KvStagingRing::Reset(int num_lanes) {
  if (num_lanes < 1 || num_lanes > num_blocks()) {
    return absl::InvalidArgumentError(absl::StrCat("KV staging ring of ", num_blocks(),
                                                   " blocks cannot hold ", num_lanes, " lanes"));
  }
  lanes_.assign(num_lanes, Lane());
  const int base = num_blocks() / num_lanes, extra = num_blocks() % num_lanes;
  int first = 0;
  for (int i = 0; i < num_lanes; ++i) {
    lanes_[i].first_slot = first;
    lanes_[i].num_slots = base + (i < extra ? 1 : 0);
    first += lanes_[i].num_slots;
  }
  return absl::OkStatus();
}

absl::Status KvStagingRing::StageAndPut(int lane_idx, const CopyToHost& copy, int layer,
                                        absl::Span<const int32_t> local_blocks,
                                        absl::Span<const int32_t> remote_blocks,
                                        transfer::KvWriteSession& session, absl::Time deadline) {
  if (lane_idx < 0 || lane_idx >= num_lanes()) {
    return absl::InvalidArgumentError(
        absl::StrCat("KV staging: lane ", lane_idx, " of ", num_lanes()));
  }
  if (local_blocks.size() != remote_blocks.size()) {
    return absl::InvalidArgumentError(absl::StrCat("KV staging: ", local_blocks.size(),
                                                   " local blocks for ", remote_blocks.size(),
                                                   " remote blocks"));
  }
  Lane& lane = lanes_[lane_idx];
  const size_t total = local_blocks.size();
  std::vector<int32_t> slots;
  for (size_t done = 0; done < total;) {
    if (lane.num_used == lane.num_slots) {
      // Every slot of the lane is a pending PUT's source: wait until they have landed, then
      // reuse them. Other lanes belong to other sessions and are left alone.
      const absl::Duration left = deadline - absl::Now();
      if (left <= absl::ZeroDuration()) {
        return absl::DeadlineExceededError(absl::StrCat("KV staging ring full at layer ", layer,
                                                        " and the request's deadline has passed"));
      }
      SS_RETURN_IF_ERROR(session.Flush(left));
      lane.num_used = 0;
      ++lane.num_wrap_flushes;
    }
    const size_t count =
        std::min(total - done, static_cast<size_t>(lane.num_slots - lane.num_used));
    slots.resize(count);
    std::iota(slots.begin(), slots.end(), lane.first_slot + lane.num_used);
    const absl::Time copy_start = absl::Now();
    SS_RETURN_IF_ERROR(copy(local_blocks.subspan(done, count), buffer_, slots));
    lane.copy_time += absl::Now() - copy_start;
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat("KV transfer stopped at layer ", layer,
                                                      ": the request's deadline has passed"));
    }
    SS_RETURN_IF_ERROR(
        session.PutBlocks(layer, buffer_.raw_data(), slots, remote_blocks.subspan(done, count)));
    lane.num_used += static_cast<int>(count);
    done += count;
  }
  return absl::OkStatus();
}

}  // namespace sparseserve::prefill
