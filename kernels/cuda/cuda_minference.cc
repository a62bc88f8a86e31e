// CudaBackend's MInference planning: the device records of a batch's kMInference sequences
// (kernels/cuda/cuda_kernels.h MInferenceSeqInfo), their index offsets (the CPU reference's
// order, so the two backends' sparse_index areas compare word for word), the estimation scratch
// they need, and the configs' head patterns uploaded once per config.
#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/core/status.h"
#include "kernels/attention_plan_check.h"
#include "kernels/cuda/cuda_backend_state.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cuda_status.h"

namespace sparseserve::kernels {
namespace {

// True when some head of `c` is estimated from scores (vertical-slash or block-sparse): the
// index build then needs scratch for the sequence.
bool NeedsScratch(const MInferenceConfig& c) {
  if (c.planted) return false;
  return std::any_of(c.heads.begin(), c.heads.end(), [](const HeadPattern& h) {
    return h.kind == HeadPatternKind::kVerticalSlash || h.kind == HeadPatternKind::kBlockSparse;
  });
}

}  // namespace

absl::Status CudaBackend::PlanMInference(const AttentionBatch& batch, const AttentionShape& shape,
                                         const std::vector<int32_t>& table_begins,
                                         CudaMInferencePlan* plan) {
  constexpr int64_t kMaxWords = std::numeric_limits<int32_t>::max();
  *plan = CudaMInferencePlan();
  for (size_t s = 0; s < batch.sequences.size(); ++s) {
    const SequenceAttention& sa = batch.sequences[s];
    const int64_t words = SparseIndexWords(sa);  // 0 unless kMInference with rows
    if (words == 0) continue;
    const std::shared_ptr<const MInferenceConfig>& config = sa.pattern.minference;
    if (minference_ == nullptr) minference_ = std::make_unique<MInferenceState>();
    auto it = minference_->configs.find(config.get());
    if (it == minference_->configs.end()) {
      if (capturing_) {
        return absl::FailedPreconditionError(
            "Attention: an MInference config must be planned once before a graph capture");
      }
      std::vector<int32_t> host;
      host.reserve(config->heads.size() * 3);
      for (const HeadPattern& h : config->heads) {
        host.insert(host.end(), {static_cast<int32_t>(h.kind), h.v, h.s});
      }
      MInferenceState::Heads entry;
      entry.config = config;
      SS_ASSIGN_OR_RETURN(entry.heads, Allocate(DType::kI32, {static_cast<int64_t>(host.size())}));
      // From pageable memory the copy has read `host` when the call returns.
      SS_RETURN_IF_ERROR(CudaStatus(
          cudaMemcpyAsync(entry.heads.raw_data(), host.data(), host.size() * sizeof(int32_t),
                          cudaMemcpyHostToDevice, stream()),
          "MInference config upload"));
      it = minference_->configs.emplace(config.get(), std::move(entry)).first;
    }
    const MInferenceIndexShape ishape = MInferenceIndexShapeOf(*config, sa.q_len, sa.kv_len);
    cuda::MInferenceSeqInfo rec{};
    rec.heads = it->second.heads.data<int32_t>();
    rec.planted_seed = config->planted_seed;
    rec.seq = static_cast<int32_t>(s);
    rec.q_begin = sa.q_begin;
    rec.q_len = sa.q_len;
    rec.kv_len = sa.kv_len;
    rec.table_begin = table_begins[s];
    rec.index_offset = static_cast<int32_t>(plan->index_words);
    rec.num_query_blocks = ishape.num_query_blocks;
    rec.cap_columns = ishape.cap_columns;
    rec.cap_slashes = ishape.cap_slashes;
    rec.cap_blocks = ishape.cap_blocks;
    rec.words_per_head = ishape.words_per_head;
    rec.scratch_offset = -1;
    if (NeedsScratch(*config)) {
      rec.scratch_offset = static_cast<int32_t>(plan->scratch_floats);
      plan->scratch_floats += int64_t{shape.num_heads} *
                              cuda::MInferenceScratchFloatsPerHead(sa.kv_len, shape.head_dim);
    }
    rec.num_layers = config->num_layers;
    rec.planted = config->planted ? 1 : 0;
    plan->index_words += words;
    if (plan->index_words > kMaxWords || plan->scratch_floats > kMaxWords) {
      return absl::ResourceExhaustedError(
          absl::StrCat("Attention: the MInference index of this batch needs ", plan->index_words,
                       " words and ", plan->scratch_floats, " scratch floats (int32 offsets)"));
    }
    const int32_t record = static_cast<int32_t>(plan->seqs.size());
    plan->seqs.push_back(rec);
    for (int32_t r = 0; r < sa.q_len; ++r) plan->rows.insert(plan->rows.end(), {record, r});
    plan->max_key_tiles = std::max(plan->max_key_tiles, (sa.kv_len + 63) / 64);
    plan->max_query_blocks = std::max(plan->max_query_blocks, ishape.num_query_blocks);
  }
  return absl::OkStatus();
}

}  // namespace sparseserve::kernels
