// Engine <-> wire conversions of what the workers report: a request's finish reason (and its
// `requests_total{finish_reason}` label, the same short values on every role) and a runner's KV
// layout. Shared by the decode and prefill workers and the router, so neither service library
// links the other. Stateless; thread-safe.
#ifndef SPARSESERVE_COMMON_RPC_WORKER_CONVERSION_H_
#define SPARSESERVE_COMMON_RPC_WORKER_CONVERSION_H_

#include "absl/strings/string_view.h"
#include "common/engine/generator.h"
#include "common/engine/model_runner.h"
#include "sparseserve/v1/generation.pb.h"
#include "sparseserve/v1/worker.pb.h"

namespace sparseserve::rpc {

v1::FinishReason FinishReasonToProto(engine::FinishReason reason);

// "length", "stop", "context", "aborted"; "error" for anything else (UNSPECIFIED).
absl::string_view FinishReasonLabel(v1::FinishReason reason);

// The layout of `runner`'s KV cache as worker.proto carries it (kv::CheckCompatible's input).
v1::KvLayout KvLayoutOf(const engine::ModelRunner& runner);

}  // namespace sparseserve::rpc

#endif  // SPARSESERVE_COMMON_RPC_WORKER_CONVERSION_H_
