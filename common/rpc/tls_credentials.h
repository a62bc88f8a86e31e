// TLS of the gRPC services (--tls-cert, --tls-key, --tls-ca): the PEM files of a process's
// identity and trust, read once at start-up, and the gRPC credentials built from them.
//
// The rule (docs/api.md, "TLS and API keys"): a process with a certificate and key serves TLS on
// its gRPC port (and the router on its HTTP port too). A CA makes the cluster-internal links
// mutual: workers then accept only clients presenting a certificate the CA signed, and the router
// verifies the workers against the CA while presenting its own certificate. The router's public
// port never asks clients for certificates (API keys authenticate them). Without files everything
// stays plain, the easy default for one machine. Pure functions; thread-safe.
#ifndef SPARSESERVE_COMMON_RPC_TLS_CREDENTIALS_H_
#define SPARSESERVE_COMMON_RPC_TLS_CREDENTIALS_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"

namespace sparseserve::rpc {

struct TlsFiles {
  std::string cert_file;  // PEM certificate chain of this process
  std::string key_file;   // PEM private key of cert_file
  std::string ca_file;    // PEM CA bundle that signs the peers' certificates
};

// The files' contents; empty strings for files not given.
struct TlsPem {
  std::string cert_chain;
  std::string private_key;
  std::string root_certs;
  bool has_identity() const { return !cert_chain.empty(); }
  bool has_ca() const { return !root_certs.empty(); }
};

// Reads the files. kInvalidArgument for a certificate without a key or a key without one, and
// for a file that holds no PEM block; kNotFound for a file that cannot be read.
absl::StatusOr<TlsPem> ReadTlsFiles(const TlsFiles& files);

// Insecure without an identity; else TLS with it, asking for and verifying client certificates
// against the CA when `require_client_certs` (kInvalidArgument when the CA is missing then).
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentialsFor(
    const TlsPem& pem, bool require_client_certs);

// A client of a TLS server: verifies it against the CA (required: kInvalidArgument without one)
// and presents the identity when there is one (mutual TLS).
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ChannelCredentialsFor(const TlsPem& pem);

}  // namespace sparseserve::rpc

#endif  // SPARSESERVE_COMMON_RPC_TLS_CREDENTIALS_H_
