// `sparseserve router`: the front door process (also run inside `sparseserve up`).
#include <cstdio>
#include <filesystem>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/core/logging.h"
#include "common/core/status.h"
#include "common/engine/chat_template_source.h"
#include "common/metrics/metrics_exporter.h"
#include "common/rpc/server_runner.h"
#include "router/api_keys.h"
#include "router/http_front_door.h"
#include "router/router.h"
#include "tools/command.h"
#include "tools/model_path_flag.h"
#include "tools/request_options_flags.h"
#include "tools/serve_flags.h"
#include "tools/termination_signal.h"

ABSL_FLAG(std::string, decode_workers, "",
          "Comma-separated decode workers (required): host:port, or dns:///NAME:PORT for every "
          "address NAME resolves to (e.g. a Kubernetes headless Service), re-resolved each "
          "health round so replicas join and leave.");
ABSL_FLAG(std::string, prefill_workers, "",
          "Comma-separated prefill workers: host:port or dns:///NAME:PORT (see "
          "--decode-workers).");
ABSL_FLAG(int, disagg_threshold, 1024,
          "Uncached prompt tokens at or above which prefill runs on a prefill worker "
          "(conditional disaggregation); below it the decode worker prefills locally.");
ABSL_FLAG(int, migration_limit, 3,
          "Times a request may move to another decode worker when its worker dies mid-stream.");
ABSL_FLAG(double, status_interval_seconds, 0.5, "How often workers' health and load are polled.");
ABSL_FLAG(int, http_port, 0,
          "Port of the OpenAI-compatible HTTP API (/v1/completions, /v1/chat/completions, "
          "/v1/models, /health) on the --address host; 0 = any free port (printed in the READY "
          "line), -1 = no HTTP API.");
ABSL_FLAG(int, http_threads, 256,
          "HTTP requests served at once (a streaming request holds one thread while it runs).");
ABSL_FLAG(std::string, api_key_file, "",
          "File of accepted API keys, one per line ('#' comments): every call of the public gRPC "
          "API (metadata authorization: Bearer KEY) and the HTTP API (header Authorization: "
          "Bearer KEY; /health excepted) must carry one, else UNAUTHENTICATED / 401. Empty = "
          "no authentication.");
ABSL_FLAG(std::string, chat_template, "",
          "Jinja chat template file for /v1/chat/completions; default: the model's own "
          "(tokenizer_config.json chat_template, or GGUF tokenizer.chat_template). A model "
          "without one answers chat requests with 400.");
ABSL_FLAG(std::string, served_model_name, "",
          "Model id of the HTTP API (what clients pass as \"model\"); default: the model file or "
          "directory name without extension.");

ABSL_DECLARE_FLAG(std::string, tls_cert);
ABSL_DECLARE_FLAG(std::string, tls_key);

