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
  const ModelConfig& c = config_;
  kernels::Backend& be = *backend_;
  const int block_tokens = cache.shape().block_tokens;
  if (batch.empty()) return absl::InvalidArgumentError("Forward: empty batch");

  // Flatten the batch: token ids, positions, KV slots, rows whose logits are wanted.
  std::vector<int32_t> ids, positions, slots, logit_rows;
  kernels::AttentionBatch attn;
  attn.block_tokens = block_tokens;
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
        return absl::InvalidArgumentError(absl::StrCat("Forward: token id ", seq.tokens[i],
                                                       " outside the vocabulary of ",
                                                       c.vocab_size));
      }
      if (seq.all_logits || i == n - 1) logit_rows.push_back(static_cast<int32_t>(ids.size()));
      ids.push_back(seq.tokens[i]);
      positions.push_back(pos);
      slots.push_back(block * block_tokens + pos % block_tokens);
    }
  }
  const int64_t n = static_cast<int64_t>(ids.size());
  const int64_t hidden = c.hidden_size;
  const int64_t hd = c.head_dim;
  const DType dt = be.compute_dtype();

  auto upload_i32 = [&](const std::vector<int32_t>& v) -> absl::StatusOr<Tensor> {
    SS_ASSIGN_OR_RETURN(Tensor t, be.Allocate(DType::kI32, {static_cast<int64_t>(v.size())}));
    SS_RETURN_IF_ERROR(be.CopyFromHost(HostI32(v), t));
    return t;
  };
  SS_ASSIGN_OR_RETURN(Tensor ids_t, upload_i32(ids));
  SS_ASSIGN_OR_RETURN(Tensor pos_t, upload_i32(positions));
  SS_ASSIGN_OR_RETURN(Tensor slots_t, upload_i32(slots));
  SS_ASSIGN_OR_RETURN(Tensor rows_t, upload_i32(logit_rows));

  // Activations. `h` is the residual stream; `x` its normalised copy fed to each sub-block.
  SS_ASSIGN_OR_RETURN(Tensor h, be.Allocate(dt, {n, hidden}));
  SS_ASSIGN_OR_RETURN(Tensor x, be.Allocate(dt, {n, hidden}));
  SS_ASSIGN_OR_RETURN(Tensor q, be.Allocate(dt, {n, c.num_heads, hd}));
  SS_ASSIGN_OR_RETURN(Tensor k, be.Allocate(dt, {n, c.num_kv_heads, hd}));
  SS_ASSIGN_OR_RETURN(Tensor v, be.Allocate(dt, {n, c.num_kv_heads, hd}));
  SS_ASSIGN_OR_RETURN(Tensor attn_out, be.Allocate(dt, {n, c.num_heads, hd}));
  SS_ASSIGN_OR_RETURN(Tensor gate, be.Allocate(dt, {n, c.intermediate_size}));
  SS_ASSIGN_OR_RETURN(Tensor up, be.Allocate(dt, {n, c.intermediate_size}));
  SS_ASSIGN_OR_RETURN(Tensor branch, be.Allocate(dt, {n, hidden}));  // sub-block output
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

  const int64_t m = static_cast<int64_t>(logit_rows.size());
  SS_ASSIGN_OR_RETURN(Tensor last, be.Allocate(dt, {m, hidden}));
  SS_RETURN_IF_ERROR(be.GatherRows(x, rows_t, last));
  // f32 logits: sampling and greedy argmax must not see bf16 rounding ties.
  SS_ASSIGN_OR_RETURN(Tensor logits, be.Allocate(DType::kF32, {m, c.vocab_size}));
  SS_RETURN_IF_ERROR(be.Linear(last, lm_head_, Tensor(), logits));
  Tensor host = Tensor::Zeros(DType::kF32, {m, c.vocab_size});
  SS_RETURN_IF_ERROR(be.CopyToHost(logits, host));
  return host;
}

}  // namespace sparseserve::model
