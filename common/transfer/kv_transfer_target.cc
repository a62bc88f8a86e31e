#include "common/transfer/kv_transfer_target.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/core/status.h"
#include "common/transfer/internal/ucp_context.h"
#include "common/transfer/internal/ucp_memory.h"
#include "common/transfer/internal/ucp_progress_thread.h"
#include "common/transfer/internal/ucp_worker.h"
#include "common/transfer/internal/wire_envelope.h"

namespace sparseserve::transfer {

using internal::WireEnvelope;
using internal::WireKind;

absl::StatusOr<std::unique_ptr<KvTransferTarget>> KvTransferTarget::Create(
    const KvTransferOptions& options) {
  SS_ASSIGN_OR_RETURN(auto context, internal::UcpContext::Create(options.transports));
  SS_ASSIGN_OR_RETURN(auto worker, internal::UcpWorker::Create(*context));
  return std::unique_ptr<KvTransferTarget>(
      new KvTransferTarget(std::move(context), std::move(worker)));
}

KvTransferTarget::KvTransferTarget(std::unique_ptr<internal::UcpContext> context,
                                   std::unique_ptr<internal::UcpWorker> worker)
    : context_(std::move(context)),
      transport_info_(internal::DescribeTransports(*context_)),
      worker_(std::move(worker)) {
  WireEnvelope envelope;
  envelope.kind = WireKind::kWorkerAddress;
  envelope.payload = worker_->address();
  worker_address_ = internal::EncodeWireEnvelope(envelope);
  progress_ = std::make_unique<internal::UcpProgressThread>(worker_.get());
}

KvTransferTarget::~KvTransferTarget() = default;

absl::Status KvTransferTarget::RegisterRegion(int layer, void* base, size_t bytes,
                                              KvMemoryKind kind) {
  if (layer < 0) return absl::InvalidArgumentError(absl::StrCat("layer ", layer, " < 0"));
  {
    absl::MutexLock lock(&mu_);
    if (regions_.contains(layer)) {
      return absl::AlreadyExistsError(absl::StrCat("layer ", layer, " is already registered"));
    }
  }
  // Registration may pin memory and take a while: done outside the lock.
  SS_ASSIGN_OR_RETURN(auto memory, internal::UcpMemoryRegion::Map(*context_, base, bytes, kind));
  return AddRegion(layer, std::move(memory));
}

absl::StatusOr<void*> KvTransferTarget::AllocateRegion(int layer, size_t bytes) {
  if (layer < 0) return absl::InvalidArgumentError(absl::StrCat("layer ", layer, " < 0"));
  {
    absl::MutexLock lock(&mu_);
    if (regions_.contains(layer)) {
      return absl::AlreadyExistsError(absl::StrCat("layer ", layer, " is already registered"));
    }
  }
  SS_ASSIGN_OR_RETURN(auto memory, internal::UcpMemoryRegion::Allocate(*context_, bytes));
  void* base = memory->base();
  SS_RETURN_IF_ERROR(AddRegion(layer, std::move(memory)));
  return base;
}

absl::Status KvTransferTarget::AddRegion(int layer,
                                         std::unique_ptr<internal::UcpMemoryRegion> memory) {
  SS_ASSIGN_OR_RETURN(std::string rkey, memory->PackRkey());
  WireEnvelope envelope;
  envelope.kind = WireKind::kRemoteKey;
  envelope.region_base = reinterpret_cast<uint64_t>(memory->base());
  envelope.region_bytes = memory->bytes();
  envelope.payload = std::move(rkey);
  Region region{std::move(memory), internal::EncodeWireEnvelope(envelope)};
  absl::MutexLock lock(&mu_);
  if (!regions_.emplace(layer, std::move(region)).second) {
    // A concurrent registration of the same layer won; this one is unmapped on return.
    return absl::AlreadyExistsError(absl::StrCat("layer ", layer, " is already registered"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> KvTransferTarget::PackedRkey(int layer) const {
  absl::MutexLock lock(&mu_);
  auto it = regions_.find(layer);
  if (it == regions_.end()) {
    return absl::NotFoundError(absl::StrCat("layer ", layer, " is not registered"));
  }
  return it->second.packed_rkey;
}

absl::StatusOr<uint64_t> KvTransferTarget::BaseAddress(int layer) const {
  absl::MutexLock lock(&mu_);
  auto it = regions_.find(layer);
  if (it == regions_.end()) {
    return absl::NotFoundError(absl::StrCat("layer ", layer, " is not registered"));
  }
  return reinterpret_cast<uint64_t>(it->second.memory->base());
}

absl::StatusOr<RemoteKvPool> KvTransferTarget::ExportPool(int num_layers,
                                                          uint64_t block_bytes) const {
  if (num_layers < 1 || block_bytes == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("ExportPool: num_layers ", num_layers, ", block_bytes ", block_bytes));
  }
  RemoteKvPool pool;
  pool.worker_address = worker_address_;
  pool.block_bytes = block_bytes;
  {
    absl::MutexLock lock(&mu_);
    auto it = regions_.find(0);
    if (it != regions_.end()) pool.memory = it->second.memory->kind();  // one kind for all layers
  }
  for (int layer = 0; layer < num_layers; ++layer) {
    SS_ASSIGN_OR_RETURN(std::string rkey, PackedRkey(layer));
    SS_ASSIGN_OR_RETURN(uint64_t base, BaseAddress(layer));
    pool.layer_rkeys.push_back(std::move(rkey));
    pool.layer_base_addresses.push_back(base);
  }
  return pool;
}

}  // namespace sparseserve::transfer
