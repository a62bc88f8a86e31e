#include "common/rpc/deadline.h"

#include <algorithm>
#include <chrono>

namespace sparseserve::rpc {

void SetDeadline(grpc::ClientContext& context, absl::Duration timeout) {
  // absl::ToChronoTime maps InfiniteFuture to time_point::max(), which gRPC reads as "none".
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
}

absl::Duration RemainingTime(const grpc::ServerContextBase& context) {
  const std::chrono::system_clock::time_point deadline = context.deadline();
  if (deadline == std::chrono::system_clock::time_point::max()) return absl::InfiniteDuration();
  return std::max(absl::ZeroDuration(), absl::FromChrono(deadline) - absl::Now());
}

}  // namespace sparseserve::rpc
