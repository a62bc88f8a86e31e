// Flags shared by the serving commands (decode, prefill, router, up).
#ifndef SPARSESERVE_TOOLS_SERVE_FLAGS_H_
#define SPARSESERVE_TOOLS_SERVE_FLAGS_H_

#include <string>

#include "absl/time/time.h"

namespace sparseserve::tools {

std::string ListenAddressFromFlags();
std::string MetricsAddressFromFlags();
absl::Duration DrainFromFlags();
// "READY <role> <host:port> metrics <host:port> [http <host:port>]" on stdout: `up` and tests
// wait for it. http_port < 0: no HTTP API (workers; a router run with --http-port=-1).
void PrintReady(const char* role, const std::string& address, int port,
                const std::string& metrics_address, int metrics_port, int http_port = -1);

}  // namespace sparseserve::tools

#endif  // SPARSESERVE_TOOLS_SERVE_FLAGS_H_
