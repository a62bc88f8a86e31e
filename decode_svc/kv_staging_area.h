// KvStagingArea: host memory into which prefill workers PUT a reservation's KV when the decode
// worker's KV pool is not in host memory (the UCX here moves host memory only; see
// common/transfer/kv_staging_mode.h), with its own block allocator. Each layer has one host
// tensor in the KV pool's block layout, [num_blocks * 2, block_tokens, kv_heads, head_dim]
// (block b = rows [2b, 2b + 2)); staging block b is block b of every layer. The decode job that
// takes a reservation copies its staged blocks into their pool blocks (engine thread) and then
// returns them.
//
// Blocks leave the area only inside a KvStagingLease, which returns them when destroyed or Reset,
// so every path (release, lease expiry, failure, shutdown) frees them.
//
// Ownership: the area borrows its layer memory (the KvTransferTarget that allocated and
// registered it, or the caller, keeps it alive longer than the area); every lease borrows the
// area and must be destroyed before it. Thread-safe; a lease is thread-compatible.
#ifndef SPARSESERVE_DECODE_SVC_KV_STAGING_AREA_H_
#define SPARSESERVE_DECODE_SVC_KV_STAGING_AREA_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/kv/kv_block_pool.h"
#include "common/tensor/tensor.h"

namespace sparseserve::decode {

class KvStagingArea;

// Staging blocks handed out by KvStagingArea::Allocate; returns them on destruction. Movable,
// not copyable; a default-constructed or moved-from lease holds nothing.
class KvStagingLease {
 public:
  KvStagingLease() = default;
  ~KvStagingLease() { Reset(); }
  KvStagingLease(KvStagingLease&& other) noexcept;
  KvStagingLease& operator=(KvStagingLease&& other) noexcept;
  KvStagingLease(const KvStagingLease&) = delete;
  KvStagingLease& operator=(const KvStagingLease&) = delete;

  // The staging block ids, in allocation order.
  const std::vector<int32_t>& block_ids() const { return block_ids_; }
  bool empty() const { return block_ids_.empty(); }
  // The area the blocks belong to; null when empty.
  const KvStagingArea* area() const { return area_; }
  // Returns the blocks to the area now; the lease is empty afterwards.
  void Reset();

 private:
  friend class KvStagingArea;
  KvStagingLease(KvStagingArea* area, std::vector<int32_t> block_ids)
      : area_(area), block_ids_(std::move(block_ids)) {}

  KvStagingArea* area_ = nullptr;
  std::vector<int32_t> block_ids_;
};

class KvStagingArea {
 public:
  // `layers`: one host tensor per layer, each [num_blocks * 2, block_tokens, kv_heads, head_dim],
  // contiguous, all of one dtype and shape. kInvalidArgument otherwise (or for no layers or no
  // block).
  static absl::StatusOr<std::unique_ptr<KvStagingArea>> Create(std::vector<Tensor> layers);
  KvStagingArea(const KvStagingArea&) = delete;
  KvStagingArea& operator=(const KvStagingArea&) = delete;

  // Hands out `n` blocks (n >= 0; lowest free ids first in a fresh area). kResourceExhausted
  // (with the counts) when fewer are free; nothing is allocated then.
  absl::StatusOr<KvStagingLease> Allocate(int n);

  int num_layers() const { return static_cast<int>(layers_.size()); }
  int num_blocks() const { return allocator_.num_blocks(); }
  int num_free_blocks() const { return allocator_.num_free_blocks(); }
  // Layer `idx`'s host tensor [num_blocks * 2, block_tokens, kv_heads, head_dim].
  const Tensor& layer(int idx) const { return layers_[idx]; }

 private:
  friend class KvStagingLease;
  KvStagingArea(std::vector<Tensor> layers, int num_blocks)
      : layers_(std::move(layers)), allocator_(num_blocks) {}
  void Free(absl::Span<const int32_t> block_ids) { allocator_.Release(block_ids); }

  const std::vector<Tensor> layers_;
  // Block ids only: one reference per leased block, never registered for prefix caching.
  kv::KvBlockPool allocator_;
};

}  // namespace sparseserve::decode

#endif  // SPARSESERVE_DECODE_SVC_KV_STAGING_AREA_H_
