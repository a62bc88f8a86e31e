#include "common/kv/block_table.h"

#include "common/core/check.h"

namespace sparseserve::kv {

BlockTable::BlockTable(int block_tokens) : block_tokens_(block_tokens) {
  SS_CHECK(block_tokens > 0);
}

int BlockTable::NumBlocksNeeded(int total_tokens) const {
  SS_CHECK(total_tokens >= 0);
  const int blocks_for_total = (total_tokens + block_tokens_ - 1) / block_tokens_;
  return blocks_for_total > num_blocks() ? blocks_for_total - num_blocks() : 0;
}

void BlockTable::Append(absl::Span<const int32_t> block_ids) {
  for (const int32_t id : block_ids) SS_CHECK(id >= 0);
  block_ids_.insert(block_ids_.end(), block_ids.begin(), block_ids.end());
}

void BlockTable::AddTokens(int n) {
  SS_CHECK(n >= 0 && n <= capacity_tokens() - num_tokens_);
  num_tokens_ += n;
}

KvSlot BlockTable::Slot(int pos) const {
  SS_CHECK(pos >= 0 && pos < capacity_tokens());
  return KvSlot{block_ids_[static_cast<size_t>(pos / block_tokens_)], pos % block_tokens_};
}

void BlockTable::Clear() {
  block_ids_.clear();
  num_tokens_ = 0;
}

}  // namespace sparseserve::kv
