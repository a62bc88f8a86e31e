#include "common/kv/prefix_cache.h"

#include "common/core/check.h"

namespace sparseserve::kv {

PrefixCache::PrefixCache(int num_blocks) {
  SS_CHECK(num_blocks >= 0);
  entries_.resize(static_cast<size_t>(num_blocks));
}

const PrefixCache::Entry& PrefixCache::entry(int32_t block_id) const {
  SS_CHECK(block_id >= 0 && static_cast<size_t>(block_id) < entries_.size());
  return entries_[static_cast<size_t>(block_id)];
}

PrefixCache::Entry& PrefixCache::entry(int32_t block_id) {
  SS_CHECK(block_id >= 0 && static_cast<size_t>(block_id) < entries_.size());
  return entries_[static_cast<size_t>(block_id)];
}

bool PrefixCache::Insert(BlockHash hash, int32_t block_id) {
  Entry& e = entry(block_id);
  SS_CHECK(!e.evictable);
  if (e.cached) {
    SS_CHECK(e.hash == hash);  // a full block's content, hence its hash, never changes
    return true;
  }
  const auto [it, inserted] = block_of_hash_.try_emplace(hash, block_id);
  if (!inserted) return false;
  e.cached = true;
  e.hash = hash;
  return true;
}

int32_t PrefixCache::Find(BlockHash hash) const {
  const auto it = block_of_hash_.find(hash);
  return it == block_of_hash_.end() ? -1 : it->second;
}

bool PrefixCache::IsCached(int32_t block_id) const {
  return entry(block_id).cached;
}

bool PrefixCache::IsEvictable(int32_t block_id) const {
  return entry(block_id).evictable;
}

void PrefixCache::MarkEvictable(int32_t block_id) {
  Entry& e = entry(block_id);
  SS_CHECK(e.cached && !e.evictable);
  e.evictable = true;
  e.lru_pos = evictable_lru_.insert(evictable_lru_.end(), block_id);
}

void PrefixCache::UnmarkEvictable(int32_t block_id) {
  Entry& e = entry(block_id);
  SS_CHECK(e.evictable);
  evictable_lru_.erase(e.lru_pos);
  e.evictable = false;
}

int32_t PrefixCache::EvictOldest() {
  SS_CHECK(!evictable_lru_.empty());
  const int32_t block_id = evictable_lru_.front();
  evictable_lru_.pop_front();
  Entry& e = entry(block_id);
  SS_CHECK(e.cached && e.evictable);
  block_of_hash_.erase(e.hash);
  e = Entry{};
  return block_id;
}

std::vector<BlockHash> PrefixCache::CachedHashes() const {
  std::vector<BlockHash> hashes;
  hashes.reserve(block_of_hash_.size());
  for (const Entry& e : entries_) {
    if (e.cached) hashes.push_back(e.hash);
  }
  return hashes;
}

void PrefixCache::RecordLookup(int num_queried, int num_hit) {
  SS_CHECK(num_hit >= 0 && num_hit <= num_queried);
  num_queries_ += num_queried;
  num_hits_ += num_hit;
}

}  // namespace sparseserve::kv
