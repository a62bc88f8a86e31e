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
// into `out`, highest first; ties go to the lower id, as the greedy argmax breaks them. One pass
// keeping the best k (k is a few; a sort of the vocabulary cost more than the heads' pass).
// `marks`: vocab bytes, all 0 on entry and exit.
void TopK(const float* logits, int64_t vocab, float penalty, absl::Span<const int32_t> penalized,
          int k, std::vector<uint8_t>& marks, int32_t* out) {
  std::vector<std::pair<float, int32_t>> best;  // sorted, best first
  best.reserve(static_cast<size_t>(k) + 1);
  const auto better = [](float va, int32_t a, float vb, int32_t b) {
    return va > vb || (va == vb && a < b);
  };
  const auto offer = [&](float v, int32_t id) {
    if (std::isnan(v)) v = -INFINITY;  // NaN would break the ordering
    if (static_cast<int>(best.size()) == k &&
        !better(v, id, best.back().first, best.back().second)) {
      return;
    }
    auto at = best.begin();
    while (at != best.end() && better(at->first, at->second, v, id)) ++at;
    best.insert(at, {v, id});
    if (static_cast<int>(best.size()) > k) best.pop_back();
  };
  marks.resize(std::max(marks.size(), static_cast<size_t>(vocab)), 0);
  if (penalty != 1.0f) {
    for (const int32_t id : penalized) {
      if (id >= 0 && id < vocab) marks[static_cast<size_t>(id)] = 1;
    }
  }
  for (int64_t id = 0; id < vocab; ++id) {
    if (marks[static_cast<size_t>(id)] == 0) offer(logits[id], static_cast<int32_t>(id));
  }
  if (penalty != 1.0f) {
    for (const int32_t id : penalized) {  // an id listed twice is penalised once
      if (id < 0 || id >= vocab || marks[static_cast<size_t>(id)] == 0) continue;
      marks[static_cast<size_t>(id)] = 0;
      const float raw = logits[id];
      offer(raw > 0 ? raw / penalty : raw * penalty, id);
    }
  }
  for (int i = 0; i < k; ++i) {  // a vocabulary smaller than k repeats the best
    out[i] = best[static_cast<size_t>(i) < best.size() ? static_cast<size_t>(i) : 0].second;
  }
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

absl::Status LlamaModel::LaunchDraftHeads(const StepViews& v,
                                          const kernels::SamplingBatch& sampling,
                                          const DraftPass& draft) {
  if (!draft.head_rows.empty()) {  // rows of a verify or plain step: no penalty (see DraftPass)
    SS_RETURN_IF_ERROR(PrepareHeads(v.h.dim(0), draft.head_rows, nullptr, draft.head_top_k));
    return RunHeadOps(v.h);
  }
  const int64_t m = v.logits.dim(0);
  if (m != v.h.dim(0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "draft heads: every row of the step must have logits (", m, " of ", v.h.dim(0), " do)"));
  }
  std::vector<int32_t> rows(static_cast<size_t>(m));
  std::iota(rows.begin(), rows.end(), 0);
  SS_RETURN_IF_ERROR(PrepareHeads(m, rows, &sampling, draft.head_top_k));
  return RunHeadOps(v.h);
}

absl::StatusOr<std::vector<int32_t>> LlamaModel::DraftHeadsAtLastStep(
    absl::Span<const int32_t> rows, const kernels::SamplingBatch& sampling, int top_k) {
  if (draft_heads_.empty()) {
    return absl::FailedPreconditionError("draft heads: the model has none (--tokenswift-heads)");
  }
  if (last_h_.empty()) {
    return absl::FailedPreconditionError(
        "draft heads: the last step left no residual stream to read (none ran, or it exited "
        "early)");
  }
  const int64_t n = last_h_.dim(0);
  std::vector<int32_t> from(rows.begin(), rows.end());
  for (int32_t& r : from) {
    if (r < 0 && r >= -n) r += static_cast<int32_t>(n);  // from the end
  }
  SS_RETURN_IF_ERROR(PrepareHeads(n, from, &sampling, top_k));
  SS_RETURN_IF_ERROR(RunHeadOps(last_h_));
  return ReadHeads(&sampling);
}

