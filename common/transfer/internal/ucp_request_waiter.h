// UcpRequestWaiter: waits, with a deadline, for one non-blocking UCX send-type request
// (ucp_ep_flush_nbx, ucp_ep_close_nbx, ...) that a UcpProgressThread completes.
//
// Usage: `UcpRequestWaiter waiter; waiter.Bind(&param); auto r = ucp_ep_flush_nbx(ep, &param);
// waiter.Wait(r, timeout, progress)`. The completion callback runs on the progress thread under
// UCX's worker lock; Wait always releases the request with ucp_request_free, which takes the same
// lock and disables the callback, so once Wait returns the waiter (usually on the caller's stack)
// is never touched again. One waiter serves one request, from one thread.
#ifndef SPARSESERVE_COMMON_TRANSFER_INTERNAL_UCP_REQUEST_WAITER_H_
#define SPARSESERVE_COMMON_TRANSFER_INTERNAL_UCP_REQUEST_WAITER_H_

#include <ucp/api/ucp.h>

#include <optional>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/transfer/internal/ucp_progress_thread.h"

namespace sparseserve::transfer::internal {

class UcpRequestWaiter {
 public:
  UcpRequestWaiter() = default;
  UcpRequestWaiter(const UcpRequestWaiter&) = delete;
  UcpRequestWaiter& operator=(const UcpRequestWaiter&) = delete;

  // Points `param`'s send callback and user data at this waiter.
  void Bind(ucp_request_param_t* param);

  // `request` is what the nbx call returned (NULL = done at once, an error pointer, or a
  // request). Wakes `progress`, waits up to `timeout`, releases the request. Returns the
  // request's final status, or nullopt if it did not complete in time (the operation then goes
  // on inside UCX without further notice).
  std::optional<ucs_status_t> Wait(ucs_status_ptr_t request, absl::Duration timeout,
                                   UcpProgressThread& progress);

 private:
  static void OnComplete(void* request, ucs_status_t status, void* user_data);

  absl::Notification done_;
  // Written by OnComplete before done_.Notify(); read after the notification is observed.
  ucs_status_t status_ = UCS_INPROGRESS;
};

}  // namespace sparseserve::transfer::internal

#endif  // SPARSESERVE_COMMON_TRANSFER_INTERNAL_UCP_REQUEST_WAITER_H_
