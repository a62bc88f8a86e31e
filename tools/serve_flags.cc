#include "tools/serve_flags.h"

#include <cstdio>
#include <cstdlib>

#include "absl/flags/flag.h"

ABSL_FLAG(std::string, address, "127.0.0.1:0", "gRPC listen address (port 0 = any free port).");
ABSL_FLAG(std::string, metrics_address, "127.0.0.1:0", "Prometheus /metrics listen address.");
ABSL_FLAG(double, drain_seconds, 30, "On SIGINT/SIGTERM, time in-flight requests get to finish.");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM certificate chain: serve TLS on the gRPC port (and the router's HTTP port) with it "
          "and --tls-key. Default: plain. See docs/api.md, \"TLS and API keys\".");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls-cert.");
ABSL_FLAG(std::string, tls_ca, "",
          "PEM CA bundle for mutual TLS between router and workers: workers accept only clients "
          "with a certificate it signed; the router verifies workers with it and presents "
          "--tls-cert. With --server (generate, eval): verify the router with it.");

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

absl::StatusOr<rpc::TlsPem> TlsFromFlags() {
  return rpc::ReadTlsFiles({.cert_file = absl::GetFlag(FLAGS_tls_cert),
                            .key_file = absl::GetFlag(FLAGS_tls_key),
                            .ca_file = absl::GetFlag(FLAGS_tls_ca)});
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> WorkerCredentialsFromFlags() {
  absl::StatusOr<rpc::TlsPem> pem = TlsFromFlags();
  if (!pem.ok()) return pem.status();
  return rpc::ServerCredentialsFor(*pem, /*require_client_certs=*/pem->has_ca());
}

std::string ApiKeyFromEnv() {
  const char* key = std::getenv("SPARSESERVE_API_KEY");
  return key == nullptr ? "" : key;
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ClientCredentialsFromFlags() {
  absl::StatusOr<rpc::TlsPem> pem = TlsFromFlags();
  if (!pem.ok()) return pem.status();
  if (!pem->has_ca()) return std::shared_ptr<grpc::ChannelCredentials>();
  return rpc::ChannelCredentialsFor(*pem);
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
