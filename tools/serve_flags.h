// Flags shared by the serving commands (decode, prefill, router, up): addresses, drain, TLS.
#ifndef SPARSESERVE_TOOLS_SERVE_FLAGS_H_
#define SPARSESERVE_TOOLS_SERVE_FLAGS_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/rpc/tls_credentials.h"

namespace sparseserve::tools {

std::string ListenAddressFromFlags();
std::string MetricsAddressFromFlags();
absl::Duration DrainFromFlags();
// --tls-cert, --tls-key, --tls-ca read (rpc/tls_credentials.h); their errors.
absl::StatusOr<rpc::TlsPem> TlsFromFlags();
// A worker's gRPC port: plain, TLS with --tls-cert/--tls-key, mutual with --tls-ca too.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> WorkerCredentialsFromFlags();
// A client of the router or of workers: null (plain) without --tls-ca, else TLS verifying the
// peer with it (and presenting --tls-cert when given).
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ClientCredentialsFromFlags();
// A client's API key: $SPARSESERVE_API_KEY ("" when unset), kept out of flags and `ps`.
std::string ApiKeyFromEnv();
// "READY <role> <host:port> metrics <host:port> [http <host:port>]" on stdout: `up` and tests
// wait for it. http_port < 0: no HTTP API (workers; a router run with --http-port=-1).
void PrintReady(const char* role, const std::string& address, int port,
                const std::string& metrics_address, int metrics_port, int http_port = -1);

}  // namespace sparseserve::tools

#endif  // SPARSESERVE_TOOLS_SERVE_FLAGS_H_
