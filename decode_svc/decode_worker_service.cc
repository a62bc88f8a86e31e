#include "decode_svc/decode_worker_service.h"

#include <deque>
#include <memory>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/core/logging.h"
#include "common/rpc/finish_label.h"
#include "common/rpc/request_conversion.h"
#include "common/rpc/status_conversion.h"
#include "common/rpc/worker_conversion.h"

namespace sparseserve::decode {

namespace {

// One Decode call. The scheduler's engine thread pushes tokens through the Sink (a separate,
// co-owned object, so a late token after the client left touches no freed reactor); gRPC's
// threads drive the writes. State shared by both sides is under `mu`.
class DecodeStream final : public grpc::ServerWriteReactor<v1::DecodeResponse> {
 public:
  struct Shared {
    absl::Mutex mu;
    DecodeStream* stream ABSL_GUARDED_BY(mu);  // null once OnDone ran
    std::vector<int32_t> pending ABSL_GUARDED_BY(mu);
    // One per pending token when the request asked for logprobs; empty otherwise.
    std::vector<model::TokenLogprobs> pending_logprobs ABSL_GUARDED_BY(mu);
    bool started ABSL_GUARDED_BY(mu) = false;
    int cached_tokens ABSL_GUARDED_BY(mu) = 0;
    double queue_seconds ABSL_GUARDED_BY(mu) = 0;
    double prefill_density ABSL_GUARDED_BY(mu) = 1.0;
    DecodeWork work ABSL_GUARDED_BY(mu);  // set with `finished`
    bool finished ABSL_GUARDED_BY(mu) = false;
    absl::Status status ABSL_GUARDED_BY(mu);
    engine::FinishReason reason ABSL_GUARDED_BY(mu) = engine::FinishReason::kLength;
    bool write_in_flight ABSL_GUARDED_BY(mu) = false;
    bool sent_first ABSL_GUARDED_BY(mu) = false;
    bool finish_called ABSL_GUARDED_BY(mu) = false;
  };

  class Sink final : public DecodeSink {
   public:
    Sink(std::shared_ptr<Shared> shared, metrics::ServingMetrics* metrics)
        : shared_(std::move(shared)), metrics_(metrics), start_(absl::Now()) {}
    void OnStart(int cached, double queue_seconds, double prefill_density) override {
      metrics_->request_queue_time().Observe(queue_seconds);
      if (prefill_density < 1.0) metrics_->sparse_attention_density_prefill().Set(prefill_density);
      absl::MutexLock lock(&shared_->mu);
      shared_->started = true;
      shared_->cached_tokens = cached;
      shared_->queue_seconds = queue_seconds;
      shared_->prefill_density = prefill_density;
    }
    void OnToken(int32_t token, const model::TokenLogprobs* logprobs) override {
      const absl::Time now = absl::Now();
      if (num_tokens_++ == 0) {
        metrics_->ttft().Observe(absl::ToDoubleSeconds(now - start_));
      } else {
        metrics_->inter_token_latency().Observe(absl::ToDoubleSeconds(now - last_token_));
      }
      last_token_ = now;
      metrics_->generated_tokens().Increment();
      DecodeStream* to_write = nullptr;
      {
        absl::MutexLock lock(&shared_->mu);
        shared_->pending.push_back(token);
        if (logprobs != nullptr) shared_->pending_logprobs.push_back(*logprobs);
        to_write = shared_->stream;
      }
      if (to_write != nullptr) to_write->MaybeWrite();
    }
    void OnFinish(const absl::Status& status, engine::FinishReason reason,
                  const DecodeWork& work) override {
      metrics_->e2e_request_latency().Observe(absl::ToDoubleSeconds(absl::Now() - start_));
      if (work.selection_cache_queries > 0 || work.attention_density < 1.0) {
        metrics_->sparse_attention_density_decode().Set(work.attention_density);
      }
      metrics_
          ->requests_finished(status.ok() ? rpc::FinishReasonLabel(rpc::FinishReasonToProto(reason))
                                          : "error")
          .Increment();
      DecodeStream* to_write = nullptr;
      {
        absl::MutexLock lock(&shared_->mu);
        shared_->finished = true;
        shared_->status = status;
        shared_->reason = reason;
        shared_->work = work;
        to_write = shared_->stream;
      }
      if (to_write != nullptr) to_write->MaybeWrite();
    }

