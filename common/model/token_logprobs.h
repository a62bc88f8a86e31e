// TokenLogprobs and StepLogprobs: log probabilities of sampled tokens (the OpenAI API's
// `logprobs`), as LlamaModel::ForwardSample reads them back from Backend::TokenLogprobs — the
// sampled token's log-softmax over the raw logits and the most probable alternatives'. Plain
// values; thread-compatible.
#ifndef SPARSESERVE_COMMON_MODEL_TOKEN_LOGPROBS_H_
#define SPARSESERVE_COMMON_MODEL_TOKEN_LOGPROBS_H_

#include <algorithm>
#include <cstdint>
#include <vector>

namespace sparseserve::model {

// One emitted token's.
struct TokenLogprobs {
  float logprob = 0;
  std::vector<int32_t> top_ids;     // most probable first (ties: lower id)
  std::vector<float> top_logprobs;  // same order
};

// A step's, for every logits row. The caller sets top_n (the most any row asked for); the step
// fills values and ids.
struct StepLogprobs {
  int top_n = 0;              // alternatives per row, 0 .. kernels::kMaxTopLogprobs
  std::vector<float> values;  // [rows, 1 + top_n]: the sampled token's, then the alternatives'
  std::vector<int32_t> ids;   // [rows, top_n]: the alternatives' ids

  int64_t rows() const { return static_cast<int64_t>(values.size()) / (1 + top_n); }
  // Row `row` with its first `n` alternatives (n is clamped to top_n).
  TokenLogprobs Row(int64_t row, int n) const {
    n = std::clamp(n, 0, top_n);
    TokenLogprobs out;
    const float* v = values.data() + row * (1 + top_n);
    out.logprob = v[0];
    out.top_ids.assign(ids.begin() + row * top_n, ids.begin() + row * top_n + n);
    out.top_logprobs.assign(v + 1, v + 1 + n);
    return out;
  }
};

}  // namespace sparseserve::model

#endif  // SPARSESERVE_COMMON_MODEL_TOKEN_LOGPROBS_H_
