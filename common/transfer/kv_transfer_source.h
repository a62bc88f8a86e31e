// KvTransferSource: the prefill worker's end of KV transfer. It owns one UCX worker (driven by
// an owned progress thread), registers the local per-layer KV buffers once (or one staging buffer
// that every layer passes through), and opens a KvWriteSession per decode worker pool (Connect)
// through which blocks are PUT.
//
// Ownership: the source borrows the registered local buffers (they must stay allocated until the
// source is destroyed); every KvWriteSession borrows the source and must be destroyed before it
// (checked). Thread-safe; sessions may be used concurrently from different threads.
#ifndef SPARSESERVE_COMMON_TRANSFER_KV_TRANSFER_SOURCE_H_
#define SPARSESERVE_COMMON_TRANSFER_KV_TRANSFER_SOURCE_H_

#include <atomic>
#include <cstddef>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "common/transfer/kv_transfer_options.h"
#include "common/transfer/kv_transport_info.h"
#include "common/transfer/kv_write_session.h"
#include "common/transfer/remote_kv_pool.h"

namespace sparseserve::transfer {
namespace internal {
class UcpContext;
class UcpEndpoint;
class UcpMemoryRegion;
class UcpProgressThread;
class UcpWorker;
}  // namespace internal

class KvTransferSource {
 public:
  // Returns UCX's error if UCX cannot start.
  static absl::StatusOr<std::unique_ptr<KvTransferSource>> Create(
      const KvTransferOptions& options = {});
  // REQUIRES: every session from Connect has been destroyed.
  ~KvTransferSource();
  KvTransferSource(const KvTransferSource&) = delete;
  KvTransferSource& operator=(const KvTransferSource&) = delete;

  // Registers layer `layer`'s local KV buffer [base, base + bytes) of `kind` memory, the source
  // of PutBlocks. REQUIRES: the buffer stays allocated until this source is destroyed, and (kCuda)
  // every write to a block has completed on the device before the block is PUT.
  // Returns kInvalidArgument for layer < 0, a null base or zero bytes, kAlreadyExists if the
  // layer is registered, or UCX's error.
  absl::Status RegisterLocal(int layer, const void* base, size_t bytes,
                             KvMemoryKind kind = KvMemoryKind::kHost);

  // Registers one buffer [base, base + bytes) as the local source of every layer that has no
  // buffer of its own (RegisterLocal): a host staging ring through which all layers' blocks pass.
  // REQUIRES: the buffer stays allocated until this source is destroyed.
  // Returns kInvalidArgument for a null base or zero bytes, kAlreadyExists if a shared buffer is
  // registered, or UCX's error.
  absl::Status RegisterSharedLocal(const void* base, size_t bytes);

  // The UCX version and transports this end runs on (fixed at Create).
  const KvTransportInfo& transport_info() const { return transport_info_; }

  // Opens a session writing into the decode worker pool `remote` (from its KvTransferTarget).
  // Everything is validated before UCX sees it: kInvalidArgument if the address or a key is
  // corrupted or truncated, a key's base differs from layer_base_addresses, the layer lists
  // differ in length or are empty, or a region holds no whole block. Returns UCX's error
  // (kUnavailable) if the peer cannot be reached at once; a peer that proves unreachable later
  // fails the session's Flush instead. See KvTransferOptions::require_peer_failure_detection.
  absl::StatusOr<std::unique_ptr<KvWriteSession>> Connect(const RemoteKvPool& remote);

 private:
  friend class KvWriteSession;

  KvTransferSource(const KvTransferOptions& options, std::unique_ptr<internal::UcpContext> context,
                   std::unique_ptr<internal::UcpWorker> worker);

  // Connects to a raw UCX address with peer failure detection if the transports allow it.
  absl::StatusOr<std::unique_ptr<internal::UcpEndpoint>> ConnectEndpoint(absl::string_view address);
  // Logs the lanes UCX chose for the first session, and warns when KV in GPU memory would go over
  // a slow path (neither cuda_ipc nor RDMA).
  void ReportLanes(const internal::UcpEndpoint& endpoint);
  // Warns (once) when this side's KV memory and the decode worker's pool (`remote`) differ in
  // kind: a staged worker facing a GPU-direct one.
  void ReportMixedMemory(KvMemoryKind remote);
  // The registration of `layer` (its own, else the shared one), or nullptr. The region lives as
  // long as the source.
  const internal::UcpMemoryRegion* FindLocal(int layer) const;

  const KvTransferOptions options_;
  // Declaration order is destruction order in reverse: progress thread first, then memory
  // registrations, worker, context.
  std::unique_ptr<internal::UcpContext> context_;
  KvTransportInfo transport_info_;
  std::unique_ptr<internal::UcpWorker> worker_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<int, std::unique_ptr<internal::UcpMemoryRegion>> local_regions_
      ABSL_GUARDED_BY(mu_);
  std::unique_ptr<internal::UcpMemoryRegion> shared_local_region_ ABSL_GUARDED_BY(mu_);
  // Set once a Connect found that the transports cannot detect peer failure, so later ones
  // skip the attempt (and UCX's error line). A cached capability bit: relaxed order suffices.
  std::atomic<bool> peer_detection_unsupported_{false};
  // Set once the first session's lanes, or a memory-kind mismatch, were logged. Flags read
  // without ordering other data: relaxed order suffices.
  std::atomic<bool> lanes_reported_{false};
  std::atomic<bool> mixed_reported_{false};
  // Live sessions; a counter only (checked in the destructor), so relaxed order suffices.
  std::atomic<int> num_sessions_{0};
  std::unique_ptr<internal::UcpProgressThread> progress_;
};

}  // namespace sparseserve::transfer

#endif  // SPARSESERVE_COMMON_TRANSFER_KV_TRANSFER_SOURCE_H_
