#include "common/transfer/internal/block_runs.h"

#include "common/core/check.h"

namespace sparseserve::transfer::internal {

std::vector<BlockRun> MergeBlockRuns(absl::Span<const int32_t> local_block_ids,
                                     absl::Span<const int32_t> remote_block_ids) {
  SS_CHECK(local_block_ids.size() == remote_block_ids.size());
  std::vector<BlockRun> runs;
  for (size_t i = 0; i < local_block_ids.size(); ++i) {
    const int32_t local = local_block_ids[i];
    const int32_t remote = remote_block_ids[i];
    if (!runs.empty()) {
      BlockRun& last = runs.back();
      // int64 arithmetic: an id of INT32_MAX must not wrap into a false "consecutive".
      if (int64_t{last.local_block} + last.num_blocks == local &&
          int64_t{last.remote_block} + last.num_blocks == remote) {
        ++last.num_blocks;
        continue;
      }
    }
    runs.push_back(BlockRun{local, remote, 1});
  }
  return runs;
}

}  // namespace sparseserve::transfer::internal
