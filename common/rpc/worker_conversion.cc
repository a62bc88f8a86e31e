#include "common/rpc/worker_conversion.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"

namespace sparseserve::rpc {

v1::FinishReason FinishReasonToProto(engine::FinishReason reason) {
  switch (reason) {
    case engine::FinishReason::kLength: return v1::FINISH_REASON_LENGTH;
    case engine::FinishReason::kStop: return v1::FINISH_REASON_STOP;
    case engine::FinishReason::kContextFull: return v1::FINISH_REASON_CONTEXT;
    case engine::FinishReason::kAborted: return v1::FINISH_REASON_ABORTED;
  }
  return v1::FINISH_REASON_UNSPECIFIED;
}

v1::KvLayout KvLayoutOf(const engine::ModelRunner& runner) {
  const kv::KvLayout ours = runner.kv_layout();
  v1::KvLayout layout;
  layout.set_dtype(std::string(DTypeName(ours.dtype)));
  layout.set_block_tokens(ours.block_tokens);
  layout.set_num_layers(ours.num_layers);
  layout.set_num_kv_heads(ours.num_kv_heads);
  layout.set_head_dim(ours.head_dim);
  layout.set_tensor_parallel(ours.tensor_parallel);
  layout.set_adapter_fingerprint(ours.adapter_fingerprint);
  return layout;
}

absl::StatusOr<kv::KvLayout> KvLayoutFromProto(const v1::KvLayout& proto) {
  kv::KvLayout layout;
  bool known = false;
  for (DType d : {DType::kF32, DType::kBf16, DType::kF16}) {
    if (DTypeName(d) == proto.dtype()) {
      layout.dtype = d;
      known = true;
    }
  }
  if (!known) {
    return absl::InvalidArgumentError(absl::StrCat("unknown KV dtype '", proto.dtype(), "'"));
  }
  layout.block_tokens = proto.block_tokens();
  layout.num_layers = proto.num_layers();
  layout.num_kv_heads = proto.num_kv_heads();
  layout.head_dim = proto.head_dim();
  layout.tensor_parallel = std::max(1, proto.tensor_parallel());
  layout.adapter_fingerprint = proto.adapter_fingerprint();
  return layout;
}

void TokenLogprobsToProto(const model::TokenLogprobs& logprobs, v1::TokenLogprobs* out) {
  out->Clear();
  out->set_logprob(logprobs.logprob);
  out->mutable_top_ids()->Assign(logprobs.top_ids.begin(), logprobs.top_ids.end());
  out->mutable_top_logprobs()->Assign(logprobs.top_logprobs.begin(), logprobs.top_logprobs.end());
}

}  // namespace sparseserve::rpc
