// KvWriteSession: one connection from a prefill worker (KvTransferSource) to one decode
// worker's KV pools (RemoteKvPool). PutBlocks posts non-blocking PUTs layer by layer, as each
// layer's KV is ready; Flush waits until every PUT posted so far has landed remotely.
//
// A peer failure (process killed, connection reset) makes Flush return kUnavailable with UCX's
// reason and leaves the session failed: later calls return the same error at once; drop the
// session and retry elsewhere. A Flush that times out leaves the PUTs in flight (not failed).
// Over transports that cannot detect a dead peer (detects_peer_failure() false) a dead peer
// shows up as Flush kDeadlineExceeded instead.
//
// Ownership: borrows its KvTransferSource, which must outlive it. Local KV memory named in a
// PutBlocks must not be modified until a later Flush returns OK or the session is destroyed.
// Thread-compatible: one thread at a time per session (the counters may be read from any
// thread).
#ifndef SPARSESERVE_COMMON_TRANSFER_KV_WRITE_SESSION_H_
#define SPARSESERVE_COMMON_TRANSFER_KV_WRITE_SESSION_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace sparseserve::transfer {
namespace internal {
class UcpEndpoint;
class UcpRemoteKey;
}  // namespace internal

class KvTransferSource;

class KvWriteSession {
 public:
  // Closes the connection (bounded by KvTransferOptions::close_timeout); PUTs not yet flushed
  // may or may not land.
  ~KvWriteSession();
  KvWriteSession(const KvWriteSession&) = delete;
  KvWriteSession& operator=(const KvWriteSession&) = delete;

  // Posts PUTs copying local block local_block_ids[i] of `layer` (at local_base +
  // id * block_bytes) into remote block remote_block_ids[i] of the same layer. Pairs that are
  // consecutive on both sides go as one PUT. Returns without waiting for the data to move.
  // `local_base` must lie in the buffer registered with KvTransferSource::RegisterLocal(layer).
  // Returns kInvalidArgument for unequal lengths, an unknown layer or an id outside either
  // region (nothing is posted then), kFailedPrecondition if the layer has no local
  // registration, kUnavailable if the session has failed.
  absl::Status PutBlocks(int layer, const void* local_base,
                         absl::Span<const int32_t> local_block_ids,
                         absl::Span<const int32_t> remote_block_ids);

  // Waits up to `timeout` until every PUT posted so far is complete at the peer.
  // Returns kDeadlineExceeded on timeout (PUTs stay in flight; Flush again or drop the
  // session), kUnavailable (with UCX's reason) if the peer failed.
  absl::Status Flush(absl::Duration timeout);

  // Bytes posted by PutBlocks so far (cumulative).
  int64_t bytes_posted() const { return bytes_posted_.load(std::memory_order_relaxed); }
  // Bytes confirmed landed by a successful Flush (cumulative; kv_transfer_bytes_total).
  int64_t bytes_transferred() const { return bytes_transferred_.load(std::memory_order_relaxed); }
  // Whether UCX reports a dead peer for this session (see KvTransferOptions).
  bool detects_peer_failure() const;
  int num_layers() const { return static_cast<int>(layers_.size()); }
  uint64_t block_bytes() const { return block_bytes_; }

 private:
  friend class KvTransferSource;

  struct RemoteLayer {
    std::unique_ptr<internal::UcpRemoteKey> rkey;
    uint64_t base = 0;       // remote address of block 0
    int64_t num_blocks = 0;  // whole blocks in the remote region
  };

  KvWriteSession(KvTransferSource& source, uint64_t block_bytes);
  // Returns failure_ if set, else records and returns the endpoint's reported failure if any.
  absl::Status CheckHealthy();

  KvTransferSource& source_;
  const uint64_t block_bytes_;
  // Declared before layers_: remote keys must be destroyed before their endpoint.
  std::unique_ptr<internal::UcpEndpoint> endpoint_;
  std::vector<RemoteLayer> layers_;  // [num_layers]
  absl::Status failure_;             // sticky first failure
  int64_t bytes_unflushed_ = 0;      // posted since the last successful Flush
  // Monotonic counters read by other threads for metrics: relaxed order, no data behind them.
  std::atomic<int64_t> bytes_posted_{0};
  std::atomic<int64_t> bytes_transferred_{0};
};

}  // namespace sparseserve::transfer

#endif  // SPARSESERVE_COMMON_TRANSFER_KV_WRITE_SESSION_H_
