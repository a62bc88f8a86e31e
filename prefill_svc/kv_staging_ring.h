// KvStagingRing: the prefill worker's host staging memory for KV transfer when its KV cache is
// not in host memory (the UCX here moves host memory only; see
// common/transfer/kv_staging_mode.h), or when staging is forced. One host buffer in the KV block
// layout, [num_blocks * 2, block_tokens, kv_heads, head_dim] (block b = rows [2b, 2b + 2)),
// registered with the KvTransferSource as the local source of every layer.
//
// Several prompts of one engine step may transfer their KV at once, each through its own write
// session, so Reset splits the ring into lanes, one per transfer, of consecutive slots. In the
// per-layer hook of a step, StageAndPut copies a layer's blocks device -> host into the next free
// slots of the transfer's lane and PUTs them from there. A PUT's source must not change before a
// Flush of its session (kv_write_session.h), so a lane's slots are used once per flush: when the
// lane is full, StageAndPut flushes that lane's session (only its own: another transfer's peer
// cannot stall or fail this one) and starts over at the lane's first slot. A prompt whose KV
// exceeds its lane thus costs a flush per wrap, and any prompt fits.
//
// Ownership: owns the buffer; the KvTransferSource it was registered with borrows it, so the
// ring must outlive that source. Not thread-safe: used by the prefill engine thread only (it
// calls the backend).
#ifndef SPARSESERVE_PREFILL_SVC_KV_STAGING_RING_H_
#define SPARSESERVE_PREFILL_SVC_KV_STAGING_RING_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/model/paged_kv_cache.h"
#include "common/tensor/tensor.h"
#include "common/transfer/kv_transfer_source.h"
#include "common/transfer/kv_write_session.h"
#include "kernels/backend.h"

namespace sparseserve::prefill {

class KvStagingRing {
 public:
  // Allocates `num_blocks` blocks of `shape`'s block layout (shape.num_blocks is ignored) in
  // `dtype` in host memory and registers them with `source` (RegisterSharedLocal).
  // kInvalidArgument for num_blocks < 1, else the source's error.
  static absl::StatusOr<std::unique_ptr<KvStagingRing>> Create(
      transfer::KvTransferSource& source, const model::PagedKvCacheShape& shape, DType dtype,
      int num_blocks);
  KvStagingRing(const KvStagingRing&) = delete;
  KvStagingRing& operator=(const KvStagingRing&) = delete;

  // Starts a round of `num_lanes` transfers: every slot is free, the ring is split into that many
  // lanes of consecutive slots (as equal as can be) and the per-lane counters are zero.
  // kInvalidArgument unless 1 <= num_lanes <= num_blocks().
  // REQUIRES: every PUT from the ring has been flushed, or its session destroyed.
  absl::Status Reset(int num_lanes);

  // How a layer's blocks reach the ring: copies blocks `local_blocks` of the KV cache's layer
  // into blocks `host_blocks` of `host_layer` (the ring's buffer) — engine::CopyKvBlocksToHost
  // for one backend, engine::ModelRunner::CopyKvToHost to gather every tensor-parallel rank's
  // heads into the whole-heads layout.
  using CopyToHost =
      std::function<absl::Status(absl::Span<const int32_t> local_blocks, const Tensor& host_layer,
                                 absl::Span<const int32_t> host_blocks)>;

  // Copies block local_blocks[i] of layer `layer` of the KV cache (through `copy`) into
  // lane `lane_idx` and PUTs it through `session` (that lane's transfer, the same one every call
  // since Reset) into remote block remote_blocks[i] of that layer. When the lane has no free slot
  // left, first flushes `session` (waiting until `deadline` at most) and reuses the lane from its
  // first slot. No PUT starts at or past `deadline`.
  // Returns kInvalidArgument for unequal lengths, bad ids or a lane out of range,
  // kDeadlineExceeded when the deadline passes (the lane must not be reused before the session
  // is destroyed then), and the copy's, PutBlocks' or Flush's error otherwise.
  absl::Status StageAndPut(int lane_idx, const CopyToHost& copy, int layer,
                           absl::Span<const int32_t> local_blocks,
                           absl::Span<const int32_t> remote_blocks,
                           transfer::KvWriteSession& session, absl::Time deadline);

  int num_blocks() const { return static_cast<int>(buffer_.dim(0) / 2); }
  int num_lanes() const { return static_cast<int>(lanes_.size()); }
  // The buffer, host [num_blocks * 2, block_tokens, kv_heads, head_dim].
  const Tensor& buffer() const { return buffer_; }
  // Of lane `lane_idx` since Reset (REQUIRES: lane_idx < num_lanes()): its slots, its slots
  // holding data PUT after its last flush, flushes made to free it, and the time spent copying
  // device -> host into it.
  int lane_blocks(int lane_idx) const { return lanes_[lane_idx].num_slots; }
  int num_used_blocks(int lane_idx) const { return lanes_[lane_idx].num_used; }
  int num_wrap_flushes(int lane_idx) const { return lanes_[lane_idx].num_wrap_flushes; }
  absl::Duration copy_time(int lane_idx) const { return lanes_[lane_idx].copy_time; }

 private:
  // Slots [first_slot, first_slot + num_slots) of the ring, used by one transfer.
  struct Lane {
    int first_slot = 0;
    int num_slots = 0;
    int num_used = 0;
    int num_wrap_flushes = 0;
    absl::Duration copy_time;
  };

  explicit KvStagingRing(Tensor buffer) : buffer_(std::move(buffer)) {}

  Tensor buffer_;  // owns the host memory (registered with the source)
  std::vector<Lane> lanes_;
};

}  // namespace sparseserve::prefill

#endif  // SPARSESERVE_PREFILL_SVC_KV_STAGING_RING_H_
