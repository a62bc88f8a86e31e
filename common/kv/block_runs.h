// KvBlockRun: pairs of (source block, destination block) merged into runs consecutive on both
// sides, so that one copy or one remote PUT moves a whole run (one (layer, block) is one
// contiguous unit of a KV layer, kv_layout.h). The one merger of the KV copies between device
// and host (engine/kv_block_copy.h) and the UCX transfers (transfer/kv_write_session.h).
// Stateless, thread-safe.
#ifndef SPARSESERVE_COMMON_KV_BLOCK_RUNS_H_
#define SPARSESERVE_COMMON_KV_BLOCK_RUNS_H_

#include <cstdint>
#include <vector>

#include "absl/types/span.h"

namespace sparseserve::kv {

// [src_block, src_block + num_blocks) goes to [dst_block, dst_block + num_blocks).
struct KvBlockRun {
  int32_t src_block = 0;
  int32_t dst_block = 0;
  int32_t num_blocks = 0;  // >= 1
};

// Pairs src_blocks[i] with dst_blocks[i], in order, merging a pair into the previous run when both
// ids are one greater. REQUIRES: the spans have equal length (aborts otherwise).
std::vector<KvBlockRun> MergeKvBlockRuns(absl::Span<const int32_t> src_blocks,
                                         absl::Span<const int32_t> dst_blocks);

}  // namespace sparseserve::kv

#endif  // SPARSESERVE_COMMON_KV_BLOCK_RUNS_H_
