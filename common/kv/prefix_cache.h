// PrefixCache: the index from full-block prefix hashes to KV block ids, with the LRU order of
// cached blocks that no sequence uses any more (evictable).
//
// It holds no reference counts and no lock: KvBlockPool owns one, guards it with its mutex and
// decides when a block becomes evictable (its reference count fell to 0) or is evicted (the
// pool needs a block). A block is "cached" while it backs a hash; a cached block is
// "evictable" while nobody holds it. Hit accounting follows vLLM: a query is one full prompt
// block looked up, a hit is one found. Not thread-safe.
#ifndef SPARSESERVE_COMMON_KV_PREFIX_CACHE_H_
#define SPARSESERVE_COMMON_KV_PREFIX_CACHE_H_

#include <cstdint>
#include <list>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "common/kv/block_hash.h"

namespace sparseserve::kv {

class PrefixCache {
 public:
  // Block ids are [0, num_blocks). REQUIRES: num_blocks >= 0.
  explicit PrefixCache(int num_blocks);
  PrefixCache(const PrefixCache&) = delete;
  PrefixCache& operator=(const PrefixCache&) = delete;

  // Makes `block_id` back `hash`. Returns false and changes nothing if `hash` is already backed
  // by another block (two sequences filled the same content; the first stays canonical).
  // Registering the same (hash, block) again is a no-op returning true.
  // REQUIRES: block_id is not cached under a different hash and is not evictable.
  bool Insert(BlockHash hash, int32_t block_id);

  // The block backing `hash`, or -1 if none.
  int32_t Find(BlockHash hash) const;

  bool IsCached(int32_t block_id) const;
  bool IsEvictable(int32_t block_id) const;

  // Appends a cached, unused block to the LRU list as the most recently released.
  // REQUIRES: IsCached(block_id) && !IsEvictable(block_id).
  void MarkEvictable(int32_t block_id);
  // Takes a block off the LRU list because it is in use again. REQUIRES: IsEvictable(block_id).
  void UnmarkEvictable(int32_t block_id);
  // Removes the least recently released evictable block from the index (its hash no longer
  // matches) and returns its id. REQUIRES: num_evictable() > 0.
  int32_t EvictOldest();

  int num_cached() const { return static_cast<int>(block_of_hash_.size()); }
  int num_evictable() const { return static_cast<int>(evictable_lru_.size()); }

  // Hashes of all cached blocks (in use or evictable), ordered by block id.
  std::vector<BlockHash> CachedHashes() const;

  // Counts one lookup of `num_queried` leading prompt blocks of which `num_hit` were found.
  void RecordLookup(int num_queried, int num_hit);
  int64_t num_queries() const { return num_queries_; }
  int64_t num_hits() const { return num_hits_; }

 private:
  struct Entry {
    bool cached = false;
    bool evictable = false;
    BlockHash hash = 0;                    // valid while cached
    std::list<int32_t>::iterator lru_pos;  // valid while evictable
  };

  const Entry& entry(int32_t block_id) const;
  Entry& entry(int32_t block_id);

  std::vector<Entry> entries_;  // [num_blocks], indexed by block id
  absl::flat_hash_map<BlockHash, int32_t> block_of_hash_;
  std::list<int32_t> evictable_lru_;  // block ids; front = least recently released
  int64_t num_queries_ = 0;           // full blocks looked up (prefix_cache_queries_total)
  int64_t num_hits_ = 0;              // of those, found (prefix_cache_hits_total)
};

}  // namespace sparseserve::kv

#endif  // SPARSESERVE_COMMON_KV_PREFIX_CACHE_H_
