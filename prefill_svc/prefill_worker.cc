#include "prefill_svc/prefill_worker.h"

#include "common/core/logging.h"
#include "common/core/status.h"
#include "prefill_svc/prefill_worker_service.h"

namespace sparseserve::prefill {

absl::StatusOr<std::unique_ptr<PrefillWorker>> PrefillWorker::Start(
    const PrefillWorkerOptions& options) {
  std::unique_ptr<PrefillWorker> w(new PrefillWorker());
  SS_ASSIGN_OR_RETURN(w->backend_, kernels::CreateBackend(options.device));
  SS_ASSIGN_OR_RETURN(w->source_, engine::OpenModelSource(options.model_path));
  SS_ASSIGN_OR_RETURN(w->runner_,
                      engine::ModelRunner::Create(w->source_, w->backend_.get(), options.runner));
  // The UCX build this project links (Debian's 1.13) has no CUDA transport: it can only move
  // host memory, so a KV cache on the GPU is served without disaggregated prefill (the router then
  // prefills on the decode worker). Staging through host memory is the way to lift this.
  const bool kv_on_host = w->runner_->cache().layer(0).device() == Device::kHost;
  if (options.enable_kv_transfer && !kv_on_host) {
    SS_LOG_WARNING(
        "KV cache is in GPU memory and UCX here moves host memory only: KV transfer "
        "disabled on this prefill worker");
  }
  if (options.enable_kv_transfer && kv_on_host) {
    SS_ASSIGN_OR_RETURN(w->kv_source_, transfer::KvTransferSource::Create());
    const model::PagedKvCache& cache = w->runner_->cache();
    for (int l = 0; l < cache.shape().num_layers; ++l) {
      SS_RETURN_IF_ERROR(
          w->kv_source_->RegisterLocal(l, cache.layer(l).raw_data(), cache.layer(l).nbytes()));
    }
  }
  SS_ASSIGN_OR_RETURN(w->exporter_, metrics::MetricsExporter::Start(options.metrics_address));
  SS_ASSIGN_OR_RETURN(w->metrics_, metrics::ServingMetrics::Create(w->exporter_->registry(),
                                                                   metrics::ServiceRole::kPrefill));
  w->engine_ = std::make_unique<PrefillEngine>(w->runner_.get(), w->kv_source_.get(),
                                               options.max_queued, options.fault_put_delay);
  w->service_ = std::make_unique<PrefillWorkerService>(w->engine_.get(), w->runner_.get(),
                                                       w->metrics_.get(), options.model_path);
  SS_ASSIGN_OR_RETURN(w->server_, rpc::RpcServer::Start(options.address, {w->service_.get()}));
  SS_LOG_INFO("prefill worker serving {} on port {} (metrics on {})", options.model_path, w->port(),
              w->metrics_port());
  return w;
}

void PrefillWorker::Shutdown(absl::Duration drain) {
  if (server_ != nullptr) server_->Shutdown(drain);
}

PrefillWorker::~PrefillWorker() {
  if (server_ != nullptr) server_->Shutdown(absl::Seconds(5));
  server_.reset();
  engine_.reset();
}

}  // namespace sparseserve::prefill
