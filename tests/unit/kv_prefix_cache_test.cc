#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

#include "common/kv/block_hash.h"
#include "common/kv/kv_block_pool.h"
#include "gtest/gtest.h"

namespace sparseserve::kv {
namespace {

constexpr int kBlockTokens = 16;

std::vector<int32_t> Prompt(int num_tokens, int32_t first = 100) {
  std::vector<int32_t> tokens(static_cast<size_t>(num_tokens));
  std::iota(tokens.begin(), tokens.end(), first);
  return tokens;
}

// What a worker does after prefilling a prompt: allocate, register the full blocks.
std::vector<int32_t> PrefillAndRegister(KvBlockPool& pool, const std::vector<int32_t>& tokens) {
  const int num_blocks = static_cast<int>((tokens.size() + kBlockTokens - 1) / kBlockTokens);
  absl::StatusOr<std::vector<int32_t>> ids = pool.Allocate(num_blocks);
  EXPECT_TRUE(ids.ok()) << ids.status();
  const std::vector<BlockHash> hashes = ComputeBlockHashes(tokens, kBlockTokens);
  for (size_t i = 0; i < hashes.size(); ++i) EXPECT_TRUE(pool.Register(hashes[i], (*ids)[i]));
  return *ids;
}

// Pinned so that any change to the hash function is noticed: these values are part of the
// cross-process contract and must be identical on every machine. They were cross-checked
// against an independent implementation of the definition in block_hash.h.
TEST(BlockHashTest, ValuesArePinned) {
  const std::vector<int32_t> tokens = {1, 2, 3, 4};
  EXPECT_EQ(ChainHash(kRootBlockHash, nullptr, 0), 0x48218226ff3cd4bfull);
  EXPECT_EQ(ChainHash(kRootBlockHash, tokens.data(), 4), 0xbda64eeb20a01ebaull);
  EXPECT_EQ(ChainHash(0x0123456789abcdefull, tokens.data(), 4), 0x6f8e8f5af547feebull);
  const std::vector<int32_t> prompt = Prompt(2 * kBlockTokens, 0);  // 0, 1, ..., 31
  EXPECT_EQ(ComputeBlockHashes(prompt, kBlockTokens),
            (std::vector<BlockHash>{0xbc9c47f8ba0da186ull, 0x3bd07101115e7c60ull}));
}

TEST(BlockHashTest, ChainsParentAndOnlyHashesFullBlocks) {
  const std::vector<int32_t> tokens = Prompt(3 * kBlockTokens + 5);
  const std::vector<BlockHash> hashes = ComputeBlockHashes(tokens, kBlockTokens);
  ASSERT_EQ(hashes.size(), 3u);  // the partial 4th block is not hashed
  EXPECT_EQ(hashes[0], ChainHash(kRootBlockHash, tokens.data(), kBlockTokens));
  EXPECT_EQ(hashes[1], ChainHash(hashes[0], tokens.data() + kBlockTokens, kBlockTokens));
  // Same tokens under a different parent hash to a different value.
  EXPECT_NE(ChainHash(kRootBlockHash, tokens.data() + kBlockTokens, kBlockTokens), hashes[1]);
  EXPECT_TRUE(ComputeBlockHashes(Prompt(kBlockTokens - 1), kBlockTokens).empty());
  // Token order matters.
  const std::vector<int32_t> ab = {1, 2};
  const std::vector<int32_t> ba = {2, 1};
  EXPECT_NE(ChainHash(kRootBlockHash, ab.data(), 2), ChainHash(kRootBlockHash, ba.data(), 2));
}

TEST(PrefixCacheTest, IdenticalPromptMatchesEveryFullBlock) {
  KvBlockPool pool(16);
  const std::vector<int32_t> prompt = Prompt(4 * kBlockTokens + 3);  // 4 full + 1 partial
  const std::vector<int32_t> first = PrefillAndRegister(pool, prompt);
  EXPECT_EQ(pool.prefix_cache_stats().num_cached_blocks, 4);

  const std::vector<int32_t> matched = pool.Match(ComputeBlockHashes(prompt, kBlockTokens));
  EXPECT_EQ(matched, std::vector<int32_t>(first.begin(), first.begin() + 4));
  for (const int32_t id : matched) EXPECT_EQ(pool.ref_count(id), 2);  // retained for the caller
  const PrefixCacheStats stats = pool.prefix_cache_stats();
  EXPECT_EQ(stats.num_queries, 4);
  EXPECT_EQ(stats.num_hits, 4);
  pool.Release(matched);
  pool.Release(first);
  EXPECT_EQ(pool.num_used_blocks(), 0);
}

TEST(PrefixCacheTest, DifferentFirstBlockMatchesNothing) {
  KvBlockPool pool(16);
  const std::vector<int32_t> prompt = Prompt(4 * kBlockTokens);
  const std::vector<int32_t> held = PrefillAndRegister(pool, prompt);
  std::vector<int32_t> other = prompt;
  other[3] += 1;  // only the first block differs, but every later hash chains through it
  EXPECT_TRUE(pool.Match(ComputeBlockHashes(other, kBlockTokens)).empty());
  EXPECT_EQ(pool.prefix_cache_stats().num_queries, 4);
  EXPECT_EQ(pool.prefix_cache_stats().num_hits, 0);
  pool.Release(held);
}

TEST(PrefixCacheTest, DifferentLastBlockMatchesAllButIt) {
  KvBlockPool pool(16);
  const std::vector<int32_t> prompt = Prompt(4 * kBlockTokens);
  const std::vector<int32_t> held = PrefillAndRegister(pool, prompt);
  std::vector<int32_t> other = prompt;
  other.back() += 1;
  const std::vector<int32_t> matched = pool.Match(ComputeBlockHashes(other, kBlockTokens));
  EXPECT_EQ(matched, std::vector<int32_t>(held.begin(), held.begin() + 3));
  EXPECT_EQ(pool.prefix_cache_stats().num_hits, 3);
  pool.Release(matched);
  pool.Release(held);
}

TEST(PrefixCacheTest, MatchStopsAtFirstMissingBlock) {
  KvBlockPool pool(8);
  const std::vector<int32_t> prompt = Prompt(3 * kBlockTokens);
  absl::StatusOr<std::vector<int32_t>> ids = pool.Allocate(3);
  ASSERT_TRUE(ids.ok());
  const std::vector<BlockHash> hashes = ComputeBlockHashes(prompt, kBlockTokens);
  EXPECT_TRUE(pool.Register(hashes[0], (*ids)[0]));
  EXPECT_TRUE(pool.Register(hashes[2], (*ids)[2]));  // block 1 never registered
  const std::vector<int32_t> matched = pool.Match(hashes);
  EXPECT_EQ(matched, std::vector<int32_t>{(*ids)[0]});
  EXPECT_EQ(pool.ref_count((*ids)[2]), 1);  // not retained past the gap
  EXPECT_EQ(pool.prefix_cache_stats().num_queries, 3);
  EXPECT_EQ(pool.prefix_cache_stats().num_hits, 1);
  pool.Release(matched);
  pool.Release(*ids);
}

TEST(PrefixCacheTest, ReleasedCachedBlocksStayMatchableAndCountAsFree) {
  KvBlockPool pool(8);
  const std::vector<int32_t> prompt = Prompt(2 * kBlockTokens);
  const std::vector<int32_t> held = PrefillAndRegister(pool, prompt);
  pool.Release(held);
  EXPECT_EQ(pool.num_used_blocks(), 0);
  EXPECT_EQ(pool.num_free_blocks(), 8);
  EXPECT_EQ(pool.CachedHashes(), ComputeBlockHashes(prompt, kBlockTokens));

  const std::vector<int32_t> revived = pool.Match(ComputeBlockHashes(prompt, kBlockTokens));
  EXPECT_EQ(revived, held);
  EXPECT_EQ(pool.num_used_blocks(), 2);
  pool.Release(revived);
}

TEST(PrefixCacheTest, AllocateEvictsCachedBlocksUnderPressureOldestFirst) {
  KvBlockPool pool(4);
  const std::vector<int32_t> a = Prompt(2 * kBlockTokens, 100);
  const std::vector<int32_t> b = Prompt(2 * kBlockTokens, 900);
  const std::vector<int32_t> a_ids = PrefillAndRegister(pool, a);
  const std::vector<int32_t> b_ids = PrefillAndRegister(pool, b);
  pool.Release(a_ids);  // a is released first, so it is evicted first
  pool.Release(b_ids);
  EXPECT_EQ(pool.prefix_cache_stats().num_cached_blocks, 4);

  absl::StatusOr<std::vector<int32_t>> fresh = pool.Allocate(2);
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  std::vector<int32_t> reused = *fresh;
  std::sort(reused.begin(), reused.end());
  std::vector<int32_t> a_sorted = a_ids;
  std::sort(a_sorted.begin(), a_sorted.end());
  EXPECT_EQ(reused, a_sorted);
  EXPECT_EQ(pool.prefix_cache_stats().num_cached_blocks, 2);
  EXPECT_TRUE(pool.Match(ComputeBlockHashes(a, kBlockTokens)).empty());  // evicted: no match
  const std::vector<int32_t> b_again = pool.Match(ComputeBlockHashes(b, kBlockTokens));
  EXPECT_EQ(b_again, b_ids);
  EXPECT_EQ(pool.CachedHashes(), ComputeBlockHashes(b, kBlockTokens));

  // Everything is in use now; nothing left to evict.
  EXPECT_EQ(pool.Allocate(1).status().code(), absl::StatusCode::kResourceExhausted);
  pool.Release(b_again);
  pool.Release(*fresh);
  EXPECT_EQ(pool.num_used_blocks(), 0);
}

TEST(PrefixCacheTest, DuplicateContentKeepsFirstBlockCanonical) {
  KvBlockPool pool(4);
  const std::vector<int32_t> prompt = Prompt(kBlockTokens);
  const std::vector<int32_t> first = PrefillAndRegister(pool, prompt);
  absl::StatusOr<std::vector<int32_t>> second = pool.Allocate(1);
  ASSERT_TRUE(second.ok());
  const BlockHash hash = ComputeBlockHashes(prompt, kBlockTokens)[0];
  EXPECT_FALSE(pool.Register(hash, (*second)[0]));
  EXPECT_TRUE(pool.Register(hash, first[0]));  // re-registering is a no-op
  pool.Release(*second);                       // uncached: straight back to free
  pool.Release(first);
  EXPECT_EQ(pool.prefix_cache_stats().num_cached_blocks, 1);
  EXPECT_EQ(pool.Match({hash}), first);
  pool.Release(first);
}

}  // namespace
}  // namespace sparseserve::kv
