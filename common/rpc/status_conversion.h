// The one conversion between absl::Status (project code) and grpc::Status (the wire).
//
// The canonical codes are numerically identical in both libraries, so codes map 1:1 and the
// message is kept verbatim; payloads / error details are not carried. Thread-safe (stateless).
#ifndef SPARSESERVE_COMMON_RPC_STATUS_CONVERSION_H_
#define SPARSESERVE_COMMON_RPC_STATUS_CONVERSION_H_

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace sparseserve::rpc {

// Same code and message; OK maps to grpc::Status::OK.
grpc::Status ToGrpcStatus(const absl::Status& status);

// Same code and message; a code outside the canonical range becomes kUnknown.
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace sparseserve::rpc

#endif  // SPARSESERVE_COMMON_RPC_STATUS_CONVERSION_H_
