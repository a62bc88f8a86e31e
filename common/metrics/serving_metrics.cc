#include "common/metrics/serving_metrics.h"

#include <exception>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"

namespace sparseserve::metrics {
namespace {

constexpr absl::string_view kPrefix = "sparseserve_";

prometheus::Histogram* AddHistogram(prometheus::Registry& registry, absl::string_view name,
                                    const std::string& help, const prometheus::Labels& labels,
                                    absl::Span<const double> buckets) {
  auto& family =
      prometheus::BuildHistogram().Name(absl::StrCat(kPrefix, name)).Help(help).Register(registry);
  return &family.Add(labels,
                     prometheus::Histogram::BucketBoundaries(buckets.begin(), buckets.end()));
}

prometheus::Gauge* AddGauge(prometheus::Registry& registry, absl::string_view name,
                            const std::string& help, const prometheus::Labels& labels) {
  auto& family =
      prometheus::BuildGauge().Name(absl::StrCat(kPrefix, name)).Help(help).Register(registry);
  return &family.Add(labels);
}

prometheus::Family<prometheus::Counter>& AddCounterFamily(prometheus::Registry& registry,
                                                          absl::string_view name,
                                                          const std::string& help) {
  return prometheus::BuildCounter().Name(absl::StrCat(kPrefix, name)).Help(help).Register(registry);
}

prometheus::Counter* AddCounter(prometheus::Registry& registry, absl::string_view name,
                                const std::string& help, const prometheus::Labels& labels) {
  return &AddCounterFamily(registry, name, help).Add(labels);
}

}  // namespace

absl::string_view ServiceRoleName(ServiceRole role) {
  switch (role) {
    case ServiceRole::kRouter: return "router";
    case ServiceRole::kPrefill: return "prefill";
    case ServiceRole::kDecode: return "decode";
  }
  return "unknown";
}

ServingMetrics::ServingMetrics(std::shared_ptr<prometheus::Registry> registry, ServiceRole role)
    : registry_(std::move(registry)), role_(role) {}

absl::StatusOr<std::unique_ptr<ServingMetrics>> ServingMetrics::Create(
    std::shared_ptr<prometheus::Registry> registry, ServiceRole role) {
  if (registry == nullptr) return absl::InvalidArgumentError("serving metrics: null registry");
  std::unique_ptr<ServingMetrics> metrics(new ServingMetrics(std::move(registry), role));
  try {
    // prometheus-cpp throws std::invalid_argument on a clashing family; keep it inside.
    metrics->Register();
  } catch (const std::exception& e) {
    return absl::AlreadyExistsError(
        absl::StrCat("serving metrics (role ", ServiceRoleName(role), "): ", e.what()));
  }
  return metrics;
}

absl::Status ServingMetrics::SetKvTransportInfo(absl::string_view ucx_version,
                                                absl::string_view transports) {
  const prometheus::Labels labels = {{"role", std::string(ServiceRoleName(role_))},
                                     {"ucx_version", std::string(ucx_version)},
                                     {"transports", std::string(transports)}};
  try {
    // prometheus-cpp throws std::invalid_argument on a clashing family; keep it inside.
    AddGauge(*registry_, "kv_transport_info",
             "UCX version and transports KV moves with (labels); always 1.", labels)
        ->Set(1);
  } catch (const std::exception& e) {
    return absl::AlreadyExistsError(absl::StrCat("kv_transport_info: ", e.what()));
  }
  return absl::OkStatus();
}

void ServingMetrics::Register() {
  prometheus::Registry& r = *registry_;
  const prometheus::Labels labels = {{"role", std::string(ServiceRoleName(role_))}};

  ttft_ = AddHistogram(r, "time_to_first_token_seconds",
                       "Time from request arrival to its first generated token, seconds.", labels,
                       kLatencyBuckets);
  inter_token_latency_ = AddHistogram(
      r, "inter_token_latency_seconds",
      "Time between consecutive generated tokens of a request, seconds.", labels, kLatencyBuckets);
  e2e_request_latency_ = AddHistogram(r, "e2e_request_latency_seconds",
                                      "Time from request arrival to its last token, seconds.",
                                      labels, kLatencyBuckets);
  request_queue_time_ = AddHistogram(
      r, "request_queue_time_seconds",
      "Time a request waited before it was first scheduled, seconds.", labels, kLatencyBuckets);
  kv_transfer_time_ =
      AddHistogram(r, "kv_transfer_seconds", "Duration of one request's KV transfer, seconds.",
                   labels, kTransferBuckets);
  kv_staging_copy_time_ = AddHistogram(
      r, "kv_staging_copy_seconds",
      "Time one request's KV spent in copies between device memory and host staging memory "
      "for transfer (prefill: device to host, decode: host to device), seconds.",
      labels, kTransferBuckets);
  tp_allreduce_time_ = AddHistogram(
      r, "tp_allreduce_seconds",
      "Duration of one tensor-parallel all-reduce (--tensor-parallel > 1), sampled in engine "
      "steps that run kernel by kernel (CUDA-graph replays are not timed per collective), "
      "seconds.",
      labels, kCollectiveBuckets);

  attention_error_family_ =
      &prometheus::BuildHistogram()
           .Name(absl::StrCat(kPrefix, "sparse_attention_error"))
           .Help(
               "Relative L2 error ||sparse - dense|| / ||dense|| of the attention output of one "
               "shadowed (sequence, layer) call of a sparse method, against dense attention "
               "computed beside it (--shadow-dense-rate).")
           .Register(r);

  num_requests_running_ =
      AddGauge(r, "num_requests_running", "Requests currently in the running batch.", labels);
  num_requests_waiting_ =
      AddGauge(r, "num_requests_waiting", "Requests queued and not yet scheduled.", labels);
  kv_cache_usage_ =
      AddGauge(r, "kv_cache_usage_ratio", "Fraction of KV cache blocks in use, 0 to 1.", labels);
  // One series per phase: MInference's prefill and TokenSelect's decode are separate choices.
  auto& density = prometheus::BuildGauge()
                      .Name(absl::StrCat(kPrefix, "sparse_attention_density"))
                      .Help(
                          "Fraction of the dense attention work done by sparse attention in the "
                          "last sparse request's prefill or decode, 0 to 1.")
                      .Register(r);
  for (auto [gauge, phase] : {std::pair{&sparse_attention_density_prefill_, "prefill"},
                              {&sparse_attention_density_decode_, "decode"}}) {
    prometheus::Labels phase_labels = labels;
    phase_labels["phase"] = phase;
    *gauge = &density.Add(phase_labels);
  }

  prefix_cache_queries_ = AddCounter(r, "prefix_cache_queries_total",
                                     "KV blocks looked up in the prefix cache.", labels);
  prefix_cache_hits_ =
      AddCounter(r, "prefix_cache_hits_total", "KV blocks found in the prefix cache.", labels);
  kv_transfer_bytes_ =
      AddCounter(r, "kv_transfer_bytes_total", "KV cache bytes transferred.", labels);
  kv_transfer_failures_ =
      AddCounter(r, "kv_transfer_failures_total", "KV transfers that failed.", labels);
  kv_reservation_expiries_ = AddCounter(r, "kv_reservation_expiries_total",
                                        "KV block reservations that expired unused.", labels);
  request_migrations_ = AddCounter(r, "request_migrations_total",
                                   "Requests moved to another worker after a failure.", labels);
  spec_draft_family_ =
      &AddCounterFamily(r, "spec_decode_draft_tokens_total",
                        "Draft tokens verified by speculative decoding, by method.");
  spec_accepted_family_ =
      &AddCounterFamily(r, "spec_decode_accepted_tokens_total",
                        "Draft tokens accepted by speculative decoding, by method.");
  spec_position_family_ = &AddCounterFamily(
      r, "spec_decode_accepted_tokens_per_position_total",
      "Draft tokens accepted by speculative decoding, by method and draft position (0 = the "
      "first draft token of a step).");
  spec_steps_family_ =
      &AddCounterFamily(r, "spec_decode_verify_steps_total",
                        "Decode steps that verified a draft, by speculation method.");
  spec_mean_family_ = &prometheus::BuildGauge()
                           .Name(absl::StrCat(kPrefix, "spec_decode_mean_accepted_length"))
                           .Help(
                               "Mean accepted draft tokens per verify step since the start, by "
                               "speculation method.")
                           .Register(r);
  selection_cache_hits_ = AddCounter(r, "tokenselect_selection_cache_hits_total",
                                     "TokenSelect selection cache hits.", labels);
  selection_cache_queries_ = AddCounter(r, "tokenselect_selection_cache_queries_total",
                                        "TokenSelect selection cache lookups.", labels);
  generated_tokens_ =
      AddCounter(r, "generated_tokens_total", "Tokens generated (output tokens).", labels);
  prompt_tokens_ =
      AddCounter(r, "prompt_tokens_total", "Prompt tokens processed (input tokens).", labels);
  auto& steps = AddCounterFamily(
      r, "engine_steps_total",
      "Engine forward steps, by what they held: decode rows only, prefill chunks only, or both "
      "(a mixed step: running streams advanced while a prompt was prefilled).");
  for (auto [counter, kind] : {std::pair{&engine_steps_decode_, "decode"},
                               {&engine_steps_prefill_, "prefill"},
                               {&engine_steps_mixed_, "mixed"}}) {
    prometheus::Labels step_labels = labels;
    step_labels["kind"] = kind;
    *counter = &steps.Add(step_labels);
  }
  engine_step_sequences_ =
      AddHistogram(r, "engine_step_sequences",
                   "Sequences in one engine forward step (decode streams and prompt chunks).",
                   labels, kStepSequenceBuckets);
  // Series for the sparse methods (engine::AttentionMethodName's names) exist from the start, so
  // dashboards and rules see the family before the first shadowed call.
  for (absl::string_view method : {"sliding-window", "minference", "tokenselect"}) {
    sparse_attention_error(method);
  }
  // The part-1 speculation methods' series exist from the start, like the reasons below.
  for (absl::string_view method : {"prompt-lookup", "lookahead"}) {
    spec_decode_draft_tokens(method);
    spec_decode_accepted_tokens(method);
    spec_decode_accepted_tokens_per_position(method, 0);
    spec_decode_verify_steps(method);
    spec_decode_mean_accepted_length(method);
  }
  requests_family_ = &AddCounterFamily(r, "requests_total", "Finished requests, by finish reason.");
  // Series for the standard reasons exist from the start, so rate() sees them go 0 -> 1.
  for (absl::string_view reason : {"length", "stop", "context", "aborted", "error"}) {
    requests_finished(reason);
  }
}

prometheus::Histogram& ServingMetrics::sparse_attention_error(absl::string_view method) {
  // Family::Add returns the existing series when these labels were added before.
  return attention_error_family_->Add(
      {{"role", std::string(ServiceRoleName(role_))}, {"method", std::string(method)}},
      prometheus::Histogram::BucketBoundaries(kAttentionErrorBuckets.begin(),
                                              kAttentionErrorBuckets.end()));
}

prometheus::Counter& ServingMetrics::spec_decode_draft_tokens(absl::string_view method) {
  return spec_draft_family_->Add(
      {{"role", std::string(ServiceRoleName(role_))}, {"method", std::string(method)}});
}

prometheus::Counter& ServingMetrics::spec_decode_accepted_tokens(absl::string_view method) {
  return spec_accepted_family_->Add(
      {{"role", std::string(ServiceRoleName(role_))}, {"method", std::string(method)}});
}

prometheus::Counter& ServingMetrics::spec_decode_accepted_tokens_per_position(
    absl::string_view method, int position) {
  return spec_position_family_->Add({{"role", std::string(ServiceRoleName(role_))},
                                     {"method", std::string(method)},
                                     {"position", absl::StrCat(position)}});
}

prometheus::Counter& ServingMetrics::spec_decode_verify_steps(absl::string_view method) {
  return spec_steps_family_->Add(
      {{"role", std::string(ServiceRoleName(role_))}, {"method", std::string(method)}});
}

prometheus::Gauge& ServingMetrics::spec_decode_mean_accepted_length(absl::string_view method) {
  return spec_mean_family_->Add(
      {{"role", std::string(ServiceRoleName(role_))}, {"method", std::string(method)}});
}

prometheus::Counter& ServingMetrics::requests_finished(absl::string_view finish_reason) {
  // Family::Add returns the existing series when these labels were added before.
  return requests_family_->Add({{"role", std::string(ServiceRoleName(role_))},
                                {"finish_reason", std::string(finish_reason)}});
}

}  // namespace sparseserve::metrics
