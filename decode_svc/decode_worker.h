// DecodeWorker: one decode worker process's parts, assembled — model, KV cache, scheduler,
// KV reservations with lease expiry, UCX target for prefill workers' PUTs, metrics endpoint and
// the gRPC server. `sparseserve decode` is a thin main around it; tests start it in-process.
// Thread-safe; Shutdown drains (health NOT_SERVING, in-flight calls get `drain` to finish).
#ifndef SPARSESERVE_DECODE_SVC_DECODE_WORKER_H_
#define SPARSESERVE_DECODE_SVC_DECODE_WORKER_H_

#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/engine/model_runner.h"
#include "common/engine/model_source.h"
#include "common/engine/request_options.h"
#include "common/metrics/metrics_exporter.h"
#include "common/metrics/serving_metrics.h"
#include "common/rpc/server_runner.h"
#include "common/transfer/kv_staging_mode.h"
#include "common/transfer/kv_transfer_target.h"
#include "decode_svc/decode_scheduler.h"
#include "decode_svc/decode_worker_service.h"
#include "decode_svc/kv_reservation_table.h"
#include "decode_svc/kv_staging_area.h"
#include "grpcpp/security/server_credentials.h"
#include "kernels/backend.h"

namespace sparseserve::decode {

struct DecodeWorkerOptions {
  std::string model_path;                       // .gguf file or Hugging Face directory
  std::string address = "127.0.0.1:0";          // gRPC listen address (port 0 = any free port)
  std::string metrics_address = "127.0.0.1:0";  // Prometheus /metrics listen address
  // Credentials of the gRPC port (rpc/tls_credentials.h); null = plain.
  std::shared_ptr<grpc::ServerCredentials> credentials;
  Device device = Device::kHost;
  engine::ModelRunnerOptions runner;
  DecodeSchedulerOptions scheduler;             // eos_ids are filled from the tokenizer
  absl::Duration kv_lease = absl::Seconds(60);  // unused reservations return after this
  bool enable_kv_transfer = true;               // accept prefill workers' KV PUTs over UCX
  // Whether prefill workers PUT into a host staging area (copied into the KV pool when the
  // decode job adopts the KV) instead of into the KV pool itself. kAuto stages exactly when the
  // KV pool is not in host memory, which the UCX here cannot reach.
  transfer::KvStagingMode kv_staging = transfer::KvStagingMode::kAuto;
  // Host memory for the staging area, all layers together; bounds the KV of reserved prompts
  // not yet adopted (a reservation that does not fit fails RESOURCE_EXHAUSTED and the router
  // prefills locally). Rounded down to whole blocks and capped at the KV pool's block count.
  // Default 2 GiB.
  size_t kv_staging_bytes = size_t{2} << 30;
  // The attention and speculation methods of requests that leave them unset (the
  // --attention / --spec flags); valid and implemented (checked by the caller).
  engine::RequestOptions request_defaults;
};

class DecodeWorker {
 public:
  // Loads the model and starts serving. Errors of model loading, UCX set-up (kUnavailable) and
  // binding (kUnavailable naming the address).
  static absl::StatusOr<std::unique_ptr<DecodeWorker>> Start(const DecodeWorkerOptions& options);
  ~DecodeWorker();
  DecodeWorker(const DecodeWorker&) = delete;
  DecodeWorker& operator=(const DecodeWorker&) = delete;

  int port() const { return server_->port(); }
  int metrics_port() const { return exporter_->port(); }
  const engine::ModelRunner& runner() const { return *runner_; }

  // Stops accepting work and waits up to `drain` for in-flight calls, then stops.
  void Shutdown(absl::Duration drain);

 private:
  DecodeWorker() = default;
  void ExpiryLoop();

  // Destruction order matters: the server goes first (no more calls), then the scheduler
  // (engine thread) and the reservations (their staging leases), then the staging area, the KV
  // transport (which owns the staging memory), runner and backend.
  engine::ModelSource source_;
  std::unique_ptr<kernels::Backend> backend_;
  std::unique_ptr<engine::ModelRunner> runner_;
  std::unique_ptr<transfer::KvTransferTarget> kv_target_;
  std::unique_ptr<KvStagingArea> staging_;  // null unless KV is staged in host memory
  std::unique_ptr<metrics::MetricsExporter> exporter_;
  std::unique_ptr<metrics::ServingMetrics> metrics_;
  std::unique_ptr<KvReservationTable> reservations_;
  std::unique_ptr<DecodeScheduler> scheduler_;
  std::unique_ptr<DecodeWorkerService> service_;
  std::unique_ptr<rpc::RpcServer> server_;
  absl::Notification stop_expiry_;
  std::thread expiry_;  // returns expired reservations once a second (owned, joined)
};

}  // namespace sparseserve::decode

#endif  // SPARSESERVE_DECODE_SVC_DECODE_WORKER_H_
