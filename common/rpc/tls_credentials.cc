#include "common/rpc/tls_credentials.h"

#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace sparseserve::rpc {
namespace {

absl::StatusOr<std::string> ReadPem(const std::string& path, const char* what) {
  if (path.empty()) return std::string();
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("TLS ", what, " ", path, ": cannot read it"));
  std::stringstream text;
  text << in.rdbuf();
  if (!absl::StrContains(text.str(), "-----BEGIN ")) {
    return absl::InvalidArgumentError(
        absl::StrCat("TLS ", what, " ", path, ": no PEM block in it"));
  }
  return text.str();
}

}  // namespace

absl::StatusOr<TlsPem> ReadTlsFiles(const TlsFiles& files) {
  if (files.cert_file.empty() != files.key_file.empty()) {
    return absl::InvalidArgumentError("TLS: --tls-cert and --tls-key go together");
  }
  TlsPem pem;
  absl::StatusOr<std::string> cert = ReadPem(files.cert_file, "certificate");
  if (!cert.ok()) return cert.status();
  absl::StatusOr<std::string> key = ReadPem(files.key_file, "key");
  if (!key.ok()) return key.status();
  absl::StatusOr<std::string> ca = ReadPem(files.ca_file, "CA");
  if (!ca.ok()) return ca.status();
  pem.cert_chain = *std::move(cert);
  pem.private_key = *std::move(key);
  pem.root_certs = *std::move(ca);
  return pem;
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentialsFor(
    const TlsPem& pem, bool require_client_certs) {
  if (!pem.has_identity()) {
    if (require_client_certs) {
      return absl::InvalidArgumentError("TLS: client certificates need --tls-cert and --tls-key");
    }
    return grpc::InsecureServerCredentials();
  }
  if (require_client_certs && !pem.has_ca()) {
    return absl::InvalidArgumentError("TLS: verifying client certificates needs --tls-ca");
  }
  grpc::SslServerCredentialsOptions options(
      require_client_certs ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
                           : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  options.pem_root_certs = require_client_certs ? pem.root_certs : "";
  options.pem_key_cert_pairs.push_back({pem.private_key, pem.cert_chain});
  return grpc::SslServerCredentials(options);
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ChannelCredentialsFor(const TlsPem& pem) {
  if (!pem.has_ca()) return absl::InvalidArgumentError("TLS: a client needs --tls-ca");
  grpc::SslCredentialsOptions options;
  options.pem_root_certs = pem.root_certs;
  options.pem_private_key = pem.private_key;
  options.pem_cert_chain = pem.cert_chain;
  return grpc::SslCredentials(options);
}

}  // namespace sparseserve::rpc