   private:
    std::shared_ptr<Shared> shared_;
    metrics::ServingMetrics* metrics_;
    const absl::Time start_;
    absl::Time last_token_;
    int num_tokens_ = 0;  // engine thread only
  };

  DecodeStream(DecodeScheduler* scheduler, std::string request_id)
      : scheduler_(scheduler),
        request_id_(std::move(request_id)),
        shared_(std::make_shared<Shared>()) {
    absl::MutexLock lock(&shared_->mu);
    shared_->stream = this;
  }

  std::shared_ptr<Shared> shared() { return shared_; }

  // Starts the next write if none is in flight and there is something to send.
  void MaybeWrite() {
    bool finish_now = false;
    grpc::Status final_status;
    {
      absl::MutexLock lock(&shared_->mu);
      if (shared_->write_in_flight || shared_->finish_called) return;
      const bool error = shared_->finished && !shared_->status.ok();
      if (error) {
        shared_->finish_called = true;
        finish_now = true;
        final_status = rpc::ToGrpcStatus(shared_->status);
      } else if (!shared_->pending.empty() || (shared_->finished && !shared_->finish_called)) {
        response_.Clear();
        for (int32_t t : shared_->pending) response_.add_token_ids(t);
        for (const model::TokenLogprobs& lp : shared_->pending_logprobs) {
          rpc::TokenLogprobsToProto(lp, response_.add_logprobs());
        }
        shared_->pending.clear();
        shared_->pending_logprobs.clear();
        if (!shared_->sent_first) {
          shared_->sent_first = true;
          response_.set_cached_prompt_tokens(shared_->cached_tokens);
          response_.set_prefill_attention_density(shared_->prefill_density);
          response_.set_queue_seconds(shared_->queue_seconds);
        }
        if (shared_->finished) {
          response_.set_finish_reason(rpc::FinishReasonToProto(shared_->reason));
          response_.set_decode_attention_density(shared_->work.attention_density);
          response_.set_selection_cache_hits(
              static_cast<int64_t>(shared_->work.selection_cache_hits));
          response_.set_selection_cache_queries(
              static_cast<int64_t>(shared_->work.selection_cache_queries));
          shared_->finish_called = true;
          last_write_ = true;
        }
        shared_->write_in_flight = true;
      } else {
        return;
      }
    }
    if (finish_now) {
      Finish(final_status);
    } else if (last_write_) {
      StartWriteAndFinish(&response_, grpc::WriteOptions(), grpc::Status::OK);
    } else {
      StartWrite(&response_);
    }
  }

  void OnWriteDone(bool ok) override {
    bool finish_cancelled = false;
    {
      absl::MutexLock lock(&shared_->mu);
      shared_->write_in_flight = false;
      if (!ok && !shared_->finish_called) {
        // The client is gone; stop generating. Finish is still owed exactly once.
        shared_->finish_called = true;
        finish_cancelled = true;
      }
    }
    if (!ok) {
      if (finish_cancelled) {
        scheduler_->Abort(request_id_);
        Finish(grpc::Status(grpc::StatusCode::CANCELLED, "write failed: client gone"));
      }
      return;
    }
    MaybeWrite();
  }

  void OnCancel() override { scheduler_->Abort(request_id_); }

  void OnDone() override {
    {
      absl::MutexLock lock(&shared_->mu);
      shared_->stream = nullptr;
    }
    delete this;
  }

  bool last_write_ = false;  // set under mu before the final write starts