namespace sparseserve::tools {

router::RouterOptions RouterOptionsFromFlags() {
  router::RouterOptions options;
  options.model_path = ModelPathFromFlags();
  for (absl::string_view a :
       absl::StrSplit(absl::GetFlag(FLAGS_decode_workers), ',', absl::SkipEmpty())) {
    options.decode_workers.emplace_back(a);
  }
  for (absl::string_view a :
       absl::StrSplit(absl::GetFlag(FLAGS_prefill_workers), ',', absl::SkipEmpty())) {
    options.prefill_workers.emplace_back(a);
  }
  options.disagg_threshold_tokens = absl::GetFlag(FLAGS_disagg_threshold);
  options.migration_limit = absl::GetFlag(FLAGS_migration_limit);
  options.status_interval = absl::Seconds(absl::GetFlag(FLAGS_status_interval_seconds));
  return options;
}

namespace {

// The model id the HTTP API serves: --served-model-name, else the model's file name without its
// extension ("stories260K.gguf" -> "stories260K") or directory name.
std::string ServedModelName(const std::string& model_path) {
  std::string name = absl::GetFlag(FLAGS_served_model_name);
  if (!name.empty()) return name;
  std::filesystem::path path(model_path);
  if (!path.has_filename()) path = path.parent_path();  // "dir/"
  return path.extension() == ".gguf" ? path.stem().string() : path.filename().string();
}

// The chat template of /v1/chat/completions: --chat-template, else the model's own. A model
// without one is not an error (chat requests get 400); a template that does not parse is.
absl::Status SetChatTemplate(const std::string& model_path, router::HttpFrontDoorOptions* http) {
  const std::string file = absl::GetFlag(FLAGS_chat_template);
  absl::StatusOr<engine::LoadedChatTemplate> loaded = engine::LoadChatTemplate(model_path, file);
  if (absl::IsNotFound(loaded.status()) && file.empty()) {
    http->chat_template_missing =
        absl::StrCat("the model ", model_path,
                     " has no chat template; start the router with --chat-template "
                     "FILE to serve /v1/chat/completions");
    SS_LOG_INFO("router: {}", http->chat_template_missing);
    return absl::OkStatus();
  }
  if (!loaded.ok()) return loaded.status();
  SS_LOG_INFO("router: chat template from {}", loaded->origin);
  auto chat = std::make_shared<engine::LoadedChatTemplate>(*std::move(loaded));
  http->render_chat = [chat](const std::vector<tokenizer::ChatMessage>& messages,
                             bool add_generation_prompt) {
    tokenizer::ChatTemplateContext context;
    context.add_generation_prompt = add_generation_prompt;
    context.bos_token = chat->bos_token;
    context.eos_token = chat->eos_token;
    return chat->chat_template.Render(messages, context);
  };
  return absl::OkStatus();
}

// The HTTP address: the gRPC --address host with --http-port.
std::string HttpAddress(int port) {
  const std::string grpc = ListenAddressFromFlags();
  return absl::StrCat(grpc.substr(0, grpc.rfind(':')), ":", port);
}

}  // namespace

absl::Status ServeRouter(router::RouterOptions options, const char* role,
                         const std::function<void()>& on_stop) {
  absl::StatusOr<std::unique_ptr<metrics::MetricsExporter>> exporter =
      metrics::MetricsExporter::Start(MetricsAddressFromFlags());
  if (!exporter.ok()) return exporter.status();
  options.metrics_registry = (*exporter)->registry();
  const std::string model_path = options.model_path;
  if (const std::string key_file = absl::GetFlag(FLAGS_api_key_file); !key_file.empty()) {
    SS_ASSIGN_OR_RETURN(options.api_keys, router::LoadApiKeys(key_file));
  }
  const std::vector<std::string> api_keys = options.api_keys;
  // TLS: the public port with --tls-cert/--tls-key; the links to the workers with --tls-ca.
  SS_ASSIGN_OR_RETURN(const rpc::TlsPem tls, TlsFromFlags());
  SS_ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> public_credentials,
                      rpc::ServerCredentialsFor(tls, /*require_client_certs=*/false));
  if (tls.has_ca()) {
    SS_ASSIGN_OR_RETURN(options.channel.credentials, rpc::ChannelCredentialsFor(tls));
  }
  absl::StatusOr<std::unique_ptr<router::Router>> r = router::Router::Create(std::move(options));
  if (!r.ok()) return r.status();
  absl::StatusOr<std::unique_ptr<rpc::RpcServer>> server = rpc::RpcServer::Start(
      ListenAddressFromFlags(), {(*r)->service()}, {.credentials = public_credentials});
  if (!server.ok()) return server.status();
  std::unique_ptr<router::HttpFrontDoor> http;
  if (const int http_port = absl::GetFlag(FLAGS_http_port); http_port >= 0) {
    router::HttpFrontDoorOptions http_options;
    http_options.address = HttpAddress(http_port);
    http_options.served_model_name = ServedModelName(model_path);
    http_options.max_context = (*r)->limits().max_context;
    http_options.threads = absl::GetFlag(FLAGS_http_threads);
    http_options.api_keys = api_keys;
    http_options.tls_cert_file = absl::GetFlag(FLAGS_tls_cert);
    http_options.tls_key_file = absl::GetFlag(FLAGS_tls_key);
    SS_RETURN_IF_ERROR(SetChatTemplate(model_path, &http_options));
    SS_ASSIGN_OR_RETURN(
        http, router::HttpFrontDoor::Start(std::move(http_options), (*server)->InProcessChannel(),
                                           &(*r)->tokenizer()));
  }
  PrintReady(role, ListenAddressFromFlags(), (*server)->port(), MetricsAddressFromFlags(),
             (*exporter)->port(), http == nullptr ? -1 : http->port());
  const int sig = WaitForTerminationSignal();
  SS_LOG_INFO("router: signal {}, draining", sig);
  // The gRPC drain first: HTTP streams are calls of it and finish (new HTTP requests meanwhile get
  // 503 from the draining server); then the HTTP listener stops and its threads are joined.
  (*server)->Shutdown(DrainFromFlags());
  if (http != nullptr) http->Stop();
  http.reset();
  (*r)->Shutdown();
  if (on_stop) on_stop();
  return absl::OkStatus();
}

int RunRouterCommand(const std::vector<char*>& positional) {
  if (positional.size() > 1) {
    std::fprintf(stderr, "error: unexpected argument '%s'\n", positional[1]);
    return 2;
  }
  CatchTerminationSignals();
  router::RouterOptions options = RouterOptionsFromFlags();
  if (options.decode_workers.empty()) {
    std::fprintf(stderr, "error: --decode-workers is required (see --help)\n");
    return 2;
  }
  absl::StatusOr<engine::RequestOptions> request_defaults = RequestOptionsFromFlags();
  if (!request_defaults.ok()) {
    std::fprintf(stderr, "error: %s\n", request_defaults.status().ToString().c_str());
    return 2;
  }
  options.request_defaults = *request_defaults;
  if (absl::Status s = ServeRouter(std::move(options), "router", nullptr); !s.ok()) {
    std::fprintf(stderr, "error: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}

const Command& RouterCommand() {
  static const Command command = {
      "router",
      "run the router (public Generation API) in front of running workers",
      "sparseserve router --model PATH --decode-workers A,B [--prefill-workers C] ...\n"
      "       (or sparseserve-router with the same flags: the router alone, no model libraries)",
      "Serves sparseserve.v1.Generation: tokenizes, routes by load and prefix-cache overlap,\n"
      "sends long uncached prompts to prefill workers (--disagg-threshold), streams tokens,\n"
      "retries and migrates on worker failure. --model is used for the tokenizer only.\n"
      "A request's attention and speculation choices are checked with this router's flags\n"
      "filling what it leaves unset, then forwarded as given: each worker fills them from its\n"
      "own flags (run the router and workers with the same ones; `up` does).",
      {"tools/router_command.cc", "tools/request_options_flags.cc", "tools/serve_flags.cc",
       "tools/model_path_flag.cc"},
      &RunRouterCommand};
  return command;
}

}  // namespace sparseserve::tools
