// KvTransferTarget: the decode worker's end of KV transfer. It registers each layer's KV pool
// buffer with UCX and publishes what a prefill worker needs to PUT blocks into it (worker
// address, per-layer packed remote key and base address). Writes land without any call here;
// the target only keeps its UCX worker progressing on an owned progress thread, which the tcp
// and shared-memory transports need because they emulate RMA in software on the target side.
//
// Pool memory either comes from the caller (RegisterRegion) or from UCX (AllocateRegion). Only
// the latter can be PUT into directly over UCX 1.13's shared-memory transports (the peer maps
// the segment and copies once); into caller memory they emulate RMA with active messages, which
// costs extra copies and target progress (bench/kv_transfer_bench --ucx_alloc compares them).
// tcp and RDMA transports are indifferent.
//
// Ownership: the target borrows registered buffers (each must stay allocated until the target
// is destroyed) and owns allocated ones (freed with it). Thread-safe.
#ifndef SPARSESERVE_COMMON_TRANSFER_KV_TRANSFER_TARGET_H_
#define SPARSESERVE_COMMON_TRANSFER_KV_TRANSFER_TARGET_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/transfer/kv_transfer_options.h"
#include "common/transfer/kv_transport_info.h"
#include "common/transfer/remote_kv_pool.h"

namespace sparseserve::transfer {
namespace internal {
class UcpContext;
class UcpMemoryRegion;
class UcpProgressThread;
class UcpWorker;
}  // namespace internal

class KvTransferTarget {
 public:
  // Returns UCX's error (kUnavailable, kInvalidArgument for bad transports, ...) if UCX cannot
  // start.
  static absl::StatusOr<std::unique_ptr<KvTransferTarget>> Create(
      const KvTransferOptions& options = {});
  ~KvTransferTarget();
  KvTransferTarget(const KvTransferTarget&) = delete;
  KvTransferTarget& operator=(const KvTransferTarget&) = delete;

  // Registers layer `layer`'s pool buffer [base, base + bytes) of `kind` memory for remote PUTs
  // (kCuda: GPU memory a peer on this node writes GPU to GPU, see transport_info().gpu_direct()).
  // REQUIRES: the buffer stays allocated until this target is destroyed.
  // Returns kInvalidArgument for layer < 0, a null base or zero bytes, kAlreadyExists if the
  // layer is registered, or UCX's error.
  absl::Status RegisterRegion(int layer, void* base, size_t bytes,
                              KvMemoryKind kind = KvMemoryKind::kHost);

  // Allocates layer `layer`'s pool of `bytes` (zero-filled) through UCX and registers it; the
  // memory is valid until this target is destroyed.
  // Returns kInvalidArgument for layer < 0 or zero bytes, kAlreadyExists if the layer is
  // registered, or UCX's error (kResourceExhausted when out of memory).
  absl::StatusOr<void*> AllocateRegion(int layer, size_t bytes);

  // The UCX version and transports this end runs on (fixed at Create).
  const KvTransportInfo& transport_info() const { return transport_info_; }

  // This worker's UCX address, wrapped for transport (KvReservation.ucx_worker_address).
  const std::string& WorkerAddress() const { return worker_address_; }
  // The layer's packed remote key, wrapped with its base and size. kNotFound if unregistered.
  absl::StatusOr<std::string> PackedRkey(int layer) const;
  // The layer's registered base address. kNotFound if unregistered.
  absl::StatusOr<uint64_t> BaseAddress(int layer) const;
  // The description of layers [0, num_layers) with `block_bytes` per block (and the memory kind
  // of layer 0's region, which every layer shares).
  // Returns kNotFound if a layer is unregistered, kInvalidArgument if num_layers < 1 or
  // block_bytes is 0.
  absl::StatusOr<RemoteKvPool> ExportPool(int num_layers, uint64_t block_bytes) const;

 private:
  struct Region {
    std::unique_ptr<internal::UcpMemoryRegion> memory;
    std::string packed_rkey;  // enveloped, see internal/wire_envelope.h
  };

  // Publishes `memory` as layer `layer`'s pool. Returns kAlreadyExists or UCX's error.
  absl::Status AddRegion(int layer, std::unique_ptr<internal::UcpMemoryRegion> memory);

  KvTransferTarget(std::unique_ptr<internal::UcpContext> context,
                   std::unique_ptr<internal::UcpWorker> worker);

  // Declaration order is destruction order in reverse: the progress thread stops first, then
  // memory is unregistered, then the worker and context go.
  std::unique_ptr<internal::UcpContext> context_;
  KvTransportInfo transport_info_;
  std::unique_ptr<internal::UcpWorker> worker_;
  std::string worker_address_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<int, Region> regions_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<internal::UcpProgressThread> progress_;
};

}  // namespace sparseserve::transfer

#endif  // SPARSESERVE_COMMON_TRANSFER_KV_TRANSFER_TARGET_H_
