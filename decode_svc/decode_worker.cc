#include "decode_svc/decode_worker.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/core/logging.h"
#include "common/core/status.h"

namespace sparseserve::decode {
namespace {

// The staging area: per layer `bytes / num_layers` of host memory allocated and registered by
// `target` (the fast path over UCX's shared-memory transports), in the KV pool's block layout,
// at most as many blocks as the pool has (each staged block is copied into one pool block).
// kInvalidArgument when `bytes` holds no block of every layer; UCX's error when out of memory.
// In the whole-heads layout that moves between workers (kv::KvLayout): under tensor parallelism
// the staging copy scatters it into the ranks' slices.
absl::StatusOr<std::unique_ptr<KvStagingArea>> AllocateStagingArea(
    transfer::KvTransferTarget& target, const engine::ModelRunner& runner, size_t bytes) {
  const model::PagedKvCache& cache = runner.cache();
  const model::PagedKvCacheShape shape = runner.WholeHeadsKvShape();
  const size_t block_bytes = static_cast<size_t>(runner.WholeHeadsBlockBytes());
  const size_t blocks = std::min<size_t>(
      bytes / (block_bytes * static_cast<size_t>(shape.num_layers)), shape.num_blocks);
  if (blocks == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("KV staging area of ", bytes, " bytes holds no block (", block_bytes,
                     " bytes x ", shape.num_layers, " layers): raise --kv-staging-mb"));
  }
  std::vector<Tensor> layers;
  for (int l = 0; l < shape.num_layers; ++l) {
    SS_ASSIGN_OR_RETURN(void* base, target.AllocateRegion(l, blocks * block_bytes));
    layers.push_back(Tensor::Wrap(
        base, cache.dtype(),
        Shape{static_cast<int64_t>(blocks) * 2, shape.block_tokens, shape.num_kv_heads,
              shape.head_dim},
        Device::kHost, /*holder=*/nullptr));  // owned by `target`, which outlives the area
  }
  return KvStagingArea::Create(std::move(layers));
}

}  // namespace

absl::StatusOr<std::unique_ptr<DecodeWorker>> DecodeWorker::Start(
    const DecodeWorkerOptions& options) {
  std::unique_ptr<DecodeWorker> w(new DecodeWorker());
  SS_ASSIGN_OR_RETURN(w->backend_, kernels::CreateBackend(options.device));
  SS_ASSIGN_OR_RETURN(w->source_, engine::OpenModelSource(options.model_path));
  SS_ASSIGN_OR_RETURN(w->runner_,
                      engine::ModelRunner::Create(w->source_, w->backend_.get(), options.runner));
  DecodeWorkerInfo info;
  info.model = options.model_path;
  info.request_defaults = options.request_defaults;
  std::string transfer_mode = "off (--kv-transfer=false)";
  if (options.enable_kv_transfer) {
    const model::PagedKvCache& cache = w->runner_->cache();
    const bool kv_on_host = cache.layer(0).device() == Device::kHost;
    SS_ASSIGN_OR_RETURN(w->kv_target_, transfer::KvTransferTarget::Create());
    const bool gpu_direct = w->kv_target_->transport_info().gpu_direct();
    SS_ASSIGN_OR_RETURN(const bool staged,
                        transfer::UsesKvStaging(options.kv_staging, kv_on_host,
                                                w->runner_->tensor_parallel(), gpu_direct));
    const uint64_t block_bytes = static_cast<uint64_t>(w->runner_->WholeHeadsBlockBytes());
    if (staged) {
      SS_ASSIGN_OR_RETURN(
          w->staging_, AllocateStagingArea(*w->kv_target_, *w->runner_, options.kv_staging_bytes));
      transfer_mode = absl::StrCat(
          "staged through host memory (", w->staging_->num_blocks(), " staging blocks, ",
          static_cast<double>(block_bytes * w->staging_->num_blocks() * cache.shape().num_layers) /
              (1 << 20),
          " MiB; --kv-staging=", transfer::KvStagingModeName(options.kv_staging), ")");
    } else {
      // Prefill workers PUT straight into the pool's blocks; the reservation table keeps a block
      // out of reuse until its lease ends, so no PUT lands in a block it has released.
      const transfer::KvMemoryKind kind =
          kv_on_host ? transfer::KvMemoryKind::kHost : transfer::KvMemoryKind::kCuda;
      for (int l = 0; l < cache.shape().num_layers; ++l) {
        const Tensor& t = cache.layer(l);
        SS_RETURN_IF_ERROR(w->kv_target_->RegisterRegion(l, t.raw_data(), t.nbytes(), kind));
      }
      transfer_mode = kv_on_host ? "direct into the KV pool (registered with UCX)"
                                 : absl::StrCat(
                                       "GPU to GPU into the KV pool (UCX cuda_ipc; "
                                       "--kv-staging=",
                                       transfer::KvStagingModeName(options.kv_staging), ")");
    }
    SS_ASSIGN_OR_RETURN(info.kv_pool,
                        w->kv_target_->ExportPool(cache.shape().num_layers, block_bytes));
  }
  SS_ASSIGN_OR_RETURN(w->exporter_, metrics::MetricsExporter::Start(options.metrics_address));
  SS_ASSIGN_OR_RETURN(w->metrics_, metrics::ServingMetrics::Create(w->exporter_->registry(),
                                                                   metrics::ServiceRole::kDecode));
  if (w->kv_target_ != nullptr) {
    const transfer::KvTransportInfo& ucx = w->kv_target_->transport_info();
    SS_RETURN_IF_ERROR(w->metrics_->SetKvTransportInfo(ucx.ucx_version, ucx.transports));
    SS_LOG_INFO("decode worker KV transfer: UCX {}, transports {}", ucx.ucx_version, ucx.resources);
  }
  w->reservations_ = std::make_unique<KvReservationTable>(
      &w->runner_->mutable_pool(), w->runner_->block_tokens(), options.kv_lease, w->staging_.get(),
      w->runner_->rolling_window());
  DecodeSchedulerOptions sched = options.scheduler;
  sched.eos_ids = w->source_.tokenizer->eos_ids();
  // The runner's chunking flags shape the scheduler's steps (--max-step-tokens, --prefill-chunk).
  sched.max_step_tokens = options.runner.max_step_tokens;
  sched.prefill_chunk = options.runner.prefill_chunk_tokens;
  sched.metrics = w->metrics_.get();
  w->scheduler_ = std::make_unique<DecodeScheduler>(w->runner_.get(), std::move(sched));
  w->service_ = std::make_unique<DecodeWorkerService>(
      w->scheduler_.get(), w->runner_.get(), w->reservations_.get(), w->metrics_.get(), info);
  SS_ASSIGN_OR_RETURN(w->server_, rpc::RpcServer::Start(options.address, {w->service_.get()},
                                                        {.credentials = options.credentials}));
  w->expiry_ = std::thread([raw = w.get()] { raw->ExpiryLoop(); });
  SS_LOG_INFO(
      "decode worker serving {} on port {} (metrics on {}), {} KV blocks of {} tokens; KV "
      "transfer {}",
      options.model_path, w->port(), w->metrics_port(), w->runner_->pool().num_blocks(),
      w->runner_->block_tokens(), transfer_mode);
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
