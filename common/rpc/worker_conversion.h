// Engine <-> wire conversions of what the workers report: a request's finish reason, a runner's
// KV layout (both ways) and a token's log probabilities. Shared by the decode and prefill workers,
// so neither service library links the other (the router, which links no engine, has
// finish_label.h). Stateless; thread-safe.
#ifndef SPARSESERVE_COMMON_RPC_WORKER_CONVERSION_H_
#define SPARSESERVE_COMMON_RPC_WORKER_CONVERSION_H_

#include "common/engine/generator.h"
#include "common/engine/model_runner.h"
#include "sparseserve/v1/generation.pb.h"
#include "sparseserve/v1/worker.pb.h"

namespace sparseserve::rpc {

v1::FinishReason FinishReasonToProto(engine::FinishReason reason);

// The layout of `runner`'s KV cache as worker.proto carries it (kv::CheckCompatible's input).
v1::KvLayout KvLayoutOf(const engine::ModelRunner& runner);
// The layout a peer sent; kInvalidArgument for an unknown dtype. tensor_parallel 0 (unset) is 1.
absl::StatusOr<kv::KvLayout> KvLayoutFromProto(const v1::KvLayout& proto);

// Fills `out` (cleared first) with `logprobs`.
void TokenLogprobsToProto(const model::TokenLogprobs& logprobs, v1::TokenLogprobs* out);

}  // namespace sparseserve::rpc

#endif  // SPARSESERVE_COMMON_RPC_WORKER_CONVERSION_H_
