// `sparseserve prefill`: a prefill worker process.
#include <cstdio>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "common/core/logging.h"
#include "prefill_svc/prefill_worker.h"
#include "tools/command.h"
#include "tools/kv_staging_flags.h"
#include "tools/model_flags.h"
#include "tools/request_options_flags.h"
#include "tools/serve_flags.h"
#include "tools/termination_signal.h"

ABSL_FLAG(int, max_queued, 256, "Queued prefills beyond which new ones get RESOURCE_EXHAUSTED.");
ABSL_FLAG(bool, prefill_kv_transfer, true,
          "Set up UCX to PUT KV into decode workers (from the KV cache, or a host staging ring: "
          "--kv-staging). false: this worker cannot serve disaggregated prefill.");
ABSL_FLAG(int, fault_kv_put_delay_ms, 0,
          "Fault injection for tests: sleep this long after each layer's KV PUT, so a transfer "
          "can be interrupted mid-way (0 = off; never set in production).");

// Shared with `decode` (decode_command.cc).
ABSL_DECLARE_FLAG(int, max_running);

ABSL_DECLARE_FLAG(int, prefill_tensor_parallel);  // tools/model_flags.cc

namespace sparseserve::tools {

int RunPrefillCommand(const std::vector<char*>& positional) {
  if (positional.size() > 1) {
    std::fprintf(stderr, "error: unexpected argument '%s'\n", positional[1]);
    return 2;
  }
  CatchTerminationSignals();
  prefill::PrefillWorkerOptions options;
  options.model_path = ModelPathFromFlags();
  options.address = ListenAddressFromFlags();
  options.metrics_address = MetricsAddressFromFlags();
  absl::StatusOr<engine::ModelRunnerOptions> runner_options = RunnerOptionsFromFlags();
  if (!runner_options.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(runner_options.status().message()).c_str());
    return 2;
  }
  options.runner = *std::move(runner_options);
  if (const int tp = absl::GetFlag(FLAGS_prefill_tensor_parallel); tp > 0) {
    options.runner.tensor_parallel = tp;
  }
  options.max_queued = absl::GetFlag(FLAGS_max_queued);
  options.max_running = absl::GetFlag(FLAGS_max_running);
  if (options.max_running < 1) {
    std::fprintf(stderr, "error: --max-running must be at least 1\n");
    return 2;
  }
  options.enable_kv_transfer = absl::GetFlag(FLAGS_prefill_kv_transfer);
  options.fault_put_delay = absl::Milliseconds(absl::GetFlag(FLAGS_fault_kv_put_delay_ms));
  absl::StatusOr<Device> device = DeviceFromFlags();
  absl::StatusOr<transfer::KvStagingMode> staging = KvStagingModeFromFlags();
  absl::StatusOr<size_t> staging_bytes = PrefillKvStagingBytesFromFlags();
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
  auto worker = prefill::PrefillWorker::Start(options);
  if (!worker.ok()) {
    std::fprintf(stderr, "error: %s\n", worker.status().ToString().c_str());
    return 1;
  }
  PrintReady("prefill", options.address, (*worker)->port(), options.metrics_address,
             (*worker)->metrics_port());
  const int sig = WaitForTerminationSignal();
  SS_LOG_INFO("prefill worker: signal {}, draining", sig);
  (*worker)->Shutdown(DrainFromFlags());
  return 0;
}

}  // namespace sparseserve::tools
