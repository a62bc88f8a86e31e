// KvReservationTable: KV blocks a decode worker has set aside for prompts a prefill worker is
// computing, with leases.
//
// Reserve matches the prompt against the local prefix cache (those blocks are shared and never
// written remotely) and allocates the rest; the prefill worker PUTs the prompt's KV into the
// blocks from `first_remote_block` on. With a KvStagingArea (the KV pool is not in host memory,
// or staging is forced) each remotely written block also gets a staging block, and the prefill
// worker PUTs into those instead; the decode job copies them into the pool blocks when it adopts
// the KV. Take hands the blocks (and the staging lease) to the decode job; Release or lease expiry
// returns them all. A prefill worker's whole operation runs under a deadline shorter than the
// lease (the router sets it), and it closes its UCX endpoint at that deadline, so no PUT can land
// in blocks after their lease expired (ARCHITECTURE.md failure rules).
// Thread-safe.
#ifndef SPARSESERVE_DECODE_SVC_KV_RESERVATION_TABLE_H_
#define SPARSESERVE_DECODE_SVC_KV_RESERVATION_TABLE_H_

#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/kv/kv_block_lease.h"
#include "common/kv/kv_block_pool.h"
#include "decode_svc/kv_staging_area.h"

namespace sparseserve::decode {

// What a reservation is (the blocks themselves are leased by the table, then by the taker).
struct KvReservation {
  std::string id;
  // KV pool blocks covering the whole prompt, in order. Under rolling KV the blocks before the
  // window of the prompt's next token are kv::kNoBlock: nobody reads them, so none is reserved
  // or sent.
  std::vector<int32_t> block_ids;
  // Blocks before it came from the local prefix cache (or are outside the window).
  int first_remote_block = 0;
  int cached_tokens = 0;  // prompt tokens served by the local prefix cache
  int num_prompt_tokens = 0;
  // With staging: the staging block receiving block_ids[first_remote_block + i] is
  // staging_block_ids[i] (block_ids.size() - first_remote_block of them). Empty without staging.
  std::vector<int32_t> staging_block_ids;
};

// What Take hands over: the reservation, the lease on its pool blocks (block_ids, kNoBlock
// entries included) and the lease on its staging blocks (empty without staging).
struct TakenKvReservation {
  KvReservation reservation;
  kv::KvBlockLease blocks;
  KvStagingLease staging;
};

class KvReservationTable {
 public:
  // `pool` and `staging` (null: no staging) are borrowed and must outlive the table.
  // `rolling_window` > 0: the model's every layer has that window (ModelRunner::rolling_window).
  KvReservationTable(kv::KvBlockPool* pool, int block_tokens, absl::Duration lease,
                     KvStagingArea* staging = nullptr, int rolling_window = 0);

  // kResourceExhausted when the pool or the staging area cannot hold the prompt (nothing is kept
  // then); kInvalidArgument for an empty prompt.
  absl::StatusOr<KvReservation> Reserve(absl::Span<const int32_t> prompt);
  // Removes the reservation and hands its blocks (and their references) and its staging blocks
  // to the caller. kNotFound when unknown or expired.
  absl::StatusOr<TakenKvReservation> Take(const std::string& id);
  // Returns the blocks to the pool and the staging blocks to the staging area. False when
  // unknown.
  bool Release(const std::string& id);
  // Releases every reservation whose lease ended before `now`; returns how many.
  int ExpireBefore(absl::Time now);
  int size() const;
  absl::Duration lease() const { return lease_; }
  // The staging area, or null without staging.
  const KvStagingArea* staging() const { return staging_; }

 private:
  struct Entry {
    KvReservation reservation;
    kv::KvBlockLease blocks;
    KvStagingLease staging;
    absl::Time expires;
  };
  kv::KvBlockPool* pool_;
  const int block_tokens_;
  const int rolling_window_;
  const absl::Duration lease_;
  KvStagingArea* staging_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Entry> entries_ ABSL_GUARDED_BY(mu_);
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
};

}  // namespace sparseserve::decode

#endif  // SPARSESERVE_DECODE_SVC_KV_RESERVATION_TABLE_H_
