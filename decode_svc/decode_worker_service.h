// DecodeWorkerService: the gRPC face of a decode worker (sparseserve.v1.DecodeWorker).
//
// Decode streams a request's tokens from the DecodeScheduler to the caller through one
// ServerWriteReactor per call (one write in flight; tokens arriving meanwhile are coalesced
// into the next message). ReserveKv/Release manage KV reservations for prefill workers; Status
// reports load, free blocks and cached prefix hashes for the router. Reactions never block.
// Thread-safe; borrows everything it is given (the DecodeWorker owns them).
#ifndef SPARSESERVE_DECODE_SVC_DECODE_WORKER_SERVICE_H_
#define SPARSESERVE_DECODE_SVC_DECODE_WORKER_SERVICE_H_

#include <string>

#include "absl/synchronization/mutex.h"
#include "common/engine/model_runner.h"
#include "common/engine/request_options.h"
#include "common/metrics/serving_metrics.h"
#include "common/transfer/remote_kv_pool.h"
#include "decode_svc/decode_scheduler.h"
#include "decode_svc/kv_reservation_table.h"
#include "sparseserve/v1/worker.grpc.pb.h"

namespace sparseserve::decode {

struct DecodeWorkerInfo {
  std::string model;               // path the worker loaded
  transfer::RemoteKvPool kv_pool;  // what a prefill worker needs to PUT here (empty: no UCX)
  engine::RequestOptions request_defaults;  // what a Decode request leaves unset takes these
};

class DecodeWorkerService final : public v1::DecodeWorker::CallbackService {
 public:
  DecodeWorkerService(DecodeScheduler* scheduler, engine::ModelRunner* runner,
                      KvReservationTable* reservations, metrics::ServingMetrics* metrics,
                      DecodeWorkerInfo info);

  grpc::ServerWriteReactor<v1::DecodeResponse>* Decode(grpc::CallbackServerContext* context,
                                                       const v1::DecodeRequest* request) override;
  grpc::ServerUnaryReactor* ReserveKv(grpc::CallbackServerContext* context,
                                      const v1::ReserveKvRequest* request,
                                      v1::ReserveKvResponse* response) override;
  grpc::ServerUnaryReactor* Release(grpc::CallbackServerContext* context,
                                    const v1::ReleaseRequest* request,
                                    v1::ReleaseResponse* response) override;
  grpc::ServerUnaryReactor* Abort(grpc::CallbackServerContext* context,
                                  const v1::WorkerAbortRequest* request,
                                  v1::WorkerAbortResponse* response) override;
  grpc::ServerUnaryReactor* Status(grpc::CallbackServerContext* context,
                                   const v1::WorkerStatusRequest* request,
                                   v1::WorkerStatusResponse* response) override;

 private:
  DecodeScheduler* scheduler_;
  engine::ModelRunner* runner_;
  KvReservationTable* reservations_;
  metrics::ServingMetrics* metrics_;
  const DecodeWorkerInfo info_;

  // Moves the pool's cumulative prefix-cache counters into the Prometheus counters.
  void RecordPrefixCacheStats();
  absl::Mutex stats_mu_;
  kv::PrefixCacheStats reported_ ABSL_GUARDED_BY(stats_mu_);
};

}  // namespace sparseserve::decode

#endif  // SPARSESERVE_DECODE_SVC_DECODE_WORKER_SERVICE_H_
