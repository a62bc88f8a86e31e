#include "common/transfer/internal/ucp_endpoint.h"

#include <ucp/api/ucp_version.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/core/logging.h"
#include "common/core/status.h"
#include "common/transfer/internal/ucp_request_waiter.h"
#include "common/transfer/internal/ucp_status.h"

namespace sparseserve::transfer::internal {

absl::StatusOr<std::unique_ptr<UcpEndpoint>> UcpEndpoint::Connect(UcpWorker& worker,
                                                                  UcpProgressThread& progress,
                                                                  absl::string_view address,
                                                                  bool detect_peer_failure,
                                                                  absl::Duration close_timeout) {
  // The object exists before the ep so that UCX's error callback has a stable argument.
  std::unique_ptr<UcpEndpoint> endpoint(
      new UcpEndpoint(progress, detect_peer_failure, close_timeout));
  ucp_ep_params_t params{};
  params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER;
  params.address = reinterpret_cast<const ucp_address_t*>(address.data());
  params.err_mode = detect_peer_failure ? UCP_ERR_HANDLING_MODE_PEER : UCP_ERR_HANDLING_MODE_NONE;
  params.err_handler.cb = &UcpEndpoint::OnPeerError;
  params.err_handler.arg = endpoint.get();
  ucp_ep_h ep = nullptr;  // assigned only on success, so the destructor never sees garbage
  SS_RETURN_IF_ERROR(UcsToStatus(ucp_ep_create(worker.handle(), &params, &ep), "ucp_ep_create"));
  endpoint->ep_ = ep;
  progress.Wake();  // let the wireup start without waiting for the first operation
  return endpoint;
}

UcpEndpoint::~UcpEndpoint() {
  if (ep_ == nullptr) return;
  // Forcing needs peer error handling on both sides (UCX's contract for the flag).
  const bool failed = detect_peer_failure_ && failure() != UCS_OK;
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  // A failed peer cannot acknowledge a graceful close; force releases local resources only.
  param.flags = failed ? UCP_EP_CLOSE_FLAG_FORCE : 0;
  UcpRequestWaiter waiter;
  waiter.Bind(&param);
  std::optional<ucs_status_t> status =
      waiter.Wait(ucp_ep_close_nbx(ep_, &param), close_timeout_, progress_);
  if (!status.has_value()) {
    SS_LOG_WARNING("UCX endpoint close did not finish within {}; UCX finishes it in background",
                   absl::FormatDuration(close_timeout_));
  } else if (*status != UCS_OK && !failed) {
    SS_LOG_DEBUG("UCX endpoint close: {}", ucs_status_string(*status));
  }
}

std::vector<std::string> UcpEndpoint::Transports() const {
  std::vector<std::string> names;
#if UCP_API_VERSION >= UCP_VERSION(1, 14)
  ucp_transport_entry_t entries[16];
  ucp_ep_attr_t attr{};
  attr.field_mask = UCP_EP_ATTR_FIELD_TRANSPORTS;
  attr.transports.entries = entries;
  attr.transports.num_entries = 16;
  attr.transports.entry_size = sizeof(ucp_transport_entry_t);
  if (ucp_ep_query(ep_, &attr) != UCS_OK) return names;
  for (unsigned i = 0; i < attr.transports.num_entries; ++i) {
    std::string name = absl::StrCat(entries[i].transport_name, "/", entries[i].device_name);
    if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
  }
#endif
  return names;
}

ucs_status_t UcpEndpoint::failure() const {
  absl::MutexLock lock(&mu_);
  return failure_;
}

void UcpEndpoint::OnPeerError(void* arg, ucp_ep_h /*ep*/, ucs_status_t status) {
  auto* endpoint = static_cast<UcpEndpoint*>(arg);
  SS_LOG_DEBUG("UCX peer error: {}", ucs_status_string(status));
  absl::MutexLock lock(&endpoint->mu_);
  if (endpoint->failure_ == UCS_OK) endpoint->failure_ = status;
}

}  // namespace sparseserve::transfer::internal
