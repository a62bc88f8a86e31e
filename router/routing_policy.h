// Routing policy of the router: which decode worker serves a request and whether its prefill
// runs on a prefill worker (disaggregated) or on the decode worker itself (local).
//
// Pure functions over plain snapshots (no gRPC, no clock), so the rule is unit-tested directly.
//
// The rule (KV-aware routing as in NVIDIA Dynamo's KV router; conditional disaggregation as in
// DistServe / Splitwise, papers/serving-systems.md):
//   1. overlap(w) = number of LEADING prompt block hashes decode worker w has cached (a block is
//      reusable only if every block before it is, because hashes chain).
//   2. cost(w) = uncached_block_weight * (prompt_blocks - overlap(w)) + active_blocks(w), where
//      prompt_blocks = ceil(prompt_len / block_tokens) (a partial tail block still has to be
//      computed) and active_blocks = total - free KV blocks (the worker's current load). The
//      healthy worker with the lowest cost wins; ties go to fewer running requests, then to the
//      lowest index.
//   3. Disaggregate when the uncached prompt, prompt_len - overlap * block_tokens, is at least
//      disagg_threshold_tokens AND a healthy prefill worker exists; otherwise prefill locally on
//      the chosen decode worker (short or mostly cached prompts are cheaper without the KV
//      transfer).
//   4. Prefill worker: the healthy one with the fewest running + waiting requests, ties to the
//      lowest index.
// Thread-safe (stateless).
#ifndef SPARSESERVE_ROUTER_ROUTING_POLICY_H_
#define SPARSESERVE_ROUTER_ROUTING_POLICY_H_

#include <cstdint>
#include <optional>

#include "absl/container/flat_hash_set.h"
#include "absl/types/span.h"
#include "common/kv/block_hash.h"

namespace sparseserve::router {

struct RoutingConfig {
  // Weight w of one uncached prompt block against one active KV block in the cost; default 1.0
  // (Dynamo's default overlap weight: a block to prefill costs as much as a block in use).
  double uncached_block_weight = 1.0;
  // Uncached prompt tokens from which prefill goes to a prefill worker; default 1024 tokens.
  int disagg_threshold_tokens = 1024;
};

// What the policy knows about one decode worker (a snapshot from the WorkerRegistry).
struct DecodeCandidate {
  bool healthy = false;      // unhealthy or excluded workers are never chosen
  int block_tokens = 0;      // tokens per KV block of this worker (> 0 when healthy)
  int num_running = 0;       // sequences being decoded
  int num_free_blocks = 0;   // KV blocks free in its pool
  int num_total_blocks = 0;  // KV blocks in its pool
  int overlap_blocks = 0;    // leading prompt blocks it has cached
};

// What the policy knows about one prefill worker.
struct PrefillCandidate {
  bool healthy = false;
  int num_running = 0;
  int num_waiting = 0;
};

struct RouteDecision {
  int decode_idx = -1;     // index into the candidates
  int overlap_blocks = 0;  // of the chosen decode worker
  bool disaggregate = false;
  int prefill_idx = -1;  // valid when disaggregate
};

// Number of leading entries of `prompt_hashes` contained in `cached`.
int CountCachedPrefixBlocks(absl::Span<const kv::BlockHash> prompt_hashes,
                            const absl::flat_hash_set<kv::BlockHash>& cached);

// ceil(prompt_len / block_tokens). REQUIRES: block_tokens > 0, prompt_len >= 0.
int NumPromptBlocks(int prompt_len, int block_tokens);

// Rule 2's cost of sending a `prompt_len`-token prompt to `candidate`.
// REQUIRES: candidate.block_tokens > 0.
double DecodeCost(const DecodeCandidate& candidate, int prompt_len, const RoutingConfig& config);

// Rule 2: index of the cheapest healthy decode worker; nullopt when none is healthy.
std::optional<int> ChooseDecodeWorker(absl::Span<const DecodeCandidate> candidates, int prompt_len,
                                      const RoutingConfig& config);

// Rule 4: index of the least-loaded healthy prefill worker; nullopt when none is healthy.
std::optional<int> ChoosePrefillWorker(absl::Span<const PrefillCandidate> candidates);

// Rule 3's test on the token counts alone (a prefill worker's availability is checked by Route).
bool ShouldDisaggregate(int prompt_len, int overlap_blocks, int block_tokens,
                        const RoutingConfig& config);

// Rules 1-4 together; nullopt when no decode worker is healthy.
std::optional<RouteDecision> Route(absl::Span<const DecodeCandidate> decode,
                                   absl::Span<const PrefillCandidate> prefill, int prompt_len,
                                   const RoutingConfig& config);

}  // namespace sparseserve::router

#endif  // SPARSESERVE_ROUTER_ROUTING_POLICY_H_
