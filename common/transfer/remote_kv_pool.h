// RemoteKvPool: everything a prefill worker needs to PUT into one decode worker's paged KV
// pools; the fields mirror KvReservation in proto/sparseserve/v1/worker.proto (services carry it
// there). Serialize/ParseRemoteKvPool give a compact binary form for out-of-band exchange where
// no proto is at hand (multi-process tests, kv_transfer_bench). A plain value; thread-compatible.
#ifndef SPARSESERVE_COMMON_TRANSFER_REMOTE_KV_POOL_H_
#define SPARSESERVE_COMMON_TRANSFER_REMOTE_KV_POOL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/transfer/kv_transfer_options.h"

namespace sparseserve::transfer {

struct RemoteKvPool {
  // KvTransferTarget::WorkerAddress(): opaque, checksummed bytes.
  std::string worker_address;
  // [num_layers] KvTransferTarget::PackedRkey(layer): opaque, checksummed bytes.
  std::vector<std::string> layer_rkeys;
  // [num_layers] KvTransferTarget::BaseAddress(layer): remote virtual address of block 0.
  std::vector<uint64_t> layer_base_addresses;
  // Bytes of one (layer, block) transfer unit; block b of a layer lives at base + b * bytes.
  uint64_t block_bytes = 0;
  // Where the pool lives (KvReservation.gpu_memory): a prefill worker PUTting from the other kind
  // of memory gets UCX's slow emulated path, which it reports.
  KvMemoryKind memory = KvMemoryKind::kHost;
};

std::string SerializeRemoteKvPool(const RemoteKvPool& pool);
// Returns kInvalidArgument if `bytes` is not exactly one SerializeRemoteKvPool output. (The
// address and keys inside are verified later, by KvTransferSource::Connect.)
absl::StatusOr<RemoteKvPool> ParseRemoteKvPool(absl::string_view bytes);

}  // namespace sparseserve::transfer

#endif  // SPARSESERVE_COMMON_TRANSFER_REMOTE_KV_POOL_H_
