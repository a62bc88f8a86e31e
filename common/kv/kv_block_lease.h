// KvBlockLease: one reference to each of a list of KV blocks of a KvBlockPool, returned to the
// pool when the lease is destroyed or Release()d — unless Take() handed the references on. It
// replaces hand-written Release calls on every error path of a reservation's life (reserved →
// taken by a decode job → adopted by its sequence). Entries equal to kNoBlock (blocks outside a
// rolling-KV window) are kept in place and never released. Movable, not copyable; not
// thread-safe (the pool is).
#ifndef SPARSESERVE_COMMON_KV_KV_BLOCK_LEASE_H_
#define SPARSESERVE_COMMON_KV_KV_BLOCK_LEASE_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "common/kv/kv_block_pool.h"

namespace sparseserve::kv {

class KvBlockLease {
 public:
  KvBlockLease() = default;
  // Takes over one reference to each id of `block_ids` (from pool->Allocate / Match / Retain).
  KvBlockLease(KvBlockPool* pool, std::vector<int32_t> block_ids)
      : pool_(pool), block_ids_(std::move(block_ids)) {}
  ~KvBlockLease() { Release(); }
  KvBlockLease(KvBlockLease&& other) noexcept
      : pool_(std::exchange(other.pool_, nullptr)), block_ids_(std::move(other.block_ids_)) {
    other.block_ids_.clear();
  }
  KvBlockLease& operator=(KvBlockLease&& other) noexcept {
    if (this != &other) {
      Release();
      pool_ = std::exchange(other.pool_, nullptr);
      block_ids_ = std::move(other.block_ids_);
      other.block_ids_.clear();
    }
    return *this;
  }
  KvBlockLease(const KvBlockLease&) = delete;
  KvBlockLease& operator=(const KvBlockLease&) = delete;

  const std::vector<int32_t>& block_ids() const { return block_ids_; }
  bool empty() const { return block_ids_.empty(); }

  // Adds references the caller got from the same pool (REQUIRES: the lease was made with a pool).
  void Append(const std::vector<int32_t>& block_ids) {
    block_ids_.insert(block_ids_.end(), block_ids.begin(), block_ids.end());
  }

  // Returns the blocks to the pool now; the lease is empty after.
  void Release() {
    if (pool_ != nullptr) pool_->Release(block_ids_);
    pool_ = nullptr;
    block_ids_.clear();
  }
  // Hands the references to the caller, who releases them; the lease is empty after.
  std::vector<int32_t> Take() {
    pool_ = nullptr;
    return std::exchange(block_ids_, {});
  }

 private:
  KvBlockPool* pool_ = nullptr;  // borrowed; null when empty
  std::vector<int32_t> block_ids_;
};

}  // namespace sparseserve::kv

#endif  // SPARSESERVE_COMMON_KV_KV_BLOCK_LEASE_H_
