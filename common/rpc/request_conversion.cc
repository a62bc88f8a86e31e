#include "common/rpc/request_conversion.h"

#include <string>

#include "common/core/status.h"

namespace sparseserve::rpc {
namespace {

// `*method` from a method name; "" (unset) keeps it. kInvalidArgument naming `field` otherwise.
absl::Status SetAttentionMethod(const std::string& name, absl::string_view field,
                                engine::AttentionMethod* method) {
  if (name.empty()) return absl::OkStatus();
  absl::StatusOr<engine::AttentionMethod> parsed = engine::ParseAttentionMethod(name);
  if (!parsed.ok()) return AnnotateStatus(parsed.status(), field);
  *method = *parsed;
  return absl::OkStatus();
}

}  // namespace

sampling::SamplingParams SamplingFromProto(const v1::SamplingParams& proto) {
  sampling::SamplingParams params;
  params.temperature = proto.has_temperature() ? proto.temperature() : 1.0f;
  params.top_k = proto.top_k();
  params.top_p = proto.top_p() == 0.0f ? 1.0f : proto.top_p();
  params.min_p = proto.min_p();
  params.repetition_penalty =
      proto.repetition_penalty() == 0.0f ? 1.0f : proto.repetition_penalty();
  params.penalty_window = proto.penalty_window();
  params.seed = proto.seed();
  return params;
}

absl::StatusOr<engine::RequestOptions> RequestOptionsFromProto(
    const v1::PrefillAttention& prefill, const v1::DecodeAttention& decode,
    const v1::Speculation& speculation, const engine::RequestOptions& defaults) {
  engine::RequestOptions options = defaults;

  engine::AttentionChoice& p = options.prefill;
  SS_RETURN_IF_ERROR(SetAttentionMethod(prefill.method(), "prefill_attention.method", &p.method));
  if (prefill.has_window()) p.window = prefill.window();
  if (prefill.has_sink_tokens()) p.sink_tokens = prefill.sink_tokens();
  if (prefill.has_sparse_prefill_threshold()) {
    p.sparse_prefill_threshold = prefill.sparse_prefill_threshold();
  }
  if (prefill.has_minference_config()) p.minference_config = prefill.minference_config();
  if (prefill.has_tokenselect_k()) p.tokenselect_k = prefill.tokenselect_k();
  if (prefill.has_tokenselect_initial()) p.tokenselect_initial = prefill.tokenselect_initial();
  if (prefill.has_tokenselect_local()) p.tokenselect_local = prefill.tokenselect_local();
  if (prefill.has_tokenselect_theta()) p.tokenselect_theta = prefill.tokenselect_theta();
  if (prefill.has_tokenselect_per_kv_head()) {
    p.tokenselect_per_kv_head = prefill.tokenselect_per_kv_head();
  }

  engine::AttentionChoice& d = options.decode;
  SS_RETURN_IF_ERROR(SetAttentionMethod(decode.method(), "decode_attention.method", &d.method));
  if (decode.has_window()) d.window = decode.window();
  if (decode.has_sink_tokens()) d.sink_tokens = decode.sink_tokens();
  if (decode.has_tokenselect_k()) d.tokenselect_k = decode.tokenselect_k();
  if (decode.has_tokenselect_initial()) d.tokenselect_initial = decode.tokenselect_initial();
  if (decode.has_tokenselect_local()) d.tokenselect_local = decode.tokenselect_local();
  if (decode.has_tokenselect_theta()) d.tokenselect_theta = decode.tokenselect_theta();
  if (decode.has_tokenselect_per_kv_head()) {
    d.tokenselect_per_kv_head = decode.tokenselect_per_kv_head();
  }

  engine::SpeculationChoice& s = options.spec;
  if (!speculation.method().empty()) {
    absl::StatusOr<engine::SpecMethod> method = engine::ParseSpecMethod(speculation.method());
    if (!method.ok()) return AnnotateStatus(method.status(), "speculation.method");
    s.method = *method;
  }
  if (speculation.has_max_draft()) s.max_draft = speculation.max_draft();
  if (speculation.has_lookahead_window()) s.lookahead_window = speculation.lookahead_window();
  if (speculation.has_lookahead_ngram()) s.lookahead_ngram = speculation.lookahead_ngram();
  if (speculation.has_lookahead_guesses()) s.lookahead_guesses = speculation.lookahead_guesses();
  if (speculation.has_controller()) s.controller = speculation.controller();
  SS_RETURN_IF_ERROR(SetAttentionMethod(speculation.sparse_self_attention(),
                                        "speculation.sparse_self_attention",
                                        &s.sparse_self_attention));
  if (speculation.has_sparse_self_sinks()) s.sparse_self_sinks = speculation.sparse_self_sinks();
  if (speculation.has_sparse_self_window()) s.sparse_self_window = speculation.sparse_self_window();
  if (speculation.has_sparse_self_k()) s.sparse_self_k = speculation.sparse_self_k();
  if (speculation.has_sparse_self_per_kv_head()) {
    s.sparse_self_per_kv_head = speculation.sparse_self_per_kv_head();
  }
  if (speculation.tokenswift_tree_size() > 0) {  // empty: the server's default
    s.tokenswift_tree.assign(speculation.tokenswift_tree().begin(),
                             speculation.tokenswift_tree().end());
  }
  if (speculation.has_tokenswift_ngram_k()) s.tokenswift_ngram_k = speculation.tokenswift_ngram_k();
  if (speculation.has_tokenswift_draft_pass()) {
    s.tokenswift_draft_pass = speculation.tokenswift_draft_pass();
  }
  if (speculation.has_tokenswift_ngram_chain()) {
    s.tokenswift_ngram_chain = speculation.tokenswift_ngram_chain();
  }
  if (speculation.has_tokenswift_ngram_lag()) {
    s.tokenswift_ngram_lag = speculation.tokenswift_ngram_lag();
  }
  if (speculation.has_kangaroo_eta()) s.kangaroo_eta = speculation.kangaroo_eta();

  SS_RETURN_IF_ERROR(engine::Validate(options));
  return options;
}

}  // namespace sparseserve::rpc
