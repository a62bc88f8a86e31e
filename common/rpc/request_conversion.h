// The one conversion of a request's per-request parameters from the wire (generation.proto,
// worker.proto) into the engine's structs: sampling parameters and the attention / speculation
// choices. The router and both workers use these, so a field means the same on every hop.
//
// Presence rules (docs/api.md): an unset `temperature` is 1.0 (an explicit 0 is greedy); an unset
// method name ("") or parameter takes the caller's defaults — the server's flags. Stateless;
// thread-safe.
#ifndef SPARSESERVE_COMMON_RPC_REQUEST_CONVERSION_H_
#define SPARSESERVE_COMMON_RPC_REQUEST_CONVERSION_H_

#include "absl/status/statusor.h"
#include "common/engine/request_options.h"
#include "common/sampling/sampling_params.h"
#include "sparseserve/v1/generation.pb.h"

namespace sparseserve::rpc {

// The engine's SamplingParams for the proto's fields: an unset temperature means 1.0; top_p 0
// means 1 (off); repetition_penalty 0 means 1 (off). Not validated (sampling::Validate is).
sampling::SamplingParams SamplingFromProto(const v1::SamplingParams& proto);

// The request's attention and speculation choices over `defaults`: each unset method or
// parameter keeps the default's value, each set one replaces it. Returns kInvalidArgument for an
// unknown method name (naming the field and the known names) or for what engine::Validate
// rejects (a method in the wrong phase, a parameter out of range). Never falls back to another
// method.
absl::StatusOr<engine::RequestOptions> RequestOptionsFromProto(
    const v1::PrefillAttention& prefill, const v1::DecodeAttention& decode,
    const v1::Speculation& speculation, const engine::RequestOptions& defaults);

}  // namespace sparseserve::rpc

#endif  // SPARSESERVE_COMMON_RPC_REQUEST_CONVERSION_H_
