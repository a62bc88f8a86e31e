// The CPU reference of TokenSelect (kernels/tokenselect_index.h): selecting or reusing a layer's
// tokens in each sequence's state slot, and listing the keys a row sees under the selection.
#ifndef SPARSESERVE_KERNELS_CPU_CPU_TOKENSELECT_H_
#define SPARSESERVE_KERNELS_CPU_CPU_TOKENSELECT_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "common/core/thread_pool.h"
#include "common/tensor/tensor.h"
#include "kernels/attention_plan.h"

namespace sparseserve::kernels::cpu_internal {

// Layer `layer`'s state area of `seq` in batch.sequence_state, or null when the slot is too small
// to hold it (StateWords of layer + 1 layers).
int32_t* TokenSelectLayerState(const AttentionBatch& batch, const SequenceAttention& seq,
                               const AttentionShape& shape, int layer);

// Selects (or reuses, per the selection cache) layer `layer`'s tokens of every kTokenSelect
// sequence of `plan` with more candidates than k, writing them into its state slot, and adds each
// sequence's pairs to sparse_stats and its cache hits and queries to selection_stats.
// q f32 [rows, heads, head_dim], kv_layer as Backend::WriteKv. kInvalidArgument when a
// sequence's state slot is too small for this layer.
absl::Status BuildTokenSelectIndex(const AttentionPlan& plan, const Tensor& q,
                                   const Tensor& kv_layer, int layer, core::ThreadPool* pool);

// Checks the payload of a selecting step's layer area before attention reads it: k keys per
// list, strictly ascending within [initial_end, LocalBegin) (so no list reads outside the
// sequence or counts a key twice). kInternal naming the list and place otherwise; OK on steps
// that run dense.
absl::Status CheckTokenSelectLists(const SequenceAttention& seq, const int32_t* layer_state,
                                   const AttentionShape& shape);

// The keys row `row` (0 <= row < q_len) of kTokenSelect `seq` sees through KV head `kv_head`,
// ascending, into `keys`; `layer_state` is its layer's area as BuildTokenSelectIndex left it
// (unused on dense steps) and CheckTokenSelectLists passed.
void TokenSelectKeys(const SequenceAttention& seq, const int32_t* layer_state,
                     const AttentionShape& shape, int32_t kv_head, int32_t row,
                     std::vector<int32_t>* keys);

}  // namespace sparseserve::kernels::cpu_internal

#endif  // SPARSESERVE_KERNELS_CPU_CPU_TOKENSELECT_H_
