#include "common/kv/block_hash.h"

#include "common/core/check.h"

namespace sparseserve::kv {
namespace {

// 2^64 / golden ratio: an odd constant with well-spread bits; keeps Mix(0) away from 0.
constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;

// The splitmix64 finaliser (Steele, Lea & Flood 2014): a bijection on 64 bits in which every
// input bit affects every output bit.
constexpr uint64_t Mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 31;
  return x;
}

}  // namespace

BlockHash ChainHash(BlockHash parent, const int32_t* tokens, int n) {
  SS_CHECK(n >= 0);
  SS_CHECK(n == 0 || tokens != nullptr);
  uint64_t h = Mix(parent + kGolden);
  for (int i = 0; i < n; ++i) {
    h = Mix((h ^ static_cast<uint32_t>(tokens[i])) + kGolden);
  }
  // The length closes the chain so blocks of different sizes never alias.
  return Mix(h ^ static_cast<uint64_t>(n));
}

std::vector<BlockHash> ComputeBlockHashes(absl::Span<const int32_t> tokens, int block_tokens) {
  SS_CHECK(block_tokens > 0);
  const size_t num_full = tokens.size() / static_cast<size_t>(block_tokens);
  std::vector<BlockHash> hashes;
  hashes.reserve(num_full);
  BlockHash parent = kRootBlockHash;
  for (size_t i = 0; i < num_full; ++i) {
    parent = ChainHash(parent, tokens.data() + i * block_tokens, block_tokens);
    hashes.push_back(parent);
  }
  return hashes;
}

}  // namespace sparseserve::kv
