#include "router/generation_service.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "router/api_keys.h"

namespace sparseserve::router {
namespace {

// A Generate call refused before it starts (no or a wrong API key).
class RefusedGenerate final : public grpc::ServerWriteReactor<v1::GenerateResponse> {
 public:
  explicit RefusedGenerate(const grpc::Status& status) { Finish(status); }
  void OnDone() override { delete this; }
};

const grpc::Status& Unauthenticated() {
  static const grpc::Status* status =
      new grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                       "missing or invalid API key (send metadata authorization: Bearer KEY)");
  return *status;
}

}  // namespace

bool GenerationService::Authorized(const grpc::CallbackServerContext* context) const {
  const std::vector<std::string>& keys = resources_->options->api_keys;
  if (keys.empty()) return true;
  const auto& metadata = context->client_metadata();
  const auto it = metadata.find("authorization");
  return it != metadata.end() &&
         AuthorizationAccepted(absl::string_view(it->second.data(), it->second.size()), keys);
}

grpc::ServerWriteReactor<v1::GenerateResponse>* GenerationService::Generate(
    grpc::CallbackServerContext* context, const v1::GenerateRequest* request) {
  if (!Authorized(context)) return new RefusedGenerate(Unauthenticated());
  return GenerateCall::Start(resources_, context, *request);
}

grpc::ServerUnaryReactor* GenerationService::Abort(grpc::CallbackServerContext* context,
                                                   const v1::AbortRequest* request,
                                                   v1::AbortResponse* /*response*/) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (!Authorized(context)) {
    reactor->Finish(Unauthenticated());
    return reactor;
  }
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
  if (!Authorized(context)) {
    reactor->Finish(Unauthenticated());
    return reactor;
  }
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
