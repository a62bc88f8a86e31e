// Prefix hashing of KV blocks: the chained 64-bit block hash shared by router and workers.
//
// A full block's hash chains its parent's (the previous block's) hash and its token ids, so
// equal prefixes give equal hash chains on every process and machine (ARCHITECTURE.md,
// "Contracts that cross process boundaries"). Only FULL blocks are hashed: a partial last block
// can still change and is never shared. The function is fixed (not std::hash) and uses only
// unsigned 64-bit arithmetic, so values are identical across compilers, platforms and
// endianness; changing it invalidates every cache and is caught by pinned values in
// tests/unit/kv_prefix_cache_test.cc. 64-bit collisions (~2^-64 per pair) are accepted.
// Stateless, thread-safe.
#ifndef SPARSESERVE_COMMON_KV_BLOCK_HASH_H_
#define SPARSESERVE_COMMON_KV_BLOCK_HASH_H_

#include <cstdint>
#include <vector>

#include "absl/types/span.h"

namespace sparseserve::kv {

using BlockHash = uint64_t;

// Parent hash of a sequence's first block.
inline constexpr BlockHash kRootBlockHash = 0;

// Hash of the block holding `tokens[0, n)` whose previous block hashed to `parent`.
// Definition (splitmix64 finaliser `Mix`, golden-ratio constant `G = 0x9E3779B97F4A7C15`):
//   h = Mix(parent + G); for each token t: h = Mix((h ^ uint32(t)) + G); return Mix(h ^ n).
// REQUIRES: n >= 0 and tokens points to n ids (may be null when n == 0).
BlockHash ChainHash(BlockHash parent, const int32_t* tokens, int n);

// Chained hashes of the full blocks of `tokens`: tokens.size() / block_tokens values, the i-th
// covering tokens [i * block_tokens, (i + 1) * block_tokens). A partial tail is not hashed.
// REQUIRES: block_tokens > 0.
std::vector<BlockHash> ComputeBlockHashes(absl::Span<const int32_t> tokens, int block_tokens);

}  // namespace sparseserve::kv

#endif  // SPARSESERVE_COMMON_KV_BLOCK_HASH_H_
