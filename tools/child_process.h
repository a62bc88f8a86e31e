// ChildProcess: a worker process started by `sparseserve up` — fork/exec of this binary with a
// pipe on its stdout to read its READY line, killed with the parent (PR_SET_PDEATHSIG), and
// stopped with SIGTERM (then SIGKILL after a grace period). Not thread-safe.
#ifndef SPARSESERVE_TOOLS_CHILD_PROCESS_H_
#define SPARSESERVE_TOOLS_CHILD_PROCESS_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace sparseserve::tools {

class ChildProcess {
 public:
  // Starts `/proc/self/exe args...`. kInternal when fork/exec fails.
  static absl::StatusOr<std::unique_ptr<ChildProcess>> Spawn(const std::vector<std::string>& args);
  ~ChildProcess();  // Stop(5 s) if still running
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  // Reads stdout until a line starting "READY " and returns its words. kDeadlineExceeded after
  // `timeout`, kUnavailable (with the exit status) when the child exits first.
  absl::StatusOr<std::vector<std::string>> WaitReady(absl::Duration timeout);
  // SIGTERM, wait up to `grace`, then SIGKILL. Returns the exit status (waitpid's).
  int Stop(absl::Duration grace);
  pid_t pid() const { return pid_; }

 private:
  ChildProcess(pid_t pid, int stdout_fd) : pid_(pid), stdout_fd_(stdout_fd) {}
  pid_t pid_;
  int stdout_fd_;
  bool reaped_ = false;
  std::string buffered_;
};

}  // namespace sparseserve::tools

#endif  // SPARSESERVE_TOOLS_CHILD_PROCESS_H_
