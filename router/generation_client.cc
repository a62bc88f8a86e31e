#include "router/generation_client.h"

#include <grpcpp/grpcpp.h>

#include <utility>

#include "common/rpc/deadline.h"
#include "common/rpc/status_conversion.h"

namespace sparseserve::router {

GenerationClient::GenerationClient(const std::string& address,
                                   const std::shared_ptr<grpc::ChannelCredentials>& credentials,
                                   std::string api_key)
    : stub_(v1::Generation::NewStub(grpc::CreateChannel(
          address, credentials != nullptr ? credentials : grpc::InsecureChannelCredentials()))),
      api_key_(std::move(api_key)) {}

absl::StatusOr<RemoteGeneration> GenerationClient::Generate(
    const v1::GenerateRequest& request, absl::Duration timeout,
    const std::function<void(absl::string_view)>& on_text) {
  grpc::ClientContext context;
  rpc::SetDeadline(context, timeout);
  if (!api_key_.empty()) context.AddMetadata("authorization", "Bearer " + api_key_);
  std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader =
      stub_->Generate(&context, request);
  RemoteGeneration out;
  v1::GenerateResponse message;
  while (reader->Read(&message)) {
    out.tokens.insert(out.tokens.end(), message.token_ids().begin(), message.token_ids().end());
    out.text += message.text();
    if (on_text && !message.text().empty()) on_text(message.text());
    if (message.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) {
      out.finish_reason = message.finish_reason();
      out.usage = message.usage();
      out.timings = message.timings();
    }
  }
  const grpc::Status status = reader->Finish();
  if (!status.ok()) return rpc::FromGrpcStatus(status);
  return out;
}

}  // namespace sparseserve::router
