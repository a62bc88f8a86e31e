// PrefillWorkerService: sparseserve.v1.PrefillWorker over a PrefillEngine. Prefill is a unary
// reactor finished from the engine thread; Abort drops queued work; Status reports load.
// Thread-safe; borrows its engine, runner and metrics (the PrefillWorker owns them).
#ifndef SPARSESERVE_PREFILL_SVC_PREFILL_WORKER_SERVICE_H_
#define SPARSESERVE_PREFILL_SVC_PREFILL_WORKER_SERVICE_H_

#include <string>

#include "common/engine/model_runner.h"
#include "common/engine/request_options.h"
#include "common/metrics/serving_metrics.h"
#include "prefill_svc/prefill_engine.h"
#include "sparseserve/v1/worker.grpc.pb.h"

namespace sparseserve::prefill {

class PrefillWorkerService final : public v1::PrefillWorker::CallbackService {
 public:
  // `request_defaults`: what a Prefill request leaves unset of its attention and speculation
  // choices takes these (the worker's flags).
  PrefillWorkerService(PrefillEngine* engine, engine::ModelRunner* runner,
                       metrics::ServingMetrics* metrics, std::string model,
                       engine::RequestOptions request_defaults);

  grpc::ServerUnaryReactor* Prefill(grpc::CallbackServerContext* context,
                                    const v1::PrefillRequest* request,
                                    v1::PrefillResponse* response) override;
  grpc::ServerUnaryReactor* Abort(grpc::CallbackServerContext* context,
                                  const v1::WorkerAbortRequest* request,
                                  v1::WorkerAbortResponse* response) override;
  grpc::ServerUnaryReactor* Status(grpc::CallbackServerContext* context,
                                   const v1::WorkerStatusRequest* request,
                                   v1::WorkerStatusResponse* response) override;

 private:
  PrefillEngine* engine_;
  engine::ModelRunner* runner_;
  metrics::ServingMetrics* metrics_;
  const std::string model_;
  const engine::RequestOptions request_defaults_;
};

}  // namespace sparseserve::prefill

#endif  // SPARSESERVE_PREFILL_SVC_PREFILL_WORKER_SERVICE_H_
