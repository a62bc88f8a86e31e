#include "common/metrics/metrics_exporter.h"

#include <exception>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace sparseserve::metrics {

MetricsExporter::MetricsExporter(std::unique_ptr<prometheus::Exposer> exposer,
                                 std::shared_ptr<prometheus::Registry> registry, int port)
    : registry_(std::move(registry)), exposer_(std::move(exposer)), port_(port) {}

absl::StatusOr<std::unique_ptr<MetricsExporter>> MetricsExporter::Start(
    const std::string& bind_address) {
  if (bind_address.empty()) {
    return absl::InvalidArgumentError("metrics exporter: empty bind address");
  }
  // civetweb spells "all interfaces" as a bare port ("9100"), not ":9100".
  const std::string listening_ports =
      bind_address.front() == ':' ? bind_address.substr(1) : bind_address;
  std::unique_ptr<prometheus::Exposer> exposer;
  std::vector<int> ports;
  try {
    // civetweb throws (CivetException) when it cannot bind; keep it inside this call.
    exposer = std::make_unique<prometheus::Exposer>(listening_ports, /*num_threads=*/2);
    ports = exposer->GetListeningPorts();
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("metrics exporter: cannot serve on ", bind_address, ": ", e.what()));
  }
  if (ports.empty() || ports.front() <= 0) {
    return absl::UnavailableError(
        absl::StrCat("metrics exporter: no listening port for ", bind_address));
  }
  auto registry = std::make_shared<prometheus::Registry>();
  exposer->RegisterCollectable(registry);
  return std::unique_ptr<MetricsExporter>(
      new MetricsExporter(std::move(exposer), std::move(registry), ports.front()));
}

}  // namespace sparseserve::metrics
