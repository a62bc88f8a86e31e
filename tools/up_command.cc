// `sparseserve up`: router + N prefill + M decode worker processes on this machine.
#include <cstdio>
#include <iterator>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/str_join.h"
#include "common/core/logging.h"
#include "router/router.h"
#include "tools/child_process.h"
#include "tools/command.h"
#include "tools/request_options_flags.h"
#include "tools/termination_signal.h"

ABSL_FLAG(int, num_prefill, 1, "Prefill worker processes to start.");
ABSL_FLAG(int, num_decode, 1, "Decode worker processes to start.");
ABSL_FLAG(double, worker_start_seconds, 120, "How long a worker may take to load and serve.");

ABSL_DECLARE_FLAG(std::string, tls_cert);
ABSL_DECLARE_FLAG(std::string, kv_staging);       // tools/kv_staging_flags.cc
ABSL_DECLARE_FLAG(int, tensor_parallel);          // tools/model_flags.cc
ABSL_DECLARE_FLAG(int, prefill_tensor_parallel);  // tools/model_flags.cc

namespace sparseserve::tools {
namespace {

// Flags every worker inherits from `up` (when changed from their defaults).
constexpr const char* kForwardedFlags[] = {"model",
                                           "device",
                                           "kv_cache_tokens",
                                           "block_tokens",
                                           "prefill_chunk",
                                           "max_step_tokens",
                                           "threads",
                                           "log_level",
                                           "kv_lease_seconds",
                                           "max_running",
                                           "max_waiting",
                                           "drain_seconds",
                                           "gpu_memory_fraction",
                                           "cuda_graph_batch",
                                           "shadow_dense_rate",
                                           "tokenswift_heads",
                                           "kangaroo_adapter",
                                           "tensor_parallel",
                                           "prefill_tensor_parallel",
                                           "fault_kv_put_delay_ms",
                                           "kv_transfer",
                                           "prefill_kv_transfer",
                                           "kv_staging",
                                           "kv_staging_mb",
                                           "prefill_kv_staging_mb",
                                           "tls_cert",
                                           "tls_key",
                                           "tls_ca"};

// A worker of several GPUs always stages KV through host memory; a worker that moves it GPU to GPU
// cannot exchange it with one that stages (UCX emulates host <-> GPU PUTs over tcp, ~0.2 GB/s,
// bench/RESULTS.md). So under --kv-staging=auto, when some worker has --tensor-parallel > 1, all
// of them stage.
bool EveryWorkerStages() {
  const int tp = absl::GetFlag(FLAGS_tensor_parallel);
  const int prefill_tp = absl::GetFlag(FLAGS_prefill_tensor_parallel);
  return absl::GetFlag(FLAGS_kv_staging) == "auto" && (tp > 1 || prefill_tp > 1);
}

std::vector<std::string> WorkerArgs(const char* role) {
  std::vector<std::string> args = {role, "--address=127.0.0.1:0", "--metrics_address=127.0.0.1:0"};
  if (EveryWorkerStages()) args.push_back("--kv-staging=on");
  std::vector<const char*> names(std::begin(kForwardedFlags), std::end(kForwardedFlags));
  names.insert(names.end(), RequestOptionFlagNames().begin(), RequestOptionFlagNames().end());
  for (const char* name : names) {
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    if (flag != nullptr && flag->CurrentValue() != flag->DefaultValue()) {
      args.push_back(absl::StrCat("--", name, "=", flag->CurrentValue()));
    }
  }
  return args;
}

}  // namespace

int RunUpCommand(const std::vector<char*>& positional) {
  if (positional.size() > 1) {
    std::fprintf(stderr, "error: unexpected argument '%s'\n", positional[1]);
    return 2;
  }
  CatchTerminationSignals();
  const int num_prefill = absl::GetFlag(FLAGS_num_prefill);
  const int num_decode = absl::GetFlag(FLAGS_num_decode);
  if (num_decode < 1 || num_prefill < 0) {
    std::fprintf(stderr, "error: need --num-decode >= 1 and --num-prefill >= 0\n");
    return 2;
  }
  // The router checks requests with these defaults; the workers get the same flags.
  absl::StatusOr<engine::RequestOptions> request_defaults = RequestOptionsFromFlags();
  if (!request_defaults.ok()) {
    std::fprintf(stderr, "error: %s\n", request_defaults.status().ToString().c_str());
    return 2;
  }
  std::vector<std::unique_ptr<ChildProcess>> children;
  router::RouterOptions options = RouterOptionsFromFlags();
  options.request_defaults = *request_defaults;
  options.decode_workers.clear();
  options.prefill_workers.clear();
  const absl::Duration start_timeout = absl::Seconds(absl::GetFlag(FLAGS_worker_start_seconds));
  for (int i = 0; i < num_prefill + num_decode; ++i) {
    const bool decode = i >= num_prefill;
    auto child = ChildProcess::Spawn(WorkerArgs(decode ? "decode" : "prefill"));
    if (!child.ok()) {
      std::fprintf(stderr, "error: %s\n", child.status().ToString().c_str());
      return 1;
    }
    absl::StatusOr<std::vector<std::string>> ready = (*child)->WaitReady(start_timeout);
    if (!ready.ok() || ready->size() < 3) {
      std::fprintf(stderr, "error: %s worker: %s\n", decode ? "decode" : "prefill",
                   ready.ok() ? "malformed READY line" : ready.status().ToString().c_str());
      return 1;
    }
    (decode ? options.decode_workers : options.prefill_workers).push_back((*ready)[2]);
    // "WORKER <role> <address> metrics <address> pid <pid>": for tools and tests.
    std::printf("WORKER %s %s metrics %s pid %d\n", (*ready)[1].c_str(), (*ready)[2].c_str(),
                ready->size() > 4 ? (*ready)[4].c_str() : "-", static_cast<int>((*child)->pid()));
    children.push_back(std::move(*child));
  }
  std::fprintf(stderr, "sparseserve up: decode workers [%s], prefill workers [%s]\n",
               absl::StrJoin(options.decode_workers, ", ").c_str(),
               absl::StrJoin(options.prefill_workers, ", ").c_str());
  if (absl::GetFlag(FLAGS_tls_cert).empty()) {
    std::fprintf(stderr,
                 "sparseserve up: plain gRPC and HTTP (fine on one machine). For TLS pass "
                 "--tls-cert and --tls-key (public ports), plus --tls-ca for mutual TLS to the "
                 "workers, and --api-key-file for API keys (docs/api.md)\n");
  }
  absl::Status s = ServeRouter(std::move(options), "up", [&children] {
    for (auto& c : children) c->Stop(absl::Seconds(10));
  });
  if (!s.ok()) {
    std::fprintf(stderr, "error: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}

}  // namespace sparseserve::tools
