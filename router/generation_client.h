// GenerationClient: a blocking client of the public Generation API, for `sparseserve generate
// --server` and tests. Streams text deltas to a callback as they arrive. One channel per client;
// thread-compatible (one call at a time per client object).
#ifndef SPARSESERVE_ROUTER_GENERATION_CLIENT_H_
#define SPARSESERVE_ROUTER_GENERATION_CLIENT_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/security/credentials.h"
#include "sparseserve/v1/generation.grpc.pb.h"

namespace sparseserve::router {

struct RemoteGeneration {
  std::vector<int32_t> tokens;
  std::string text;
  v1::FinishReason finish_reason = v1::FINISH_REASON_UNSPECIFIED;
  v1::Usage usage;
  v1::Timings timings;
};

class GenerationClient {
 public:
  // `credentials`: null = plain; TLS ones (rpc::ChannelCredentialsFor) for a TLS router.
  // `api_key`: sent with every call as "authorization: Bearer KEY" when not empty.
  explicit GenerationClient(const std::string& address,
                            const std::shared_ptr<grpc::ChannelCredentials>& credentials = nullptr,
                            std::string api_key = "");
  // Runs one Generate call; `on_text` gets each text delta. Errors are the server's status
  // (e.g. kInvalidArgument, kUnavailable) or kDeadlineExceeded after `timeout`.
  absl::StatusOr<RemoteGeneration> Generate(
      const v1::GenerateRequest& request, absl::Duration timeout,
      const std::function<void(absl::string_view)>& on_text = nullptr);

 private:
  std::unique_ptr<v1::Generation::Stub> stub_;
  const std::string api_key_;
};

}  // namespace sparseserve::router

#endif  // SPARSESERVE_ROUTER_GENERATION_CLIENT_H_
