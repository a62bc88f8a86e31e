// Flags every subcommand accepts.
#include <cstdio>

#include "absl/flags/flag.h"
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
  return true;
}

}  // namespace sparseserve::tools
