// What LlamaModel adds to a forward step for the self-drafting methods: TokenSwift's multi-token
// draft heads (and the host-side choice of each head's candidates), Kangaroo's adapter K/V and
// its draft's top probabilities.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "common/core/status.h"
#include "common/model/llama_model.h"

namespace sparseserve::model {
namespace {

// Writes the `k` highest of `logits` [vocab] (after the row's repetition penalty on `penalized`)
// into `out`, highest first; ties go to the lower id, as the greedy argmax breaks them.
void TopK(const float* logits, int64_t vocab, float penalty, absl::Span<const int32_t> penalized,
          int k, std::vector<float>& scratch, std::vector<int32_t>& order, int32_t* out) {
  scratch.assign(logits, logits + vocab);
  for (float& x : scratch) {
    if (std::isnan(x)) x = -INFINITY;  // NaN would break the ordering partial_sort needs
  }
  if (penalty != 1.0f) {
    for (const int32_t id : penalized) {  // an id listed twice is penalised once
      const float raw = logits[id];
      scratch[static_cast<size_t>(id)] = raw > 0 ? raw / penalty : raw * penalty;
    }
  }
  order.resize(static_cast<size_t>(vocab));
  std::iota(order.begin(), order.end(), 0);
  const auto better = [&](int32_t a, int32_t b) {
    const float fa = scratch[static_cast<size_t>(a)], fb = scratch[static_cast<size_t>(b)];
    return fa > fb || (fa == fb && a < b);
  };
  const int kk = static_cast<int>(std::min<int64_t>(k, vocab));
  std::partial_sort(order.begin(), order.begin() + kk, order.end(), better);
  std::copy(order.begin(), order.begin() + kk, out);
  std::fill(out + kk, out + k, order[0]);  // a vocabulary smaller than k repeats the best
}

}  // namespace

absl::Status LlamaModel::WriteAdapterKv(const StepViews& v, const Tensor& scratch,
                                        PagedKvCache& cache) {
  kernels::Backend& be = *backend_;
  const EarlyExitAdapter& a = early_exit_;
  SS_RETURN_IF_ERROR(be.RmsNorm(v.h, a.input_norm, config_.rms_norm_eps, scratch));
  SS_RETURN_IF_ERROR(be.Linear(scratch, a.wqkv, Tensor(), v.qkv));
  return be.RopeWriteKv(v.qkv, v.positions, inv_freq_, v.slots, v.q,
                        cache.layer(config_.num_layers));
}

absl::Status LlamaModel::ReadTopProbabilities(const StepViews& v, DraftPass& draft) {
  Tensor host = Tensor::Zeros(DType::kF32, v.logits.shape());
  SS_RETURN_IF_ERROR(backend_->CopyToHost(v.logits, host));
  const int64_t rows = host.dim(0), vocab = host.dim(1);
  draft.top_probability.assign(static_cast<size_t>(rows), 0.0f);
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = host.data<float>() + r * vocab;
    const float top = *std::max_element(row, row + vocab);
    double sum = 0;  // softmax's denominator relative to the top logit: p_top = 1 / sum
    for (int64_t i = 0; i < vocab; ++i) sum += std::exp(static_cast<double>(row[i] - top));
    // Non-finite logits: no confidence (the draft stops there).
    draft.top_probability[static_cast<size_t>(r)] =
        std::isfinite(top) && std::isfinite(sum) ? static_cast<float>(1.0 / sum) : 0.0f;
  }
  return absl::OkStatus();
}

absl::Status LlamaModel::ReadLogprobs(const StepViews& v, StepLogprobs& out) {
  const int64_t m = v.logits.dim(0);
  const int n = out.top_n;
  SS_ASSIGN_OR_RETURN(const Tensor values, backend_->Allocate(DType::kF32, {m, 1 + n}));
  SS_ASSIGN_OR_RETURN(const Tensor ids, backend_->Allocate(DType::kI32, {m, std::max(n, 1)}));
  SS_RETURN_IF_ERROR(backend_->TokenLogprobs(v.logits, v.tokens, n, values, ids));
  Tensor host_values = Tensor::Zeros(DType::kF32, values.shape());
  Tensor host_ids = Tensor::Zeros(DType::kI32, ids.shape());
  SS_RETURN_IF_ERROR(backend_->CopyToHost(values, host_values));
  SS_RETURN_IF_ERROR(backend_->CopyToHost(ids, host_ids));
  out.values.assign(host_values.data<float>(), host_values.data<float>() + host_values.numel());
  out.ids.clear();
  for (int64_t r = 0; r < m; ++r) {
    const int32_t* row = host_ids.data<int32_t>() + r * ids.dim(1);
    out.ids.insert(out.ids.end(), row, row + n);
  }
  return absl::OkStatus();
}

absl::Status LlamaModel::RunDraftHeads(const StepViews& v, const kernels::SamplingBatch& sampling,
                                       DraftPass& draft) {
  kernels::Backend& be = *backend_;
  const ModelConfig& c = config_;
  const int64_t m = v.logits.dim(0);
  if (m != v.h.dim(0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "draft heads: every row of the step must have logits (", m, " of ", v.h.dim(0), " do)"));
  }
  const int k = draft.head_top_k;
  const int64_t vocab = c.vocab_size;
  draft.head_tokens.assign(draft_heads_.size() * static_cast<size_t>(m) * k, 0);
  Tensor host = Tensor::Zeros(DType::kF32, v.logits.shape());
  std::vector<float> scratch;
  std::vector<int32_t> order;
  for (size_t i = 0; i < draft_heads_.size(); ++i) {
    const DraftHeadWeights& w = draft_heads_[i];
    // h_i = h_{i-1} + proj · RmsNorm(h_{i-1}); x = final_norm(h_i); logits = LMHead(x).
    SS_RETURN_IF_ERROR(be.RmsNorm(v.h, w.norm, c.rms_norm_eps, v.x));
    SS_RETURN_IF_ERROR(be.Linear(v.x, w.proj, Tensor(), v.branch));
    SS_RETURN_IF_ERROR(be.AddRmsNorm(v.h, v.branch, final_norm_, c.rms_norm_eps, v.x));
    SS_RETURN_IF_ERROR(be.GatherRows(v.x, v.logit_rows, v.last));
    SS_RETURN_IF_ERROR(be.Linear(v.last, lm_head_, Tensor(), v.logits));
    SS_RETURN_IF_ERROR(be.CopyToHost(v.logits, host));
    for (int64_t r = 0; r < m; ++r) {
      const kernels::SamplingRow row = r < static_cast<int64_t>(sampling.rows.size())
                                           ? sampling.rows[r]
                                           : kernels::SamplingRow{};
      absl::Span<const int32_t> penalized;
      if (static_cast<int64_t>(sampling.penalized_begin.size()) > r + 1) {
        const int32_t begin = sampling.penalized_begin[r], end = sampling.penalized_begin[r + 1];
        penalized = absl::MakeConstSpan(sampling.penalized_ids).subspan(begin, end - begin);
      }
      int32_t* out = draft.head_tokens.data() + (i * static_cast<size_t>(m) + r) * k;
      TopK(host.data<float>() + r * vocab, vocab, row.repetition_penalty, penalized, k, scratch,
           order, out);
    }
  }
  return absl::OkStatus();
}

}  // namespace sparseserve::model
