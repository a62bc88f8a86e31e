#include "common/sampling/sampler.h"

#include <algorithm>

#include "common/core/check.h"

namespace sparseserve::sampling {

Sampler::Sampler(const SamplingParams& params) : params_(params), rng_(params.seed) {
  SS_CHECK(Validate(params).ok());
}

kernels::SamplingRow Sampler::Row() const {
  kernels::SamplingRow row;
  row.temperature = params_.temperature;
  row.top_k = params_.top_k;
  row.top_p = params_.top_p;
  row.min_p = params_.min_p;
  row.repetition_penalty = params_.repetition_penalty;
  return row;
}

void Sampler::AppendPenalizedIds(absl::Span<const int32_t> history, std::vector<int32_t>* ids) {
  if (params_.repetition_penalty == 1.0f || history.empty()) return;
  // TokenSwift's contextual penalty: only the last `penalty_window` tokens count.
  const size_t window = static_cast<size_t>(params_.penalty_window);
  const absl::Span<const int32_t> recent = (window == 0 || window >= history.size())
                                               ? history
                                               : history.subspan(history.size() - window);
  const size_t first = ids->size();
  for (const int32_t token : recent) {
    SS_CHECK(token >= 0 && token < kernels::kMaxSamplingVocab);
    const size_t u = static_cast<size_t>(token);
    if (u >= seen_.size()) seen_.resize(u + 1, 0);
    if (seen_[u]) continue;
    seen_[u] = 1;
    ids->push_back(token);
  }
  for (size_t i = first; i < ids->size(); ++i) seen_[static_cast<size_t>((*ids)[i])] = 0;
}

kernels::SamplingRow Sampler::NextRow(absl::Span<const int32_t> history,
                                      std::vector<int32_t>* penalized_ids) {
  AppendPenalizedIds(history, penalized_ids);
  kernels::SamplingRow row = Row();
  if (params_.temperature != 0.0f) row.uniform = NextUniform();
  return row;
}

double Sampler::PeekUniform(int i) {
  if (params_.temperature == 0.0f) return 0.0;
  while (static_cast<int>(peeked_.size()) <= i) peeked_.push_back(EngineUniform());
  return peeked_[static_cast<size_t>(i)];
}

kernels::SamplingRow Sampler::RowWithDraw(absl::Span<const int32_t> history,
                                          absl::Span<const int32_t> continuation, double uniform,
                                          std::vector<int32_t>* penalized_ids) {
  if (params_.repetition_penalty != 1.0f) {
    // The window's tail of the history, then the continuation (AppendPenalizedIds keeps the
    // window's last tokens of the two); not built when nothing is penalised.
    const size_t window = static_cast<size_t>(params_.penalty_window);
    const size_t tail = window > 0 ? std::min(history.size(), window) : history.size();
    window_.assign(history.end() - static_cast<std::ptrdiff_t>(tail), history.end());
    window_.insert(window_.end(), continuation.begin(), continuation.end());
    AppendPenalizedIds(window_, penalized_ids);
  }
  kernels::SamplingRow row = Row();
  if (params_.temperature != 0.0f) row.uniform = uniform;
  return row;
}

void Sampler::SkipDraw() {
  if (params_.temperature != 0.0f) NextUniform();
}

double Sampler::NextUniform() {
  if (peeked_.empty()) return EngineUniform();
  const double u = peeked_.front();
  peeked_.erase(peeked_.begin());  // a few at most (a draft's depth)
  return u;
}

double Sampler::EngineUniform() {
  return static_cast<double>(rng_() >> 11) * 0x1.0p-53;
}

int32_t Sampler::Sample(const float* logits, int vocab_size, absl::Span<const int32_t> history) {
  SS_CHECK(vocab_size > 0 && logits != nullptr);
  ids_.clear();
  const kernels::SamplingRow row = NextRow(history, &ids_);
  return kernels::SampleRow(absl::MakeConstSpan(logits, static_cast<size_t>(vocab_size)), row, ids_,
                            &scratch_);
}

std::vector<float> Sampler::Probabilities(const float* logits, int vocab_size,
                                          absl::Span<const int32_t> history) {
  SS_CHECK(vocab_size > 0 && logits != nullptr);
  ids_.clear();
  AppendPenalizedIds(history, &ids_);
  std::vector<float> probs(static_cast<size_t>(vocab_size), 0.0f);
  kernels::SampleRowProbabilities(absl::MakeConstSpan(logits, static_cast<size_t>(vocab_size)),
                                  Row(), ids_, &scratch_, absl::MakeSpan(probs));
  return probs;
}

}  // namespace sparseserve::sampling
