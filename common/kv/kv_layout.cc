#include "common/kv/kv_layout.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace sparseserve::kv {

int64_t KvLayout::bytes_per_block_per_layer() const {
  return int64_t{2} * block_tokens * num_kv_heads * head_dim *
         static_cast<int64_t>(DTypeSize(dtype));
}

std::string KvLayout::ToString() const {
  return absl::StrCat(
      DTypeName(dtype), " block=", block_tokens, " layers=", num_layers, " kv_heads=", num_kv_heads,
      " head_dim=", head_dim, " k=post-rope",
      tensor_parallel > 1 ? absl::StrCat(" tp=", tensor_parallel) : "",
      adapter_fingerprint != 0
          ? absl::StrCat(" adapter=", absl::Hex(adapter_fingerprint, absl::kZeroPad16))
          : "");
}

absl::Status KvLayout::Validate() const {
  if (dtype == DType::kI32) {
    return absl::InvalidArgumentError("KV layout: dtype i32 is not a KV element type");
  }
  if (block_tokens <= 0 || block_tokens % 16 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "KV layout: block_tokens must be a positive multiple of 16, got ", block_tokens));
  }
  if (num_layers <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("KV layout: num_layers must be positive, got ", num_layers));
  }
  if (num_kv_heads <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("KV layout: num_kv_heads must be positive, got ", num_kv_heads));
  }
  if (head_dim <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("KV layout: head_dim must be positive, got ", head_dim));
  }
  return absl::OkStatus();
}

absl::Status CheckCompatible(const KvLayout& ours, const KvLayout& theirs) {
  // Tensor parallelism does not change the bytes that move: both sides stage whole-heads blocks.
  KvLayout same_ranks = theirs;
  same_ranks.tensor_parallel = ours.tensor_parallel;
  if (ours == same_ranks) return absl::OkStatus();
  std::vector<absl::string_view> differ;
  if (ours.dtype != theirs.dtype) differ.push_back("dtype");
  if (ours.block_tokens != theirs.block_tokens) differ.push_back("block_tokens");
  if (ours.num_layers != theirs.num_layers) differ.push_back("num_layers");
  if (ours.num_kv_heads != theirs.num_kv_heads) differ.push_back("num_kv_heads");
  if (ours.head_dim != theirs.head_dim) differ.push_back("head_dim");
  if (ours.adapter_fingerprint != theirs.adapter_fingerprint) {
    differ.push_back("adapter_fingerprint");
  }
  // The usual cause of a layer-count mismatch between workers of one model: a Kangaroo adapter
  // (one more KV layer) loaded on one side only.
  const absl::string_view hint =
      ours.num_layers != theirs.num_layers
          ? "; workers differ in num_layers when only some load --kangaroo-adapter"
      : ours.adapter_fingerprint != theirs.adapter_fingerprint
          ? "; the workers load different --kangaroo-adapter files"
          : "";
  return absl::FailedPreconditionError(
      absl::StrCat("KV layout mismatch: ours [", ours.ToString(), "] vs theirs [",
                   theirs.ToString(), "] (differs in ", absl::StrJoin(differ, ", "), ")", hint));
}

}  // namespace sparseserve::kv
