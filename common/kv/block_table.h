// BlockTable: one sequence's KV block ids, in token order, and how many tokens they hold.
//
// Token position `pos` lives in block block_ids()[pos / block_tokens] at offset
// pos % block_tokens. The table only records ids: the blocks' references belong to the caller,
// which allocates them from (and releases them to) a KvBlockPool. Not thread-safe: owned by
// the scheduler thread of the sequence's worker.
#ifndef SPARSESERVE_COMMON_KV_BLOCK_TABLE_H_
#define SPARSESERVE_COMMON_KV_BLOCK_TABLE_H_

#include <cstdint>
#include <vector>

#include "absl/types/span.h"

namespace sparseserve::kv {

// Where one token's K and V sit in the per-layer pools.
struct KvSlot {
  int32_t block_id = -1;  // row of the per-layer pool
  int offset = 0;         // token index inside the block, [0, block_tokens)
};

class BlockTable {
 public:
  // REQUIRES: block_tokens > 0 (KvLayout::block_tokens).
  explicit BlockTable(int block_tokens);

  int block_tokens() const { return block_tokens_; }
  // Tokens written so far (prompt + generated), [0, capacity_tokens()].
  int num_tokens() const { return num_tokens_; }
  int num_blocks() const { return static_cast<int>(block_ids_.size()); }
  // Tokens the appended blocks can hold: num_blocks() * block_tokens().
  int capacity_tokens() const { return num_blocks() * block_tokens_; }
  const std::vector<int32_t>& block_ids() const { return block_ids_; }

  // Additional blocks needed for the table to hold `total_tokens` tokens (0 if it already can).
  // REQUIRES: total_tokens >= 0.
  int NumBlocksNeeded(int total_tokens) const;

  // Appends blocks at the end of the sequence.
  void Append(absl::Span<const int32_t> block_ids);

  // Counts `n` more tokens as written. REQUIRES: n >= 0, num_tokens() + n <= capacity_tokens().
  void AddTokens(int n);

  // Block and offset of token position `pos`. REQUIRES: 0 <= pos < capacity_tokens().
  KvSlot Slot(int pos) const;

  // Forgets every block and token (the caller releases the ids first).
  void Clear();

 private:
  int block_tokens_;
  int num_tokens_ = 0;
  std::vector<int32_t> block_ids_;
};

}  // namespace sparseserve::kv

#endif  // SPARSESERVE_COMMON_KV_BLOCK_TABLE_H_
