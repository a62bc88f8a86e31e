#include "common/rpc/channel_cache.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"

namespace sparseserve::rpc {

ChannelCache::ChannelCache(ChannelOptions options) : options_(std::move(options)) {}

std::shared_ptr<grpc::Channel> ChannelCache::Get(const std::string& address,
                                                 const std::string& tls_name) {
  const std::string key = tls_name.empty() ? address : absl::StrCat(address, " as ", tls_name);
  absl::MutexLock lock(&mu_);
  auto it = channels_.find(key);
  if (it != channels_.end()) return it->second;
  // Channel creation is cheap and does no I/O (connection is lazy), so it is fine under mu_.
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS,
              static_cast<int>(absl::ToInt64Milliseconds(options_.keepalive_time)));
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
              static_cast<int>(absl::ToInt64Milliseconds(options_.keepalive_timeout)));
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);  // keep pinging while idle
  args.SetMaxReceiveMessageSize(options_.max_message_bytes);
  args.SetMaxSendMessageSize(options_.max_message_bytes);
  if (!tls_name.empty() && options_.credentials != nullptr) args.SetSslTargetNameOverride(tls_name);
  std::shared_ptr<grpc::Channel> channel = grpc::CreateCustomChannel(
      address,
      options_.credentials != nullptr ? options_.credentials : grpc::InsecureChannelCredentials(),
      args);
  channels_.emplace(key, channel);
  return channel;
}

std::size_t ChannelCache::size() const {
  absl::MutexLock lock(&mu_);
  return channels_.size();
}

}  // namespace sparseserve::rpc
