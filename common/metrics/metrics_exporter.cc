#include "common/metrics/metrics_exporter.h"

#include <sys/socket.h>

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/core/host_port.h"
#include "common/core/status.h"
#include "httplib.h"
#include "prometheus/text_serializer.h"

namespace sparseserve::metrics {

absl::StatusOr<std::unique_ptr<MetricsExporter>> MetricsExporter::Start(
    const std::string& bind_address) {
  // "host:port", ":port" or "port" (the last two: all interfaces).
  absl::StatusOr<core::ListenAddress> listen = core::ParseListenAddress(bind_address);
  if (!listen.ok()) return AnnotateStatus(listen.status(), "metrics exporter");
  const std::string& host = listen->host;
  const int port = listen->port;
  std::unique_ptr<MetricsExporter> exporter(new MetricsExporter());
  exporter->registry_ = std::make_shared<prometheus::Registry>();
  exporter->server_ = std::make_unique<httplib::Server>();
  httplib::Server& server = *exporter->server_;
  // SO_REUSEADDR only: httplib's default also sets SO_REUSEPORT, which would let a second
  // exporter silently share a port that is already in use.
  server.set_socket_options([](int sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  std::weak_ptr<prometheus::Registry> weak = exporter->registry_;
  server.Get("/metrics", [weak](const httplib::Request&, httplib::Response& response) {
    std::shared_ptr<prometheus::Registry> registry = weak.lock();
    if (registry == nullptr) {
      response.status = 503;
      return;
    }
    const prometheus::TextSerializer serializer;
    response.set_content(serializer.Serialize(registry->Collect()),
                         "text/plain; version=0.0.4; charset=utf-8");
  });
  const int bound =
      port == 0 ? server.bind_to_any_port(host) : (server.bind_to_port(host, port) ? port : -1);
  if (bound <= 0) {
    return absl::UnavailableError(absl::StrCat("metrics exporter: cannot serve on ", bind_address,
                                               " (address in use or not available)"));
  }
  exporter->port_ = bound;
  MetricsExporter* raw = exporter.get();
  exporter->listener_ = std::thread([raw] {
    raw->server_->listen_after_bind();
    raw->listener_done_.Notify();
  });
  return exporter;
}

MetricsExporter::~MetricsExporter() {
  if (!listener_.joinable()) return;
  // httplib's stop() only acts once the accept loop is running, and the loop may not have
  // started yet when an exporter is destroyed right after Start: repeat until it returned.
  do {
    server_->stop();
  } while (!listener_done_.WaitForNotificationWithTimeout(absl::Milliseconds(10)));
  listener_.join();
}

}  // namespace sparseserve::metrics
