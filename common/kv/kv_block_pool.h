// KvBlockPool: ownership and accounting of a worker's KV block ids, with prefix caching.
//
// The per-layer KV tensors live in the model runtime (layout in kv_layout.h); this pool only
// decides which block ids are in use. Blocks are reference-counted so a prefix-cached block can
// back several sequences. When a block's count falls to 0 it returns to the free list, or, if
// it backs a prefix hash (Register), it stays cached as "evictable" in LRU order: a later
// Match can revive it, and Allocate evicts the least recently released one when the free list
// runs dry (its hash stops matching). Hence num_free_blocks() counts free + evictable blocks.
//
// Every block goes back through one place, ReturnBlockLocked; the lease rule (a block may not
// be reused while a remote KV write into it may still land, ARCHITECTURE.md "Failure rules")
// will hook in there and in a KvBlockLease wrapper around Allocate/Release.
//
// Thread-safe: all state is guarded by one mutex. Releasing an id more times than it was
// handed out, or naming an unknown id, is a bug and aborts (SS_CHECK).
#ifndef SPARSESERVE_COMMON_KV_KV_BLOCK_POOL_H_
#define SPARSESERVE_COMMON_KV_KV_BLOCK_POOL_H_

#include <cstdint>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "common/kv/block_hash.h"
#include "common/kv/prefix_cache.h"

namespace sparseserve::kv {

// A consistent snapshot of the prefix-cache counters.
struct PrefixCacheStats {
  int64_t num_queries = 0;    // full prompt blocks looked up by Match, cumulative
  int64_t num_hits = 0;       // of those, found cached, cumulative
  int num_cached_blocks = 0;  // blocks currently backing a hash (in use or evictable)
};

// An entry of a sequence's block list that holds no block: a block a rolling-KV model released
// because it left every layer's window (ModelConfig::AllLayersWindowed). Release skips it.
inline constexpr int32_t kNoBlock = -1;

class KvBlockPool {
 public:
  // Block ids are [0, num_blocks). REQUIRES: num_blocks >= 0.
  explicit KvBlockPool(int num_blocks);
  KvBlockPool(const KvBlockPool&) = delete;
  KvBlockPool& operator=(const KvBlockPool&) = delete;

  // Hands out `n` blocks, each with reference count 1; free blocks first (lowest ids first in
  // a fresh pool), then evicted cached blocks, least recently released first.
  // Returns kInvalidArgument if n < 0, kResourceExhausted (with the counts) if fewer than n
  // blocks are free or evictable; on error nothing is allocated.
  absl::StatusOr<std::vector<int32_t>> Allocate(int n);

  // Adds one reference to each block (a second sequence shares it).
  // REQUIRES: every id is in use (reference count > 0).
  void Retain(absl::Span<const int32_t> block_ids);

  // Drops one reference from each block; at 0 it becomes free, or evictable if cached. Entries
  // equal to kNoBlock are skipped.
  // REQUIRES: every other id is in use (each occurrence matches an earlier Allocate/Retain/Match).
  void Release(absl::Span<const int32_t> block_ids);

  // Records that in-use, full block `block_id` holds the tokens whose chained hash is `hash`.
  // Returns false (block stays uncached) if another block already backs `hash`.
  // REQUIRES: block_id is in use and not registered under a different hash.
  bool Register(BlockHash hash, int32_t block_id);

  // Looks up `hashes` (a prompt's full-block chain, ComputeBlockHashes) and returns the blocks
  // of the longest cached leading run, each retained for the caller (release them when done).
  // Counts hashes.size() queries and the returned length as hits.
  std::vector<int32_t> Match(absl::Span<const BlockHash> hashes);

  // Hashes of every cached block, ordered by block id (for the router's overlap scoring).
  std::vector<BlockHash> CachedHashes() const;
  PrefixCacheStats prefix_cache_stats() const;

  int num_blocks() const { return num_blocks_; }
  // Blocks Allocate can hand out: free plus evictable cached ones.
  int num_free_blocks() const;
  // Blocks with a reference count > 0.
  int num_used_blocks() const;
  // num_used_blocks() / num_blocks() in [0, 1] (kv_cache_usage_ratio); 0 for an empty pool.
  double usage_ratio() const;
  // Current reference count of `block_id` (0 when free or evictable). For tests and debugging.
  int ref_count(int32_t block_id) const;

 private:
  // Called when a block's reference count reaches 0.
  void ReturnBlockLocked(int32_t block_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CheckId(int32_t block_id) const;

  const int num_blocks_;
  mutable absl::Mutex mu_;
  std::vector<int32_t> ref_counts_ ABSL_GUARDED_BY(mu_);  // [num_blocks]
  std::vector<int32_t> free_ids_ ABSL_GUARDED_BY(mu_);    // uncached unused ids; back = next
  PrefixCache prefix_cache_ ABSL_GUARDED_BY(mu_);
  int num_used_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace sparseserve::kv

#endif  // SPARSESERVE_COMMON_KV_KV_BLOCK_POOL_H_
