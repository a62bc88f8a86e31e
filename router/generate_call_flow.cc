// GenerateCall's downstream half: routing, ReserveKv → Prefill → Decode, local decode, retries,
// prefill fallback and migration (see generate_call.h for the threading rules).
#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/core/logging.h"
#include "common/core/status.h"
#include "common/rpc/deadline.h"
#include "common/rpc/status_conversion.h"
#include "router/generate_call.h"

namespace sparseserve::router {
namespace {

RoutingConfig RoutingConfigOf(const RouterOptions& options) {
  return {.uncached_block_weight = options.uncached_block_weight,
          .disagg_threshold_tokens = options.disagg_threshold_tokens};
}

// Codes after which a decode stream's request may continue on another worker: the worker is
// gone (UNAVAILABLE), the stream was cancelled by someone else than the router (CANCELLED; the
// router concludes the call before it cancels), or the worker gave the request up (ABORTED).
bool IsMigratable(grpc::StatusCode code) {
  return code == grpc::StatusCode::UNAVAILABLE || code == grpc::StatusCode::CANCELLED ||
         code == grpc::StatusCode::ABORTED;
}

}  // namespace

absl::Duration GenerateCall::CallTimeout(absl::Duration limit) const {
  return std::min(limit, rpc::RemainingTime(*context_));
}

template <typename Request, typename Response, typename StartFn, typename DoneFn>
void GenerateCall::StartUnaryLocked(Request request, absl::Duration timeout, StartFn start,
                                    DoneFn done, Actions& actions) {
  struct Call : UnaryCallBase {
    Request request;
    Response response;
  };
  auto call = std::make_unique<Call>();
  call->request = std::move(request);
  rpc::SetDeadline(call->context, timeout);
  Call* raw = call.get();
  unary_calls_.push_back(std::move(call));
  Ref();  // released after `done` has run
  actions.push_back([this, raw, start, done] {
    start(&raw->context, &raw->request, &raw->response, [this, raw, done](grpc::Status status) {
      done(status, raw->response);
      Unref();
    });
  });
}

void GenerateCall::AbortOnWorkerLocked(WorkerRole role, int idx, Actions& actions) {
  v1::WorkerAbortRequest request;
  request.set_request_id(request_.request_id);
  auto done = [](const grpc::Status&, const v1::WorkerAbortResponse&) {};  // best effort
  WorkerRegistry& registry = *resources_->registry;
  // The client's deadline may have passed already: Abort gets its own.
  const absl::Duration timeout = resources_->options->unary_timeout;
  if (role == WorkerRole::kDecode) {
    StartUnaryLocked<v1::WorkerAbortRequest, v1::WorkerAbortResponse>(
        std::move(request), timeout,
        [&registry, idx](auto* c, auto* q, auto* r, auto cb) {
          registry.decode_stub(idx).async()->Abort(c, q, r, std::move(cb));
        },
        done, actions);
  } else {
    StartUnaryLocked<v1::WorkerAbortRequest, v1::WorkerAbortResponse>(
        std::move(request), timeout,
        [&registry, idx](auto* c, auto* q, auto* r, auto cb) {
          registry.prefill_stub(idx).async()->Abort(c, q, r, std::move(cb));
        },
        done, actions);
  }
  unary_calls_.back()->cancel_on_conclude = false;
}

void GenerateCall::ReleaseReservationLocked(Actions& actions) {
  if (reservation_id_.empty()) return;
  v1::ReleaseRequest request;
  request.set_reservation_id(std::exchange(reservation_id_, std::string()));
  WorkerRegistry& registry = *resources_->registry;
  const int idx = std::exchange(reservation_decode_idx_, -1);
  StartUnaryLocked<v1::ReleaseRequest, v1::ReleaseResponse>(
      std::move(request), resources_->options->unary_timeout,
      [&registry, idx](auto* c, auto* q, auto* r, auto cb) {
        registry.decode_stub(idx).async()->Release(c, q, r, std::move(cb));
      },
      // Best effort: an unreleased reservation returns its blocks when its lease expires.
      [](const grpc::Status&, const v1::ReleaseResponse&) {}, actions);
  unary_calls_.back()->cancel_on_conclude = false;
}

void GenerateCall::RouteLocked(Actions& actions) {
  WorkerRegistry& registry = *resources_->registry;
  std::vector<DecodeCandidate> decode = registry.DecodeCandidates(request_.prompt_ids);
  for (int idx : excluded_decode_) decode[idx].healthy = false;
  std::vector<PrefillCandidate> prefill = registry.PrefillCandidates();
  for (int idx : excluded_prefill_) prefill[idx].healthy = false;
  if (num_prefill_attempts_ >= resources_->options->max_prefill_attempts) prefill.clear();
  const int prompt_len = static_cast<int>(request_.prompt_ids.size());
  const std::optional<RouteDecision> decision =
      Route(decode, prefill, prompt_len, RoutingConfigOf(*resources_->options));
  if (!decision.has_value()) {
    ConcludeLocked({.status = absl::UnavailableError(absl::StrCat(
                        "no healthy decode worker (", registry.num_workers(WorkerRole::kDecode),
                        " configured, ", excluded_decode_.size(), " failed for this request)"))},
                   actions);
    return;
  }
  if (!routed_) {
    routed_ = true;
    const DecodeCandidate& chosen = decode[decision->decode_idx];
    const int full_blocks = prompt_len / chosen.block_tokens;  // only full blocks are hashed
    resources_->metrics->prefix_cache_queries().Increment(full_blocks);
    resources_->metrics->prefix_cache_hits().Increment(decision->overlap_blocks);
  }
  if (decision->disaggregate) {
    StartReserveLocked(decision->decode_idx, decision->prefill_idx, actions);
  } else {
    StartDecodeLocked(decision->decode_idx, LocalDecodeRequestLocked(), actions);
  }
}

v1::DecodeRequest GenerateCall::LocalDecodeRequestLocked() const {
  v1::DecodeRequest request;
  request.set_request_id(request_.request_id);
  request.mutable_prompt_ids()->Add(request_.prompt_ids.begin(), request_.prompt_ids.end());
  *request.mutable_sampling() = request_.sampling;
  *request.mutable_prefill_attention() = request_.prefill_attention;
  *request.mutable_decode_attention() = request_.decode_attention;
  *request.mutable_speculation() = request_.speculation;
  request.set_max_tokens(request_.max_tokens);
  request.mutable_stop_token_ids()->Add(request_.stop_token_ids.begin(),
                                        request_.stop_token_ids.end());
  request.set_ignore_eos(request_.ignore_eos);
  if (request_.top_logprobs.has_value()) request.set_top_logprobs(*request_.top_logprobs);
  return request;
}

void GenerateCall::StartReserveLocked(int decode_idx, int prefill_idx, Actions& actions) {
  v1::ReserveKvRequest request;
  request.set_request_id(request_.request_id);
  request.mutable_prompt_ids()->Add(request_.prompt_ids.begin(), request_.prompt_ids.end());
  WorkerRegistry& registry = *resources_->registry;
  StartUnaryLocked<v1::ReserveKvRequest, v1::ReserveKvResponse>(
      std::move(request), CallTimeout(resources_->options->unary_timeout),
      [&registry, decode_idx](auto* c, auto* q, auto* r, auto cb) {
        registry.decode_stub(decode_idx).async()->ReserveKv(c, q, r, std::move(cb));
      },
      [this, decode_idx, prefill_idx](const grpc::Status& s, const v1::ReserveKvResponse& r) {
        OnReserveDone(decode_idx, prefill_idx, s, r);
      },
      actions);
  // Never cancelled: a cancelled call could leave a reservation made on the worker whose id never
  // reaches us (held until its lease ends); OnReserveDone releases it once concluded.
  unary_calls_.back()->cancel_on_conclude = false;
}

void GenerateCall::OnReserveDone(int decode_idx, int prefill_idx, const grpc::Status& status,
                                 const v1::ReserveKvResponse& response) {
  Actions actions;
  {
    absl::MutexLock lock(&mu_);
    if (status.ok()) {
      reservation_id_ = response.reservation().reservation_id();
      reservation_decode_idx_ = decode_idx;
    }
    if (concluded_) {
      ReleaseReservationLocked(actions);
    } else if (!status.ok()) {
      const std::string& address = resources_->registry->address(WorkerRole::kDecode, decode_idx);
      if (status.error_code() == grpc::StatusCode::UNAVAILABLE) {
        DecodeFailedLocked(decode_idx, status, actions);  // no token yet: a retry elsewhere
      } else {
        SS_LOG_WARNING("request {}: ReserveKv on {} failed ({}); prefilling locally",
                       request_.request_id, address, status.error_message());
        StartDecodeLocked(decode_idx, LocalDecodeRequestLocked(), actions);
      }
    } else {
      cached_prompt_tokens_ = response.cached_tokens();
      v1::PrefillRequest request;
      request.set_request_id(request_.request_id);
      request.mutable_prompt_ids()->Add(request_.prompt_ids.begin(), request_.prompt_ids.end());
      *request.mutable_reservation() = response.reservation();
      *request.mutable_sampling() = request_.sampling;
      *request.mutable_prefill_attention() = request_.prefill_attention;
      *request.mutable_decode_attention() = request_.decode_attention;
      *request.mutable_speculation() = request_.speculation;
      if (request_.top_logprobs.has_value()) request.set_top_logprobs(*request_.top_logprobs);
      prefill_idx_ = prefill_idx;
      ++num_prefill_attempts_;
      WorkerRegistry& registry = *resources_->registry;
      // The prefill worker stops PUTting at its call's deadline; end that well inside the
      // reservation's lease, after which the decode worker reuses the blocks (90%: the rest
      // covers the ReserveKv answer's trip here and PUTs still in flight).
      absl::Duration prefill_timeout = resources_->options->unary_timeout;
      if (response.reservation().lease_seconds() > 0) {
        prefill_timeout =
            std::min(prefill_timeout, absl::Seconds(0.9 * response.reservation().lease_seconds()));
      }
      StartUnaryLocked<v1::PrefillRequest, v1::PrefillResponse>(
          std::move(request), CallTimeout(prefill_timeout),
          [&registry, prefill_idx](auto* c, auto* q, auto* r, auto cb) {
            registry.prefill_stub(prefill_idx).async()->Prefill(c, q, r, std::move(cb));
          },
          [this, decode_idx, prefill_idx](const grpc::Status& s, const v1::PrefillResponse& r) {
            OnPrefillDone(decode_idx, prefill_idx, s, r);
          },
          actions);
      // Not cancelled when the request ends: the prefill worker gets an Abort instead, and its
      // answer to this call is the confirmation that no PUT into the reservation can still land
      // (it closes its KV session first), after which OnPrefillDone releases the reservation.
      unary_calls_.back()->cancel_on_conclude = false;
    }
  }
  Run(actions);
}

void GenerateCall::OnPrefillDone(int decode_idx, int prefill_idx, const grpc::Status& status,
                                 const v1::PrefillResponse& response) {
  Actions actions;
  {
    absl::MutexLock lock(&mu_);
    prefill_idx_ = -1;
    if (concluded_) {
      ReleaseReservationLocked(actions);
    } else if (!status.ok()) {
      PrefillFailedLocked(decode_idx, prefill_idx, status, actions);
    } else {
      disaggregated_ = true;
      prefill_density_ = response.attention_density();
      const int32_t first = response.first_token();
      const v1::TokenLogprobs* first_logprobs = &response.first_token_logprobs();
      RelayTokensLocked(&first, 1, request_.top_logprobs.has_value() ? &first_logprobs : nullptr,
                        actions);
      if (concluded_) {  // a stop string
        ReleaseReservationLocked(actions);
      } else if (EndsGenerationLocked(first) || request_.max_tokens <= 1) {
        ReleaseReservationLocked(actions);
        ConcludeLocked({.reason = EndsGenerationLocked(first) ? v1::FINISH_REASON_STOP
                                                              : v1::FINISH_REASON_LENGTH},
                       actions);
      } else {
        v1::DecodeRequest request = LocalDecodeRequestLocked();
        request.set_reservation_id(reservation_id_);  // kept until the stream's first answer
        request.set_first_token(first);
        request.set_max_tokens(request_.max_tokens - 1);
        StartDecodeLocked(decode_idx, std::move(request), actions);
      }
    }
  }
  Run(actions);
}

void GenerateCall::PrefillFailedLocked(int decode_idx, int prefill_idx, const grpc::Status& status,
                                       Actions& actions) {
  const std::string& address = resources_->registry->address(WorkerRole::kPrefill, prefill_idx);
  SS_LOG_WARNING("request {}: prefill on {} failed: {}", request_.request_id, address,
                 status.error_message());
  if (status.error_code() == grpc::StatusCode::UNAVAILABLE) {
    resources_->registry->MarkUnhealthy(WorkerRole::kPrefill, prefill_idx, status.error_message());
  }
  ReleaseReservationLocked(actions);
  excluded_prefill_.insert(prefill_idx);
  std::optional<int> next;
  if (num_prefill_attempts_ < resources_->options->max_prefill_attempts &&
      resources_->registry->healthy(WorkerRole::kDecode, decode_idx)) {
    std::vector<PrefillCandidate> prefill = resources_->registry->PrefillCandidates();
    for (int idx : excluded_prefill_) prefill[idx].healthy = false;
    next = ChoosePrefillWorker(prefill);
  }
  if (next.has_value()) {
    StartReserveLocked(decode_idx, *next, actions);
  } else {
    StartDecodeLocked(decode_idx, LocalDecodeRequestLocked(), actions);  // local prefill
  }
}

void GenerateCall::StartDecodeLocked(int decode_idx, v1::DecodeRequest request, Actions& actions) {
  auto stream = std::make_unique<DecodeStream>(this, decode_idx, std::move(request),
                                               CallTimeout(resources_->options->decode_timeout));
  active_stream_ = stream.get();
  streams_.push_back(std::move(stream));
  Ref();  // released by OnDecodeDone
  actions.push_back([stream = active_stream_, stub = &resources_->registry->decode_stub(
                                                  decode_idx)] { stream->Start(*stub); });
}

void GenerateCall::DecodeFailedLocked(int decode_idx, const grpc::Status& status,
                                      Actions& actions) {
  ReleaseReservationLocked(actions);  // one the failed stream carried, taken or not
  WorkerRegistry& registry = *resources_->registry;
  const std::string& address = registry.address(WorkerRole::kDecode, decode_idx);
  const std::string what = absl::StrCat("decode worker ", address, ": ", status.error_message());
  if (!IsMigratable(status.error_code())) {
    ConcludeLocked({.status = AnnotateStatus(rpc::FromGrpcStatus(status),
                                             absl::StrCat("decode worker ", address))},
                   actions);
    return;
  }
  if (status.error_code() == grpc::StatusCode::UNAVAILABLE) {
    registry.MarkUnhealthy(WorkerRole::kDecode, decode_idx, status.error_message());
  } else {
    AbortOnWorkerLocked(WorkerRole::kDecode, decode_idx, actions);  // it may still hold it
  }
  excluded_decode_.insert(decode_idx);
  const RouterOptions& options = *resources_->options;
  if (generated_.empty()) {  // nothing relayed yet: a plain retry elsewhere
    if (num_retries_ >= options.max_retries) {
      ConcludeLocked({.status = absl::UnavailableError(
                          absl::StrCat(what, " (gave up after ", num_retries_, " retries)"))},
                     actions);
      return;
    }
    ++num_retries_;
    SS_LOG_WARNING("request {}: {}; retrying on another worker", request_.request_id, what);
    RouteLocked(actions);
    return;
  }
  // Migration: re-prefill prompt + tokens so far on another worker (always a local prefill).
  const int remaining = request_.max_tokens - static_cast<int>(generated_.size());
  if (remaining <= 0) {
    ConcludeLocked({.reason = v1::FINISH_REASON_LENGTH}, actions);
    return;
  }
  if (num_migrations_ >= options.migration_limit) {
    ConcludeLocked({.status = absl::UnavailableError(absl::StrCat(
                        what, " (migration limit ", options.migration_limit, " reached)"))},
                   actions);
    return;
  }
  v1::DecodeRequest request = LocalDecodeRequestLocked();
  request.mutable_prompt_ids()->Add(generated_.begin(), generated_.end());
  request.set_num_generated_before(static_cast<int32_t>(generated_.size()));
  request.set_max_tokens(remaining);
  std::vector<DecodeCandidate> decode = registry.DecodeCandidates(
      absl::MakeConstSpan(request.prompt_ids().data(), request.prompt_ids_size()));
  for (int idx : excluded_decode_) decode[idx].healthy = false;
  const std::optional<int> target =
      ChooseDecodeWorker(decode, request.prompt_ids_size(), RoutingConfigOf(options));
  if (!target.has_value()) {
    ConcludeLocked({.status = absl::UnavailableError(absl::StrCat(
                        what, "; no other healthy decode worker to migrate the request to"))},
                   actions);
    return;
  }
  ++num_migrations_;
  resources_->metrics->request_migrations().Increment();
  SS_LOG_WARNING("request {}: {}; migrating to {} after {} tokens", request_.request_id, what,
                 registry.address(WorkerRole::kDecode, *target), generated_.size());
  StartDecodeLocked(*target, std::move(request), actions);
}

}  // namespace sparseserve::router
