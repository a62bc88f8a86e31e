#include "tools/serve_flags.h"

#include <cstdio>

#include "absl/flags/flag.h"

ABSL_FLAG(std::string, address, "127.0.0.1:0", "gRPC listen address (port 0 = any free port).");
ABSL_FLAG(std::string, metrics_address, "127.0.0.1:0", "Prometheus /metrics listen address.");
ABSL_FLAG(double, drain_seconds, 30, "On SIGINT/SIGTERM, time in-flight requests get to finish.");

namespace sparseserve::tools {

std::string ListenAddressFromFlags() {
  return absl::GetFlag(FLAGS_address);
}
std::string MetricsAddressFromFlags() {
  return absl::GetFlag(FLAGS_metrics_address);
}
absl::Duration DrainFromFlags() {
  return absl::Seconds(absl::GetFlag(FLAGS_drain_seconds));
}

void PrintReady(const char* role, const std::string& address, int port,
                const std::string& metrics_address, int metrics_port, int http_port) {
  auto host = [](const std::string& a) {
    const std::string h = a.substr(0, a.rfind(':'));
    return h.empty() || h == "0.0.0.0" ? std::string("127.0.0.1") : h;
  };
  std::printf("READY %s %s:%d metrics %s:%d", role, host(address).c_str(), port,
              host(metrics_address).c_str(), metrics_port);
  if (http_port >= 0) std::printf(" http %s:%d", host(address).c_str(), http_port);
  std::printf("\n");
  std::fflush(stdout);
}

}  // namespace sparseserve::tools
