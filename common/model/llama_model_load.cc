// LlamaModel::Load — tensor naming, shape checks, RoPE pair-layout conversion, upload — and the
// RoPE inverse frequencies that Load and CreateRandom share.
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/core/status.h"
#include "common/model/llama_model.h"
#include "kernels/rope_frequencies.h"

namespace sparseserve::model {
namespace {

struct TensorNames {
  std::string embedding, final_norm, lm_head;
  std::string Layer(WeightNaming naming, int l, const char* hf, const char* gguf) const {
    return naming == WeightNaming::kHuggingFace ? absl::StrCat("model.layers.", l, ".", hf)
                                                : absl::StrCat("blk.", l, ".", gguf);
  }
};

TensorNames NamesFor(WeightNaming naming) {
  if (naming == WeightNaming::kHuggingFace) {
    return {"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"};
  }
  return {"token_embd.weight", "output_norm.weight", "output.weight"};
}

// Reorders the rows of a Q or K projection (or bias) from adjacent RoPE pairs (2i, 2i+1) to
// halves (i, i + head_dim/2), head by head. `t` is a host f32 tensor [heads * head_dim, ...].
void AdjacentToHalves(Tensor& t, int num_heads, int head_dim) {
  const int64_t row = t.ndim() == 2 ? t.dim(1) : 1;
  const int half = head_dim / 2;
  std::vector<float> head(static_cast<size_t>(head_dim) * row);
  for (int h = 0; h < num_heads; ++h) {
    float* base = t.data<float>() + static_cast<int64_t>(h) * head_dim * row;
    std::memcpy(head.data(), base, head.size() * sizeof(float));
    for (int i = 0; i < half; ++i) {
      for (int j = 0; j < 2; ++j) {
        std::memcpy(base + (j * half + i) * row, head.data() + (2 * i + j) * row,
                    row * sizeof(float));
      }
    }
  }
}

class WeightUploader {
 public:
  WeightUploader(const TensorFile& file, kernels::Backend& backend)
      : file_(file), backend_(backend) {}

  // Reads `name`, checks its shape, optionally permutes RoPE rows, uploads in compute dtype.
  absl::StatusOr<Tensor> Load(const std::string& name, Shape expected, int rope_heads = 0,
                              int head_dim = 0) {
    SS_ASSIGN_OR_RETURN(Tensor src, file_.GetTensor(name));
    if (!(src.shape() == expected)) {
      return absl::InvalidArgumentError(absl::StrCat("tensor ", name, " has shape ",
                                                     src.shape().ToString(), ", config expects ",
                                                     expected.ToString()));
    }
    if (rope_heads > 0) {
      SS_ASSIGN_OR_RETURN(src, src.ToF32());  // a private copy we may permute
      AdjacentToHalves(src, rope_heads, head_dim);
    }
    SS_ASSIGN_OR_RETURN(Tensor dst, backend_.Allocate(backend_.compute_dtype(), expected));
    SS_RETURN_IF_ERROR(AnnotateStatus(backend_.CopyFromHost(src, dst), name));
    return dst;
  }

