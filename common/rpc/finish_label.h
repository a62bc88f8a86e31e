// The `requests_total{finish_reason}` label of a finish reason: the same short values on every
// role (router, decode and prefill workers). Stateless; thread-safe.
#ifndef SPARSESERVE_COMMON_RPC_FINISH_LABEL_H_
#define SPARSESERVE_COMMON_RPC_FINISH_LABEL_H_

#include "absl/strings/string_view.h"
#include "sparseserve/v1/generation.pb.h"

namespace sparseserve::rpc {

// "length", "stop", "context", "aborted"; "error" for anything else (UNSPECIFIED).
absl::string_view FinishReasonLabel(v1::FinishReason reason);

}  // namespace sparseserve::rpc

#endif  // SPARSESERVE_COMMON_RPC_FINISH_LABEL_H_
