// Deadline helpers for gRPC calls: every outgoing RPC gets one (STYLE.md), and a server
// handler can ask how much of its caller's budget is left before it calls downstream.
// Thread-safe (stateless); the contexts themselves follow gRPC's rules.
#ifndef SPARSESERVE_COMMON_RPC_DEADLINE_H_
#define SPARSESERVE_COMMON_RPC_DEADLINE_H_

#include "absl/time/time.h"
#include "grpcpp/client_context.h"
#include "grpcpp/server_context.h"

namespace sparseserve::rpc {

// Sets `context`'s deadline to now + `timeout`; absl::InfiniteDuration() means no deadline.
// REQUIRES: the call on `context` has not started.
void SetDeadline(grpc::ClientContext& context, absl::Duration timeout);

// Time left until the caller's deadline of the call served with `context` (zero when it has
// passed); absl::InfiniteDuration() when the caller set none. Works for CallbackServerContext.
absl::Duration RemainingTime(const grpc::ServerContextBase& context);

}  // namespace sparseserve::rpc

#endif  // SPARSESERVE_COMMON_RPC_DEADLINE_H_
