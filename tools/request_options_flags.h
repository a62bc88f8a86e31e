// Flags of the per-request attention and speculation choices (issue 10): the server's defaults
// for `decode`, `prefill` and `router` (and `up`, which forwards them to its workers), and the
// request's choices for `generate`, in process or sent with --server. docs/api.md states how a
// request's choices and these defaults combine.
#ifndef SPARSESERVE_TOOLS_REQUEST_OPTIONS_FLAGS_H_
#define SPARSESERVE_TOOLS_REQUEST_OPTIONS_FLAGS_H_

#include <vector>

#include "absl/status/statusor.h"
#include "common/engine/request_options.h"
#include "sparseserve/v1/generation.pb.h"

namespace sparseserve::tools {

// The choices every flag of this file makes (--attention is the shorthand; explicit
// --prefill-attention / --decode-attention win over it). kInvalidArgument naming the flag for an
// unknown method name or a value engine::Validate rejects; kUnimplemented naming a method this
// build does not have yet (a default no request could be served with).
absl::StatusOr<engine::RequestOptions> RequestOptionsFromFlags();

// `generate --server`: sets in `request` the choices of the flags changed from their defaults
// and leaves the others unset, so the server's defaults apply to them. kInvalidArgument naming
// the flag for an unknown method name; everything else is the server's to check.
absl::Status SetRequestOptionsFromChangedFlags(v1::GenerateRequest* request);

// The names of this file's flags, for `up` to forward to its workers.
const std::vector<const char*>& RequestOptionFlagNames();

}  // namespace sparseserve::tools

#endif  // SPARSESERVE_TOOLS_REQUEST_OPTIONS_FLAGS_H_
