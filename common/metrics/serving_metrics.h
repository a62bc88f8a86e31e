// ServingMetrics: the engine-standard Prometheus families of ARCHITECTURE.md, registered on one
// registry, with typed accessors (`metrics.ttft().Observe(seconds)`).
//
// Names carry the `sparseserve_` prefix and Prometheus base units (seconds, bytes, ratios);
// counters end in `_total` (prometheus-cpp 1.0 appends nothing). Every metric carries the label
// `role` (router | prefill | decode), so several roles may share one registry (an all-in-one
// process) without clashing. Bucket boundaries are `kLatencyBuckets` / `kTransferBuckets` /
// `kStepSequenceBuckets` / `kCollectiveBuckets`.
//
// ServingMetrics co-owns the registry (std::shared_ptr, with the MetricsExporter) so the metric
// references it hands out stay valid for its lifetime. Thread-safe: prometheus-cpp metrics are
// updated with atomics; `requests_finished` takes the family's mutex.
#ifndef SPARSESERVE_COMMON_METRICS_SERVING_METRICS_H_
#define SPARSESERVE_COMMON_METRICS_SERVING_METRICS_H_

#include <array>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace sparseserve::metrics {

// Which service a process plays; the value of the `role` label.
enum class ServiceRole { kRouter, kPrefill, kDecode };

// "router" | "prefill" | "decode".
absl::string_view ServiceRoleName(ServiceRole role);

// Request-level latencies, seconds: 1 ms … 120 s, roughly 1-2.5-5 per decade up to 10 s, then
// 20/30/60/120 s for long generations. Covers inter-token latency (ms), TTFT and queue time
// (ms to s) and end-to-end latency (s to minutes); slower values land in +Inf.
inline constexpr std::array<double, 17> kLatencyBuckets = {
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120};
// KV transfer durations, seconds: 100 µs … 10 s (one block is µs, a long prompt's KV is ms-s).
// One tensor-parallel all-reduce of a step's activations (microseconds over NVLink, up to
// milliseconds for a prefill chunk or the CPU's in-process one), seconds.
inline constexpr std::array<double, 16> kCollectiveBuckets = {
    1e-6, 2.5e-6, 5e-6,   1e-5, 2.5e-5, 5e-5,   1e-4, 2.5e-4,
    5e-4, 1e-3,   2.5e-3, 5e-3, 1e-2,   2.5e-2, 5e-2, 0.1};
inline constexpr std::array<double, 16> kTransferBuckets = {
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
    0.05,   0.1,     0.25,   0.5,   1,      2.5,   5,    10};
// Sequences in one engine step (a count): powers of two up to a full decode batch.
inline constexpr std::array<double, 9> kStepSequenceBuckets = {1, 2, 4, 8, 16, 32, 64, 128, 256};
// Relative L2 errors of sparse attention against dense (the shadow-dense monitor), a ratio:
// 1e-4 … 1. bf16 rounding alone gives ~1e-3; an exact method (a window covering the context)
// lands in the first bucket; 1 means the output is as large as the dense one is wrong.
inline constexpr std::array<double, 13> kAttentionErrorBuckets = {
    0.0001, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1};

class ServingMetrics {
 public:
  // Registers (or, if already present, reuses) every family on `registry` and creates this
  // role's metrics. Returns kAlreadyExists when a family name is already registered with another
  // metric type or with constant labels (prometheus-cpp rejects the merge).
  static absl::StatusOr<std::unique_ptr<ServingMetrics>> Create(
      std::shared_ptr<prometheus::Registry> registry, ServiceRole role);

  ServingMetrics(const ServingMetrics&) = delete;
  ServingMetrics& operator=(const ServingMetrics&) = delete;

  ServiceRole role() const { return role_; }

