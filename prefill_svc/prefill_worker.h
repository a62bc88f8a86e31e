// PrefillWorker: one prefill worker process's parts — model, KV cache with prefix cache, UCX
// source registered over the KV pools, PrefillEngine, metrics endpoint and the gRPC service
// (sparseserve.v1.PrefillWorker). `sparseserve prefill` is a thin main around it.
// Thread-safe; the gRPC reactions only queue work for the engine thread.
#ifndef SPARSESERVE_PREFILL_SVC_PREFILL_WORKER_H_
#define SPARSESERVE_PREFILL_SVC_PREFILL_WORKER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/engine/model_runner.h"
#include "common/engine/model_source.h"
#include "common/engine/request_options.h"
#include "common/metrics/metrics_exporter.h"
#include "common/metrics/serving_metrics.h"
#include "common/rpc/server_runner.h"
#include "common/transfer/kv_staging_mode.h"
#include "common/transfer/kv_transfer_source.h"
#include "grpcpp/security/server_credentials.h"
#include "kernels/backend.h"
#include "prefill_svc/kv_staging_ring.h"
#include "prefill_svc/prefill_engine.h"
#include "sparseserve/v1/worker.grpc.pb.h"

namespace sparseserve::prefill {

struct PrefillWorkerOptions {
  std::string model_path;
  std::string address = "127.0.0.1:0";
  std::string metrics_address = "127.0.0.1:0";
  // Credentials of the gRPC port (rpc/tls_credentials.h); null = plain.
  std::shared_ptr<grpc::ServerCredentials> credentials;
  Device device = Device::kHost;
  engine::ModelRunnerOptions runner;
  int max_queued = 256;  // queued prefills beyond this: RESOURCE_EXHAUSTED
  // Prompts prefilled at once at most, their chunks batched into shared engine steps under
  // runner.max_step_tokens (--max-step-tokens) and runner.prefill_chunk_tokens (--prefill-chunk).
  int max_running = 64;
  bool enable_kv_transfer = true;  // PUT KV into decode workers over UCX
  // Whether KV is copied into a host staging ring and PUT from there instead of straight from
  // the KV cache. kAuto stages exactly when the KV cache is not in host memory, which the UCX
  // here cannot reach.
  transfer::KvStagingMode kv_staging = transfer::KvStagingMode::kAuto;
  // Host memory for the staging ring: bounds how much KV is in flight between flushes (a
  // prompt's KV larger than the ring costs one flush per wrap). Rounded down to whole
  // (layer, block) units, at least one, and capped at the whole KV pool. Default 256 MiB.
  size_t kv_staging_bytes = size_t{256} << 20;
  // Fault injection for tests: sleep this long after each layer's KV PUT (PrefillEngine).
  absl::Duration fault_put_delay = absl::ZeroDuration();
  // The attention and speculation methods of requests that leave them unset (the
  // --attention / --spec flags); valid and implemented (checked by the caller).
  engine::RequestOptions request_defaults;
};

class PrefillWorkerService;

class PrefillWorker {
 public:
  static absl::StatusOr<std::unique_ptr<PrefillWorker>> Start(const PrefillWorkerOptions& options);
  ~PrefillWorker();
  PrefillWorker(const PrefillWorker&) = delete;
  PrefillWorker& operator=(const PrefillWorker&) = delete;

  int port() const { return server_->port(); }
  int metrics_port() const { return exporter_->port(); }
  void Shutdown(absl::Duration drain);

 private:
  PrefillWorker() = default;
  // Destroyed bottom-up: server, service, engine (thread), transport, staging ring (registered
  // with the transport), runner, backend.
  engine::ModelSource source_;
  std::unique_ptr<kernels::Backend> backend_;
  std::unique_ptr<engine::ModelRunner> runner_;
  std::unique_ptr<KvStagingRing> ring_;  // null unless KV is staged in host memory
  std::unique_ptr<transfer::KvTransferSource> kv_source_;
  std::unique_ptr<metrics::MetricsExporter> exporter_;
  std::unique_ptr<metrics::ServingMetrics> metrics_;
  std::unique_ptr<PrefillEngine> engine_;
  std::unique_ptr<PrefillWorkerService> service_;
  std::unique_ptr<rpc::RpcServer> server_;
};

}  // namespace sparseserve::prefill

#endif  // SPARSESERVE_PREFILL_SVC_PREFILL_WORKER_H_
