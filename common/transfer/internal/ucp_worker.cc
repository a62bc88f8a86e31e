#include "common/transfer/internal/ucp_worker.h"

#include <utility>

#include "common/core/status.h"
#include "common/transfer/internal/ucp_status.h"

namespace sparseserve::transfer::internal {

absl::StatusOr<std::unique_ptr<UcpWorker>> UcpWorker::Create(const UcpContext& context) {
  ucp_worker_params_t params{};
  params.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  params.thread_mode = UCS_THREAD_MODE_MULTI;
  ucp_worker_h worker = nullptr;
  SS_RETURN_IF_ERROR(
      UcsToStatus(ucp_worker_create(context.handle(), &params, &worker), "ucp_worker_create"));
  // From here on the worker is owned; every early return destroys it.
  std::unique_ptr<UcpWorker> owned(new UcpWorker(worker, std::string(), -1));

  ucp_worker_attr_t attr{};
  attr.field_mask = UCP_WORKER_ATTR_FIELD_THREAD_MODE;
  SS_RETURN_IF_ERROR(UcsToStatus(ucp_worker_query(worker, &attr), "ucp_worker_query"));
  if (attr.thread_mode != UCS_THREAD_MODE_MULTI) {
    return absl::FailedPreconditionError(
        "ucp_worker_create: UCX gave no UCS_THREAD_MODE_MULTI worker (built without --enable-mt?)");
  }
  ucp_address_t* address = nullptr;
  size_t address_length = 0;
  SS_RETURN_IF_ERROR(UcsToStatus(ucp_worker_get_address(worker, &address, &address_length),
                                 "ucp_worker_get_address"));
  owned->address_.assign(reinterpret_cast<const char*>(address), address_length);
  ucp_worker_release_address(worker, address);
  SS_RETURN_IF_ERROR(
      UcsToStatus(ucp_worker_get_efd(worker, &owned->event_fd_), "ucp_worker_get_efd"));
  return owned;
}

UcpWorker::~UcpWorker() {
  ucp_worker_destroy(worker_);
}

}  // namespace sparseserve::transfer::internal
