#include "common/kv/block_runs.h"

#include "common/core/check.h"

namespace sparseserve::kv {

std::vector<KvBlockRun> MergeKvBlockRuns(absl::Span<const int32_t> src_blocks,
                                         absl::Span<const int32_t> dst_blocks) {
  SS_CHECK(src_blocks.size() == dst_blocks.size());
  std::vector<KvBlockRun> runs;
  for (size_t i = 0; i < src_blocks.size(); ++i) {
    const int32_t src = src_blocks[i];
    const int32_t dst = dst_blocks[i];
    if (!runs.empty()) {
      KvBlockRun& last = runs.back();
      // int64 arithmetic: an id of INT32_MAX must not wrap into a false "consecutive".
      if (int64_t{last.src_block} + last.num_blocks == src &&
          int64_t{last.dst_block} + last.num_blocks == dst) {
        ++last.num_blocks;
        continue;
      }
    }
    runs.push_back(KvBlockRun{src, dst, 1});
  }
  return runs;
}

}  // namespace sparseserve::kv
