#include "prefill_svc/prefill_worker.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/core/logging.h"
#include "common/core/status.h"
#include "common/engine/request_options.h"
#include "prefill_svc/prefill_worker_service.h"

namespace sparseserve::prefill {

absl::StatusOr<std::unique_ptr<PrefillWorker>> PrefillWorker::Start(
    const PrefillWorkerOptions& options) {
  std::unique_ptr<PrefillWorker> w(new PrefillWorker());
  SS_ASSIGN_OR_RETURN(w->backend_, kernels::CreateBackend(options.device));
  SS_ASSIGN_OR_RETURN(w->source_, engine::OpenModelSource(options.model_path));
  SS_ASSIGN_OR_RETURN(w->runner_,
                      engine::ModelRunner::Create(w->source_, w->backend_.get(), options.runner));
  std::string transfer_mode = "off (--prefill-kv-transfer=false)";
  if (options.enable_kv_transfer) {
    const model::PagedKvCache& cache = w->runner_->cache();
    const bool kv_on_host = cache.layer(0).device() == Device::kHost;
    SS_ASSIGN_OR_RETURN(w->kv_source_, transfer::KvTransferSource::Create());
    const bool gpu_direct = w->kv_source_->transport_info().gpu_direct();
    SS_ASSIGN_OR_RETURN(const bool staged,
                        transfer::UsesKvStaging(options.kv_staging, kv_on_host,
                                                w->runner_->tensor_parallel(), gpu_direct));
    if (staged) {
      // The whole-heads layout that moves between workers (kv::KvLayout): under tensor
      // parallelism the ranks' slices are gathered into it.
      const model::PagedKvCacheShape shape = w->runner_->WholeHeadsKvShape();
      const size_t block_bytes = static_cast<size_t>(w->runner_->WholeHeadsBlockBytes());
      // No request can need more than every block of every layer at once.
      const size_t blocks = std::min(options.kv_staging_bytes / block_bytes,
                                     static_cast<size_t>(shape.num_blocks) * shape.num_layers);
      if (blocks == 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "KV staging ring of ", options.kv_staging_bytes, " bytes holds no block of ",
            block_bytes, " bytes: raise --prefill-kv-staging-mb"));
      }
      SS_ASSIGN_OR_RETURN(w->ring_, KvStagingRing::Create(*w->kv_source_, shape, cache.dtype(),
                                                          static_cast<int>(blocks)));
      transfer_mode =
          absl::StrCat("staged through a host ring of ", blocks, " (layer, block) units, ",
                       static_cast<double>(blocks * block_bytes) / (1 << 20),
                       " MiB; --kv-staging=", transfer::KvStagingModeName(options.kv_staging));
    } else {
      const transfer::KvMemoryKind kind =
          kv_on_host ? transfer::KvMemoryKind::kHost : transfer::KvMemoryKind::kCuda;
      for (int l = 0; l < cache.shape().num_layers; ++l) {
        SS_RETURN_IF_ERROR(w->kv_source_->RegisterLocal(l, cache.layer(l).raw_data(),
                                                        cache.layer(l).nbytes(), kind));
      }
      transfer_mode = kv_on_host ? "direct from the KV cache (registered with UCX)"
                                 : absl::StrCat(
                                       "GPU to GPU from the KV cache (UCX cuda_ipc; "
                                       "--kv-staging=",
                                       transfer::KvStagingModeName(options.kv_staging), ")");
    }
  }
  SS_ASSIGN_OR_RETURN(w->exporter_, metrics::MetricsExporter::Start(options.metrics_address));
  SS_ASSIGN_OR_RETURN(w->metrics_, metrics::ServingMetrics::Create(w->exporter_->registry(),
                                                                   metrics::ServiceRole::kPrefill));
  if (w->kv_source_ != nullptr) {
    const transfer::KvTransportInfo& ucx = w->kv_source_->transport_info();
    SS_RETURN_IF_ERROR(w->metrics_->SetKvTransportInfo(ucx.ucx_version, ucx.transports));
    SS_LOG_INFO("prefill worker KV transfer: UCX {}, transports {}", ucx.ucx_version,
                ucx.resources);
  }
  // The shadow-dense monitor's errors (--shadow-dense-rate) go to
  // sparseserve_sparse_attention_error{role="prefill", method}; set before the engine thread that
  // calls it starts.
  w->runner_->set_shadow_error_observer(
      [metrics = w->metrics_.get()](absl::Span<const model::ShadowAttentionError> errors) {
        for (const model::ShadowAttentionError& e : errors) {
          metrics->sparse_attention_error(engine::AttentionMethodKindName(e.method))
              .Observe(e.relative_l2);
        }
      });
  w->runner_->set_allreduce_observer([metrics = w->metrics_.get()](double seconds) {
    metrics->tp_allreduce_time().Observe(seconds);
  });
  PrefillEngineOptions engine_options;
  engine_options.max_queued = options.max_queued;
  engine_options.max_running = options.max_running;
  engine_options.max_step_tokens = options.runner.max_step_tokens;
  engine_options.prefill_chunk = options.runner.prefill_chunk_tokens;
  engine_options.put_delay = options.fault_put_delay;
  engine_options.metrics = w->metrics_.get();
  w->engine_ = std::make_unique<PrefillEngine>(w->runner_.get(), w->kv_source_.get(),
                                               w->ring_.get(), engine_options);
  w->service_ =
      std::make_unique<PrefillWorkerService>(w->engine_.get(), w->runner_.get(), w->metrics_.get(),
                                             options.model_path, options.request_defaults);
  SS_ASSIGN_OR_RETURN(w->server_, rpc::RpcServer::Start(options.address, {w->service_.get()},
                                                        {.credentials = options.credentials}));
  SS_LOG_INFO("prefill worker serving {} on port {} (metrics on {}); KV transfer {}",
              options.model_path, w->port(), w->metrics_port(), transfer_mode);
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
