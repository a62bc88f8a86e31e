// HttpFrontDoor: the OpenAI-compatible HTTP API of the router (`--http-port`), so that the
// `openai` client, curl and OpenAI-speaking load generators reach sparseserve:
//   POST /v1/completions, POST /v1/chat/completions (JSON, or server-sent events with
//   "stream": true), GET /v1/models, GET /v1/models/{id}, GET /health.
// Each request becomes one call of the public Generation service over the router's in-process
// gRPC channel (RpcServer::InProcessChannel), so both public APIs share one implementation: the
// same validation, routing, retries, migration and metrics. Errors are OpenAI's {"error": ...}
// bodies with the HTTP status of the gRPC code (openai_response.h). A client that disconnects
// mid-stream cancels its call. docs/api.md shows curl and `openai` examples.
//
// Thread-safe; requests are served by a pool of `threads` (a stream holds one thread while it
// runs, so this bounds the concurrent HTTP requests; see HttpFrontDoorOptions::threads).
#ifndef SPARSESERVE_ROUTER_HTTP_FRONT_DOOR_H_
#define SPARSESERVE_ROUTER_HTTP_FRONT_DOOR_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/tokenizer/tokenizer.h"
#include "grpcpp/channel.h"
#include "router/openai_request.h"

namespace httplib {
class Server;
}  // namespace httplib

namespace sparseserve::router {

// Renders chat messages into the prompt text with the model's chat template (the caller owns the
// template); kInvalidArgument for messages the template refuses (raise_exception).
using ChatRenderer = std::function<absl::StatusOr<std::string>(
    const std::vector<tokenizer::ChatMessage>& messages, bool add_generation_prompt)>;

struct HttpFrontDoorOptions {
  // "host:port"; port 0 = a kernel-chosen port (port() tells which).
  std::string address = "0.0.0.0:8000";
  // The model id clients name ("model"); a request naming another one gets 404. Required.
  std::string served_model_name;
  int max_context = 0;  // reported by /v1/models as max_model_len
  // Connections served at once (see the class comment). Default 256. Generation requests may
  // take all but 8 of them (half when there are 16 or fewer): beyond that they get 429 at once,
  // so /health and /v1/models always find a thread.
  int threads = 256;
  // Deadline of one generation request (its whole stream), as the router's decode timeout; a
  // client that vanished without closing its connection frees its thread by then. Default 10 min.
  absl::Duration request_timeout = absl::Minutes(10);
  // Chat requests render with this; null: the model has no chat template and chat requests get
  // 400 with `chat_template_missing` as the message.
  ChatRenderer render_chat;
  std::string chat_template_missing = "the model has no chat template (start with --chat-template)";
  // Accepted API keys ("Authorization: Bearer KEY"); empty = no authentication. Compared in
  // constant time; never logged.
  std::vector<std::string> api_keys;
  // TLS: PEM certificate chain and private key; both empty = plain HTTP.
  std::string tls_cert_file;
  std::string tls_key_file;
};

class HttpFrontDoor {
 public:
  // Binds options.address and starts serving on a thread of its own. `generation`: a channel to
  // the router's Generation service; `tokenizer` (borrowed, outlives this) tokenizes rendered chat
  // prompts and spells logprobs' tokens. kInvalidArgument for bad options or unreadable TLS
  // files, kUnavailable when the address cannot be bound.
  static absl::StatusOr<std::unique_ptr<HttpFrontDoor>> Start(
      HttpFrontDoorOptions options, std::shared_ptr<grpc::Channel> generation,
      const tokenizer::Tokenizer* tokenizer);

  HttpFrontDoor(const HttpFrontDoor&) = delete;
  HttpFrontDoor& operator=(const HttpFrontDoor&) = delete;
  // Stop(), then waits for in-flight requests to end.
  ~HttpFrontDoor();

  int port() const { return port_; }
  bool tls() const { return !options_.tls_cert_file.empty(); }

  // Stops accepting connections; requests in flight go on (their calls end when the Generation
  // service drains). Does not block. Idempotent.
  void Stop();

 private:
  HttpFrontDoor(HttpFrontDoorOptions options, std::shared_ptr<grpc::Channel> generation,
                const tokenizer::Tokenizer* tokenizer);
  void RegisterRoutes();

  const HttpFrontDoorOptions options_;
  const std::shared_ptr<grpc::Channel> generation_;
  const tokenizer::Tokenizer* const tokenizer_;
  const int64_t started_unix_;
  std::atomic<int> generating_{0};  // generation requests holding a thread
  std::unique_ptr<httplib::Server> server_;
  int port_ = 0;
  std::thread listener_;
};

}  // namespace sparseserve::router

#endif  // SPARSESERVE_ROUTER_HTTP_FRONT_DOOR_H_
