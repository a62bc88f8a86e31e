#include "common/transfer/internal/ucp_request_waiter.h"

namespace sparseserve::transfer::internal {

void UcpRequestWaiter::Bind(ucp_request_param_t* param) {
  param->op_attr_mask |= UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  param->cb.send = &UcpRequestWaiter::OnComplete;
  param->user_data = this;
}

void UcpRequestWaiter::OnComplete(void* /*request*/, ucs_status_t status, void* user_data) {
  auto* waiter = static_cast<UcpRequestWaiter*>(user_data);
  waiter->status_ = status;
  waiter->done_.Notify();
}

std::optional<ucs_status_t> UcpRequestWaiter::Wait(ucs_status_ptr_t request, absl::Duration timeout,
                                                   UcpProgressThread& progress) {
  if (request == nullptr) return UCS_OK;
  if (UCS_PTR_IS_ERR(request)) return UCS_PTR_STATUS(request);
  progress.Wake();
  done_.WaitForNotificationWithTimeout(timeout);
  // After this no callback can run (see the header), so done_ is final.
  ucp_request_free(request);
  if (!done_.HasBeenNotified()) return std::nullopt;
  return status_;
}

}  // namespace sparseserve::transfer::internal
