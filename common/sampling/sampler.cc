#include "common/sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "common/core/check.h"

namespace sparseserve::sampling {

Sampler::Sampler(const SamplingParams& params) : params_(params), rng_(params.seed) {
  SS_CHECK(Validate(params).ok());
}

void Sampler::PenalizeInto(const float* logits, int vocab_size, absl::Span<const int32_t> history) {
  SS_CHECK(vocab_size > 0 && logits != nullptr);
  const size_t vocab = static_cast<size_t>(vocab_size);
  if (logits_.size() < vocab) {
    logits_.resize(vocab);
    weights_.resize(vocab);
    order_.resize(vocab);
    seen_.resize(vocab, 0);
  }
  std::copy(logits, logits + vocab, logits_.begin());
  const float theta = params_.repetition_penalty;
  if (theta == 1.0f || history.empty()) return;

  // TokenSwift's contextual penalty: only the last `penalty_window` tokens count.
  const size_t window = static_cast<size_t>(params_.penalty_window);
  const absl::Span<const int32_t> recent = (window == 0 || window >= history.size())
                                               ? history
                                               : history.subspan(history.size() - window);
  for (const int32_t token : recent) {
    SS_CHECK(token >= 0 && token < vocab_size);
    uint8_t& seen = seen_[static_cast<size_t>(token)];
    if (seen) continue;
    seen = 1;
    float& logit = logits_[static_cast<size_t>(token)];
    logit = logit > 0.0f ? logit / theta : logit * theta;
  }
  for (const int32_t token : recent) seen_[static_cast<size_t>(token)] = 0;
}

int32_t Sampler::Argmax(int vocab_size) const {
  int32_t best = 0;
  for (int32_t i = 1; i < vocab_size; ++i) {
    if (logits_[static_cast<size_t>(i)] > logits_[static_cast<size_t>(best)]) best = i;
  }
  return best;
}

int Sampler::Filter(int vocab_size) {
  const int32_t best = Argmax(vocab_size);
  const float max_logit = logits_[static_cast<size_t>(best)];
  if (!std::isfinite(max_logit)) {  // +inf or all -inf: the only sensible choice is the argmax
    std::fill_n(weights_.begin(), vocab_size, 0.0f);
    weights_[static_cast<size_t>(best)] = 1.0f;
    order_[0] = best;
    return 1;
  }
  const float inv_temperature = 1.0f / params_.temperature;
  for (int i = 0; i < vocab_size; ++i) {
    const size_t u = static_cast<size_t>(i);
    weights_[u] = std::exp((logits_[u] - max_logit) * inv_temperature);
  }
  // Probability descending, then id ascending: a strict total order, so results are stable.
  const auto more_probable = [this](int32_t a, int32_t b) {
    const float wa = weights_[static_cast<size_t>(a)];
    const float wb = weights_[static_cast<size_t>(b)];
    return wa > wb || (wa == wb && a < b);
  };
  const auto begin = order_.begin();
  std::iota(begin, begin + vocab_size, 0);
  int num_kept = vocab_size;

  if (params_.top_k > 0 && params_.top_k < num_kept) {
    std::nth_element(begin, begin + params_.top_k, begin + num_kept, more_probable);
    num_kept = params_.top_k;
  }
  // top-p is measured against the mass that survived top-k (HF applies the filters in turn).
  double top_k_mass = 0.0;
  for (int i = 0; i < num_kept; ++i) top_k_mass += weights_[static_cast<size_t>(order_[i])];

  // min-p keeps a most-probable prefix too, so it commutes with top-p; applying it first
  // shrinks the sort below. The argmax has weight 1 and always survives.
  if (params_.min_p > 0.0f) {
    const float min_weight = params_.min_p;  // min_p * p_max, with p_max scaled to 1
    num_kept = static_cast<int>(
        std::remove_if(begin, begin + num_kept,
                       [&](int32_t id) { return weights_[static_cast<size_t>(id)] < min_weight; }) -
        begin);
  }
  if (params_.top_p < 1.0f) {
    std::sort(begin, begin + num_kept, more_probable);
    const double target = static_cast<double>(params_.top_p) * top_k_mass;
    double mass = 0.0;
    for (int i = 0; i < num_kept; ++i) {
      mass += weights_[static_cast<size_t>(order_[i])];
      if (mass >= target) {
        num_kept = i + 1;
        break;
      }
    }
  }
  SS_CHECK(num_kept >= 1);
  return num_kept;
}

void Sampler::SkipDraw() {
  if (params_.temperature != 0.0f) NextUniform();
}

double Sampler::NextUniform() {
  return static_cast<double>(rng_() >> 11) * 0x1.0p-53;
}

int32_t Sampler::Sample(const float* logits, int vocab_size, absl::Span<const int32_t> history) {
  PenalizeInto(logits, vocab_size, history);
  if (params_.temperature == 0.0f) return Argmax(vocab_size);
  const int num_kept = Filter(vocab_size);
  double total = 0.0;
  for (int i = 0; i < num_kept; ++i) total += weights_[static_cast<size_t>(order_[i])];
  double u = NextUniform() * total;
  for (int i = 0; i < num_kept; ++i) {
    u -= weights_[static_cast<size_t>(order_[i])];
    if (u < 0.0) return order_[i];
  }
  // Rounding left u >= 0: the draw belongs to the last survivor with positive weight.
  for (int i = num_kept - 1; i > 0; --i) {
    if (weights_[static_cast<size_t>(order_[i])] > 0.0f) return order_[i];
  }
  return order_[0];
}

std::vector<float> Sampler::Probabilities(const float* logits, int vocab_size,
                                          absl::Span<const int32_t> history) {
  PenalizeInto(logits, vocab_size, history);
  std::vector<float> probs(static_cast<size_t>(vocab_size), 0.0f);
  if (params_.temperature == 0.0f) {
    probs[static_cast<size_t>(Argmax(vocab_size))] = 1.0f;
    return probs;
  }
  const int num_kept = Filter(vocab_size);
  double total = 0.0;
  for (int i = 0; i < num_kept; ++i) total += weights_[static_cast<size_t>(order_[i])];
  for (int i = 0; i < num_kept; ++i) {
    const size_t id = static_cast<size_t>(order_[i]);
    probs[id] = static_cast<float>(weights_[id] / total);
  }
  return probs;
}

}  // namespace sparseserve::sampling
