// SequenceStateTable: per-sequence persistent memory on the backend for attention methods and
// drafters that carry state from step to step (TokenSelect's selection cache, a drafter's table).
//
// Slots are keyed by a stable sequence id (SequenceKv::id), never by batch row: rows move when a
// batch is compacted, a sequence's slot does not. Acquire assigns a slot (zeroed) outside any
// graph capture; kernels of a step then find a sequence's state at row `slot` of memory(), so a
// decode step that reads and writes it still replays as a CUDA graph. Release frees the slot for
// reuse; the next Acquire of it zeroes it again. Not thread-safe: owned by the engine thread.
#ifndef SPARSESERVE_COMMON_ENGINE_SEQUENCE_STATE_TABLE_H_
#define SPARSESERVE_COMMON_ENGINE_SEQUENCE_STATE_TABLE_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "common/tensor/tensor.h"
#include "kernels/backend.h"

namespace sparseserve::engine {

class SequenceStateTable {
 public:
  // `num_slots` slots of `slot_words` int32 words each in `backend` memory (borrowed; must
  // outlive the table). kInvalidArgument for sizes < 1, kResourceExhausted when it does not fit.
  static absl::StatusOr<std::unique_ptr<SequenceStateTable>> Create(kernels::Backend& backend,
                                                                    int num_slots,
                                                                    int64_t slot_words);
  SequenceStateTable(const SequenceStateTable&) = delete;
  SequenceStateTable& operator=(const SequenceStateTable&) = delete;

  // The slot of `sequence_id`; a sequence without one gets a free slot, zeroed (a host upload:
  // not inside a graph capture). kResourceExhausted when every slot is taken.
  absl::StatusOr<int> Acquire(uint64_t sequence_id);
  // Frees the sequence's slot; nothing happens when it has none.
  void Release(uint64_t sequence_id);
  // The sequence's slot, or -1.
  int SlotOf(uint64_t sequence_id) const;
  int num_free_slots() const { return static_cast<int>(free_.size()); }

  // i32 [num_slots, slot_words]: slot s is row s.
  const Tensor& memory() const { return memory_; }

 private:
  SequenceStateTable(kernels::Backend& backend, Tensor memory);

  kernels::Backend& backend_;
  Tensor memory_;
  Tensor zeros_;           // host i32 [slot_words], uploaded into a slot when it is reused
  std::vector<int> free_;  // free slots, lowest last (handed out first)
  absl::flat_hash_map<uint64_t, int> slots_;
};

}  // namespace sparseserve::engine

#endif  // SPARSESERVE_COMMON_ENGINE_SEQUENCE_STATE_TABLE_H_
