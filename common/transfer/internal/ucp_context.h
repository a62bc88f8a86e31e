// UcpContext: RAII owner of one ucp_context_h (UCX's per-process transport state).
//
// Created with the RMA and WAKEUP features (one-sided PUTs, and an event fd so progress threads
// can sleep) and `mt_workers_shared`, because memory is registered from caller threads while
// progress threads drive the workers. Thread-safe after Create; must outlive every worker and
// memory region created from it.
#ifndef SPARSESERVE_COMMON_TRANSFER_INTERNAL_UCP_CONTEXT_H_
#define SPARSESERVE_COMMON_TRANSFER_INTERNAL_UCP_CONTEXT_H_

#include <ucp/api/ucp.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/transfer/kv_transport_info.h"

namespace sparseserve::transfer::internal {

class UcpContext {
 public:
  // `transports` is a UCX_TLS-style list ("tcp,self", "sm,self"); empty keeps UCX's own choice
  // (its environment, else every available transport).
  // Returns kUnavailable / kInvalidArgument / kInternal (with UCX's reason) if UCX refuses.
  static absl::StatusOr<std::unique_ptr<UcpContext>> Create(const std::string& transports);
  ~UcpContext();
  UcpContext(const UcpContext&) = delete;
  UcpContext& operator=(const UcpContext&) = delete;

  ucp_context_h handle() const { return context_; }
  // The transport resources UCX opened, "tl/device" each ("tcp/lo", "posix/memory", ...), in
  // UCX's order; what endpoints of this context can choose from.
  std::vector<std::string> Resources() const;

 private:
  explicit UcpContext(ucp_context_h context) : context_(context) {}

  ucp_context_h context_;
};

// The loaded UCX's version and `context`'s transports.
KvTransportInfo DescribeTransports(const UcpContext& context);

}  // namespace sparseserve::transfer::internal

#endif  // SPARSESERVE_COMMON_TRANSFER_INTERNAL_UCP_CONTEXT_H_