bool LlamaModel::HeadsRankOnDevice(const kernels::SamplingBatch* penalties, size_t rows,
                                   int top_k) const {
  if (penalties != nullptr) {
    for (size_t r = 0; r < rows && r < penalties->rows.size(); ++r) {
      if (penalties->rows[r].repetition_penalty != 1.0f) return false;
    }
  }
  return top_k <= std::min<int64_t>(kernels::kMaxTopLogprobs, config_.vocab_size);
}

absl::Status LlamaModel::PrepareHeads(int64_t step_rows, absl::Span<const int32_t> rows,
                                      const kernels::SamplingBatch* penalties, int top_k) {
  kernels::Backend& be = *backend_;
  const int64_t n = static_cast<int64_t>(rows.size());
  const int64_t heads = static_cast<int64_t>(draft_heads_.size());
  const int64_t vocab = config_.vocab_size, hidden = config_.hidden_size;
  HeadBuffers& b = head_buffers_;
  b.pending_rows = 0;
  for (const int32_t r : rows) {
    if (r < 0 || r >= step_rows) {
      return absl::InvalidArgumentError(
          absl::StrCat("draft heads: row ", r, " is outside the step's ", step_rows, " rows"));
    }
  }
  if (n == 0 || heads == 0 || top_k <= 0) return absl::OkStatus();
  if (b.rows < n) {
    HeadBuffers grown;
    // Where steps replay graphs, at once for as many rows as a graph step has: growing drops
    // every graph, plain steps' too, and each is run op by op and captured again (~1.5 ms a shape
    // at batch 8 on the long-context model), each time an explore read more heads than before.
    grown.rows = std::max<int64_t>({n, 2 * b.rows, graphs_.Eligible(n) ? graphs_.max_rows() : 0});
    b = HeadBuffers();  // frees the smaller ones first
    graphs_.Clear();    // which may have captured them
    const int64_t r = grown.rows, kmax = kernels::kMaxTopLogprobs;
    const DType dt = be.compute_dtype();
    SS_ASSIGN_OR_RETURN(grown.index, be.Allocate(DType::kI32, {r}));
    SS_ASSIGN_OR_RETURN(grown.h, be.Allocate(DType::kF32, {r, hidden}));
    SS_ASSIGN_OR_RETURN(grown.x, be.Allocate(dt, {heads * r, hidden}));
    SS_ASSIGN_OR_RETURN(grown.branch, be.Allocate(dt, {r, hidden}));
    SS_ASSIGN_OR_RETURN(grown.logits, be.Allocate(DType::kF32, {heads * r, vocab}));
    SS_ASSIGN_OR_RETURN(grown.none, be.Allocate(DType::kI32, {heads * r}));  // zeros
    SS_ASSIGN_OR_RETURN(grown.values, be.Allocate(DType::kF32, {heads * r, 1 + kmax}));
    SS_ASSIGN_OR_RETURN(grown.ids, be.Allocate(DType::kI32, {heads * r, kmax}));
    b = std::move(grown);
  }
  Tensor host_rows = Tensor::Zeros(DType::kI32, {n});
  std::copy(rows.begin(), rows.end(), host_rows.data<int32_t>());
  SS_RETURN_IF_ERROR(be.CopyFromHost(host_rows, b.index.Slice(0, 0, n)));
  b.pending_rows = n;
  b.pending_top_k = top_k;
  b.on_device = HeadsRankOnDevice(penalties, rows.size(), top_k);
  return absl::OkStatus();
}

