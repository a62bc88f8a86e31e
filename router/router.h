// Router: the front door of sparseserve, assembled — the model's tokenizer, the worker registry
// (with its health loop), the router's ServingMetrics (role "router") and the public Generation
// service. `sparseserve router` (tools/) serves service() with an rpc::RpcServer.
//
// Ownership: the Router owns everything the service and its in-flight calls borrow, so it must
// outlive the gRPC server serving service(). Thread-safe: service() may be served by any number
// of gRPC threads; Shutdown may be called from any thread.
#ifndef SPARSESERVE_ROUTER_ROUTER_H_
#define SPARSESERVE_ROUTER_ROUTER_H_

#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/metrics/serving_metrics.h"
#include "common/rpc/channel_cache.h"
#include "common/tokenizer/tokenizer.h"
#include "grpcpp/impl/service_type.h"
#include "router/generation_service.h"
#include "router/request_table.h"
#include "router/router_options.h"
#include "router/worker_registry.h"

namespace sparseserve::router {

class Router {
 public:
  // Loads the tokenizer and config of options.model_path, registers the metrics, connects to the
  // workers and polls them once, then starts the health loop. Returns kInvalidArgument for no
  // model path, no decode worker or a negative limit; the model's errors (kNotFound,
  // kInvalidArgument, kUnimplemented) annotated with the path; kAlreadyExists when the metrics
  // registry holds clashing families. Workers that do not answer yet are not an error (they
  // become healthy when they do).
  static absl::StatusOr<std::unique_ptr<Router>> Create(RouterOptions options);

  Router(const Router&) = delete;
  Router& operator=(const Router&) = delete;
  ~Router();  // Shutdown()

  // The sparseserve.v1.Generation service to register on the server; owned by the Router.
  grpc::Service* service() { return service_.get(); }

  WorkerRegistry& registry() { return *registry_; }
  // The model's tokenizer and limits (the HTTP front door tokenizes chat prompts with them).
  const tokenizer::Tokenizer& tokenizer() const { return *tokenizer_; }
  const PrepareLimits& limits() const { return resources_.limits; }
  metrics::ServingMetrics& metrics() { return *metrics_; }

  // Aborts every in-flight request, waits (up to 10 s) for their calls to end, and stops the
  // health loop. Idempotent.
  // REQUIRES: the gRPC server serving service() has stopped accepting calls (RpcServer::Shutdown),
  // so that no new call starts meanwhile.
  void Shutdown() ABSL_LOCKS_EXCLUDED(shutdown_mu_);

 private:
  explicit Router(RouterOptions options);

  const RouterOptions options_;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer_;
  std::unique_ptr<metrics::ServingMetrics> metrics_;
  std::unique_ptr<rpc::ChannelCache> channels_;
  std::unique_ptr<WorkerRegistry> registry_;
  RequestTable requests_;
  CallResources resources_;
  std::unique_ptr<GenerationService> service_;

  absl::Mutex shutdown_mu_;
  bool shut_down_ ABSL_GUARDED_BY(shutdown_mu_) = false;
};

}  // namespace sparseserve::router

#endif  // SPARSESERVE_ROUTER_ROUTER_H_
