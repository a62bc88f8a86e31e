// Conversion of UCX status codes into absl::Status, with the retry semantics of STYLE.md.
//
// A peer that is gone or unreachable maps to kUnavailable (retry elsewhere), a malformed
// parameter to kInvalidArgument, exhausted resources to kResourceExhausted, the rest to
// kInternal. The message carries the operation and UCX's own status string. Thread-safe.
#ifndef SPARSESERVE_COMMON_TRANSFER_INTERNAL_UCP_STATUS_H_
#define SPARSESERVE_COMMON_TRANSFER_INTERNAL_UCP_STATUS_H_

#include <ucs/type/status.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace sparseserve::transfer::internal {

// Returns OK for UCS_OK, else an error whose message is "`what`: <ucs status string>".
absl::Status UcsToStatus(ucs_status_t status, absl::string_view what);

}  // namespace sparseserve::transfer::internal

#endif  // SPARSESERVE_COMMON_TRANSFER_INTERNAL_UCP_STATUS_H_
