// KvReservationTable: KV blocks a decode worker has set aside for prompts a prefill worker is
// computing, with leases.
//
// Reserve matches the prompt against the local prefix cache (those blocks are shared and never
// written remotely) and allocates the rest; the prefill worker PUTs the prompt's KV into the
// blocks from `first_remote_block` on. Take hands the blocks to the decode job; Release or lease
// expiry returns them to the pool. A prefill worker's whole operation runs under a deadline
// shorter than the lease (the router sets it), and it closes its UCX endpoint at that deadline,
// so no PUT can land in blocks after their lease expired (ARCHITECTURE.md failure rules).
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
#include "common/kv/kv_block_pool.h"

namespace sparseserve::decode {

struct KvReservation {
  std::string id;
  std::vector<int32_t> block_ids;  // covering the whole prompt, in order
  int first_remote_block = 0;      // blocks before it came from the local prefix cache
  int cached_tokens = 0;           // = first_remote_block * block_tokens
  int num_prompt_tokens = 0;
};

class KvReservationTable {
 public:
  // `pool` is borrowed and must outlive the table.
  KvReservationTable(kv::KvBlockPool* pool, int block_tokens, absl::Duration lease);

  // kResourceExhausted when the pool cannot hold the prompt (nothing is kept then).
  absl::StatusOr<KvReservation> Reserve(absl::Span<const int32_t> prompt);
  // Removes the reservation and hands its blocks (and their references) to the caller.
  // kNotFound when unknown or expired.
  absl::StatusOr<KvReservation> Take(const std::string& id);
  // Returns the blocks to the pool. False when unknown.
  bool Release(const std::string& id);
  // Releases every reservation whose lease ended before `now`; returns how many.
  int ExpireBefore(absl::Time now);
  int size() const;
  absl::Duration lease() const { return lease_; }

 private:
  struct Entry {
    KvReservation reservation;
    absl::Time expires;
  };
  kv::KvBlockPool* pool_;
  const int block_tokens_;
  const absl::Duration lease_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Entry> entries_ ABSL_GUARDED_BY(mu_);
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
};

}  // namespace sparseserve::decode

#endif  // SPARSESERVE_DECODE_SVC_KV_RESERVATION_TABLE_H_