  // Histograms, seconds.
  prometheus::Histogram& ttft() { return *ttft_; }
  prometheus::Histogram& inter_token_latency() { return *inter_token_latency_; }
  prometheus::Histogram& e2e_request_latency() { return *e2e_request_latency_; }
  prometheus::Histogram& request_queue_time() { return *request_queue_time_; }
  prometheus::Histogram& kv_transfer_time() { return *kv_transfer_time_; }
  // One request's KV copies through host staging memory (prefill: device -> host ring, decode:
  // host staging area -> device pool), all layers together; only observed when KV is staged.
  prometheus::Histogram& kv_staging_copy_time() { return *kv_staging_copy_time_; }
  // `tp_allreduce_seconds`: one tensor-parallel all-reduce (--tensor-parallel > 1), sampled in
  // steps that run op by op (LlamaModel::set_allreduce_observer; graph replays are not timed).
  prometheus::Histogram& tp_allreduce_time() { return *tp_allreduce_time_; }
  // `sparse_attention_error{method=...}`: the relative L2 error ||sparse - dense|| / ||dense|| of
  // one shadowed (sequence, layer) attention call (--shadow-dense-rate; buckets
  // kAttentionErrorBuckets). `method` is the attention method's name ("sliding-window", ...);
  // the series of the sparse methods exist from the start, any other is created on first use. Each
  // call looks the series up under the family's mutex (a shadowed step observes layers x sequences
  // values, a few percent of steps).
  prometheus::Histogram& sparse_attention_error(absl::string_view method);

  // Gauges.
  prometheus::Gauge& num_requests_running() { return *num_requests_running_; }
  prometheus::Gauge& num_requests_waiting() { return *num_requests_waiting_; }
  prometheus::Gauge& kv_cache_usage() { return *kv_cache_usage_; }  // ratio in [0, 1]
  // `sparse_attention_density{phase=...}`: the fraction of the dense attention work actually done
  // by the last request that ran a sparse method in that phase, in [0, 1] (MInference measures
  // the prefill, TokenSelect the decode).
  prometheus::Gauge& sparse_attention_density_prefill() {
    return *sparse_attention_density_prefill_;
  }
  prometheus::Gauge& sparse_attention_density_decode() { return *sparse_attention_density_decode_; }

  // Counters.
  prometheus::Counter& prefix_cache_queries() { return *prefix_cache_queries_; }  // blocks
  prometheus::Counter& prefix_cache_hits() { return *prefix_cache_hits_; }        // blocks
  prometheus::Counter& kv_transfer_bytes() { return *kv_transfer_bytes_; }
  prometheus::Counter& kv_transfer_failures() { return *kv_transfer_failures_; }
  prometheus::Counter& kv_reservation_expiries() { return *kv_reservation_expiries_; }
  prometheus::Counter& request_migrations() { return *request_migrations_; }
  // Speculative decoding, by method (engine::SpecMethodName's names): draft tokens verified,
  // draft tokens accepted, accepted tokens by draft position (0 = the first draft token), verify
  // steps (steps that verified a draft), and the mean accepted length (accepted draft tokens per
  // verify step, since the start).
  prometheus::Counter& spec_decode_draft_tokens(absl::string_view method);
  prometheus::Counter& spec_decode_accepted_tokens(absl::string_view method);
  prometheus::Counter& spec_decode_accepted_tokens_per_position(absl::string_view method,
                                                                int position);
  prometheus::Counter& spec_decode_verify_steps(absl::string_view method);
  prometheus::Gauge& spec_decode_mean_accepted_length(absl::string_view method);
  prometheus::Counter& selection_cache_hits() { return *selection_cache_hits_; }
  prometheus::Counter& selection_cache_queries() { return *selection_cache_queries_; }
  prometheus::Counter& generated_tokens() { return *generated_tokens_; }
  prometheus::Counter& prompt_tokens() { return *prompt_tokens_; }
  // `engine_steps_total{kind=...}`: forward steps of the engine that held decode rows only,
  // prefill chunks only, or both.
  prometheus::Counter& engine_steps_decode() { return *engine_steps_decode_; }
  prometheus::Counter& engine_steps_prefill() { return *engine_steps_prefill_; }
  prometheus::Counter& engine_steps_mixed() { return *engine_steps_mixed_; }
  // `engine_step_sequences`: sequences (decode streams and prompt chunks) in one engine step;
  // buckets 1, 2, 4, ..., 256, so `_count - _bucket{le="1"}` counts the steps that batched
  // several sequences.
  prometheus::Histogram& engine_step_sequences() { return *engine_step_sequences_; }
  // `requests_total{finish_reason=...}`. The series "length", "stop", "context", "aborted" (the
  // proto FinishReason values) and "error" exist from the start; the first use of any other
  // reason creates its series. Each call looks the series up under the family's mutex.
  prometheus::Counter& requests_finished(absl::string_view finish_reason);

