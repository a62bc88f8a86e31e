#include "tools/termination_signal.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>

namespace sparseserve::tools {
namespace {

// Self-pipe: the handler only write()s (async-signal-safe); main reads. A handler rather than a
// blocked mask + sigwait, because libraries (UCX, civetweb) start threads with their own masks
// and a SIGTERM delivered to one of those must not kill the process before it drains.
int g_pipe[2] = {-1, -1};

void OnSignal(int sig) {
  const char byte = static_cast<char>(sig);
  [[maybe_unused]] ssize_t n = write(g_pipe[1], &byte, 1);
}

}  // namespace

void CatchTerminationSignals() {
  if (g_pipe[0] >= 0) return;
  if (pipe(g_pipe) != 0) return;
  struct sigaction action {};
  action.sa_handler = OnSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
}

int WaitForTerminationSignal() {
  char byte = 0;
  while (true) {
    const ssize_t n = read(g_pipe[0], &byte, 1);
    if (n == 1) return byte;
    if (n < 0 && errno == EINTR) continue;
    return SIGTERM;  // the pipe broke: treat as a request to stop
  }
}

}  // namespace sparseserve::tools
