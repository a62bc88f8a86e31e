#include "router/generation_service.h"

#include "absl/strings/str_cat.h"

namespace sparseserve::router {

grpc::ServerWriteReactor<v1::GenerateResponse>* GenerationService::Generate(
    grpc::CallbackServerContext* context, const v1::GenerateRequest* request) {
  return GenerateCall::Start(resources_, context, *request);
}

grpc::ServerUnaryReactor* GenerationService::Abort(grpc::CallbackServerContext* context,
                                                   const v1::AbortRequest* request,
                                                   v1::AbortResponse* /*response*/) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (resources_->requests->Abort(request->request_id())) {
    reactor->Finish(grpc::Status::OK);
  } else {
    reactor->Finish(grpc::Status(grpc::StatusCode::NOT_FOUND,
                                 absl::StrCat("no request ", request->request_id(), " in flight")));
  }
  return reactor;
}

grpc::ServerUnaryReactor* GenerationService::GetModelInfo(
    grpc::CallbackServerContext* context, const v1::GetModelInfoRequest* /*request*/,
    v1::GetModelInfoResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  const WorkerRegistry& registry = *resources_->registry;
  const std::optional<WorkerModelInfo> info = registry.ModelInfo();
  if (!info.has_value()) {
    reactor->Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "no healthy worker"));
    return reactor;
  }
  response->set_model(info->model);
  response->set_architecture(info->architecture);
  response->set_vocab_size(info->vocab_size);
  response->set_max_context(info->max_context);
  response->set_num_layers(info->num_layers);
  response->set_num_decode_workers(registry.NumHealthy(WorkerRole::kDecode));
  response->set_num_prefill_workers(registry.NumHealthy(WorkerRole::kPrefill));
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

}  // namespace sparseserve::router
