#include "router/generate_call.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/core/logging.h"
#include "common/rpc/finish_label.h"
#include "common/rpc/status_conversion.h"

namespace sparseserve::router {
namespace {

// The requests_total{finish_reason} label of an outcome.
absl::string_view FinishLabel(const absl::Status& status, v1::FinishReason reason) {
  if (!status.ok()) return status.code() == absl::StatusCode::kCancelled ? "aborted" : "error";
  return rpc::FinishReasonLabel(reason);
}

}  // namespace

GenerateCall* GenerateCall::Start(CallResources* resources, grpc::CallbackServerContext* context,
                                  const v1::GenerateRequest& request) {
  auto* call = new GenerateCall(resources, context);
  call->Begin(request);
  return call;
}

GenerateCall::GenerateCall(CallResources* resources, grpc::CallbackServerContext* context)
    : resources_(resources), context_(context), start_time_(absl::Now()) {
  resources_->requests->CallCreated();
}

GenerateCall::~GenerateCall() {
  resources_->requests->CallDestroyed();
}

void GenerateCall::Unref() {
  if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
}

void GenerateCall::Run(Actions& actions) {
  for (std::function<void()>& action : actions) action();
  actions.clear();
}

void GenerateCall::Begin(const v1::GenerateRequest& request) {
  Actions actions;
  {
    absl::MutexLock lock(&mu_);
    // Tokenization runs here, on the gRPC thread that received the call: CPU work bounded by
    // max_context tokens, no waiting.
    absl::StatusOr<PreparedRequest> prepared =
        PrepareRequest(request, *resources_->tokenizer, resources_->limits);
    if (!prepared.ok()) {
      ConcludeLocked({.status = prepared.status()}, actions);
    } else if (!resources_->requests->Register(prepared->request_id, this)) {
      ConcludeLocked({.status = absl::AlreadyExistsError(absl::StrCat(
                          "request_id ", prepared->request_id, " is already in flight"))},
                     actions);
    } else {
      request_ = *std::move(prepared);
      registered_ = true;
      resources_->metrics->num_requests_running().Increment();
      resources_->metrics->prompt_tokens().Increment(request_.prompt_ids.size());
      output_.emplace(*resources_->tokenizer, request_.stop);
      RouteLocked(actions);
    }
  }
  Run(actions);
}

void GenerateCall::Abort() {
  Actions actions;
  {
    absl::MutexLock lock(&mu_);
    ConcludeLocked({.reason = v1::FINISH_REASON_ABORTED}, actions);
  }
  Run(actions);
}

void GenerateCall::OnWriteDone(bool ok) {
  Actions actions;
  {
    absl::MutexLock lock(&mu_);
    write_in_flight_ = false;
    if (!ok) {  // the client is gone: nothing more can be written
      ConcludeLocked({.status = absl::CancelledError("client stream broken")}, actions);
      pending_.Clear();
      pending_final_ = false;
      if (finish_status_->ok()) finish_status_ = grpc::Status::CANCELLED;
    }
    MaybeWriteLocked(actions);
  }
  Run(actions);
}

void GenerateCall::OnCancel() {
  Actions actions;
  {
    absl::MutexLock lock(&mu_);
    ConcludeLocked({.status = absl::CancelledError("cancelled by the client")}, actions);
    MaybeWriteLocked(actions);
  }
  Run(actions);
}

// Drops the server side's reference.
void GenerateCall::OnDone() {
  Unref();
}

void GenerateCall::OnDecodeResponse(DecodeStream* stream, const v1::DecodeResponse& response) {
  Actions actions;
  {
    absl::MutexLock lock(&mu_);
    if (concluded_ || stream != active_stream_) return;
    if (!have_worker_stats_) {
      have_worker_stats_ = true;
      reservation_id_.clear();  // the decode worker took the reservation it was sent
      reservation_decode_idx_ = -1;
      // Disaggregated: the decode worker's cached tokens came with the reservation.
      if (!disaggregated_) {
        cached_prompt_tokens_ = response.cached_prompt_tokens();
        prefill_density_ = response.prefill_attention_density();
      }
      queue_seconds_ = response.queue_seconds();
      resources_->metrics->request_queue_time().Observe(queue_seconds_);
    }
    RelayTokensLocked(response.token_ids().data(), response.token_ids_size(),
                      response.logprobs_size() == response.token_ids_size()
                          ? response.logprobs().data()
                          : nullptr,
                      actions);
    if (!concluded_ && response.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) {
      decode_density_ = response.decode_attention_density();
      selection_cache_hits_ = response.selection_cache_hits();
      selection_cache_queries_ = response.selection_cache_queries();
      ConcludeLocked({.reason = response.finish_reason(), .cancel_downstream = false}, actions);
    }
  }
  Run(actions);
}

void GenerateCall::OnDecodeDone(DecodeStream* stream, const grpc::Status& status) {
  Actions actions;
  {
    absl::MutexLock lock(&mu_);
    if (stream == active_stream_) {
      active_stream_ = nullptr;
      if (!concluded_) {
        // A stream that ends OK must have sent a finish reason (which concludes the call);
        // without one the worker broke the protocol: treat it like a lost worker.
        DecodeFailedLocked(stream->worker_idx(),
                           status.ok() ? grpc::Status(grpc::StatusCode::ABORTED,
                                                      "stream ended without a finish reason")
                                       : status,
                           actions);
      }
    }
  }
  Run(actions);
  Unref();  // the stream's reference; may delete this (and `stream`)
}

bool GenerateCall::EndsGenerationLocked(int32_t id) const {
  if (!request_.ignore_eos && resources_->tokenizer->IsEndOfGeneration(id)) return true;
  return std::find(request_.stop_token_ids.begin(), request_.stop_token_ids.end(), id) !=
         request_.stop_token_ids.end();
}

void GenerateCall::RelayTokensLocked(const int32_t* ids, int n,
                                     const v1::TokenLogprobs* const* logprobs, Actions& actions) {
  if (n <= 0) return;
  const absl::Time now = absl::Now();
  metrics::ServingMetrics& m = *resources_->metrics;
  if (!first_token_time_.has_value()) {
    first_token_time_ = now;
    m.ttft().Observe(absl::ToDoubleSeconds(now - start_time_));
  } else {
    const double gap = absl::ToDoubleSeconds(now - last_token_time_) / n;
    for (int i = 0; i < n; ++i) m.inter_token_latency().Observe(gap);
  }
  last_token_time_ = now;
  for (int i = 0; i < n && !concluded_; ++i) {
    generated_.push_back(ids[i]);
    pending_.add_token_ids(ids[i]);
    // One entry per token whenever the request asked: a worker message without them (a
    // mismatched count) gets empty entries rather than shifting later ones onto these tokens.
    if (logprobs != nullptr) {
      *pending_.add_logprobs() = *logprobs[i];
    } else if (request_.top_logprobs.has_value()) {
      pending_.add_logprobs();
    }
    pending_.mutable_text()->append(output_->Push(ids[i]));
    if (output_->stopped()) ConcludeLocked({.reason = v1::FINISH_REASON_STOP}, actions);
  }
  MaybeWriteLocked(actions);
}

void GenerateCall::ConcludeLocked(const Outcome& outcome, Actions& actions) {
  if (concluded_) return;
  concluded_ = true;
  const absl::Time now = absl::Now();
  metrics::ServingMetrics& m = *resources_->metrics;
  m.requests_finished(FinishLabel(outcome.status, outcome.reason)).Increment();
  if (outcome.status.ok()) {
    if (output_.has_value()) pending_.mutable_text()->append(output_->Flush());
    pending_.set_finish_reason(outcome.reason);
    v1::Usage& usage = *pending_.mutable_usage();
    usage.set_prompt_tokens(static_cast<int32_t>(request_.prompt_ids.size()));
    usage.set_cached_prompt_tokens(cached_prompt_tokens_);
    usage.set_prefill_attention_density(prefill_density_);
    usage.set_decode_attention_density(decode_density_);
    usage.set_selection_cache_hits(selection_cache_hits_);
    usage.set_selection_cache_queries(selection_cache_queries_);
    usage.set_completion_tokens(static_cast<int32_t>(generated_.size()));
    v1::Timings& timings = *pending_.mutable_timings();
    timings.set_queue_seconds(queue_seconds_);
    if (first_token_time_.has_value()) {
      timings.set_time_to_first_token_seconds(
          absl::ToDoubleSeconds(*first_token_time_ - start_time_));
    }
    timings.set_e2e_seconds(absl::ToDoubleSeconds(now - start_time_));
    timings.set_disaggregated(disaggregated_);
    timings.set_migrations(num_migrations_);
    pending_final_ = true;
    m.e2e_request_latency().Observe(absl::ToDoubleSeconds(now - start_time_));
    m.generated_tokens().Increment(static_cast<double>(generated_.size()));
  } else {
    // Tokens not yet written still go out before the error status (the client keeps the
    // partial output), except when the client is gone.
    if (outcome.status.code() == absl::StatusCode::kCancelled) pending_.Clear();
    if (registered_ && outcome.status.code() != absl::StatusCode::kCancelled) {
      SS_LOG_WARNING("request {} failed: {}", request_.request_id, outcome.status.ToString());
    }
  }
  finish_status_ = rpc::ToGrpcStatus(outcome.status);
  if (registered_) {
    resources_->requests->Unregister(request_.request_id);
    m.num_requests_running().Decrement();
  }
  if (outcome.cancel_downstream) CancelDownstreamLocked(actions);
  MaybeWriteLocked(actions);
}

void GenerateCall::CancelDownstreamLocked(Actions& actions) {
  for (std::unique_ptr<UnaryCallBase>& call : unary_calls_) {
    if (!call->cancel_on_conclude) continue;
    actions.push_back([context = &call->context] { context->TryCancel(); });
  }
  if (active_stream_ != nullptr) {
    actions.push_back([stream = active_stream_] { stream->Cancel(); });
    AbortOnWorkerLocked(WorkerRole::kDecode, active_stream_->worker_idx(), actions);
  }
  if (prefill_idx_ >= 0) AbortOnWorkerLocked(WorkerRole::kPrefill, prefill_idx_, actions);
  // A reservation with a ReserveKv or Prefill still in flight is released when that call
  // completes (OnReserveDone / OnPrefillDone see concluded_); neither call is cancelled, so the
  // Prefill's end confirms that the prefill worker can no longer PUT into the reservation.
  if (!reservation_id_.empty() && prefill_idx_ < 0) ReleaseReservationLocked(actions);
}

void GenerateCall::MaybeWriteLocked(Actions& actions) {
  if (write_in_flight_ || finish_called_) return;
  const bool has_data = pending_final_ || pending_.token_ids_size() > 0 || !pending_.text().empty();
  if (has_data) {
    writing_ = std::move(pending_);
    pending_.Clear();
    pending_final_ = false;
    writing_.set_request_id(request_.request_id);
    write_in_flight_ = true;
    actions.push_back([this, message = &writing_] { StartWrite(message); });
    return;
  }
  if (finish_status_.has_value()) {
    finish_called_ = true;
    actions.push_back([this, status = *finish_status_] { Finish(status); });
  }
}

}  // namespace sparseserve::router
