// MetricsExporter serves one Prometheus registry over HTTP at `/metrics` so that Prometheus can
// scrape a service: prometheus-cpp's registry and text serializer behind a cpp-httplib server.
//
// Not prometheus-cpp's own Exposer: its civetweb threads are built with 100 KB stacks, and in a
// process that also loads OpenBLAS and the CUDA runtime (≈64 KB of static TLS carved out of
// every thread's stack) a scrape overflowed them and crashed the process.
//
// The exporter and every ServingMetrics built on its registry co-own the registry
// (std::shared_ptr): metric handles stay valid while either lives. The exporter owns its HTTP
// listener thread (joined on destruction). Thread-safe: metrics may be updated from any thread
// while a scrape runs.
#ifndef SPARSESERVE_COMMON_METRICS_METRICS_EXPORTER_H_
#define SPARSESERVE_COMMON_METRICS_METRICS_EXPORTER_H_

#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "prometheus/registry.h"

namespace httplib {
class Server;
}  // namespace httplib

namespace sparseserve::metrics {

class MetricsExporter {
 public:
  // Binds `bind_address` ("127.0.0.1:9100"; ":9100" or "9100" for all interfaces; port 0 as in
  // "127.0.0.1:0" or ":0" lets the kernel pick a free port) and starts serving `/metrics`.
  // Returns kInvalidArgument for an empty address, kUnavailable when the address cannot be
  // bound (port in use, unknown host, no permission).
  static absl::StatusOr<std::unique_ptr<MetricsExporter>> Start(const std::string& bind_address);

  MetricsExporter(const MetricsExporter&) = delete;
  MetricsExporter& operator=(const MetricsExporter&) = delete;
  ~MetricsExporter();

  // The port actually bound (the kernel's choice when the address asked for port 0).
  int port() const { return port_; }

  // The registry scraped at `/metrics`; families registered on it appear in the next scrape.
  // Co-owned by this exporter and by the metric objects built on it.
  std::shared_ptr<prometheus::Registry> registry() const { return registry_; }

 private:
  MetricsExporter() = default;

  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<httplib::Server> server_;
  absl::Notification listener_done_;  // the accept loop returned
  std::thread listener_;              // runs the server's accept loop (owned, joined)
  int port_ = 0;
};

}  // namespace sparseserve::metrics

#endif  // SPARSESERVE_COMMON_METRICS_METRICS_EXPORTER_H_
