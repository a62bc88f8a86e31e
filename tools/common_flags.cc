// Flags every subcommand accepts.
#include <cstdio>
#include <cstdlib>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "common/core/logging.h"
#include "common/core/thread_pool.h"
#include "tools/command.h"

ABSL_FLAG(std::string, log_level, "info",
          "Log verbosity on stderr: debug, info, warning, error, off.");
ABSL_FLAG(int, threads, 0, "CPU threads for the CPU backend (0 = one per core).");

namespace sparseserve::tools {

bool ApplyCommonFlags() {
  if (absl::Status s = core::SetLogLevel(absl::GetFlag(FLAGS_log_level)); !s.ok()) {
    std::fprintf(stderr, "error: --log_level: %s\n", std::string(s.message()).c_str());
    return false;
  }
  if (absl::GetFlag(FLAGS_threads) < 0) {
    std::fprintf(stderr, "error: --threads must be >= 0\n");
    return false;
  }
  core::ThreadPool::SetDefaultThreads(absl::GetFlag(FLAGS_threads));
  // Tensor parallelism loads every CUDA module at start-up, before CUDA is initialised. Loaded
  // lazily (CUDA's default), a kernel's first launch waits for the GPUs' queues to drain, while
  // another rank's queue may hold an NCCL kernel waiting for this rank's: the deadlock NCCL users
  // report (e.g. NVIDIA/nvbench#136), avoided at the cost of a slower start. A value the user set
  // is kept.
  for (const char* name : {"tensor_parallel", "prefill_tensor_parallel"}) {
    const absl::CommandLineFlag* tp = absl::FindCommandLineFlag(name);
    if (tp != nullptr && tp->CurrentValue() != "1" && tp->CurrentValue() != "0") {
      setenv("CUDA_MODULE_LOADING", "EAGER", /*overwrite=*/0);
    }
  }
  return true;
}

}  // namespace sparseserve::tools
