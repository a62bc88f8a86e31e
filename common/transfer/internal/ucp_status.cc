#include "common/transfer/internal/ucp_status.h"

#include "absl/strings/str_cat.h"

namespace sparseserve::transfer::internal {
namespace {

absl::StatusCode CodeFor(ucs_status_t status) {
  switch (status) {
    case UCS_ERR_UNREACHABLE:
    case UCS_ERR_CONNECTION_RESET:
    case UCS_ERR_ENDPOINT_TIMEOUT:
    case UCS_ERR_NOT_CONNECTED:
    case UCS_ERR_REJECTED:
    case UCS_ERR_TIMED_OUT:
    case UCS_ERR_IO_ERROR:
    case UCS_ERR_CANCELED:
    case UCS_ERR_NO_DEVICE:
    case UCS_ERR_SHMEM_SEGMENT: return absl::StatusCode::kUnavailable;
    case UCS_ERR_INVALID_PARAM:
    case UCS_ERR_INVALID_ADDR:
    case UCS_ERR_MESSAGE_TRUNCATED:
    case UCS_ERR_OUT_OF_RANGE: return absl::StatusCode::kInvalidArgument;
    case UCS_ERR_NO_MEMORY:
    case UCS_ERR_NO_RESOURCE:
    case UCS_ERR_EXCEEDS_LIMIT:
    case UCS_ERR_BUSY: return absl::StatusCode::kResourceExhausted;
    case UCS_ERR_UNSUPPORTED: return absl::StatusCode::kFailedPrecondition;
    default: return absl::StatusCode::kInternal;
  }
}

}  // namespace

absl::Status UcsToStatus(ucs_status_t status, absl::string_view what) {
  if (status == UCS_OK) return absl::OkStatus();
  return absl::Status(CodeFor(status), absl::StrCat(what, ": ", ucs_status_string(status)));
}

}  // namespace sparseserve::transfer::internal
