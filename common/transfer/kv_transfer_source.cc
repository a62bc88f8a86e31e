#include "common/transfer/kv_transfer_source.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/core/check.h"
#include "common/core/logging.h"
#include "common/core/status.h"
#include "common/transfer/internal/ucp_context.h"
#include "common/transfer/internal/ucp_endpoint.h"
#include "common/transfer/internal/ucp_memory.h"
#include "common/transfer/internal/ucp_progress_thread.h"
#include "common/transfer/internal/ucp_worker.h"
#include "common/transfer/internal/wire_envelope.h"

namespace sparseserve::transfer {

using internal::WireEnvelope;
using internal::WireKind;

absl::StatusOr<std::unique_ptr<KvTransferSource>> KvTransferSource::Create(
    const KvTransferOptions& options) {
  SS_ASSIGN_OR_RETURN(auto context, internal::UcpContext::Create(options.transports));
  SS_ASSIGN_OR_RETURN(auto worker, internal::UcpWorker::Create(*context));
  return std::unique_ptr<KvTransferSource>(
      new KvTransferSource(options, std::move(context), std::move(worker)));
}

KvTransferSource::KvTransferSource(const KvTransferOptions& options,
                                   std::unique_ptr<internal::UcpContext> context,
                                   std::unique_ptr<internal::UcpWorker> worker)
    : options_(options),
      context_(std::move(context)),
      transport_info_(internal::DescribeTransports(*context_)),
      worker_(std::move(worker)) {
  progress_ = std::make_unique<internal::UcpProgressThread>(worker_.get());
}

KvTransferSource::~KvTransferSource() {
  SS_CHECK(num_sessions_.load(std::memory_order_relaxed) == 0);
}

absl::Status KvTransferSource::RegisterLocal(int layer, const void* base, size_t bytes,
                                             KvMemoryKind kind) {
  if (layer < 0) return absl::InvalidArgumentError(absl::StrCat("layer ", layer, " < 0"));
  {
    absl::MutexLock lock(&mu_);
    if (local_regions_.contains(layer)) {
      return absl::AlreadyExistsError(absl::StrCat("local layer ", layer, " is registered"));
    }
  }
  // Registration may pin memory and take a while: done outside the lock.
  SS_ASSIGN_OR_RETURN(auto memory, internal::UcpMemoryRegion::Map(*context_, base, bytes, kind));
  absl::MutexLock lock(&mu_);
  if (!local_regions_.emplace(layer, std::move(memory)).second) {
    return absl::AlreadyExistsError(absl::StrCat("local layer ", layer, " is registered"));
  }
  return absl::OkStatus();
}

absl::Status KvTransferSource::RegisterSharedLocal(const void* base, size_t bytes) {
  {
    absl::MutexLock lock(&mu_);
    if (shared_local_region_ != nullptr) {
      return absl::AlreadyExistsError("a shared local buffer is registered");
    }
  }
  SS_ASSIGN_OR_RETURN(auto memory,
                      internal::UcpMemoryRegion::Map(*context_, base, bytes, KvMemoryKind::kHost));
  absl::MutexLock lock(&mu_);
  if (shared_local_region_ != nullptr) {
    return absl::AlreadyExistsError("a shared local buffer is registered");
  }
  shared_local_region_ = std::move(memory);
  return absl::OkStatus();
}

const internal::UcpMemoryRegion* KvTransferSource::FindLocal(int layer) const {
  absl::MutexLock lock(&mu_);
  auto it = local_regions_.find(layer);
  return it == local_regions_.end() ? shared_local_region_.get() : it->second.get();
}

absl::StatusOr<std::unique_ptr<internal::UcpEndpoint>> KvTransferSource::ConnectEndpoint(
    absl::string_view address) {
  const bool try_detection = !peer_detection_unsupported_.load(std::memory_order_relaxed);
  if (!try_detection && options_.require_peer_failure_detection) {
    return absl::UnavailableError("UCX transports cannot detect peer failure (required)");
  }
  absl::StatusOr<std::unique_ptr<internal::UcpEndpoint>> endpoint = internal::UcpEndpoint::Connect(
      *worker_, *progress_, address, try_detection, options_.close_timeout);
  if (endpoint.ok() || !try_detection || options_.require_peer_failure_detection ||
      endpoint.status().code() != absl::StatusCode::kUnavailable) {
    return endpoint;
  }
  // Either the peer is unreachable or the transports cannot detect peer failure: try without.
  endpoint = internal::UcpEndpoint::Connect(*worker_, *progress_, address,
                                            /*detect_peer_failure=*/false, options_.close_timeout);
  if (endpoint.ok()) {
    peer_detection_unsupported_.store(true, std::memory_order_relaxed);
    SS_LOG_WARNING(
        "UCX transports cannot detect peer failure; a dead KV transfer peer will show up as a "
        "flush timeout");
  }
  return endpoint;
}

void KvTransferSource::ReportLanes(const internal::UcpEndpoint& endpoint) {
  // Once per process: a session per request would repeat it for every prompt.
  if (lanes_reported_.exchange(true, std::memory_order_relaxed)) return;
  const std::vector<std::string> lanes = endpoint.Transports();
  if (lanes.empty()) return;  // UCX < 1.14 cannot tell
  SS_LOG_INFO("KV transfer endpoint lanes: {}", absl::StrJoin(lanes, ", "));
  const internal::UcpMemoryRegion* local = FindLocal(0);
  if (local == nullptr || local->kind() != KvMemoryKind::kCuda) return;
  // GPU memory moves fast only GPU to GPU on one node (cuda_ipc) or over RDMA that registers GPU
  // memory (GPUDirect RDMA); otherwise UCX bounces it through host buffers over tcp, measured at
  // ~0.1 GB/s (bench/RESULTS.md), far slower than staging.
  const bool fast = std::any_of(lanes.begin(), lanes.end(), [](const std::string& lane) {
    return absl::StartsWith(lane, "cuda_ipc/") || absl::StartsWith(lane, "rc") ||
           absl::StartsWith(lane, "dc") || absl::StartsWith(lane, "ud") ||
           absl::StartsWith(lane, "gga");
  });
  if (!fast) {
    SS_LOG_WARNING(
        "KV in GPU memory goes to this decode worker over {} (no cuda_ipc: another node, or its "
        "GPU is not visible here; no RDMA): slow. Use --kv-staging=on on both workers for peers "
        "on other nodes",
        absl::StrJoin(lanes, ", "));
  }
}

void KvTransferSource::ReportMixedMemory(KvMemoryKind remote) {
  const internal::UcpMemoryRegion* local = FindLocal(0);
  if (local == nullptr || local->kind() == remote) return;
  if (mixed_reported_.exchange(true, std::memory_order_relaxed)) return;  // once per process
  const auto name = [](KvMemoryKind kind) { return kind == KvMemoryKind::kCuda ? "GPU" : "host"; };
  SS_LOG_WARNING(
      "KV goes from {} memory here into a decode worker's {} memory: UCX emulates such PUTs over "
      "tcp (~0.2 GB/s, bench/RESULTS.md). Give prefill and decode workers the same --kv-staging "
      "(on wherever one of them stages, e.g. under --tensor-parallel > 1)",
      name(local->kind()), name(remote));
}

absl::StatusOr<std::unique_ptr<KvWriteSession>> KvTransferSource::Connect(
    const RemoteKvPool& remote) {
  if (remote.block_bytes == 0) return absl::InvalidArgumentError("block_bytes is 0");
  if (remote.layer_rkeys.empty() ||
      remote.layer_rkeys.size() != remote.layer_base_addresses.size()) {
    return absl::InvalidArgumentError(absl::StrCat(remote.layer_rkeys.size(), " remote keys for ",
                                                   remote.layer_base_addresses.size(),
                                                   " base addresses"));
  }
  SS_ASSIGN_OR_RETURN(WireEnvelope address, internal::DecodeWireEnvelope(remote.worker_address,
                                                                         WireKind::kWorkerAddress));
  // Validate every key before anything is connected.
  std::vector<WireEnvelope> keys;
  for (size_t layer = 0; layer < remote.layer_rkeys.size(); ++layer) {
    absl::StatusOr<WireEnvelope> key =
        internal::DecodeWireEnvelope(remote.layer_rkeys[layer], WireKind::kRemoteKey);
    if (!key.ok()) return AnnotateStatus(key.status(), absl::StrCat("layer ", layer));
    if (key->region_base != remote.layer_base_addresses[layer]) {
      return absl::InvalidArgumentError(absl::StrCat("layer ", layer, ": remote key is for base ",
                                                     key->region_base, ", reservation says ",
                                                     remote.layer_base_addresses[layer]));
    }
    if (key->region_bytes < remote.block_bytes) {
      return absl::InvalidArgumentError(absl::StrCat("layer ", layer, ": region of ",
                                                     key->region_bytes, " bytes holds no block of ",
                                                     remote.block_bytes));
    }
    keys.push_back(*std::move(key));
  }

  std::unique_ptr<KvWriteSession> session(new KvWriteSession(*this, remote.block_bytes));
  SS_ASSIGN_OR_RETURN(session->endpoint_, ConnectEndpoint(address.payload));
  ReportLanes(*session->endpoint_);
  ReportMixedMemory(remote.memory);
  for (size_t layer = 0; layer < keys.size(); ++layer) {
    KvWriteSession::RemoteLayer remote_layer;
    absl::StatusOr<std::unique_ptr<internal::UcpRemoteKey>> rkey =
        internal::UcpRemoteKey::Unpack(session->endpoint_->handle(), keys[layer].payload);
    if (!rkey.ok()) return AnnotateStatus(rkey.status(), absl::StrCat("layer ", layer));
    remote_layer.rkey = *std::move(rkey);
    remote_layer.base = keys[layer].region_base;
    remote_layer.num_blocks = static_cast<int64_t>(keys[layer].region_bytes / remote.block_bytes);
    session->layers_.push_back(std::move(remote_layer));
  }
  return session;
}

}  // namespace sparseserve::transfer
