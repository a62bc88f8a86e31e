#include "router/routing_policy.h"

#include <algorithm>
#include <tuple>

namespace sparseserve::router {

int CountCachedPrefixBlocks(absl::Span<const kv::BlockHash> prompt_hashes,
                            const absl::flat_hash_set<kv::BlockHash>& cached) {
  int n = 0;
  for (kv::BlockHash h : prompt_hashes) {
    if (!cached.contains(h)) break;
    ++n;
  }
  return n;
}

int NumPromptBlocks(int prompt_len, int block_tokens) {
  return (prompt_len + block_tokens - 1) / block_tokens;
}

double DecodeCost(const DecodeCandidate& candidate, int prompt_len, const RoutingConfig& config) {
  const int prompt_blocks = NumPromptBlocks(prompt_len, candidate.block_tokens);
  const int uncached = std::max(0, prompt_blocks - candidate.overlap_blocks);
  const int active = std::max(0, candidate.num_total_blocks - candidate.num_free_blocks);
  return config.uncached_block_weight * uncached + active;
}

std::optional<int> ChooseDecodeWorker(absl::Span<const DecodeCandidate> candidates, int prompt_len,
                                      const RoutingConfig& config) {
  std::optional<int> best;
  double best_cost = 0;
  for (int i = 0; i < static_cast<int>(candidates.size()); ++i) {
    const DecodeCandidate& c = candidates[i];
    if (!c.healthy || c.block_tokens <= 0) continue;
    const double cost = DecodeCost(c, prompt_len, config);
    // Strictly better only, so that ties keep the lower index.
    if (!best.has_value() ||
        std::tie(cost, c.num_running) < std::tie(best_cost, candidates[*best].num_running)) {
      best = i;
      best_cost = cost;
    }
  }
  return best;
}

std::optional<int> ChoosePrefillWorker(absl::Span<const PrefillCandidate> candidates) {
  std::optional<int> best;
  int best_load = 0;
  for (int i = 0; i < static_cast<int>(candidates.size()); ++i) {
    const PrefillCandidate& c = candidates[i];
    if (!c.healthy) continue;
    const int load = c.num_running + c.num_waiting;
    if (!best.has_value() || load < best_load) {
      best = i;
      best_load = load;
    }
  }
  return best;
}

bool ShouldDisaggregate(int prompt_len, int overlap_blocks, int block_tokens,
                        const RoutingConfig& config) {
  const int uncached_tokens = prompt_len - overlap_blocks * block_tokens;
  return uncached_tokens >= config.disagg_threshold_tokens;
}

std::optional<RouteDecision> Route(absl::Span<const DecodeCandidate> decode,
                                   absl::Span<const PrefillCandidate> prefill, int prompt_len,
                                   const RoutingConfig& config) {
  const std::optional<int> decode_idx = ChooseDecodeWorker(decode, prompt_len, config);
  if (!decode_idx.has_value()) return std::nullopt;
  RouteDecision decision;
  decision.decode_idx = *decode_idx;
  const DecodeCandidate& chosen = decode[*decode_idx];
  decision.overlap_blocks = chosen.overlap_blocks;
  if (ShouldDisaggregate(prompt_len, chosen.overlap_blocks, chosen.block_tokens, config)) {
    const std::optional<int> prefill_idx = ChoosePrefillWorker(prefill);
    if (prefill_idx.has_value()) {
      decision.disaggregate = true;
      decision.prefill_idx = *prefill_idx;
    }
  }
  return decision;
}

}  // namespace sparseserve::router
