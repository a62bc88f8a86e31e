// KvTransferOptions: settings shared by both ends of a KV transfer (KvTransferTarget on the
// decode worker, KvTransferSource on the prefill worker). A plain value; thread-compatible.
#ifndef SPARSESERVE_COMMON_TRANSFER_KV_TRANSFER_OPTIONS_H_
#define SPARSESERVE_COMMON_TRANSFER_KV_TRANSFER_OPTIONS_H_

#include <string>

#include "absl/time/time.h"

namespace sparseserve::transfer {

// Where a registered KV buffer lives. UCX is told explicitly rather than left to detect it:
// GPU memory registered as kCuda is what UCX's CUDA transports (cuda_ipc between processes on
// one node) PUT into and from without host staging (issue 20 item 2).
enum class KvMemoryKind {
  kHost,
  kCuda,  // a plain cudaMalloc allocation (CUDA IPC cannot export stream-ordered pool memory)
};

struct KvTransferOptions {
  // UCX transports in UCX_TLS syntax ("tcp,self", "sm,self", "rc,cuda_copy,..."). Empty (the
  // default) leaves the choice to UCX: its UCX_TLS environment variable, else all transports.
  std::string transports;
  // Whether every session must detect a dead peer itself (UCX peer error handling), so that a
  // Flush to a killed decode worker fails with kUnavailable. UCX 1.13's shared-memory transports
  // cannot; when false (the default) they are used anyway and a dead peer then shows up as a
  // Flush kDeadlineExceeded; when true, Connect over them fails with kUnavailable.
  bool require_peer_failure_detection = false;
  // How long closing a connection may wait for the peer's acknowledgement before it is
  // abandoned to UCX. Default 2 s; bounds destructor time when a peer hangs.
  absl::Duration close_timeout = absl::Seconds(2);
};

}  // namespace sparseserve::transfer

#endif  // SPARSESERVE_COMMON_TRANSFER_KV_TRANSFER_OPTIONS_H_
