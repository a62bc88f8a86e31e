// KvLayout: the KV-cache layout contract shared by every process that reads or writes KV blocks.
//
// A prefill worker writes KV blocks straight into a decode worker's pool, so both sides must
// agree byte for byte (ARCHITECTURE.md, "Contracts that cross process boundaries"). Per layer,
// a pool stores `[num_blocks][2 (K,V)][block_tokens][num_kv_heads][head_dim]` elements of
// `dtype`, with K stored after RoPE at the token's true position; one (layer, block) is one
// contiguous transfer unit. The layout is checked when KV is reserved; a mismatch is a clear
// kFailedPrecondition, never silent corruption. A value type; thread-safe when not mutated.
#ifndef SPARSESERVE_COMMON_KV_KV_LAYOUT_H_
#define SPARSESERVE_COMMON_KV_KV_LAYOUT_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "common/tensor/dtype.h"

namespace sparseserve::kv {

struct KvLayout {
  // Element type of K and V; kBf16 on CUDA, kF32 on the CPU reference backend. Never kI32.
  DType dtype = DType::kBf16;
  // Tokens per block; default 64, a multiple of 16 (tensor-core tile, ARCHITECTURE.md).
  int block_tokens = 64;
  // Decoder layers; each layer has its own pool with the same block ids.
  int num_layers = 0;
  // KV heads of the model (GQA: fewer than query heads).
  int num_kv_heads = 0;
  // Elements per head.
  int head_dim = 0;
  // Ranks the worker's model is split over (--tensor-parallel, issue 19): each rank's pool holds
  // its slice of the KV heads, and the worker moves KV through host staging in the whole-heads
  // layout the other fields describe, so workers of any degrees exchange KV.
  int tensor_parallel = 1;
  // A fingerprint of the Kangaroo early-exit adapter whose KV is the last layer (0 = none): two
  // workers with different adapters of the same shape would otherwise exchange KV that one of
  // them did not compute (the drafts would be wrong, though verification keeps them lossless).
  uint64_t adapter_fingerprint = 0;

  // Bytes of one block in one layer's pool: 2 (K,V) * block_tokens * num_kv_heads * head_dim *
  // sizeof(dtype). 256 KiB for Llama-3-8B (bf16, 64 tokens, 8 heads, head_dim 128).
  int64_t bytes_per_block_per_layer() const;

  // "bf16 block=64 layers=32 kv_heads=8 head_dim=128 k=post-rope".
  std::string ToString() const;

  // Returns kInvalidArgument naming the field if dtype is kI32, block_tokens is not a positive
  // multiple of 16, or num_layers / num_kv_heads / head_dim is not positive.
  absl::Status Validate() const;

  bool operator==(const KvLayout& other) const = default;
};

// Returns OK if `theirs` (a peer's layout) equals `ours`; otherwise kFailedPrecondition whose
// message names both layouts and the fields that differ. Not retryable: a deployment error.
// The sides' tensor_parallel may differ (the layout on the wire is the whole-heads one).
absl::Status CheckCompatible(const KvLayout& ours, const KvLayout& theirs);

}  // namespace sparseserve::kv

#endif  // SPARSESERVE_COMMON_KV_KV_LAYOUT_H_
