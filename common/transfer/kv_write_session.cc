#include "common/transfer/kv_write_session.h"

#include <cstdlib>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "common/core/status.h"
#include "common/kv/block_runs.h"
#include "common/transfer/internal/ucp_endpoint.h"
#include "common/transfer/internal/ucp_memory.h"
#include "common/transfer/internal/ucp_progress_thread.h"
#include "common/transfer/internal/ucp_request_waiter.h"
#include "common/transfer/internal/ucp_status.h"
#include "common/transfer/internal/ucp_worker.h"
#include "common/transfer/kv_transfer_source.h"

namespace sparseserve::transfer {
namespace {

// PUTs posted between two progress calls of a burst, and the fewest PUTs that make one.
constexpr size_t kBurstPuts = 16;

// SPARSESERVE_KV_PUT_BURST=0 turns bursts off (for A/B measurements); read once.
bool BurstsEnabled() {
  static const bool enabled = [] {
    const char* value = std::getenv("SPARSESERVE_KV_PUT_BURST");
    return value == nullptr || std::string_view(value) != "0";
  }();
  return enabled;
}

// Returns kInvalidArgument unless every id is in [0, num_blocks).
absl::Status CheckIds(absl::Span<const int32_t> ids, int64_t num_blocks, const char* side) {
  for (int32_t id : ids) {
    if (id < 0 || id >= num_blocks) {
      return absl::InvalidArgumentError(
          absl::StrCat(side, " block id ", id, " outside [0, ", num_blocks, ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

KvWriteSession::KvWriteSession(KvTransferSource& source, uint64_t block_bytes)
    : source_(source), block_bytes_(block_bytes) {
  source_.num_sessions_.fetch_add(1, std::memory_order_relaxed);
}

KvWriteSession::~KvWriteSession() {
  // Keys before the endpoint, and both before the source may go.
  layers_.clear();
  endpoint_.reset();
  source_.num_sessions_.fetch_sub(1, std::memory_order_relaxed);
}

bool KvWriteSession::detects_peer_failure() const {
  return endpoint_->detects_peer_failure();
}

absl::Status KvWriteSession::CheckHealthy() {
  if (!failure_.ok()) return failure_;
  ucs_status_t failure = endpoint_->failure();
  if (failure != UCS_OK) failure_ = internal::UcsToStatus(failure, "KV transfer peer failed");
  return failure_;
}

absl::Status KvWriteSession::PutBlocks(int layer, const void* local_base,
                                       absl::Span<const int32_t> local_block_ids,
                                       absl::Span<const int32_t> remote_block_ids) {
  SS_RETURN_IF_ERROR(CheckHealthy());
  if (local_block_ids.size() != remote_block_ids.size()) {
    return absl::InvalidArgumentError(absl::StrCat(local_block_ids.size(), " local blocks for ",
                                                   remote_block_ids.size(), " remote blocks"));
  }
  if (layer < 0 || layer >= num_layers()) {
    return absl::InvalidArgumentError(
        absl::StrCat("layer ", layer, " outside [0, ", num_layers(), ")"));
  }
  const internal::UcpMemoryRegion* local = source_.FindLocal(layer);
  if (local == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("layer ", layer, ": local buffer not registered (RegisterLocal)"));
  }
  const char* base = static_cast<const char*>(local_base);
  if (base < local->base() || base >= local->base() + local->bytes()) {
    return absl::InvalidArgumentError(
        absl::StrCat("layer ", layer, ": local_base is outside the registered buffer"));
  }
  const auto local_blocks = static_cast<int64_t>(
      (local->bytes() - static_cast<size_t>(base - local->base())) / block_bytes_);
  const RemoteLayer& remote = layers_[layer];
  SS_RETURN_IF_ERROR(CheckIds(local_block_ids, local_blocks, "local"));
  SS_RETURN_IF_ERROR(CheckIds(remote_block_ids, remote.num_blocks, "remote"));

  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_MEMH;
  param.memh = local->handle();
  const std::vector<kv::KvBlockRun> runs = kv::MergeKvBlockRuns(local_block_ids, remote_block_ids);
  // Many scattered blocks: post them as a burst that this thread progresses itself (2.4x the PUT
  // rate over cuda_ipc, bench/RESULTS.md); a few go to the progress thread as they are.
  const bool burst = runs.size() >= kBurstPuts && BurstsEnabled();
  ucp_worker_h worker = source_.worker_->handle();
  if (burst) source_.progress_->BeginBurst();
  absl::Cleanup end_burst = [&] {
    if (burst) source_.progress_->EndBurst();
  };
  size_t posted = 0;
  for (const kv::KvBlockRun& run : runs) {
    if (burst && ++posted % kBurstPuts == 0) ucp_worker_progress(worker);
    const uint64_t bytes = block_bytes_ * static_cast<uint64_t>(run.num_blocks);
    ucs_status_ptr_t request =
        ucp_put_nbx(endpoint_->handle(), base + block_bytes_ * run.src_block, bytes,
                    remote.base + block_bytes_ * run.dst_block, remote.rkey->handle(), &param);
    if (UCS_PTR_IS_ERR(request)) {
      failure_ =
          internal::UcsToStatus(UCS_PTR_STATUS(request), absl::StrCat("ucp_put_nbx layer ", layer));
      return failure_;
    }
    // Completion is observed through Flush; the request itself is not needed.
    if (request != nullptr) ucp_request_free(request);
    bytes_unflushed_ += static_cast<int64_t>(bytes);
    bytes_posted_.fetch_add(static_cast<int64_t>(bytes), std::memory_order_relaxed);
  }
  if (!burst) source_.progress_->Wake();  // EndBurst wakes it otherwise
  return absl::OkStatus();
}

absl::Status KvWriteSession::Flush(absl::Duration timeout) {
  SS_RETURN_IF_ERROR(CheckHealthy());
  ucp_request_param_t param{};
  internal::UcpRequestWaiter waiter;
  waiter.Bind(&param);
  std::optional<ucs_status_t> status =
      waiter.Wait(ucp_ep_flush_nbx(endpoint_->handle(), &param), timeout, *source_.progress_);
  if (!status.has_value()) {
    return absl::DeadlineExceededError(absl::StrCat("KV transfer flush of ", bytes_unflushed_,
                                                    " bytes did not complete within ",
                                                    absl::FormatDuration(timeout)));
  }
  if (*status != UCS_OK) {
    failure_ = internal::UcsToStatus(*status, "KV transfer flush");
    return failure_;
  }
  bytes_transferred_.fetch_add(bytes_unflushed_, std::memory_order_relaxed);
  bytes_unflushed_ = 0;
  return absl::OkStatus();
}

}  // namespace sparseserve::transfer
