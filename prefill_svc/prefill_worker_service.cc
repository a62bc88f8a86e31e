#include "prefill_svc/prefill_worker_service.h"

#include "absl/strings/str_cat.h"
#include "common/core/status.h"
#include "common/rpc/request_conversion.h"
#include "common/rpc/status_conversion.h"
#include "common/rpc/worker_conversion.h"
#include "kernels/sampling_plan.h"

namespace sparseserve::prefill {
namespace {

absl::StatusOr<PrefillTarget> TargetFromProto(const v1::KvReservation& r) {
  PrefillTarget t;
  t.pool.worker_address = r.ucx_worker_address();
  t.pool.layer_rkeys.assign(r.layer_rkeys().begin(), r.layer_rkeys().end());
  t.pool.layer_base_addresses.assign(r.layer_base_addresses().begin(),
                                     r.layer_base_addresses().end());
  t.pool.memory = r.gpu_memory() ? transfer::KvMemoryKind::kCuda : transfer::KvMemoryKind::kHost;
  SS_ASSIGN_OR_RETURN(t.layout, rpc::KvLayoutFromProto(r.layout()));
  t.pool.block_bytes = static_cast<uint64_t>(t.layout.bytes_per_block_per_layer());
  t.remote_blocks.assign(r.block_ids().begin(), r.block_ids().end());
  t.first_block = r.first_block_index();
  return t;
}

}  // namespace

PrefillWorkerService::PrefillWorkerService(PrefillEngine* engine, engine::ModelRunner* runner,
                                           metrics::ServingMetrics* metrics, std::string model,
                                           engine::RequestOptions request_defaults)
    : engine_(engine),
      runner_(runner),
      metrics_(metrics),
      model_(std::move(model)),
      request_defaults_(std::move(request_defaults)) {}

grpc::ServerUnaryReactor* PrefillWorkerService::Prefill(grpc::CallbackServerContext* context,
                                                        const v1::PrefillRequest* request,
                                                        v1::PrefillResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  PrefillTask task;
  task.request_id = request->request_id();
  task.prompt.assign(request->prompt_ids().begin(), request->prompt_ids().end());
  task.sampling = rpc::SamplingFromProto(request->sampling());
  task.deadline = absl::FromChrono(context->deadline());
  if (absl::Status s = sampling::Validate(task.sampling); !s.ok() || task.prompt.empty()) {
    reactor->Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                 s.ok() ? "empty prompt" : std::string(s.message())));
    return reactor;
  }
  absl::StatusOr<engine::RequestOptions> options =
      rpc::RequestOptionsFromProto(request->prefill_attention(), request->decode_attention(),
                                   request->speculation(), request_defaults_);
  if (!options.ok()) {
    reactor->Finish(rpc::ToGrpcStatus(options.status()));
    return reactor;
  }
  task.options = *std::move(options);
  if (request->has_top_logprobs()) {
    if (request->top_logprobs() < 0 || request->top_logprobs() > kernels::kMaxTopLogprobs) {
      reactor->Finish(
          grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "top_logprobs out of range"));
      return reactor;
    }
    task.top_logprobs = request->top_logprobs();
  }
  for (int32_t t : task.prompt) {
    if (t < 0 || t >= runner_->config().vocab_size) {
      reactor->Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "token id out of range"));
      return reactor;
    }
  }
  if (request->has_reservation()) {
    absl::StatusOr<PrefillTarget> target = TargetFromProto(request->reservation());
    if (!target.ok()) {
      reactor->Finish(rpc::ToGrpcStatus(target.status()));
      return reactor;
    }
    task.target = std::move(*target);
  }
  metrics::ServingMetrics* metrics = metrics_;
  absl::Status submitted = engine_->Submit(
      std::move(task), [reactor, response, metrics](absl::StatusOr<PrefillResult> result) {
        if (!result.ok()) {
          metrics->kv_transfer_failures().Increment();
          reactor->Finish(rpc::ToGrpcStatus(result.status()));
          return;
        }
        response->set_first_token(result->first_token);
        if (result->first_token_logprobs.has_value()) {
          rpc::TokenLogprobsToProto(*result->first_token_logprobs,
                                    response->mutable_first_token_logprobs());
        }
        response->set_computed_tokens(result->computed_tokens);
        response->set_cached_tokens(result->cached_tokens);
        response->set_transferred_bytes(static_cast<uint64_t>(result->transferred_bytes));
        response->set_prefill_seconds(result->prefill_seconds);
        response->set_transfer_seconds(result->transfer_seconds);
        response->set_attention_density(result->attention_density);
        if (result->attention_density < 1.0) {
          metrics->sparse_attention_density_prefill().Set(result->attention_density);
        }
        if (result->transferred_bytes > 0) {
          metrics->kv_transfer_bytes().Increment(static_cast<double>(result->transferred_bytes));
          metrics->kv_transfer_time().Observe(result->transfer_seconds);
        }
        if (result->staged) metrics->kv_staging_copy_time().Observe(result->staging_copy_seconds);
        metrics->ttft().Observe(result->prefill_seconds);
        metrics->prompt_tokens().Increment(result->computed_tokens + result->cached_tokens);
        reactor->Finish(grpc::Status::OK);
      });
  if (!submitted.ok()) reactor->Finish(rpc::ToGrpcStatus(submitted));
  return reactor;
}

grpc::ServerUnaryReactor* PrefillWorkerService::Abort(grpc::CallbackServerContext* context,
                                                      const v1::WorkerAbortRequest* request,
                                                      v1::WorkerAbortResponse* response) {
  response->set_found(engine_->Abort(request->request_id()));
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* PrefillWorkerService::Status(grpc::CallbackServerContext* context,
                                                       const v1::WorkerStatusRequest* /*request*/,
                                                       v1::WorkerStatusResponse* response) {
  response->set_role("prefill");
  const PrefillEngineStats stats = engine_->stats();
  response->set_num_waiting(stats.num_waiting);
  response->set_num_running(stats.num_running);
  response->set_num_free_blocks(runner_->pool().num_free_blocks());
  response->set_num_total_blocks(runner_->pool().num_blocks());
  *response->mutable_layout() = rpc::KvLayoutOf(*runner_);
  response->set_model(model_);
  response->set_max_context(runner_->max_context());
  response->set_vocab_size(runner_->config().vocab_size);
  response->set_architecture(std::string(model::ModelArchName(runner_->config().arch)));
  response->set_num_layers(runner_->config().num_layers);
  metrics_->num_requests_waiting().Set(stats.num_waiting);
  metrics_->num_requests_running().Set(stats.num_running);
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

}  // namespace sparseserve::prefill