 private:
  DecodeScheduler* scheduler_;
  const std::string request_id_;
  std::shared_ptr<Shared> shared_;
  v1::DecodeResponse response_;  // the message being written (one write in flight)
};

}  // namespace

DecodeWorkerService::DecodeWorkerService(DecodeScheduler* scheduler, engine::ModelRunner* runner,
                                         KvReservationTable* reservations,
                                         metrics::ServingMetrics* metrics, DecodeWorkerInfo info)
    : scheduler_(scheduler),
      runner_(runner),
      reservations_(reservations),
      metrics_(metrics),
      info_(std::move(info)) {}

grpc::ServerWriteReactor<v1::DecodeResponse>* DecodeWorkerService::Decode(
    grpc::CallbackServerContext* /*context*/, const v1::DecodeRequest* request) {
  auto* stream = new DecodeStream(scheduler_, request->request_id());
  DecodeJob job;
  job.request_id = request->request_id();
  job.prompt.assign(request->prompt_ids().begin(), request->prompt_ids().end());
  job.sampling = rpc::SamplingFromProto(request->sampling());
  job.max_tokens = request->max_tokens() > 0 ? request->max_tokens() : 256;
  job.stop_token_ids.assign(request->stop_token_ids().begin(), request->stop_token_ids().end());
  job.ignore_eos = request->ignore_eos();
  job.top_logprobs = request->has_top_logprobs() ? request->top_logprobs() : -1;
  job.sink = std::make_shared<DecodeStream::Sink>(stream->shared(), metrics_);
  // Unset choices take this worker's flags; a bad or unimplemented one ends the call (and
  // returns the reservation's blocks) before anything runs.
  absl::StatusOr<engine::RequestOptions> options =
      rpc::RequestOptionsFromProto(request->prefill_attention(), request->decode_attention(),
                                   request->speculation(), info_.request_defaults);
  if (!options.ok()) {
    if (!request->reservation_id().empty()) reservations_->Release(request->reservation_id());
    stream->Finish(rpc::ToGrpcStatus(options.status()));
    return stream;
  }
  job.options = *std::move(options);
  metrics_->prompt_tokens().Increment(static_cast<double>(job.prompt.size()));
  if (!request->reservation_id().empty()) {
    absl::StatusOr<TakenKvReservation> taken = reservations_->Take(request->reservation_id());
    if (!taken.ok()) {
      stream->Finish(rpc::ToGrpcStatus(taken.status()));
      return stream;
    }
    KvReservation& r = taken->reservation;
    if (r.num_prompt_tokens != static_cast<int>(job.prompt.size())) {
      stream->Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                  "prompt length differs from the reservation's"));
      return stream;  // the leases return the pool and staging blocks here
    }
    job.prefilled_kv = std::move(taken->blocks);
    job.first_token = request->first_token();
    job.staged_kv = std::move(taken->staging);
    job.first_staged_block = r.first_remote_block;
  }
  if (absl::Status s = scheduler_->Submit(std::move(job)); !s.ok()) {
    // The job died with Submit: its leases returned the pool and staging blocks.
    stream->Finish(rpc::ToGrpcStatus(s));
  }
  return stream;
}

