// Which keys a query row sees: attention_plan.h's semantics as one function, compiled into the
// CPU reference and the CUDA kernels alike so the backends cannot drift apart.
#ifndef SPARSESERVE_KERNELS_ATTENTION_VISIBILITY_H_
#define SPARSESERVE_KERNELS_ATTENTION_VISIBILITY_H_

#include <cstdint>

#if defined(__CUDACC__)
#define SS_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define SS_HOST_DEVICE inline
#endif

namespace sparseserve::kernels {

// The per-sequence numbers the rule needs (a plain struct: it also lives in device memory).
struct KeyVisibility {
  int32_t q_len = 0;
  int32_t kv_len = 0;
  int32_t window = 0;             // 0 = no window
  int32_t sink_tokens = 0;        // with a window: keys [0, sink_tokens) stay visible
  const uint8_t* mask = nullptr;  // uint8 [q_len * q_len] or null (causal)
};

// True when new row `row` (0 <= row < q_len) sees key index `key` (0 <= key < kv_len).
SS_HOST_DEVICE bool KeyVisible(const KeyVisibility& v, int32_t row, int32_t key) {
  const int32_t prefix = v.kv_len - v.q_len;
  const int32_t pos = prefix + row;
  if (key >= prefix) {
    const int32_t j = key - prefix;
    if (v.mask != nullptr ? v.mask[row * v.q_len + j] == 0 : j > row) return false;
  }
  return v.window <= 0 || key > pos - v.window || key < v.sink_tokens;
}

// One past the last key `row` can see: the causal bound, or every new row under a mask.
SS_HOST_DEVICE int32_t KeyEnd(const KeyVisibility& v, int32_t row) {
  return v.mask != nullptr ? v.kv_len : v.kv_len - v.q_len + row + 1;
}

// The first key a window lets `row` see past the sinks (0 without a window).
SS_HOST_DEVICE int32_t WindowBegin(const KeyVisibility& v, int32_t row) {
  if (v.window <= 0) return 0;
  const int32_t begin = v.kv_len - v.q_len + row - v.window + 1;
  return begin > 0 ? begin : 0;
}

}  // namespace sparseserve::kernels

#endif  // SPARSESERVE_KERNELS_ATTENTION_VISIBILITY_H_
