#include "decode_svc/kv_reservation_table.h"

#include "absl/strings/str_cat.h"
#include "common/kv/block_hash.h"

namespace sparseserve::decode {

KvReservationTable::KvReservationTable(kv::KvBlockPool* pool, int block_tokens,
                                       absl::Duration lease)
    : pool_(pool), block_tokens_(block_tokens), lease_(lease) {}

absl::StatusOr<KvReservation> KvReservationTable::Reserve(absl::Span<const int32_t> prompt) {
  if (prompt.empty()) return absl::InvalidArgumentError("ReserveKv: empty prompt");
  const int n = static_cast<int>(prompt.size());
  const int needed = (n + block_tokens_ - 1) / block_tokens_;
  std::vector<int32_t> blocks = pool_->Match(kv::ComputeBlockHashes(prompt, block_tokens_));
  const int cached = static_cast<int>(blocks.size());
  absl::StatusOr<std::vector<int32_t>> fresh = pool_->Allocate(needed - cached);
  if (!fresh.ok()) {
    pool_->Release(blocks);
    return fresh.status();
  }
  blocks.insert(blocks.end(), fresh->begin(), fresh->end());
  absl::MutexLock lock(&mu_);
  KvReservation r;
  r.id = absl::StrCat("kv-", next_id_++);
  r.block_ids = std::move(blocks);
  r.first_remote_block = cached;
  r.cached_tokens = cached * block_tokens_;
  r.num_prompt_tokens = n;
  entries_[r.id] = Entry{r, absl::Now() + lease_};
  return r;
}

absl::StatusOr<KvReservation> KvReservationTable::Take(const std::string& id) {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(id);
  if (it == entries_.end()) {
    return absl::NotFoundError(absl::StrCat("KV reservation ", id, " unknown or expired"));
  }
  KvReservation r = std::move(it->second.reservation);
  entries_.erase(it);
  return r;
}

bool KvReservationTable::Release(const std::string& id) {
  std::vector<int32_t> blocks;
  {
    absl::MutexLock lock(&mu_);
    auto it = entries_.find(id);
    if (it == entries_.end()) return false;
    blocks = std::move(it->second.reservation.block_ids);
    entries_.erase(it);
  }
  pool_->Release(blocks);
  return true;
}

int KvReservationTable::ExpireBefore(absl::Time now) {
  std::vector<int32_t> blocks;
  int expired = 0;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = entries_.begin(); it != entries_.end();) {
      if (it->second.expires < now) {
        const auto& ids = it->second.reservation.block_ids;
        blocks.insert(blocks.end(), ids.begin(), ids.end());
        entries_.erase(it++);
        ++expired;
      } else {
        ++it;
      }
    }
  }
  pool_->Release(blocks);
  return expired;
}

int KvReservationTable::size() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(entries_.size());
}

}  // namespace sparseserve::decode