grpc::ServerUnaryReactor* DecodeWorkerService::ReserveKv(grpc::CallbackServerContext* context,
                                                         const v1::ReserveKvRequest* request,
                                                         v1::ReserveKvResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (info_.kv_pool.worker_address.empty()) {
    reactor->Finish(grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                                 "this decode worker has no KV transport (UCX disabled)"));
    return reactor;
  }
  std::vector<int32_t> prompt(request->prompt_ids().begin(), request->prompt_ids().end());
  if (static_cast<int>(prompt.size()) >= runner_->max_context()) {
    reactor->Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "prompt exceeds context"));
    return reactor;
  }
  absl::StatusOr<KvReservation> r = reservations_->Reserve(prompt);
  if (!r.ok()) {
    reactor->Finish(rpc::ToGrpcStatus(r.status()));
    return reactor;
  }
  v1::KvReservation* out = response->mutable_reservation();
  out->set_reservation_id(r->id);
  *out->mutable_layout() = rpc::KvLayoutOf(*runner_);
  out->set_ucx_worker_address(info_.kv_pool.worker_address);
  for (const std::string& rkey : info_.kv_pool.layer_rkeys) out->add_layer_rkeys(rkey);
  for (uint64_t base : info_.kv_pool.layer_base_addresses) out->add_layer_base_addresses(base);
  out->set_gpu_memory(info_.kv_pool.memory == transfer::KvMemoryKind::kCuda);
  // With staging the prefill worker writes into staging blocks (what the rkeys cover): from
  // first_remote_block on the ids are those; the cached ones before are never written.
  for (int i = 0; i < static_cast<int>(r->block_ids.size()); ++i) {
    out->add_block_ids(i < r->first_remote_block || r->staging_block_ids.empty()
                           ? r->block_ids[i]
                           : r->staging_block_ids[i - r->first_remote_block]);
  }
  out->set_first_block_index(r->first_remote_block);
  out->set_lease_seconds(absl::ToDoubleSeconds(reservations_->lease()));
  response->set_cached_tokens(r->cached_tokens);
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* DecodeWorkerService::Release(grpc::CallbackServerContext* context,
                                                       const v1::ReleaseRequest* request,
                                                       v1::ReleaseResponse* /*response*/) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(reservations_->Release(request->reservation_id())
                      ? grpc::Status::OK
                      : grpc::Status(grpc::StatusCode::NOT_FOUND, "unknown reservation"));
  return reactor;
}

grpc::ServerUnaryReactor* DecodeWorkerService::Abort(grpc::CallbackServerContext* context,
                                                     const v1::WorkerAbortRequest* request,
                                                     v1::WorkerAbortResponse* response) {
  response->set_found(scheduler_->Abort(request->request_id()));
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* DecodeWorkerService::Status(grpc::CallbackServerContext* context,
                                                      const v1::WorkerStatusRequest* /*request*/,
                                                      v1::WorkerStatusResponse* response) {
  const DecodeSchedulerStats stats = scheduler_->stats();
  const kv::KvBlockPool& pool = runner_->pool();
  response->set_role("decode");
  response->set_num_running(stats.num_running);
  response->set_num_waiting(stats.num_waiting);
  response->set_num_free_blocks(pool.num_free_blocks());
  response->set_num_total_blocks(pool.num_blocks());
  if (const KvStagingArea* staging = reservations_->staging(); staging != nullptr) {
    response->set_num_free_staging_blocks(staging->num_free_blocks());
    response->set_num_total_staging_blocks(staging->num_blocks());
  }
  for (kv::BlockHash h : pool.CachedHashes()) response->add_cached_block_hashes(h);
  *response->mutable_layout() = rpc::KvLayoutOf(*runner_);
  response->set_model(info_.model);
  response->set_max_context(runner_->max_context());
  response->set_vocab_size(runner_->config().vocab_size);
  response->set_architecture(std::string(model::ModelArchName(runner_->config().arch)));
  response->set_num_layers(runner_->config().num_layers);
  metrics_->num_requests_running().Set(stats.num_running);
  metrics_->num_requests_waiting().Set(stats.num_waiting);
  metrics_->kv_cache_usage().Set(pool.usage_ratio());
  RecordPrefixCacheStats();
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

void DecodeWorkerService::RecordPrefixCacheStats() {
  const kv::PrefixCacheStats now = runner_->pool().prefix_cache_stats();
  absl::MutexLock lock(&stats_mu_);
  metrics_->prefix_cache_queries().Increment(
      static_cast<double>(now.num_queries - reported_.num_queries));
  metrics_->prefix_cache_hits().Increment(static_cast<double>(now.num_hits - reported_.num_hits));
  reported_ = now;
}

}  // namespace sparseserve::decode
