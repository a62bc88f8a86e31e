#include "common/kv/kv_block_pool.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/core/check.h"

namespace sparseserve::kv {

KvBlockPool::KvBlockPool(int num_blocks) : num_blocks_(num_blocks), prefix_cache_(num_blocks) {
  SS_CHECK(num_blocks >= 0);
  absl::MutexLock lock(&mu_);
  ref_counts_.assign(static_cast<size_t>(num_blocks), 0);
  free_ids_.reserve(static_cast<size_t>(num_blocks));
  // Stack order: id 0 is handed out first.
  for (int32_t id = num_blocks - 1; id >= 0; --id) free_ids_.push_back(id);
}

void KvBlockPool::CheckId(int32_t block_id) const {
  SS_CHECK(block_id >= 0 && block_id < num_blocks_);
}

absl::StatusOr<std::vector<int32_t>> KvBlockPool::Allocate(int n) {
  if (n < 0) {
    return absl::InvalidArgumentError(absl::StrCat("KV pool: cannot allocate ", n, " blocks"));
  }
  absl::MutexLock lock(&mu_);
  const int num_unused = static_cast<int>(free_ids_.size());
  const int num_evictable = prefix_cache_.num_evictable();
  if (n > num_unused + num_evictable) {
    return absl::ResourceExhaustedError(
        absl::StrCat("KV pool: requested ", n, " blocks but only ", num_unused + num_evictable,
                     " of ", num_blocks_, " are free (", num_unused, " unused + ", num_evictable,
                     " evictable cached; ", num_used_, " in use)"));
  }
  std::vector<int32_t> ids;
  ids.reserve(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    int32_t id;
    if (!free_ids_.empty()) {
      id = free_ids_.back();
      free_ids_.pop_back();
    } else {
      id = prefix_cache_.EvictOldest();
    }
    SS_CHECK(ref_counts_[static_cast<size_t>(id)] == 0);
    ref_counts_[static_cast<size_t>(id)] = 1;
    ids.push_back(id);
  }
  num_used_ += n;
  return ids;
}

void KvBlockPool::Retain(absl::Span<const int32_t> block_ids) {
  absl::MutexLock lock(&mu_);
  for (const int32_t id : block_ids) {
    CheckId(id);
    int32_t& count = ref_counts_[static_cast<size_t>(id)];
    SS_CHECK(count > 0);  // only a holder may share a block; cached ones come back via Match
    ++count;
  }
}

void KvBlockPool::Release(absl::Span<const int32_t> block_ids) {
  absl::MutexLock lock(&mu_);
  for (const int32_t id : block_ids) {
    if (id == kNoBlock) continue;
    CheckId(id);
    int32_t& count = ref_counts_[static_cast<size_t>(id)];
    SS_CHECK(count > 0);  // double release
    if (--count == 0) ReturnBlockLocked(id);
  }
}

void KvBlockPool::ReturnBlockLocked(int32_t block_id) {
  --num_used_;
  if (prefix_cache_.IsCached(block_id)) {
    prefix_cache_.MarkEvictable(block_id);
  } else {
    free_ids_.push_back(block_id);
  }
}

bool KvBlockPool::Register(BlockHash hash, int32_t block_id) {
  CheckId(block_id);
  absl::MutexLock lock(&mu_);
  SS_CHECK(ref_counts_[static_cast<size_t>(block_id)] > 0);
  return prefix_cache_.Insert(hash, block_id);
}

std::vector<int32_t> KvBlockPool::Match(absl::Span<const BlockHash> hashes) {
  absl::MutexLock lock(&mu_);
  std::vector<int32_t> ids;
  for (const BlockHash hash : hashes) {
    const int32_t id = prefix_cache_.Find(hash);
    if (id < 0) break;
    int32_t& count = ref_counts_[static_cast<size_t>(id)];
    if (count == 0) {
      prefix_cache_.UnmarkEvictable(id);
      ++num_used_;
    }
    ++count;
    ids.push_back(id);
  }
  prefix_cache_.RecordLookup(static_cast<int>(hashes.size()), static_cast<int>(ids.size()));
  return ids;
}

std::vector<BlockHash> KvBlockPool::CachedHashes() const {
  absl::MutexLock lock(&mu_);
  return prefix_cache_.CachedHashes();
}

PrefixCacheStats KvBlockPool::prefix_cache_stats() const {
  absl::MutexLock lock(&mu_);
  return PrefixCacheStats{prefix_cache_.num_queries(), prefix_cache_.num_hits(),
                          prefix_cache_.num_cached()};
}

int KvBlockPool::num_free_blocks() const {
  absl::MutexLock lock(&mu_);
  return num_blocks_ - num_used_;
}

int KvBlockPool::num_used_blocks() const {
  absl::MutexLock lock(&mu_);
  return num_used_;
}

double KvBlockPool::usage_ratio() const {
  if (num_blocks_ == 0) return 0.0;
  return static_cast<double>(num_used_blocks()) / num_blocks_;
}

int KvBlockPool::ref_count(int32_t block_id) const {
  CheckId(block_id);
  absl::MutexLock lock(&mu_);
  return ref_counts_[static_cast<size_t>(block_id)];
}

}  // namespace sparseserve::kv
