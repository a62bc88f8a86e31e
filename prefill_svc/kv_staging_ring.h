// KvStagingRing: the prefill worker's host staging memory for KV transfer when its KV cache is
// not in host memory (the UCX here moves host memory only; see
// common/transfer/kv_staging_mode.h), or when staging is forced. One host buffer in the KV block
// layout, [num_blocks * 2, block_tokens, kv_heads, head_dim] (block b = rows [2b, 2b + 2)),
// registered with the KvTransferSource as the local source of every layer.
//
// In the per-layer hook of a prefill, StageAndPut copies the layer's blocks device -> host into
// the next free slots and PUTs them from there. A PUT's source must not change before a Flush
// (kv_write_session.h), so slots are used once per flush: when the ring is full, StageAndPut
// flushes the session and starts over at slot 0. A prompt whose KV exceeds the ring thus costs a
// flush per wrap, and any prompt fits.
//
// Ownership: owns the buffer; the KvTransferSource it was registered with borrows it, so the
// ring must outlive that source. Not thread-safe: used by the prefill engine thread only (it
// calls the backend).
#ifndef SPARSESERVE_PREFILL_SVC_KV_STAGING_RING_H_
#define SPARSESERVE_PREFILL_SVC_KV_STAGING_RING_H_

#include <cstdint>
#include <memory>

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

  // Starts a request: every slot is free and the per-request counters are zero.
  // REQUIRES: every PUT from the ring has been flushed, or its session destroyed.
  void Reset();

  // Copies block local_blocks[i] of `kv_layer` (layer `layer` of the backend's KV cache) into
  // the ring and PUTs it through `session` into remote block remote_blocks[i] of that layer.
  // When the ring has no free slot left, first flushes `session` (waiting until `deadline` at
  // most) and reuses the ring from slot 0. No PUT starts at or past `deadline`.
  // Returns kInvalidArgument for unequal lengths or bad ids, kDeadlineExceeded when the deadline
  // passes (the ring must not be reused before the session is destroyed then), and the copy's,
  // PutBlocks' or Flush's error otherwise.
  absl::Status StageAndPut(kernels::Backend& backend, const Tensor& kv_layer, int layer,
                           absl::Span<const int32_t> local_blocks,
                           absl::Span<const int32_t> remote_blocks,
                           transfer::KvWriteSession& session, absl::Time deadline);

  int num_blocks() const { return static_cast<int>(buffer_.dim(0) / 2); }
  // The buffer, host [num_blocks * 2, block_tokens, kv_heads, head_dim].
  const Tensor& buffer() const { return buffer_; }
  // Since Reset: slots holding data PUT after the last flush, flushes made to free the ring,
  // and the time spent copying device -> host.
  int num_used_blocks() const { return num_used_; }
  int num_wrap_flushes() const { return num_wrap_flushes_; }
  absl::Duration copy_time() const { return copy_time_; }

 private:
  explicit KvStagingRing(Tensor buffer) : buffer_(std::move(buffer)) {}

  Tensor buffer_;  // owns the host memory (registered with the source)
  int num_used_ = 0;
  int num_wrap_flushes_ = 0;
  absl::Duration copy_time_;
};

}  // namespace sparseserve::prefill

#endif  // SPARSESERVE_PREFILL_SVC_KV_STAGING_RING_H_
