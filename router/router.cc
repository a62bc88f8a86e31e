#include "router/router.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/core/logging.h"
#include "common/core/status.h"
#include "common/engine/model_source.h"

namespace sparseserve::router {
namespace {

// How long Shutdown waits for in-flight calls after cancelling them; cancelled gRPC calls end
// promptly, so this only bounds a misbehaving peer.
constexpr absl::Duration kShutdownWait = absl::Seconds(10);

absl::Status ValidateOptions(const RouterOptions& options) {
  if (options.model_path.empty()) {
    return absl::InvalidArgumentError("router: a model path is required for the tokenizer");
  }
  if (options.decode_workers.empty()) {
    return absl::InvalidArgumentError("router: at least one decode worker address is required");
  }
  if (options.max_retries < 0 || options.max_prefill_attempts < 0 || options.migration_limit < 0 ||
      options.default_max_tokens <= 0 || options.disagg_threshold_tokens < 0 ||
      options.uncached_block_weight < 0) {
    return absl::InvalidArgumentError(
        "router: retry/migration limits, the disaggregation threshold and the block weight must "
        "be >= 0, default_max_tokens > 0");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Router>> Router::Create(RouterOptions options) {
  SS_RETURN_IF_ERROR(ValidateOptions(options));
  // The tokenizer and the config's limits only: the router never maps the weights.
  absl::StatusOr<engine::ModelSource> source =
      engine::OpenModelSource(options.model_path, /*open_weights=*/false);
  if (!source.ok()) return AnnotateStatus(source.status(), "router: model");
  std::shared_ptr<prometheus::Registry> metrics_registry = options.metrics_registry;
  if (metrics_registry == nullptr) metrics_registry = std::make_shared<prometheus::Registry>();
  SS_ASSIGN_OR_RETURN(
      std::unique_ptr<metrics::ServingMetrics> serving_metrics,
      metrics::ServingMetrics::Create(metrics_registry, metrics::ServiceRole::kRouter));

  std::unique_ptr<Router> router(new Router(std::move(options)));
  router->tokenizer_ = std::move(source->tokenizer);
  router->metrics_ = std::move(serving_metrics);
  router->channels_ = std::make_unique<rpc::ChannelCache>(router->options_.channel);
  router->registry_ = WorkerRegistry::Start({.decode_addresses = router->options_.decode_workers,
                                             .prefill_addresses = router->options_.prefill_workers,
                                             .status_interval = router->options_.status_interval,
                                             .status_timeout = router->options_.status_timeout},
                                            router->channels_.get());
  router->resources_ =
      CallResources{.options = &router->options_,
                    .registry = router->registry_.get(),
                    .metrics = router->metrics_.get(),
                    .tokenizer = router->tokenizer_.get(),
                    .requests = &router->requests_,
                    .limits = {.vocab_size = source->config.vocab_size,
                               .max_context = source->config.max_position_embeddings,
                               .default_max_tokens = router->options_.default_max_tokens,
                               .request_defaults = router->options_.request_defaults}};
  router->service_ = std::make_unique<GenerationService>(&router->resources_);
  SS_LOG_INFO("router: model {} ({} decode, {} prefill workers; {} decode healthy)",
              router->options_.model_path, router->options_.decode_workers.size(),
              router->options_.prefill_workers.size(),
              router->registry_->NumHealthy(WorkerRole::kDecode));
  return router;
}

Router::Router(RouterOptions options) : options_(std::move(options)) {}

Router::~Router() {
  Shutdown();
}

void Router::Shutdown() {
  {
    absl::MutexLock lock(&shutdown_mu_);
    if (shut_down_) return;
    shut_down_ = true;
  }
  requests_.AbortAll();
  if (!requests_.WaitForNoCalls(kShutdownWait)) {
    SS_LOG_ERROR("router: Generate calls still alive {} after shutdown began",
                 absl::FormatDuration(kShutdownWait));
  }
  if (registry_ != nullptr) registry_->Stop();
}

}  // namespace sparseserve::router
