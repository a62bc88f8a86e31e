#include "common/rpc/server_runner.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/core/logging.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/impl/server_builder_option.h"
#include "grpcpp/impl/server_builder_plugin.h"
#include "grpcpp/impl/server_initializer.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"

namespace sparseserve::rpc {
namespace {

// grpc::Service does not expose its name; the server parses it from the method paths. This
// builder plugin copies that list once the server has started (ServerBuilderPlugin::Finish).
class ServiceListPlugin final : public grpc::ServerBuilderPlugin {
 public:
  // `names` is borrowed; the caller keeps it alive until BuildAndStart returns.
  explicit ServiceListPlugin(std::vector<std::string>* names) : names_(names) {}
  std::string name() override { return "sparseserve_service_list"; }
  void InitServer(grpc::ServerInitializer* /*si*/) override {}
  void Finish(grpc::ServerInitializer* si) override {
    for (const std::string& service : *si->GetServiceList()) {
      if (!absl::StartsWith(service, "grpc.")) names_->push_back(service);
    }
  }
  void ChangeArguments(const std::string& /*name*/, void* /*value*/) override {}

 private:
  std::vector<std::string>* names_;
};

// Per-builder way to install a plugin (ServerBuilder::InternalAddPluginFactory is global).
class ServiceListOption final : public grpc::ServerBuilderOption {
 public:
  explicit ServiceListOption(std::vector<std::string>* names) : names_(names) {}
  void UpdateArguments(grpc::ChannelArguments* /*args*/) override {}
  void UpdatePlugins(std::vector<std::unique_ptr<grpc::ServerBuilderPlugin>>* plugins) override {
    plugins->push_back(std::make_unique<ServiceListPlugin>(names_));
  }

 private:
  std::vector<std::string>* names_;  // borrowed, see ServiceListPlugin
};

int ToMillis(absl::Duration d) {
  return static_cast<int>(absl::ToInt64Milliseconds(d));
}

}  // namespace

RpcServer::RpcServer(std::unique_ptr<grpc::Server> server, int port, std::vector<std::string> names,
                     int max_message_bytes)
    : server_(std::move(server)),
      port_(port),
      service_names_(std::move(names)),
      max_message_bytes_(max_message_bytes) {}

std::shared_ptr<grpc::Channel> RpcServer::InProcessChannel() const {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(max_message_bytes_);
  args.SetMaxSendMessageSize(max_message_bytes_);
  return server_->InProcessChannel(args);
}

absl::StatusOr<std::unique_ptr<RpcServer>> RpcServer::Start(
    const std::string& address, const std::vector<grpc::Service*>& services,
    const RpcServerOptions& options) {
  // Both are process-wide switches read by the next BuildAndStart; setting them again is a no-op.
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();

  grpc::ServerBuilder builder;
  int selected_port = 0;
  builder.AddListeningPort(
      address,
      options.credentials != nullptr ? options.credentials : grpc::InsecureServerCredentials(),
      &selected_port);
  for (grpc::Service* service : services) {
    if (service == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("rpc server ", address, ": null service"));
    }
    builder.RegisterService(service);
  }
  builder.SetMaxReceiveMessageSize(options.max_message_bytes);
  builder.SetMaxSendMessageSize(options.max_message_bytes);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, ToMillis(options.keepalive_time));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, ToMillis(options.keepalive_timeout));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
                             ToMillis(options.min_ping_interval));
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, options.allow_reuseport ? 1 : 0);
  std::vector<std::string> names;
  builder.SetOption(std::make_unique<ServiceListOption>(&names));

  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || selected_port == 0) {
    if (server != nullptr) server->Shutdown();
    return absl::UnavailableError(
        absl::StrCat("rpc server: cannot listen on ", address,
                     " (address in use, malformed or not local; see the gRPC log)"));
  }
  if (server->GetHealthCheckService() == nullptr) {
    server->Shutdown();
    return absl::UnavailableError(
        absl::StrCat("rpc server ", address, ": default health service missing"));
  }
  auto rpc_server = std::unique_ptr<RpcServer>(
      new RpcServer(std::move(server), selected_port, std::move(names), options.max_message_bytes));
  rpc_server->SetServing(true);
  SS_LOG_INFO("rpc server listening on {} (port {})", address, selected_port);
  return rpc_server;
}

RpcServer::~RpcServer() {
  Shutdown(absl::ZeroDuration());
  Wait();
}

void RpcServer::SetHealthLocked(bool serving) {
  grpc::HealthCheckServiceInterface* health = server_->GetHealthCheckService();
  health->SetServingStatus("", serving);
  for (const std::string& name : service_names_) health->SetServingStatus(name, serving);
}

void RpcServer::SetServing(bool serving) {
  absl::MutexLock lock(&mu_);
  if (shut_down_) return;
  SetHealthLocked(serving);
}

void RpcServer::Shutdown(absl::Duration drain_deadline) {
  {
    absl::MutexLock lock(&mu_);
    if (shut_down_) return;
    shut_down_ = true;
    SetHealthLocked(false);
  }
  SS_LOG_INFO("rpc server on port {}: draining for up to {}", port_,
              absl::FormatDuration(drain_deadline));
  // Not under mu_: this blocks until in-flight calls finish or are cancelled at the deadline.
  server_->Shutdown(absl::ToChronoTime(absl::Now() + drain_deadline));
}

void RpcServer::Wait() {
  server_->Wait();
}

}  // namespace sparseserve::rpc
