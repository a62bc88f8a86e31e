#include "decode_svc/decode_worker.h"

#include "absl/strings/str_cat.h"
#include "common/core/logging.h"
#include "common/core/status.h"

namespace sparseserve::decode {

absl::StatusOr<std::unique_ptr<DecodeWorker>> DecodeWorker::Start(
    const DecodeWorkerOptions& options) {
  std::unique_ptr<DecodeWorker> w(new DecodeWorker());
  SS_ASSIGN_OR_RETURN(w->backend_, kernels::CreateBackend(options.device));
  SS_ASSIGN_OR_RETURN(w->source_, engine::OpenModelSource(options.model_path));
  SS_ASSIGN_OR_RETURN(w->runner_,
                      engine::ModelRunner::Create(w->source_, w->backend_.get(), options.runner));
  DecodeWorkerInfo info;
  info.model = options.model_path;
  // The UCX build this project links (Debian's 1.13) has no CUDA transport: it can only move
  // host memory, so a KV cache on the GPU is served without disaggregated prefill (the router then
  // prefills on the decode worker). Staging through host memory is the way to lift this.
  const bool kv_on_host = w->runner_->cache().layer(0).device() == Device::kHost;
  if (options.enable_kv_transfer && !kv_on_host) {
    SS_LOG_WARNING(
        "KV cache is in GPU memory and UCX here moves host memory only: KV transfer "
        "disabled on this decode worker");
  }
  if (options.enable_kv_transfer && kv_on_host) {
    SS_ASSIGN_OR_RETURN(w->kv_target_, transfer::KvTransferTarget::Create());
    const model::PagedKvCache& cache = w->runner_->cache();
    for (int l = 0; l < cache.shape().num_layers; ++l) {
      const Tensor& t = cache.layer(l);
      SS_RETURN_IF_ERROR(w->kv_target_->RegisterRegion(l, t.raw_data(), t.nbytes()));
    }
    const uint64_t block_bytes = cache.layer(0).nbytes() / cache.shape().num_blocks;
    SS_ASSIGN_OR_RETURN(info.kv_pool,
                        w->kv_target_->ExportPool(cache.shape().num_layers, block_bytes));
  }
  SS_ASSIGN_OR_RETURN(w->exporter_, metrics::MetricsExporter::Start(options.metrics_address));
  SS_ASSIGN_OR_RETURN(w->metrics_, metrics::ServingMetrics::Create(w->exporter_->registry(),
                                                                   metrics::ServiceRole::kDecode));
  w->reservations_ = std::make_unique<KvReservationTable>(
      &w->runner_->mutable_pool(), w->runner_->block_tokens(), options.kv_lease);
  DecodeSchedulerOptions sched = options.scheduler;
  sched.eos_ids = w->source_.tokenizer->eos_ids();
  w->scheduler_ = std::make_unique<DecodeScheduler>(w->runner_.get(), std::move(sched));
  w->service_ = std::make_unique<DecodeWorkerService>(
      w->scheduler_.get(), w->runner_.get(), w->reservations_.get(), w->metrics_.get(), info);
  SS_ASSIGN_OR_RETURN(w->server_, rpc::RpcServer::Start(options.address, {w->service_.get()}));
  w->expiry_ = std::thread([raw = w.get()] { raw->ExpiryLoop(); });
  SS_LOG_INFO("decode worker serving {} on port {} (metrics on {}), {} KV blocks of {} tokens",
              options.model_path, w->port(), w->metrics_port(), w->runner_->pool().num_blocks(),
              w->runner_->block_tokens());
  return w;
}

void DecodeWorker::ExpiryLoop() {
  while (!stop_expiry_.WaitForNotificationWithTimeout(absl::Seconds(1))) {
    const int expired = reservations_->ExpireBefore(absl::Now());
    if (expired > 0) {
      SS_LOG_WARNING("{} KV reservation(s) expired unused; blocks returned", expired);
      metrics_->kv_reservation_expiries().Increment(expired);
    }
  }
}

void DecodeWorker::Shutdown(absl::Duration drain) {
  if (server_ != nullptr) server_->Shutdown(drain);
}

DecodeWorker::~DecodeWorker() {
  if (server_ != nullptr) server_->Shutdown(absl::Seconds(5));
  server_.reset();
  if (expiry_.joinable()) {
    stop_expiry_.Notify();
    expiry_.join();
  }
  scheduler_.reset();
}

}  // namespace sparseserve::decode
