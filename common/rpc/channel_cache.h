// ChannelCache: one grpc::Channel per target address, created on first use and reused for every
// later call (gRPC performance guide: re-use channels; a channel per call is forbidden by
// STYLE.md). Channels use ChannelOptions::credentials (plain by default, mutual TLS with --tls-ca)
// and HTTP/2 keepalive pings so that a dead peer is noticed while a long stream is idle.
//
// Thread-safe. Channels are std::shared_ptr because gRPC's API hands them out that way; the
// co-owners are this cache and the stubs created on them.
#ifndef SPARSESERVE_COMMON_RPC_CHANNEL_CACHE_H_
#define SPARSESERVE_COMMON_RPC_CHANNEL_CACHE_H_

#include <cstddef>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/channel.h"
#include "grpcpp/security/credentials.h"

namespace sparseserve::rpc {

struct ChannelOptions {
  // Interval between keepalive pings on an idle transport. Default 30 s; must not be below the
  // server's RpcServerOptions::min_ping_interval (default 10 s) or the server closes the
  // connection with GOAWAY "too_many_pings".
  absl::Duration keepalive_time = absl::Seconds(30);
  // How long to wait for a ping ack before declaring the transport dead. Default 10 s.
  absl::Duration keepalive_timeout = absl::Seconds(10);
  // Largest message sent or received, bytes. Default 64 MiB (matches RpcServerOptions).
  int max_message_bytes = 64 << 20;
  // Credentials of every channel (rpc/tls_credentials.h: mutual TLS to the workers); null =
  // insecure (plain).
  std::shared_ptr<grpc::ChannelCredentials> credentials;
};

class ChannelCache {
 public:
  explicit ChannelCache(ChannelOptions options = {});

  ChannelCache(const ChannelCache&) = delete;
  ChannelCache& operator=(const ChannelCache&) = delete;

  // The channel for `address` ("host:port", or any gRPC target URI), created on first use.
  // Creating a channel does not connect; failures show up on the first call. `tls_name`, when
  // not empty, is the name TLS verifies the peer's certificate against instead of the address's
  // host: a worker found by resolving dns:///NAME is dialled at its IP but named NAME.
  std::shared_ptr<grpc::Channel> Get(const std::string& address, const std::string& tls_name = "")
      ABSL_LOCKS_EXCLUDED(mu_);

  // Number of distinct addresses seen so far.
  std::size_t size() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const ChannelOptions options_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<grpc::Channel>> channels_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sparseserve::rpc

#endif  // SPARSESERVE_COMMON_RPC_CHANNEL_CACHE_H_
