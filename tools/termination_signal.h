// SIGINT/SIGTERM handling for the serving commands: install handlers (first thing in the
// command) and wait for one of the signals synchronously in main.
#ifndef SPARSESERVE_TOOLS_TERMINATION_SIGNAL_H_
#define SPARSESERVE_TOOLS_TERMINATION_SIGNAL_H_

namespace sparseserve::tools {

// Routes SIGINT and SIGTERM to WaitForTerminationSignal instead of terminating the process.
void CatchTerminationSignals();
// Waits until SIGINT or SIGTERM arrives; returns the signal number.
int WaitForTerminationSignal();

}  // namespace sparseserve::tools

#endif  // SPARSESERVE_TOOLS_TERMINATION_SIGNAL_H_
