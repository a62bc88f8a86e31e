// MetricsExporter serves one Prometheus registry over HTTP at `/metrics` (prometheus-cpp Exposer,
// civetweb underneath) so that Prometheus can scrape a service.
//
// The exporter and every ServingMetrics built on its registry co-own the registry
// (std::shared_ptr): metric handles stay valid while either lives. The HTTP threads belong to
// civetweb. Thread-safe: metrics may be updated from any thread while a scrape runs.
#ifndef SPARSESERVE_COMMON_METRICS_METRICS_EXPORTER_H_
#define SPARSESERVE_COMMON_METRICS_METRICS_EXPORTER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "prometheus/exposer.h"
#include "prometheus/registry.h"

namespace sparseserve::metrics {

class MetricsExporter {
 public:
  // Binds `bind_address` ("127.0.0.1:9100"; ":9100" or "9100" for all interfaces; port 0 as in
  // "127.0.0.1:0" or ":0" lets the kernel pick a free port) and starts serving `/metrics`.
  // The HTTP server (civetweb) stops within about 2 s of destruction (its poll quantum).
  // Returns kInvalidArgument for an empty address, kUnavailable when the address cannot be
  // bound (port in use, unknown host, no permission).
  static absl::StatusOr<std::unique_ptr<MetricsExporter>> Start(const std::string& bind_address);

  MetricsExporter(const MetricsExporter&) = delete;
  MetricsExporter& operator=(const MetricsExporter&) = delete;
  ~MetricsExporter() = default;

  // The port actually bound (the kernel's choice when the address asked for port 0).
  int port() const { return port_; }

  // The registry scraped at `/metrics`; families registered on it appear in the next scrape.
  // Co-owned by this exporter and by the metric objects built on it.
  std::shared_ptr<prometheus::Registry> registry() const { return registry_; }

 private:
  MetricsExporter(std::unique_ptr<prometheus::Exposer> exposer,
                  std::shared_ptr<prometheus::Registry> registry, int port);

  // Declared before exposer_ so that the exposer (which holds a weak_ptr) dies first.
  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<prometheus::Exposer> exposer_;
  int port_;
};

}  // namespace sparseserve::metrics

#endif  // SPARSESERVE_COMMON_METRICS_METRICS_EXPORTER_H_
