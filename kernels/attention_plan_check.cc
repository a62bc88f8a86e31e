#include "kernels/attention_plan_check.h"

#include <atomic>

#include "absl/strings/str_cat.h"

namespace sparseserve::kernels {

uint64_t NewPlanId() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

absl::Status ValidateSequenceAttention(const SequenceAttention& seq, int64_t num_rows,
                                       int block_tokens, int64_t num_blocks, size_t idx,
                                       absl::string_view backend) {
  if (seq.pattern.kind != AttentionPatternKind::kDense) {
    return absl::UnimplementedError(absl::StrCat("Attention: sequence ", idx,
                                                 " uses a sparse pattern the ", backend,
                                                 " backend does not have yet"));
  }
  if (seq.q_len < 0 || seq.q_begin < 0 || seq.q_begin + seq.q_len > num_rows ||
      seq.kv_len < seq.q_len) {
    return absl::InvalidArgumentError(absl::StrCat("Attention: sequence ", idx, " rows [",
                                                   seq.q_begin, ", +", seq.q_len, ") kv_len ",
                                                   seq.kv_len, " do not fit ", num_rows, " rows"));
  }
  const int64_t needed = (seq.kv_len + block_tokens - 1) / block_tokens;
  if (static_cast<int64_t>(seq.block_table.size()) < needed) {
    return absl::InvalidArgumentError(absl::StrCat("Attention: sequence ", idx, " needs ", needed,
                                                   " blocks, block table has ",
                                                   seq.block_table.size()));
  }
  for (int64_t b = 0; b < needed; ++b) {
    if (seq.block_table[b] < 0 || seq.block_table[b] >= num_blocks) {
      return absl::InvalidArgumentError(absl::StrCat("Attention: sequence ", idx, " block id ",
                                                     seq.block_table[b], " outside pool"));
    }
  }
  if (!seq.q_positions.empty()) {
    if (static_cast<int32_t>(seq.q_positions.size()) != seq.q_len) {
      return absl::InvalidArgumentError("Attention: q_positions length != q_len");
    }
    for (int32_t p : seq.q_positions) {
      if (p < 0 || p >= seq.kv_len) {
        return absl::InvalidArgumentError("Attention: query position outside the KV");
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace sparseserve::kernels