 private:
  const TensorFile& file_;
  kernels::Backend& backend_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<LlamaModel>> LlamaModel::Load(const ModelConfig& config,
                                                             const TensorFile& file,
                                                             WeightNaming naming,
                                                             kernels::Backend* backend) {
  SS_RETURN_IF_ERROR(ValidateModelConfig(config));
  std::unique_ptr<LlamaModel> model(new LlamaModel(config, backend));
  const TensorNames names = NamesFor(naming);
  WeightUploader up(file, *backend);
  const int64_t hidden = config.hidden_size;
  const int64_t hd = config.head_dim;
  const int64_t q_dim = config.num_heads * hd;
  const int64_t kv_dim = config.num_kv_heads * hd;
  const int64_t ffn = config.intermediate_size;
  const bool permute = config.rope_pair_layout == RopePairLayout::kAdjacent;
  const int q_perm = permute ? config.num_heads : 0;
  const int k_perm = permute ? config.num_kv_heads : 0;

  SS_ASSIGN_OR_RETURN(model->embedding_, up.Load(names.embedding, {config.vocab_size, hidden}));
  SS_ASSIGN_OR_RETURN(model->final_norm_, up.Load(names.final_norm, {hidden}));
  if (config.tie_word_embeddings || !file.HasTensor(names.lm_head)) {
    model->lm_head_ = model->embedding_;
  } else {
    SS_ASSIGN_OR_RETURN(model->lm_head_, up.Load(names.lm_head, {config.vocab_size, hidden}));
  }
  for (int l = 0; l < config.num_layers; ++l) {
    LayerWeights w;
    auto n = [&](const char* hf, const char* gguf) { return names.Layer(naming, l, hf, gguf); };
    SS_ASSIGN_OR_RETURN(w.attn_norm,
                        up.Load(n("input_layernorm.weight", "attn_norm.weight"), {hidden}));
    SS_ASSIGN_OR_RETURN(
        w.wq, up.Load(n("self_attn.q_proj.weight", "attn_q.weight"), {q_dim, hidden}, q_perm, hd));
    SS_ASSIGN_OR_RETURN(
        w.wk, up.Load(n("self_attn.k_proj.weight", "attn_k.weight"), {kv_dim, hidden}, k_perm, hd));
    SS_ASSIGN_OR_RETURN(w.wv,
                        up.Load(n("self_attn.v_proj.weight", "attn_v.weight"), {kv_dim, hidden}));
    SS_ASSIGN_OR_RETURN(
        w.wo, up.Load(n("self_attn.o_proj.weight", "attn_output.weight"), {hidden, q_dim}));
    if (config.attention_bias) {
      SS_ASSIGN_OR_RETURN(w.bq,
                          up.Load(n("self_attn.q_proj.bias", "attn_q.bias"), {q_dim}, q_perm, hd));
      SS_ASSIGN_OR_RETURN(w.bk,
                          up.Load(n("self_attn.k_proj.bias", "attn_k.bias"), {kv_dim}, k_perm, hd));
      SS_ASSIGN_OR_RETURN(w.bv, up.Load(n("self_attn.v_proj.bias", "attn_v.bias"), {kv_dim}));
      // HF Llama's attention_bias covers o_proj too; Qwen2 has q/k/v biases only.
      if (config.arch != ModelArch::kQwen2) {
        SS_ASSIGN_OR_RETURN(w.bo,
                            up.Load(n("self_attn.o_proj.bias", "attn_output.bias"), {hidden}));
      }
    }
    SS_ASSIGN_OR_RETURN(w.ffn_norm,
                        up.Load(n("post_attention_layernorm.weight", "ffn_norm.weight"), {hidden}));
    SS_ASSIGN_OR_RETURN(w.w_gate,
                        up.Load(n("mlp.gate_proj.weight", "ffn_gate.weight"), {ffn, hidden}));
    SS_ASSIGN_OR_RETURN(w.w_up, up.Load(n("mlp.up_proj.weight", "ffn_up.weight"), {ffn, hidden}));
    SS_ASSIGN_OR_RETURN(w.w_down,
                        up.Load(n("mlp.down_proj.weight", "ffn_down.weight"), {hidden, ffn}));
    model->layers_.push_back(std::move(w));
  }

  SS_RETURN_IF_ERROR(model->StackProjections());
  SS_RETURN_IF_ERROR(model->UploadInverseFrequencies());
  return model;
}

absl::Status LlamaModel::LoadDraftHeads(const TensorFile& file) {
  WeightUploader up(file, *backend_);
  const int64_t hidden = config_.hidden_size;
  std::vector<DraftHeadWeights> heads;
  for (int j = 0; file.HasTensor(absl::StrCat("heads.", j, ".proj.weight")); ++j) {
    DraftHeadWeights w;
    SS_ASSIGN_OR_RETURN(w.norm, up.Load(absl::StrCat("heads.", j, ".norm.weight"), {hidden}));
    SS_ASSIGN_OR_RETURN(w.proj,
                        up.Load(absl::StrCat("heads.", j, ".proj.weight"), {hidden, hidden}));
    heads.push_back(std::move(w));
  }
  if (heads.empty()) {
    return absl::InvalidArgumentError(
        "draft heads: the adapter has no tensor heads.0.proj.weight (not a TokenSwift adapter "
        "from tools/train_spec_adapters.py?)");
  }
  draft_heads_ = std::move(heads);
  return absl::OkStatus();
}

absl::Status LlamaModel::LoadEarlyExitAdapter(const TensorFile& file, int exit_layer,
                                              RopePairLayout pairs) {
  const ModelConfig& c = config_;
  if (exit_layer < 1 || exit_layer >= c.num_layers) {
    return absl::InvalidArgumentError(absl::StrCat("early-exit adapter: exit layer ", exit_layer,
                                                   " is outside [1, ", c.num_layers, ")"));
  }
  if (c.sliding_window > 0) {
    return absl::InvalidArgumentError(
        "early-exit adapter: not available on a model with its own sliding window");
  }
  WeightUploader up(file, *backend_);
  const int64_t hidden = c.hidden_size, q_dim = int64_t{c.num_heads} * c.head_dim;
  const int64_t kv_dim = int64_t{c.num_kv_heads} * c.head_dim;
  const bool permute = pairs == RopePairLayout::kAdjacent;
  EarlyExitAdapter a;
  a.exit_layer = exit_layer;
  SS_ASSIGN_OR_RETURN(a.input_norm, up.Load("adapter.input_norm.weight", {hidden}));
  SS_ASSIGN_OR_RETURN(Tensor wq, up.Load("adapter.q_proj.weight", {q_dim, hidden},
                                         permute ? c.num_heads : 0, c.head_dim));
  SS_ASSIGN_OR_RETURN(Tensor wk, up.Load("adapter.k_proj.weight", {kv_dim, hidden},
                                         permute ? c.num_kv_heads : 0, c.head_dim));
  SS_ASSIGN_OR_RETURN(Tensor wv, up.Load("adapter.v_proj.weight", {kv_dim, hidden}));
  SS_ASSIGN_OR_RETURN(a.wo, up.Load("adapter.o_proj.weight", {hidden, q_dim}));
  SS_ASSIGN_OR_RETURN(a.output_norm, up.Load("adapter.output_norm.weight", {hidden}));
  SS_ASSIGN_OR_RETURN(a.wqkv, StackRows({&wq, &wk, &wv}));
  early_exit_ = std::move(a);
  set_step_graph_rows(graphs_.max_rows());  // graphs captured before record no adapter K/V
  return absl::OkStatus();
}

absl::Status LlamaModel::UploadInverseFrequencies() {
  kernels::RopeFrequencyParams rope;
  rope.head_dim = config_.head_dim;
  rope.theta = config_.rope_theta;
  switch (config_.rope_scaling.type) {
    case RopeScalingType::kNone: rope.scaling = 0; break;
    case RopeScalingType::kLinear: rope.scaling = 1; break;
    case RopeScalingType::kLlama3: rope.scaling = 2; break;
  }
  rope.factor = config_.rope_scaling.factor;
  rope.low_freq_factor = config_.rope_scaling.low_freq_factor;
  rope.high_freq_factor = config_.rope_scaling.high_freq_factor;
  rope.original_max_position_embeddings = config_.rope_scaling.original_max_position_embeddings;
  const std::vector<float> inv_freq = kernels::RopeInverseFrequencies(rope);
  Tensor host = Tensor::Wrap(const_cast<float*>(inv_freq.data()), DType::kF32,
                             {static_cast<int64_t>(inv_freq.size())}, Device::kHost, nullptr);
  SS_ASSIGN_OR_RETURN(inv_freq_, backend_->Allocate(DType::kF32, host.shape()));
  SS_RETURN_IF_ERROR(backend_->CopyFromHost(host, inv_freq_));
  return absl::OkStatus();
}

}  // namespace sparseserve::model
