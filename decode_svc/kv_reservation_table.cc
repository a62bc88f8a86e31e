#include "decode_svc/kv_reservation_table.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/core/status.h"
#include "common/kv/block_hash.h"
#include "common/kv/rolling_window.h"

namespace sparseserve::decode {

KvReservationTable::KvReservationTable(kv::KvBlockPool* pool, int block_tokens,
                                       absl::Duration lease, KvStagingArea* staging,
                                       int rolling_window)
    : pool_(pool),
      block_tokens_(block_tokens),
      rolling_window_(rolling_window),
      lease_(lease),
      staging_(staging) {}

absl::StatusOr<KvReservation> KvReservationTable::Reserve(absl::Span<const int32_t> prompt) {
  if (prompt.empty()) return absl::InvalidArgumentError("ReserveKv: empty prompt");
  const int n = static_cast<int>(prompt.size());
  const int needed = (n + block_tokens_ - 1) / block_tokens_;
  std::vector<int32_t> ids = pool_->Match(kv::ComputeBlockHashes(prompt, block_tokens_));
  int cached = static_cast<int>(ids.size());
  // Rolling KV: blocks the prompt's next token cannot see are neither reserved nor sent (the
  // decode worker's runner would release them at once).
  const int dead = rolling_window_ > 0
                       ? std::min(kv::BlocksBeforeWindow(n, rolling_window_, block_tokens_), needed)
                       : 0;
  if (dead > 0) {
    const int drop = std::min(dead, cached);
    pool_->Release(absl::MakeConstSpan(ids).subspan(0, drop));
    std::fill(ids.begin(), ids.begin() + drop, kv::kNoBlock);
    if (cached <= dead) {
      ids.resize(dead, kv::kNoBlock);
      cached = 0;  // no hit the prompt's next tokens can use
    }
  }
  const int first_remote = static_cast<int>(ids.size());
  // From here on every error path returns the blocks through the lease.
  kv::KvBlockLease blocks(pool_, std::move(ids));
  SS_ASSIGN_OR_RETURN(const std::vector<int32_t> fresh, pool_->Allocate(needed - first_remote));
  blocks.Append(fresh);
  KvStagingLease staging;
  if (staging_ != nullptr) {
    SS_ASSIGN_OR_RETURN(staging, staging_->Allocate(needed - first_remote));
  }
  KvReservation r;
  r.block_ids = blocks.block_ids();
  r.first_remote_block = first_remote;
  r.cached_tokens = cached * block_tokens_;
  r.num_prompt_tokens = n;
  r.staging_block_ids = staging.block_ids();
  absl::MutexLock lock(&mu_);
  r.id = absl::StrCat("kv-", next_id_++);
  entries_[r.id] = Entry{r, std::move(blocks), std::move(staging), absl::Now() + lease_};
  return r;
}

absl::StatusOr<TakenKvReservation> KvReservationTable::Take(const std::string& id) {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(id);
  if (it == entries_.end()) {
    return absl::NotFoundError(absl::StrCat("KV reservation ", id, " unknown or expired"));
  }
  TakenKvReservation taken{std::move(it->second.reservation), std::move(it->second.blocks),
                           std::move(it->second.staging)};
  entries_.erase(it);
  return taken;
}

bool KvReservationTable::Release(const std::string& id) {
  Entry entry;  // its leases return the blocks on scope exit, outside the lock
  {
    absl::MutexLock lock(&mu_);
    auto it = entries_.find(id);
    if (it == entries_.end()) return false;
    entry = std::move(it->second);
    entries_.erase(it);
  }
  return true;
}

int KvReservationTable::ExpireBefore(absl::Time now) {
  std::vector<Entry> expired;  // returned on scope exit, outside the lock
  {
    absl::MutexLock lock(&mu_);
    for (auto it = entries_.begin(); it != entries_.end();) {
      if (it->second.expires < now) {
        expired.push_back(std::move(it->second));
        entries_.erase(it++);
      } else {
        ++it;
      }
    }
  }
  return static_cast<int>(expired.size());
}

int KvReservationTable::size() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(entries_.size());
}

}  // namespace sparseserve::decode
