// RpcServer: builds, starts and drains a gRPC server the same way for every sparseserve service
// (router, prefill, decode): default health service, proto reflection, keepalive, message size
// limit, port selection for ":0", and a graceful drain (health NOT_SERVING, then shutdown with a
// deadline after which in-flight calls are cancelled).
//
// The registered services are borrowed: each must outlive the RpcServer. Thread-safe: any thread
// may call SetServing / Shutdown / Wait, including concurrently.
#ifndef SPARSESERVE_COMMON_RPC_SERVER_RUNNER_H_
#define SPARSESERVE_COMMON_RPC_SERVER_RUNNER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/channel.h"
#include "grpcpp/impl/service_type.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server.h"

namespace sparseserve::rpc {

struct RpcServerOptions {
  // Largest message received or sent, bytes. Default 64 MiB (the gRPC default of 4 MiB is too
  // small for long prompts' token lists and KV descriptors).
  int max_message_bytes = 64 << 20;
  // Interval of the server's keepalive pings to idle clients. Default 60 s.
  absl::Duration keepalive_time = absl::Seconds(60);
  // How long the server waits for a ping ack before closing the transport. Default 20 s.
  absl::Duration keepalive_timeout = absl::Seconds(20);
  // Shortest interval between client pings the server tolerates on a transport without data;
  // a client pinging faster is sent GOAWAY. Default 10 s (ChannelOptions pings every 30 s).
  absl::Duration min_ping_interval = absl::Seconds(10);
  // SO_REUSEPORT on the listening socket. Default false, so that a second server on a port in
  // use fails to start instead of silently sharing the port.
  bool allow_reuseport = false;
  // Credentials of the listening port (rpc/tls_credentials.h); null = insecure (plain).
  std::shared_ptr<grpc::ServerCredentials> credentials;
};

class RpcServer {
 public:
  // Registers `services` (borrowed, non-null), binds `address` with options.credentials
  // ("0.0.0.0:50051", or port 0 such as "127.0.0.1:0" for a kernel-chosen port) and starts
  // serving with health status SERVING for "" and every registered service.
  // Returns kInvalidArgument for a null service, kUnavailable (naming the address) when the
  // address cannot be bound or the server fails to start.
  static absl::StatusOr<std::unique_ptr<RpcServer>> Start(
      const std::string& address, const std::vector<grpc::Service*>& services,
      const RpcServerOptions& options = {});

  RpcServer(const RpcServer&) = delete;
  RpcServer& operator=(const RpcServer&) = delete;
  // Shuts down immediately (cancelling in-flight calls) if Shutdown was not called, then waits.
  ~RpcServer();

  // The bound port (the kernel's choice when the address asked for port 0).
  int port() const { return port_; }

  // A channel to this server's services that skips the network (grpc::Server::InProcessChannel),
  // with the server's message size limit: the HTTP front door calls the Generation service
  // through it, so both public APIs share one implementation. Valid until Shutdown.
  std::shared_ptr<grpc::Channel> InProcessChannel() const;

  // Fully qualified names of the registered services (health-check service names), e.g.
  // "sparseserve.v1.DecodeWorker"; gRPC's own services ("grpc.*") are left out.
  const std::vector<std::string>& service_names() const { return service_names_; }

  // Sets the health status of "" and every service to SERVING or NOT_SERVING (draining: load
  // balancers stop sending new calls, in-flight ones continue). Ignored after Shutdown.
  void SetServing(bool serving) ABSL_LOCKS_EXCLUDED(mu_);

  // Marks the server NOT_SERVING, stops accepting calls, lets in-flight calls run for up to
  // `drain_deadline`, then cancels the rest; returns once all calls have finished. A second
  // call returns at once.
  void Shutdown(absl::Duration drain_deadline) ABSL_LOCKS_EXCLUDED(mu_);

  // Blocks until the server has shut down (some other thread calls Shutdown).
  void Wait();

 private:
  RpcServer(std::unique_ptr<grpc::Server> server, int port, std::vector<std::string> names,
            int max_message_bytes);
  void SetHealthLocked(bool serving) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::unique_ptr<grpc::Server> server_;
  const int port_;
  const std::vector<std::string> service_names_;
  const int max_message_bytes_;
  absl::Mutex mu_;
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace sparseserve::rpc

#endif  // SPARSESERVE_COMMON_RPC_SERVER_RUNNER_H_
