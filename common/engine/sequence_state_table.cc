#include "common/engine/sequence_state_table.h"

#include "absl/strings/str_cat.h"
#include "common/core/status.h"

namespace sparseserve::engine {

absl::StatusOr<std::unique_ptr<SequenceStateTable>> SequenceStateTable::Create(
    kernels::Backend& backend, int num_slots, int64_t slot_words) {
  if (num_slots < 1 || slot_words < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("SequenceStateTable: ", num_slots, " slots of ", slot_words, " words"));
  }
  SS_ASSIGN_OR_RETURN(Tensor memory, backend.Allocate(DType::kI32, {num_slots, slot_words}));
  return std::unique_ptr<SequenceStateTable>(new SequenceStateTable(backend, std::move(memory)));
}

SequenceStateTable::SequenceStateTable(kernels::Backend& backend, Tensor memory)
    : backend_(backend),
      memory_(std::move(memory)),
      zeros_(Tensor::Zeros(DType::kI32, {memory_.dim(1)})) {
  for (int s = static_cast<int>(memory_.dim(0)) - 1; s >= 0; --s) free_.push_back(s);
}

absl::StatusOr<int> SequenceStateTable::Acquire(uint64_t sequence_id) {
  if (auto it = slots_.find(sequence_id); it != slots_.end()) return it->second;
  if (free_.empty()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("no free sequence state slot (", memory_.dim(0), " slots, all taken)"));
  }
  const int slot = free_.back();
  // Whatever the slot's previous sequence left there must not leak into this one.
  SS_ASSIGN_OR_RETURN(const Tensor row, memory_.Slice(0, slot, slot + 1).Reshape({memory_.dim(1)}));
  SS_RETURN_IF_ERROR(backend_.CopyFromHost(zeros_, row));
  free_.pop_back();
  slots_[sequence_id] = slot;
  return slot;
}

void SequenceStateTable::Release(uint64_t sequence_id) {
  auto it = slots_.find(sequence_id);
  if (it == slots_.end()) return;
  free_.push_back(it->second);
  slots_.erase(it);
}

int SequenceStateTable::SlotOf(uint64_t sequence_id) const {
  auto it = slots_.find(sequence_id);
  return it == slots_.end() ? -1 : it->second;
}

}  // namespace sparseserve::engine
