// Rolling KV arithmetic: which KV blocks a sequence under a sliding window (every layer of the
// model windowed, ModelConfig::AllLayersWindowed) can no longer read, and how many it can hold at
// once. One definition for the runner that releases blocks, the reservation that never reserves
// them and the benchmark that lays them out. Pure functions; thread-safe.
#ifndef SPARSESERVE_COMMON_KV_ROLLING_WINDOW_H_
#define SPARSESERVE_COMMON_KV_ROLLING_WINDOW_H_

#include <algorithm>
#include <cstdint>

namespace sparseserve::kv {

// Leading blocks no later query reads once `num_tokens` KV entries exist: the next query (KV
// index num_tokens) sees keys > num_tokens - window, so a block whose last key is at or before
// that is out. REQUIRES: window > 0, block_tokens > 0, num_tokens >= 0.
inline int BlocksBeforeWindow(int64_t num_tokens, int window, int block_tokens) {
  return static_cast<int>(std::max<int64_t>(0, (num_tokens - window + 1) / block_tokens));
}

// The most blocks a sequence holds at once when every step adds up to `step_tokens` rows: the
// window's keys before the step (a block boundary may add one block) plus the step's rows.
inline int MaxBlocksInWindow(int window, int step_tokens, int block_tokens) {
  return (window - 1 + step_tokens + block_tokens - 1) / block_tokens + 1;
}

}  // namespace sparseserve::kv

#endif  // SPARSESERVE_COMMON_KV_ROLLING_WINDOW_H_
