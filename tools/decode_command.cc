// `sparseserve decode`: a decode worker process.
#include <cstdio>

#include "absl/flags/flag.h"
#include "common/core/logging.h"
#include "common/core/status.h"
#include "decode_svc/decode_worker.h"
#include "tools/command.h"
#include "tools/kv_staging_flags.h"
#include "tools/model_flags.h"
#include "tools/request_options_flags.h"
#include "tools/serve_flags.h"
#include "tools/termination_signal.h"

ABSL_FLAG(int, max_running, 64,
          "Sequences in flight at once: decode streams batched into one step (decode), prompts "
          "whose chunks share engine steps (prefill).");
ABSL_FLAG(int, max_waiting, 1024, "Queued requests beyond which new ones get RESOURCE_EXHAUSTED.");
ABSL_FLAG(double, kv_lease_seconds, 60, "Unused KV reservations return their blocks after this.");
ABSL_FLAG(bool, kv_transfer, true,
          "Accept prefill workers' KV over UCX (into the KV pool, or a host staging area: "
          "--kv-staging). false: every prompt is prefilled on this worker.");

namespace sparseserve::tools {

int RunDecodeCommand(const std::vector<char*>& positional) {
  if (positional.size() > 1) {
    std::fprintf(stderr, "error: unexpected argument '%s'\n", positional[1]);
    return 2;
  }
  // Before the worker starts: SIGINT/SIGTERM then drain instead of killing the process.
  CatchTerminationSignals();
  decode::DecodeWorkerOptions options;
  options.model_path = ModelPathFromFlags();
  options.address = ListenAddressFromFlags();
  options.metrics_address = MetricsAddressFromFlags();
  absl::StatusOr<engine::ModelRunnerOptions> runner_options = RunnerOptionsFromFlags();
  if (!runner_options.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(runner_options.status().message()).c_str());
    return 2;
  }
  options.runner = *std::move(runner_options);
  options.scheduler.max_running = absl::GetFlag(FLAGS_max_running);
  options.scheduler.max_waiting = absl::GetFlag(FLAGS_max_waiting);
  options.kv_lease = absl::Seconds(absl::GetFlag(FLAGS_kv_lease_seconds));
  options.enable_kv_transfer = absl::GetFlag(FLAGS_kv_transfer);
  absl::StatusOr<Device> device = DeviceFromFlags();
  absl::StatusOr<transfer::KvStagingMode> staging = KvStagingModeFromFlags();
  absl::StatusOr<size_t> staging_bytes = DecodeKvStagingBytesFromFlags();
  absl::StatusOr<engine::RequestOptions> request_defaults = RequestOptionsFromFlags();
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials =
      WorkerCredentialsFromFlags();
  for (const absl::Status& s : {device.status(), staging.status(), staging_bytes.status(),
                                request_defaults.status(), credentials.status()}) {
    if (!s.ok()) {
      std::fprintf(stderr, "error: %s\n", s.ToString().c_str());
      return 2;
    }
  }
  options.device = *device;
  options.kv_staging = *staging;
  options.kv_staging_bytes = *staging_bytes;
  options.request_defaults = *request_defaults;
  options.credentials = *credentials;
  auto worker = decode::DecodeWorker::Start(options);
  if (!worker.ok()) {
    std::fprintf(stderr, "error: %s\n", worker.status().ToString().c_str());
    return 1;
  }
  PrintReady("decode", options.address, (*worker)->port(), options.metrics_address,
             (*worker)->metrics_port());
  const int sig = WaitForTerminationSignal();
  SS_LOG_INFO("decode worker: signal {}, draining", sig);
  (*worker)->Shutdown(DrainFromFlags());
  return 0;
}

}  // namespace sparseserve::tools
