#include "kernels/attention_plan_check.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace sparseserve::kernels {

absl::Status CheckPatternSupported(const AttentionPattern& pattern) {
  switch (pattern.kind) {
    case AttentionMethodKind::kDense: return absl::OkStatus();
    case AttentionMethodKind::kSlidingWindow:
      if (pattern.window < 1 || pattern.sink_tokens < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("Attention: sliding window needs window >= 1 and sink_tokens >= 0, got ",
                         pattern.window, " and ", pattern.sink_tokens));
      }
      return absl::OkStatus();
    case AttentionMethodKind::kMInference: {
      const MInferenceConfig* c = pattern.minference.get();
      if (c == nullptr || c->num_layers < 1 || c->num_heads < 1 ||
          c->heads.size() != static_cast<size_t>(c->num_layers) * c->num_heads) {
        return absl::InvalidArgumentError(
            "Attention: MInference needs a config with a pattern per (layer, head)");
      }
      for (const HeadPattern& h : c->heads) {
        if (h.v < 1 || (h.kind != HeadPatternKind::kBlockSparse && h.s < 1) ||
            h.kind == HeadPatternKind::kDense) {
          return absl::InvalidArgumentError(absl::StrCat(
              "Attention: MInference head pattern ", static_cast<int>(h.kind), " (", h.v, ", ", h.s,
              ") is not A-shape, vertical-slash or block-sparse with sizes >= 1"));
        }
      }
      return absl::OkStatus();
    }
    case AttentionMethodKind::kTokenSelect: {
      const TokenSelectParams& p = pattern.tokenselect;
      if (p.k < 1 || p.initial < 0 || p.local < 0 || !(p.theta >= -1.0f)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "Attention: TokenSelect needs k >= 1, initial >= 0, local >= 0 and theta >= -1; got k ",
            p.k, ", initial ", p.initial, ", local ", p.local, ", theta ", p.theta));
      }
      return absl::OkStatus();
    }
  }
  return absl::InvalidArgumentError("Attention: unknown attention method");
}

absl::Status ValidateAttentionBatch(const AttentionBatch& batch, const AttentionShape& shape) {
  if (batch.block_tokens < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("Attention: block_tokens must be >= 1, got ", batch.block_tokens));
  }
  if (shape.num_kv_heads < 1 || shape.num_heads % shape.num_kv_heads != 0 || shape.head_dim < 1) {
    return absl::InvalidArgumentError(absl::StrCat("Attention: ", shape.num_heads, " heads, ",
                                                   shape.num_kv_heads, " KV heads, head_dim ",
                                                   shape.head_dim, " is not a GQA shape"));
  }
  const int64_t num_state_slots = batch.sequence_state.empty() ? 0 : batch.sequence_state.dim(0);
  if (!batch.sequence_state.empty() &&
      (batch.sequence_state.dtype() != DType::kI32 || batch.sequence_state.ndim() != 2)) {
    return absl::InvalidArgumentError(
        "Attention: sequence_state must be i32 [num_slots, slot_words]");
  }
  std::vector<std::pair<int64_t, int64_t>> row_ranges;
  std::vector<int32_t> state_slots;
  for (size_t idx = 0; idx < batch.sequences.size(); ++idx) {
    const SequenceAttention& seq = batch.sequences[idx];
    if (seq.state_slot < -1 || seq.state_slot >= num_state_slots) {
      return absl::InvalidArgumentError(absl::StrCat("Attention: sequence ", idx, " state slot ",
                                                     seq.state_slot, " outside the ",
                                                     num_state_slots, " slots of sequence_state"));
    }
    if (seq.state_slot >= 0) state_slots.push_back(seq.state_slot);
    if (absl::Status s = CheckPatternSupported(seq.pattern); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("sequence ", idx, ": ", s.message()));
    }
    if (seq.q_len < 0 || seq.q_begin < 0 || int64_t{seq.q_begin} + seq.q_len > shape.num_rows ||
        seq.kv_len < seq.q_len) {
      return absl::InvalidArgumentError(
          absl::StrCat("Attention: sequence ", idx, " rows [", seq.q_begin, ", +", seq.q_len,
                       ") kv_len ", seq.kv_len, " do not fit ", shape.num_rows, " rows"));
    }
    if (seq.q_len > 0) row_ranges.push_back({seq.q_begin, int64_t{seq.q_begin} + seq.q_len});
    const int64_t needed = (int64_t{seq.kv_len} + batch.block_tokens - 1) / batch.block_tokens;
    if (static_cast<int64_t>(seq.block_table.size()) < needed) {
      return absl::InvalidArgumentError(absl::StrCat("Attention: sequence ", idx, " needs ", needed,
                                                     " blocks, block table has ",
                                                     seq.block_table.size()));
    }
    for (int64_t b = 0; b < needed; ++b) {
      if (seq.block_table[b] < 0 || seq.block_table[b] >= shape.num_blocks) {
        return absl::InvalidArgumentError(absl::StrCat("Attention: sequence ", idx, " block id ",
                                                       seq.block_table[b], " outside the pool of ",
                                                       shape.num_blocks));
      }
    }
    if (seq.pattern.kind == AttentionMethodKind::kMInference) {
      if (seq.pattern.minference->num_heads != shape.num_heads) {
        return absl::InvalidArgumentError(absl::StrCat(
            "Attention: sequence ", idx, " has an MInference config for ",
            seq.pattern.minference->num_heads, " heads, the model has ", shape.num_heads));
      }
      if (!seq.mask.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat("Attention: sequence ", idx, " is MInference with a query mask"));
      }
    }
    if (seq.pattern.kind == AttentionMethodKind::kTokenSelect && seq.q_len > 0 &&
        seq.state_slot < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Attention: sequence ", idx, " is TokenSelect without a state slot for its selection"));
    }
    if (!seq.mask.empty()) {
      if (static_cast<int64_t>(seq.mask.size()) != int64_t{seq.q_len} * seq.q_len) {
        return absl::InvalidArgumentError(absl::StrCat("Attention: sequence ", idx, " mask has ",
                                                       seq.mask.size(), " entries for ", seq.q_len,
                                                       " rows (q_len * q_len)"));
      }
      if (std::any_of(seq.mask.begin(), seq.mask.end(), [](uint8_t m) { return m > 1; })) {
        return absl::InvalidArgumentError(
            absl::StrCat("Attention: sequence ", idx, " mask entries must be 0 or 1"));
      }
    }
  }
  // Two sequences of one step with one slot would overwrite each other's state.
  std::sort(state_slots.begin(), state_slots.end());
  if (std::adjacent_find(state_slots.begin(), state_slots.end()) != state_slots.end()) {
    return absl::InvalidArgumentError("Attention: two sequences share a state slot");
  }
  std::sort(row_ranges.begin(), row_ranges.end());
  for (size_t i = 1; i < row_ranges.size(); ++i) {
    if (row_ranges[i].first < row_ranges[i - 1].second) {
      return absl::InvalidArgumentError("Attention: two sequences share query rows");
    }
  }
  return absl::OkStatus();
}

int64_t SparseIndexWords(const SequenceAttention& seq) {
  if (seq.pattern.kind != AttentionMethodKind::kMInference || seq.q_len == 0) return 0;
  const MInferenceConfig& c = *seq.pattern.minference;
  return int64_t{MInferenceIndexShapeOf(c, seq.q_len, seq.kv_len).words_per_head} * c.num_heads;
}

}  // namespace sparseserve::kernels