  // Publishes `kv_transport_info{role, ucx_version, transports} 1`: which UCX build and transports
  // this process moves KV with (an info-style gauge; the labels carry the data). Call once, at
  // start-up. Returns kAlreadyExists if the family clashes with another on the registry.
  absl::Status SetKvTransportInfo(absl::string_view ucx_version, absl::string_view transports);

 private:
  ServingMetrics(std::shared_ptr<prometheus::Registry> registry, ServiceRole role);
  // Builds every family and metric; throws what prometheus-cpp throws (caught by Create).
  void Register();

  std::shared_ptr<prometheus::Registry> registry_;  // co-owned with the MetricsExporter
  const ServiceRole role_;

  // Families and metrics live inside registry_; these are borrowed pointers into it.
  prometheus::Histogram* ttft_ = nullptr;
  prometheus::Histogram* inter_token_latency_ = nullptr;
  prometheus::Histogram* e2e_request_latency_ = nullptr;
  prometheus::Histogram* request_queue_time_ = nullptr;
  prometheus::Histogram* kv_transfer_time_ = nullptr;
  prometheus::Histogram* kv_staging_copy_time_ = nullptr;
  prometheus::Histogram* tp_allreduce_time_ = nullptr;
  prometheus::Gauge* num_requests_running_ = nullptr;
  prometheus::Gauge* num_requests_waiting_ = nullptr;
  prometheus::Gauge* kv_cache_usage_ = nullptr;
  prometheus::Gauge* sparse_attention_density_prefill_ = nullptr;
  prometheus::Gauge* sparse_attention_density_decode_ = nullptr;
  prometheus::Counter* prefix_cache_queries_ = nullptr;
  prometheus::Counter* prefix_cache_hits_ = nullptr;
  prometheus::Counter* kv_transfer_bytes_ = nullptr;
  prometheus::Counter* kv_transfer_failures_ = nullptr;
  prometheus::Counter* kv_reservation_expiries_ = nullptr;
  prometheus::Counter* request_migrations_ = nullptr;
  prometheus::Family<prometheus::Counter>* spec_draft_family_ = nullptr;
  prometheus::Family<prometheus::Counter>* spec_accepted_family_ = nullptr;
  prometheus::Family<prometheus::Counter>* spec_position_family_ = nullptr;
  prometheus::Family<prometheus::Counter>* spec_steps_family_ = nullptr;
  prometheus::Family<prometheus::Gauge>* spec_mean_family_ = nullptr;
  prometheus::Counter* selection_cache_hits_ = nullptr;
  prometheus::Counter* selection_cache_queries_ = nullptr;
  prometheus::Counter* generated_tokens_ = nullptr;
  prometheus::Counter* prompt_tokens_ = nullptr;
  prometheus::Counter* engine_steps_decode_ = nullptr;
  prometheus::Counter* engine_steps_prefill_ = nullptr;
  prometheus::Counter* engine_steps_mixed_ = nullptr;
  prometheus::Histogram* engine_step_sequences_ = nullptr;
  prometheus::Family<prometheus::Counter>* requests_family_ = nullptr;
  prometheus::Family<prometheus::Histogram>* attention_error_family_ = nullptr;
};

}  // namespace sparseserve::metrics

#endif  // SPARSESERVE_COMMON_METRICS_SERVING_METRICS_H_
