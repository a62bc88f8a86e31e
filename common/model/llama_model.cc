// LlamaModel::Forward — one batched step of the Llama block stack.
#include "common/model/llama_model.h"

#include "absl/strings/str_cat.h"
#include "common/core/status.h"

namespace sparseserve::model {
namespace {

// Host int32 tensor holding `values` (copied).
Tensor HostI32(const std::vector<int32_t>& values) {
  Tensor t = Tensor::Zeros(DType::kI32, {static_cast<int64_t>(values.size())});
  std::copy(values.begin(), values.end(), t.data<int32_t>());
  return t;
}

}  // namespace

absl::StatusOr<Tensor> LlamaModel::Forward(
    const std::vector<ForwardSequence>& batch, PagedKvCache& cache,
    const std::function<absl::Status(int layer)>& on_layer_kv_written) {
  SS_RETURN_IF_ERROR(ComputeLogits(batch, cache, on_layer_kv_written));
  Tensor host = Tensor::Zeros(DType::kF32, step_.logits.shape());
  SS_RETURN_IF_ERROR(backend_->CopyToHost(step_.logits, host));
  return host;
}

absl::StatusOr<std::vector<int32_t>> LlamaModel::ForwardArgMax(
    const std::vector<ForwardSequence>& batch, PagedKvCache& cache) {
  SS_RETURN_IF_ERROR(ComputeLogits(batch, cache, nullptr));
  SS_RETURN_IF_ERROR(backend_->ArgMax(step_.logits, step_.argmax));
  Tensor host = Tensor::Zeros(DType::kI32, step_.argmax.shape());
  SS_RETURN_IF_ERROR(backend_->CopyToHost(step_.argmax, host));
  return std::vector<int32_t>(host.data<int32_t>(), host.data<int32_t>() + host.numel());
}

absl::StatusOr<std::vector<int32_t>> LlamaModel::ForwardSample(
    const std::vector<ForwardSequence>& batch, PagedKvCache& cache,
    const kernels::SamplingBatch& sampling) {
  SS_RETURN_IF_ERROR(ComputeLogits(batch, cache, nullptr));
  SS_RETURN_IF_ERROR(backend_->Sample(step_.logits, sampling, step_.argmax));
  Tensor host = Tensor::Zeros(DType::kI32, step_.argmax.shape());
  SS_RETURN_IF_ERROR(backend_->CopyToHost(step_.argmax, host));
  return std::vector<int32_t>(host.data<int32_t>(), host.data<int32_t>() + host.numel());
}

absl::Status LlamaModel::ComputeLogits(
    const std::vector<ForwardSequence>& batch, PagedKvCache& cache,
    const std::function<absl::Status(int layer)>& on_layer_kv_written) {
  const ModelConfig& c = config_;
  kernels::Backend& be = *backend_;
  const int block_tokens = cache.shape().block_tokens;
  if (batch.empty()) return absl::InvalidArgumentError("Forward: empty batch");

  // Flatten the batch: token ids, positions, KV slots, rows whose logits are wanted.
  std::vector<int32_t> ids, positions, slots, logit_rows;
  kernels::AttentionBatch attn;
  attn.block_tokens = block_tokens;
  attn.plan_id = kernels::NewPlanId();  // every layer of this step passes the same batch
  for (size_t s = 0; s < batch.size(); ++s) {
    const ForwardSequence& seq = batch[s];
    const int32_t n = static_cast<int32_t>(seq.tokens.size());
    const int64_t end_pos = int64_t{seq.start_pos} + n;
    if (n == 0 || seq.start_pos < 0) {
      return absl::InvalidArgumentError(absl::StrCat("Forward: sequence ", s, " has no tokens"));
    }
    if (end_pos > c.max_position_embeddings) {
      return absl::InvalidArgumentError(absl::StrCat("Forward: sequence ", s, " reaches position ",
                                                     end_pos, " beyond the model's context of ",
                                                     c.max_position_embeddings));
    }
    const int64_t blocks_needed = (end_pos + block_tokens - 1) / block_tokens;
    if (static_cast<int64_t>(seq.block_table.size()) < blocks_needed) {
      return absl::InvalidArgumentError(absl::StrCat("Forward: sequence ", s, " needs ",
                                                     blocks_needed, " KV blocks, has ",
                                                     seq.block_table.size()));
    }
    kernels::SequenceAttention sa;
    sa.q_begin = static_cast<int32_t>(ids.size());
    sa.q_len = n;
    sa.kv_len = static_cast<int32_t>(end_pos);
    sa.block_table = seq.block_table;
    sa.pattern = seq.pattern;
    attn.sequences.push_back(std::move(sa));
    for (int32_t i = 0; i < n; ++i) {
      const int32_t pos = seq.start_pos + i;
      const int32_t block = seq.block_table[pos / block_tokens];
      if (block < 0 || block >= cache.shape().num_blocks) {
        return absl::InvalidArgumentError(absl::StrCat("Forward: block id ", block,
                                                       " outside the "
                                                       "KV cache of ",
                                                       cache.shape().num_blocks));
      }
      if (seq.tokens[i] < 0 || seq.tokens[i] >= c.vocab_size) {
        return absl::InvalidArgumentError(absl::StrCat(
            "Forward: token id ", seq.tokens[i], " outside the vocabulary of ", c.vocab_size));
      }
      if (seq.all_logits || i == n - 1) logit_rows.push_back(static_cast<int32_t>(ids.size()));
      ids.push_back(seq.tokens[i]);
      positions.push_back(pos);
      slots.push_back(block * block_tokens + pos % block_tokens);
    }
  }
  const int64_t n = static_cast<int64_t>(ids.size());
  const int64_t hd = c.head_dim;
  const int64_t m = static_cast<int64_t>(logit_rows.size());
  SS_RETURN_IF_ERROR(PrepareStepBuffers(n, m));
  // One upload for all index arrays of the step.
  std::vector<int32_t> indices;
  indices.reserve(3 * n + m);
  for (const std::vector<int32_t>* part : {&ids, &positions, &slots, &logit_rows}) {
    indices.insert(indices.end(), part->begin(), part->end());
  }
  SS_RETURN_IF_ERROR(be.CopyFromHost(HostI32(indices), step_.indices));
  const Tensor ids_t = step_.indices.Slice(0, 0, n);
  const Tensor pos_t = step_.indices.Slice(0, n, 2 * n);
  const Tensor slots_t = step_.indices.Slice(0, 2 * n, 3 * n);
  const Tensor rows_t = step_.indices.Slice(0, 3 * n, 3 * n + m);

  // Activations. `h` is the residual stream; `x` its normalised copy fed to each sub-block.
  const Tensor &h = step_.h, &x = step_.x, &q = step_.q, &k = step_.k, &v = step_.v;
  const Tensor &attn_out = step_.attn_out, &gate = step_.gate, &up = step_.up;
  const Tensor& branch = step_.branch;  // sub-block output
  SS_ASSIGN_OR_RETURN(Tensor q2, q.Reshape({n, c.num_heads * hd}));
  SS_ASSIGN_OR_RETURN(Tensor k2, k.Reshape({n, c.num_kv_heads * hd}));
  SS_ASSIGN_OR_RETURN(Tensor v2, v.Reshape({n, c.num_kv_heads * hd}));
  SS_ASSIGN_OR_RETURN(Tensor attn2, attn_out.Reshape({n, c.num_heads * hd}));

  SS_RETURN_IF_ERROR(be.Embedding(embedding_, ids_t, h));
  for (int l = 0; l < c.num_layers; ++l) {
    const LayerWeights& w = layers_[l];
    if (l == 0) {
      SS_RETURN_IF_ERROR(be.RmsNorm(h, w.attn_norm, c.rms_norm_eps, x));
    } else {  // adds the previous layer's FFN output into the residual stream
      SS_RETURN_IF_ERROR(be.AddRmsNorm(h, branch, w.attn_norm, c.rms_norm_eps, x));
    }
    SS_RETURN_IF_ERROR(be.Linear(x, w.wq, w.bq, q2));
    SS_RETURN_IF_ERROR(be.Linear(x, w.wk, w.bk, k2));
    SS_RETURN_IF_ERROR(be.Linear(x, w.wv, w.bv, v2));
    SS_RETURN_IF_ERROR(be.Rope(q, k, pos_t, inv_freq_));
    SS_RETURN_IF_ERROR(be.WriteKv(k, v, slots_t, cache.layer(l)));
    if (on_layer_kv_written) SS_RETURN_IF_ERROR(on_layer_kv_written(l));
    SS_RETURN_IF_ERROR(be.Attention(q, cache.layer(l), attn, attn_out));
    SS_RETURN_IF_ERROR(be.Linear(attn2, w.wo, w.bo, branch));
    SS_RETURN_IF_ERROR(be.AddRmsNorm(h, branch, w.ffn_norm, c.rms_norm_eps, x));
    SS_RETURN_IF_ERROR(be.Linear(x, w.w_gate, Tensor(), gate));
    SS_RETURN_IF_ERROR(be.Linear(x, w.w_up, Tensor(), up));
    SS_RETURN_IF_ERROR(be.SiluMul(gate, up, gate));
    SS_RETURN_IF_ERROR(be.Linear(gate, w.w_down, Tensor(), branch));
  }
  SS_RETURN_IF_ERROR(be.AddRmsNorm(h, branch, final_norm_, c.rms_norm_eps, x));

  SS_RETURN_IF_ERROR(be.GatherRows(x, rows_t, step_.last));
  return be.Linear(step_.last, lm_head_, Tensor(), step_.logits);
}

absl::Status LlamaModel::PrepareStepBuffers(int64_t rows, int64_t logit_rows) {
  if (step_.rows == rows && step_.logit_rows == logit_rows) return absl::OkStatus();
  step_ = StepBuffers();  // frees the previous shape's buffers first
  const ModelConfig& c = config_;
  kernels::Backend& be = *backend_;
  const DType dt = be.compute_dtype();
  const int64_t n = rows, hidden = c.hidden_size, hd = c.head_dim;
  StepBuffers b;
  SS_ASSIGN_OR_RETURN(b.indices, be.Allocate(DType::kI32, {3 * n + logit_rows}));
  // The residual stream stays in f32 (see Backend::AddRmsNorm); sub-block inputs and outputs
  // are in the compute dtype.
  SS_ASSIGN_OR_RETURN(b.h, be.Allocate(DType::kF32, {n, hidden}));
  SS_ASSIGN_OR_RETURN(b.x, be.Allocate(dt, {n, hidden}));
  SS_ASSIGN_OR_RETURN(b.q, be.Allocate(dt, {n, c.num_heads, hd}));
  SS_ASSIGN_OR_RETURN(b.k, be.Allocate(dt, {n, c.num_kv_heads, hd}));
  SS_ASSIGN_OR_RETURN(b.v, be.Allocate(dt, {n, c.num_kv_heads, hd}));
  SS_ASSIGN_OR_RETURN(b.attn_out, be.Allocate(dt, {n, c.num_heads, hd}));
  SS_ASSIGN_OR_RETURN(b.gate, be.Allocate(dt, {n, c.intermediate_size}));
  SS_ASSIGN_OR_RETURN(b.up, be.Allocate(dt, {n, c.intermediate_size}));
  SS_ASSIGN_OR_RETURN(b.branch, be.Allocate(dt, {n, hidden}));
  SS_ASSIGN_OR_RETURN(b.last, be.Allocate(dt, {logit_rows, hidden}));
  // f32 logits: sampling and greedy argmax must not see bf16 rounding ties.
  SS_ASSIGN_OR_RETURN(b.logits, be.Allocate(DType::kF32, {logit_rows, c.vocab_size}));
  SS_ASSIGN_OR_RETURN(b.argmax, be.Allocate(DType::kI32, {logit_rows}));
  b.rows = rows;
  b.logit_rows = logit_rows;
  step_ = std::move(b);
  return absl::OkStatus();
}

}  // namespace sparseserve::model
