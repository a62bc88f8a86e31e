// GenerationService: the public sparseserve.v1.Generation gRPC service of the router, on the
// callback API. Generate creates one GenerateCall reactor per call; Abort and GetModelInfo answer
// from the RequestTable and the WorkerRegistry without blocking.
//
// With API keys (RouterOptions::api_keys) every call needs metadata "authorization: Bearer KEY",
// else UNAUTHENTICATED.
// The CallResources are borrowed from the Router, which outlives the service and every call.
// Thread-safe (gRPC calls the handlers concurrently).
#ifndef SPARSESERVE_ROUTER_GENERATION_SERVICE_H_
#define SPARSESERVE_ROUTER_GENERATION_SERVICE_H_

#include "router/generate_call.h"
#include "sparseserve/v1/generation.grpc.pb.h"

namespace sparseserve::router {

class GenerationService final : public v1::Generation::CallbackService {
 public:
  explicit GenerationService(CallResources* resources) : resources_(resources) {}

  GenerationService(const GenerationService&) = delete;
  GenerationService& operator=(const GenerationService&) = delete;

  // Streams the request's tokens; errors: INVALID_ARGUMENT (malformed request), ALREADY_EXISTS
  // (request id in flight), UNAVAILABLE (no healthy decode worker, or the request's worker died
  // and it could not be migrated), other worker errors as the worker returned them.
  grpc::ServerWriteReactor<v1::GenerateResponse>* Generate(
      grpc::CallbackServerContext* context, const v1::GenerateRequest* request) override;

  // NOT_FOUND when no request with that id is in flight; otherwise the request ends with
  // FINISH_REASON_ABORTED and every worker holding it is told to abort it.
  grpc::ServerUnaryReactor* Abort(grpc::CallbackServerContext* context,
                                  const v1::AbortRequest* request,
                                  v1::AbortResponse* response) override;

  // The model as reported by a healthy worker; UNAVAILABLE when no worker is healthy.
  grpc::ServerUnaryReactor* GetModelInfo(grpc::CallbackServerContext* context,
                                         const v1::GetModelInfoRequest* request,
                                         v1::GetModelInfoResponse* response) override;

 private:
  // Whether the call carries an accepted API key (RouterOptions::api_keys; none = all are).
  bool Authorized(const grpc::CallbackServerContext* context) const;

  CallResources* const resources_;
};

}  // namespace sparseserve::router

#endif  // SPARSESERVE_ROUTER_GENERATION_SERVICE_H_
