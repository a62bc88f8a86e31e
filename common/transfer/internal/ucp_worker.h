// UcpWorker: RAII owner of one ucp_worker_h (a progress engine with its own transport state).
//
// Workers are created in UCS_THREAD_MODE_MULTI: one dedicated progress thread
// (UcpProgressThread) calls Progress/Arm while caller threads post PUTs and flushes and free
// requests; UCX serializes them with its worker lock, and a request callback runs under that
// lock. Thread-safe; borrows the UcpContext, which must outlive it. Endpoints, rkeys and
// requests of this worker must be released before it is destroyed.
#ifndef SPARSESERVE_COMMON_TRANSFER_INTERNAL_UCP_WORKER_H_
#define SPARSESERVE_COMMON_TRANSFER_INTERNAL_UCP_WORKER_H_

#include <ucp/api/ucp.h>

#include <memory>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "common/transfer/internal/ucp_context.h"

namespace sparseserve::transfer::internal {

class UcpWorker {
 public:
  // Returns kFailedPrecondition if UCX cannot give a multi-threaded worker, or UCX's error.
  static absl::StatusOr<std::unique_ptr<UcpWorker>> Create(const UcpContext& context);
  ~UcpWorker();
  UcpWorker(const UcpWorker&) = delete;
  UcpWorker& operator=(const UcpWorker&) = delete;

  ucp_worker_h handle() const { return worker_; }
  // The raw UCX worker address (what a peer passes to ucp_ep_create).
  const std::string& address() const { return address_; }
  // The wakeup fd: readable when Arm() returned OK and an event arrived since.
  int event_fd() const { return event_fd_; }

 private:
  UcpWorker(ucp_worker_h worker, std::string address, int event_fd)
      : worker_(worker), address_(std::move(address)), event_fd_(event_fd) {}

  ucp_worker_h worker_;
  std::string address_;
  int event_fd_;
};

}  // namespace sparseserve::transfer::internal

#endif  // SPARSESERVE_COMMON_TRANSFER_INTERNAL_UCP_WORKER_H_