absl::Status LlamaModel::RunHeadOps(const Tensor& h) {
  kernels::Backend& be = *backend_;
  const ModelConfig& c = config_;
  const HeadBuffers& b = head_buffers_;
  const int64_t n = b.pending_rows;
  const int64_t heads = static_cast<int64_t>(draft_heads_.size());
  if (n == 0) return absl::OkStatus();
  const Tensor index = b.index.Slice(0, 0, n), hh = b.h.Slice(0, 0, n);
  const Tensor x = b.x.Slice(0, 0, heads * n);
  const Tensor branch = b.branch.Slice(0, 0, n), logits = b.logits.Slice(0, 0, heads * n);
  SS_RETURN_IF_ERROR(be.GatherRows(h, index, hh));
  for (int64_t i = 0; i < heads; ++i) {
    const DraftHeadWeights& w = draft_heads_[static_cast<size_t>(i)];
    // h_i = h_{i-1} + proj · RmsNorm(h_{i-1}); x_i = final_norm(h_i) (x_i is the norm's scratch
    // before); logits_i = LMHead(x_i), for every head in one product (one read of the LM head).
    const Tensor xi = x.Slice(0, i * n, (i + 1) * n);
    SS_RETURN_IF_ERROR(be.RmsNorm(hh, w.norm, c.rms_norm_eps, xi));
    SS_RETURN_IF_ERROR(be.Linear(xi, w.proj, Tensor(), branch));
    SS_RETURN_IF_ERROR(be.AddRmsNorm(hh, branch, final_norm_, c.rms_norm_eps, xi));
  }
  SS_RETURN_IF_ERROR(be.Linear(x, lm_head_, Tensor(), logits));
  if (!b.on_device) return absl::OkStatus();  // ReadHeads ranks them on the host
  return be.TokenLogprobs(logits, b.none.Slice(0, 0, heads * n), static_cast<int>(b.pending_top_k),
                          b.values.Slice(0, 0, heads * n), b.ids.Slice(0, 0, heads * n));
}

absl::StatusOr<std::vector<int32_t>> LlamaModel::ReadHeads(
    const kernels::SamplingBatch* penalties) {
  HeadBuffers& b = head_buffers_;
  const int64_t n = b.pending_rows, k = b.pending_top_k;
  b.pending_rows = 0;
  if (n == 0) return std::vector<int32_t>();
  const int64_t heads = static_cast<int64_t>(draft_heads_.size());
  const int64_t vocab = config_.vocab_size, kmax = kernels::kMaxTopLogprobs;
  std::vector<int32_t> out(static_cast<size_t>(heads * n * k), 0);
  if (b.on_device) {
    Tensor host = Tensor::Zeros(DType::kI32, {heads * n, kmax});
    SS_RETURN_IF_ERROR(backend_->CopyToHost(b.ids.Slice(0, 0, heads * n), host));
    for (int64_t r = 0; r < heads * n; ++r) {
      std::copy_n(host.data<int32_t>() + r * kmax, k, out.data() + r * k);
    }
    return out;
  }
  Tensor host = Tensor::Zeros(DType::kF32, {heads * n, vocab});
  SS_RETURN_IF_ERROR(backend_->CopyToHost(b.logits.Slice(0, 0, heads * n), host));
  std::vector<uint8_t> marks;
  for (int64_t i = 0; i < heads; ++i) {
    for (int64_t r = 0; r < n; ++r) {
      kernels::SamplingRow row;
      absl::Span<const int32_t> penalized;
      if (penalties != nullptr && r < static_cast<int64_t>(penalties->rows.size())) {
        row = penalties->rows[static_cast<size_t>(r)];
        if (static_cast<int64_t>(penalties->penalized_begin.size()) > r + 1) {
          const int32_t begin = penalties->penalized_begin[static_cast<size_t>(r)];
          const int32_t end = penalties->penalized_begin[static_cast<size_t>(r) + 1];
          penalized = absl::MakeConstSpan(penalties->penalized_ids).subspan(begin, end - begin);
        }
      }
      TopK(host.data<float>() + (i * n + r) * vocab, vocab, row.repetition_penalty, penalized,
           static_cast<int>(k), marks, out.data() + (i * n + r) * k);
    }
  }
  return out;
}

}  // namespace sparseserve::model
