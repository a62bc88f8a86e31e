// UcpEndpoint: RAII owner of one ucp_ep_h, a connection from a local worker to a peer worker,
// normally created with peer error handling so that a dead peer fails requests instead of
// hanging them. (UCX 1.13's shared-memory transports cannot detect a dead peer and refuse such
// endpoints; without it a dead peer only shows as requests that never complete.)
//
// UCX reports a peer failure through a callback on the progress thread; the endpoint records
// it (failure()). The destructor closes the endpoint — gracefully (flushing) while healthy,
// forced after a reported failure — and waits at most `close_timeout` for the close to
// complete; UCX invokes no error callback after the close is posted, so the recorded state never
// outlives the object. Thread-safe. Borrows the worker and progress thread, which must outlive it;
// remote keys unpacked for it must be destroyed first.
#ifndef SPARSESERVE_COMMON_TRANSFER_INTERNAL_UCP_ENDPOINT_H_
#define SPARSESERVE_COMMON_TRANSFER_INTERNAL_UCP_ENDPOINT_H_

#include <ucp/api/ucp.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/transfer/internal/ucp_progress_thread.h"
#include "common/transfer/internal/ucp_worker.h"

namespace sparseserve::transfer::internal {

class UcpEndpoint {
 public:
  // Starts connecting `worker` to the raw UCX worker `address` (already verified, see
  // wire_envelope.h); operations posted before the connection is up are queued by UCX.
  // `detect_peer_failure` selects UCP_ERR_HANDLING_MODE_PEER (else NONE).
  // Returns UCX's error: kUnavailable when the peer cannot be reached at once, or when the
  // transports cannot detect peer failure and `detect_peer_failure` is set.
  static absl::StatusOr<std::unique_ptr<UcpEndpoint>> Connect(UcpWorker& worker,
                                                              UcpProgressThread& progress,
                                                              absl::string_view address,
                                                              bool detect_peer_failure,
                                                              absl::Duration close_timeout);
  ~UcpEndpoint();
  UcpEndpoint(const UcpEndpoint&) = delete;
  UcpEndpoint& operator=(const UcpEndpoint&) = delete;

  ucp_ep_h handle() const { return ep_; }

  // The "transport/device" pairs of the endpoint's lanes ("cuda_ipc/cuda", "tcp/eth0"), as UCX
  // chose them for the peer at creation. Empty with a UCX older than 1.14 (no ucp_ep_query).
  std::vector<std::string> Transports() const;

  // UCS_OK while no failure was reported, else the first error UCX reported for the peer.
  ucs_status_t failure() const;
  bool detects_peer_failure() const { return detect_peer_failure_; }

 private:
  UcpEndpoint(UcpProgressThread& progress, bool detect_peer_failure, absl::Duration close_timeout)
      : progress_(progress),
        detect_peer_failure_(detect_peer_failure),
        close_timeout_(close_timeout) {}

  static void OnPeerError(void* arg, ucp_ep_h ep, ucs_status_t status);

  UcpProgressThread& progress_;
  const bool detect_peer_failure_;
  const absl::Duration close_timeout_;
  ucp_ep_h ep_ = nullptr;
  mutable absl::Mutex mu_;
  ucs_status_t failure_ ABSL_GUARDED_BY(mu_) = UCS_OK;
};

}  // namespace sparseserve::transfer::internal

#endif  // SPARSESERVE_COMMON_TRANSFER_INTERNAL_UCP_ENDPOINT_H_
