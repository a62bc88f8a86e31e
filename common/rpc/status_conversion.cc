#include "common/rpc/status_conversion.h"

#include <string>

namespace sparseserve::rpc {
namespace {

// Both enums follow google/rpc/code.proto: OK = 0 … UNAUTHENTICATED = 16.
constexpr int kMaxCanonicalCode = 16;
static_assert(static_cast<int>(absl::StatusCode::kUnauthenticated) == kMaxCanonicalCode);
static_assert(static_cast<int>(grpc::StatusCode::UNAUTHENTICATED) == kMaxCanonicalCode);
static_assert(static_cast<int>(absl::StatusCode::kUnavailable) ==
              static_cast<int>(grpc::StatusCode::UNAVAILABLE));
static_assert(static_cast<int>(absl::StatusCode::kResourceExhausted) ==
              static_cast<int>(grpc::StatusCode::RESOURCE_EXHAUSTED));

bool IsCanonical(int code) {
  return code >= 0 && code <= kMaxCanonicalCode;
}

}  // namespace

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  const int code = static_cast<int>(status.code());
  return grpc::Status(
      IsCanonical(code) ? static_cast<grpc::StatusCode>(code) : grpc::StatusCode::UNKNOWN,
      std::string(status.message()));
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  const int code = static_cast<int>(status.error_code());
  return absl::Status(
      IsCanonical(code) ? static_cast<absl::StatusCode>(code) : absl::StatusCode::kUnknown,
      status.error_message());
}

}  // namespace sparseserve::rpc
