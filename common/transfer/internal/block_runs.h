// Merging of (local block, remote block) pairs into runs that are consecutive on both sides, so
// that one PUT moves a whole run (one (layer, block) is one contiguous unit, ARCHITECTURE.md).
// Stateless, thread-safe.
#ifndef SPARSESERVE_COMMON_TRANSFER_INTERNAL_BLOCK_RUNS_H_
#define SPARSESERVE_COMMON_TRANSFER_INTERNAL_BLOCK_RUNS_H_

#include <cstdint>
#include <vector>

#include "absl/types/span.h"

namespace sparseserve::transfer::internal {

struct BlockRun {
  int32_t local_block = 0;   // first local block id of the run
  int32_t remote_block = 0;  // first remote block id of the run
  int32_t num_blocks = 0;    // run length, >= 1
};

// Pairs local_block_ids[i] with remote_block_ids[i], in order, and merges pair i+1 into the run
// of pair i when both ids are one greater. REQUIRES: the spans have equal length.
std::vector<BlockRun> MergeBlockRuns(absl::Span<const int32_t> local_block_ids,
                                     absl::Span<const int32_t> remote_block_ids);

}  // namespace sparseserve::transfer::internal

#endif  // SPARSESERVE_COMMON_TRANSFER_INTERNAL_BLOCK_RUNS_H_
