#include "router/http_front_door.h"

#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <ctime>
#include <utility>

#include "absl/random/random.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/core/host_port.h"
#include "common/core/logging.h"
#include "common/core/status.h"
#include "common/rpc/status_conversion.h"
#include "grpcpp/client_context.h"
#include "httplib.h"
#include "nlohmann/json.hpp"
#include "router/api_keys.h"
#include "router/openai_response.h"
#include "sparseserve/v1/generation.grpc.pb.h"

namespace sparseserve::router {
namespace {

using Json = nlohmann::ordered_json;

// Largest request body; a longer one gets 413 before it is read.
constexpr size_t kMaxBodyBytes = size_t{64} << 20;
// A streaming client that reads nothing for this long is dropped (its call is cancelled).
constexpr time_t kWriteTimeoutSeconds = 60;

void ReplyError(httplib::Response& res, const absl::Status& status) {
  res.status = HttpStatusOf(status.code());
  res.set_content(OpenAiErrorBody(status), "application/json");
}

std::string NewResponseId(OpenAiEndpoint endpoint) {
  absl::BitGen gen;
  return absl::StrFormat("%s-%016x%016x",
                         endpoint == OpenAiEndpoint::kChatCompletions ? "chatcmpl" : "cmpl",
                         absl::Uniform<uint64_t>(gen), absl::Uniform<uint64_t>(gen));
}

int64_t UnixNow() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// One Generate call whose messages are turned into an HTTP response, shared between the handler
// and (when streaming) httplib's content provider.
struct GenerateCall {
  // Holds one of `generating`'s slots (taken by the caller) until the response is done.
  GenerateCall(const OpenAiRequest& request, std::string id, std::string model,
               const tokenizer::Tokenizer* tokenizer, std::atomic<int>* slots)
      : builder(request, std::move(id), std::move(model), UnixNow(), tokenizer),
        generating(slots) {}
  GenerateCall(const GenerateCall&) = delete;
  GenerateCall& operator=(const GenerateCall&) = delete;
  ~GenerateCall() { generating->fetch_sub(1); }
  grpc::ClientContext context;
  std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader;
  OpenAiResponseBuilder builder;
  std::atomic<int>* const generating;
  bool finished = false;  // reader->Finish was called
  grpc::Status Finish() {
    finished = true;
    return reader->Finish();
  }
};

// Writes one SSE event; false when the client is gone.
bool WriteEvent(httplib::DataSink& sink, absl::string_view payload) {
  const std::string event = absl::StrCat("data: ", payload, "\n\n");
  return sink.is_writable() && sink.write(event.data(), event.size());
}

}  // namespace

HttpFrontDoor::HttpFrontDoor(HttpFrontDoorOptions options,
                             std::shared_ptr<grpc::Channel> generation,
                             const tokenizer::Tokenizer* tokenizer)
    : options_(std::move(options)),
      generation_(std::move(generation)),
      tokenizer_(tokenizer),
      started_unix_(UnixNow()) {}

absl::StatusOr<std::unique_ptr<HttpFrontDoor>> HttpFrontDoor::Start(
    HttpFrontDoorOptions options, std::shared_ptr<grpc::Channel> generation,
    const tokenizer::Tokenizer* tokenizer) {
  if (options.served_model_name.empty() || generation == nullptr || tokenizer == nullptr ||
      options.threads < 1) {
    return absl::InvalidArgumentError(
        "http front door: needs a model name, a channel, a tokenizer and threads >= 1");
  }
  if (options.tls_cert_file.empty() != options.tls_key_file.empty()) {
    return absl::InvalidArgumentError("http front door: TLS needs both a certificate and a key");
  }
  for (const std::string& key : options.api_keys) {
    if (key.empty()) return absl::InvalidArgumentError("http front door: an API key is empty");
  }
  const std::string address = options.address;
  absl::StatusOr<core::ListenAddress> listen = core::ParseListenAddress(address);
  if (!listen.ok()) return AnnotateStatus(listen.status(), "http front door");
  const std::string& host = listen->host;  // "[::]:8000": httplib binds "::"
  const int port = listen->port;
  std::unique_ptr<HttpFrontDoor> door(
      new HttpFrontDoor(std::move(options), std::move(generation), tokenizer));
  if (door->tls()) {
    door->server_ = std::make_unique<httplib::SSLServer>(door->options_.tls_cert_file.c_str(),
                                                         door->options_.tls_key_file.c_str());
    if (!door->server_->is_valid()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "http front door: cannot load the TLS certificate ", door->options_.tls_cert_file,
          " and key ", door->options_.tls_key_file, " (PEM files, key matching the certificate)"));
    }
  } else {
    door->server_ = std::make_unique<httplib::Server>();
  }
  httplib::Server& server = *door->server_;
  // SO_REUSEADDR only (httplib's default adds SO_REUSEPORT, which would share a port in use).
  server.set_socket_options([](int sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  const int threads = door->options_.threads;
  server.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  server.set_payload_max_length(kMaxBodyBytes);
  server.set_write_timeout(kWriteTimeoutSeconds, 0);
  server.set_keep_alive_max_count(1000);
  door->RegisterRoutes();
  const int bound =
      port == 0 ? server.bind_to_any_port(host) : (server.bind_to_port(host, port) ? port : -1);
  if (bound <= 0) {
    return absl::UnavailableError(absl::StrCat("http front door: cannot listen on ", address,
                                               " (address in use or not available)"));
  }
  door->port_ = bound;
  HttpFrontDoor* raw = door.get();
  door->listener_ = std::thread([raw] { raw->server_->listen_after_bind(); });
  // httplib's stop() acts only once the accept loop runs: wait for it, so Stop never misses.
  for (int i = 0; i < 5000 && !server.is_running(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  SS_LOG_INFO("http front door ({}) listening on {} (port {}), model '{}'",
              door->tls() ? "https" : "http", address, bound, door->options_.served_model_name);
  return door;
}

HttpFrontDoor::~HttpFrontDoor() {
  Stop();
  if (listener_.joinable()) listener_.join();
}

void HttpFrontDoor::Stop() {
  if (server_ != nullptr) server_->stop();
}

void HttpFrontDoor::RegisterRoutes() {
  httplib::Server& server = *server_;
  auto stub = std::shared_ptr<v1::Generation::Stub>(v1::Generation::NewStub(generation_));

  // Every endpoint but /health needs a key when keys are set. Checked inside the handler, once
  // httplib has read the body: a refusal before that would leave the body on a kept-alive
  // connection, to be read as the next request.
  auto guarded = [this](httplib::Server::Handler handler) {
    return [this, handler = std::move(handler)](const httplib::Request& req,
                                                httplib::Response& res) {
      if (!AuthorizationAccepted(req.get_header_value("Authorization"), options_.api_keys)) {
        return ReplyError(res, absl::UnauthenticatedError(
                                   "missing or invalid API key (send Authorization: Bearer KEY)"));
      }
      handler(req, res);
    };
  };
  // Routing failures and httplib's own errors (413, 400 for a malformed request line) as
  // OpenAI error bodies.
  server.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    absl::Status status;
    switch (res.status) {
      case 404:
        status = absl::NotFoundError(absl::StrCat("no route ", req.method, " ", req.path));
        break;
      case 413: status = absl::InvalidArgumentError("request body too large"); break;
      default: status = absl::InvalidArgumentError(absl::StrCat("HTTP error ", res.status));
    }
    const int code = res.status;
    res.set_content(OpenAiErrorBody(status), "application/json");
    res.status = code;
  });
  server.set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, const std::exception_ptr& /*error*/) {
        ReplyError(res, absl::InternalError("internal error while serving the request"));
      });

  server.Get("/health", [this, stub](const httplib::Request&, httplib::Response& res) {
    grpc::ClientContext context;
    // Probes carry no key: the front door speaks for them.
    if (!options_.api_keys.empty()) {
      context.AddMetadata("authorization", absl::StrCat("Bearer ", options_.api_keys.front()));
    }
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
    v1::GetModelInfoResponse info;
    const grpc::Status status = stub->GetModelInfo(&context, v1::GetModelInfoRequest(), &info);
    if (!status.ok()) return ReplyError(res, rpc::FromGrpcStatus(status));
    res.set_content(Json{{"status", "ok"},
                         {"decode_workers", info.num_decode_workers()},
                         {"prefill_workers", info.num_prefill_workers()}}
                        .dump(),
                    "application/json");
  });

  auto model_json = [this] {
    return Json{{"id", options_.served_model_name},
                {"object", "model"},
                {"created", started_unix_},
                {"owned_by", "sparseserve"},
                {"max_model_len", options_.max_context}};
  };
  server.Get("/v1/models", guarded([model_json](const httplib::Request&, httplib::Response& res) {
               res.set_content(
                   Json{{"object", "list"}, {"data", Json::array({model_json()})}}.dump(),
                   "application/json");
             }));
  server.Get(R"(/v1/models/(.+))",
             guarded([this, model_json](const httplib::Request& req, httplib::Response& res) {
               if (req.matches[1] != options_.served_model_name) {
                 return ReplyError(
                     res, absl::NotFoundError(absl::StrCat("the model '", req.matches[1].str(),
                                                           "' does not exist; this server serves '",
                                                           options_.served_model_name, "'")));
               }
               res.set_content(model_json().dump(), "application/json");
             }));

  auto generate = [this, stub](OpenAiEndpoint endpoint) {
    return [this, stub, endpoint](const httplib::Request& req, httplib::Response& res) {
      absl::StatusOr<OpenAiRequest> parsed = ParseOpenAiRequest(req.body, endpoint);
      if (!parsed.ok()) return ReplyError(res, parsed.status());
      if (!parsed->model.empty() && parsed->model != options_.served_model_name) {
        return ReplyError(res, absl::NotFoundError(absl::StrCat("the model '", parsed->model,
                                                                "' does not exist; this server "
                                                                "serves '",
                                                                options_.served_model_name, "'")));
      }
      v1::GenerateRequest& request = parsed->generate;
      if (endpoint == OpenAiEndpoint::kChatCompletions) {
        if (!options_.render_chat) {
          return ReplyError(res, absl::InvalidArgumentError(options_.chat_template_missing));
        }
        absl::StatusOr<std::string> prompt =
            options_.render_chat(parsed->messages, parsed->add_generation_prompt);
        if (!prompt.ok()) return ReplyError(res, prompt.status());
        // The template writes BOS and every special token itself (as HF's apply_chat_template,
        // whose output is tokenized without adding special tokens).
        absl::StatusOr<std::vector<int32_t>> ids = tokenizer_->Encode(*prompt, false);
        if (!ids.ok()) return ReplyError(res, ids.status());
        request.mutable_token_ids()->mutable_ids()->Assign(ids->begin(), ids->end());
      }
      if (parsed->top_logprobs >= 0) request.set_top_logprobs(parsed->top_logprobs);
      std::string id = NewResponseId(endpoint);
      request.set_request_id(id);

      const int limit =
          options_.threads > 16 ? options_.threads - 8 : std::max(1, options_.threads / 2);
      if (generating_.fetch_add(1) >= limit) {
        generating_.fetch_sub(1);
        return ReplyError(res, absl::ResourceExhaustedError(absl::StrCat(
                                   "the HTTP API serves ", limit,
                                   " generation requests at once (--http-threads); retry later")));
      }
      auto call = std::make_shared<GenerateCall>(*parsed, std::move(id), options_.served_model_name,
                                                 tokenizer_, &generating_);
      call->context.set_deadline(absl::ToChronoTime(absl::Now() + options_.request_timeout));
      // The key was checked here; the Generation service checks it again (it guards the gRPC port).
      if (!options_.api_keys.empty()) {
        call->context.AddMetadata("authorization", req.get_header_value("Authorization"));
      }
      call->reader = stub->Generate(&call->context, request);
      // The first message (or the error) decides the HTTP status: errors found before any token
      // (validation, no worker, full queue) are proper 4xx/5xx responses, not a broken stream.
      v1::GenerateResponse first;
      if (!call->reader->Read(&first)) {
        const grpc::Status status = call->Finish();
        return ReplyError(res, status.ok() ? absl::InternalError("the stream ended empty")
                                           : rpc::FromGrpcStatus(status));
      }
      if (!parsed->stream) {
        call->builder.Add(first);
        v1::GenerateResponse message;
        while (call->reader->Read(&message)) call->builder.Add(message);
        const grpc::Status status = call->Finish();
        if (!status.ok()) return ReplyError(res, rpc::FromGrpcStatus(status));
        res.set_content(call->builder.Body(), "application/json");
        return;
      }
      res.set_header("Cache-Control", "no-cache");
      res.set_header("X-Accel-Buffering", "no");
      auto pending = std::make_shared<v1::GenerateResponse>(std::move(first));
      res.set_chunked_content_provider(
          "text/event-stream",
          [call, pending](size_t /*offset*/, httplib::DataSink& sink) {
            bool writable = true;
            v1::GenerateResponse message = std::move(*pending);
            do {
              for (const std::string& chunk : call->builder.StreamChunks(message)) {
                writable = writable && WriteEvent(sink, chunk);
              }
              if (!writable) {
                call->context.TryCancel();  // the client left: stop generating for it
                break;
              }
            } while (call->reader->Read(&message));
            while (call->reader->Read(&message)) {
            }
            const grpc::Status status = call->Finish();
            if (!writable) return false;
            if (!status.ok()) {
              // Headers are gone: the error travels as an event, as vLLM and OpenAI send it.
              WriteEvent(sink, OpenAiErrorBody(rpc::FromGrpcStatus(status)));
            }
            WriteEvent(sink, "[DONE]");
            sink.done();
            return true;
          },
          [call](bool /*success*/) {
            // The provider never ran (connection closed first): end the call.
            if (!call->finished) {
              call->context.TryCancel();
              v1::GenerateResponse message;
              while (call->reader->Read(&message)) {
              }
              call->Finish();
            }
          });
    };
  };
  server.Post("/v1/completions", guarded(generate(OpenAiEndpoint::kCompletions)));
  server.Post("/v1/chat/completions", guarded(generate(OpenAiEndpoint::kChatCompletions)));
}

}  // namespace sparseserve::router
