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

// The part of a weight a tensor-parallel rank uploads (tensor_parallel_shard.h): `count`
// entries of dimension `axis` from `begin`, zero rows appended up to `padded` rows (axis 0 only);
// axis -1 = all of it.
struct WeightPart {
  int axis = -1;
  int64_t begin = 0, count = 0, padded = 0;
};

WeightPart Rows(int64_t begin, int64_t count, int64_t padded = 0) {
  return {0, begin, count, padded};
}
WeightPart Columns(int64_t begin, int64_t count) {
  return {1, begin, count, 0};
}

class WeightUploader {
 public:
  WeightUploader(const TensorFile& file, kernels::Backend& backend)
      : file_(file), backend_(backend) {}

  // Reads `name`, checks its shape, optionally permutes RoPE rows, takes `part` and uploads it in
  // compute dtype.
  absl::StatusOr<Tensor> Load(const std::string& name, Shape expected, int rope_heads = 0,
                              int head_dim = 0, WeightPart part = {}) {
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
    Shape shape = expected;
    if (part.axis >= 0) {
      SS_ASSIGN_OR_RETURN(src, src.Slice(part.axis, part.begin, part.begin + part.count).ToF32());
      shape[part.axis] = part.count;
      if (part.padded > part.count) {  // a vocabulary padded to a multiple of the ranks
        shape[0] = part.padded;
        Tensor padded = Tensor::Zeros(DType::kF32, shape);
        std::memcpy(padded.raw_data(), src.raw_data(), src.nbytes());
        src = std::move(padded);
      }
    }
    SS_ASSIGN_OR_RETURN(Tensor dst, backend_.Allocate(backend_.compute_dtype(), shape));
    SS_RETURN_IF_ERROR(AnnotateStatus(backend_.CopyFromHost(src, dst), name));
    return dst;
  }

 private:
  const TensorFile& file_;
  kernels::Backend& backend_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<LlamaModel>> LlamaModel::New(const ModelConfig& config,
                                                            kernels::Backend* backend,
                                                            const TensorParallelShard& shard) {
  SS_RETURN_IF_ERROR(ValidateModelConfig(config));
  SS_ASSIGN_OR_RETURN(const ShardDims dims, ShardDimsOf(config, shard.rank, shard.size));
  if (shard.size > 1 && shard.collective == nullptr) {
    return absl::InvalidArgumentError("a tensor-parallel shard needs its collective");
  }
  return std::unique_ptr<LlamaModel>(new LlamaModel(config, backend, shard, dims));
}

absl::StatusOr<std::unique_ptr<LlamaModel>> LlamaModel::Load(const ModelConfig& config,
                                                             const TensorFile& file,
                                                             WeightNaming naming,
                                                             kernels::Backend* backend,
                                                             const TensorParallelShard& shard) {
  SS_ASSIGN_OR_RETURN(std::unique_ptr<LlamaModel> model, New(config, backend, shard));
  const ShardDims& d = model->dims_;
  const bool split = shard.size > 1;
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
  // This rank's parts (all of each weight on one rank).
  const WeightPart q_rows = split ? Rows(d.head_begin * hd, d.heads * hd) : WeightPart();
  const WeightPart kv_rows = split ? Rows(d.kv_head_begin * hd, d.kv_heads * hd) : WeightPart();
  const WeightPart q_cols = split ? Columns(d.head_begin * hd, d.heads * hd) : WeightPart();
  const WeightPart ffn_rows = split ? Rows(d.ffn_begin, d.ffn) : WeightPart();
  const WeightPart ffn_cols = split ? Columns(d.ffn_begin, d.ffn) : WeightPart();
  const WeightPart vocab_rows = split ? Rows(d.vocab_begin, d.vocab_rows, d.vocab) : WeightPart();

  SS_ASSIGN_OR_RETURN(model->embedding_, up.Load(names.embedding, {config.vocab_size, hidden}));
  SS_ASSIGN_OR_RETURN(model->final_norm_, up.Load(names.final_norm, {hidden}));
  const bool tied = config.tie_word_embeddings || !file.HasTensor(names.lm_head);
  if (tied && !split) {
    model->lm_head_ = model->embedding_;
  } else {
    SS_ASSIGN_OR_RETURN(model->lm_head_, up.Load(tied ? names.embedding : names.lm_head,
                                                 {config.vocab_size, hidden}, 0, 0, vocab_rows));
  }
  for (int l = 0; l < config.num_layers; ++l) {
    LayerWeights w;
    auto n = [&](const char* hf, const char* gguf) { return names.Layer(naming, l, hf, gguf); };
    SS_ASSIGN_OR_RETURN(w.attn_norm,
                        up.Load(n("input_layernorm.weight", "attn_norm.weight"), {hidden}));
    SS_ASSIGN_OR_RETURN(w.wq, up.Load(n("self_attn.q_proj.weight", "attn_q.weight"),
                                      {q_dim, hidden}, q_perm, hd, q_rows));
    SS_ASSIGN_OR_RETURN(w.wk, up.Load(n("self_attn.k_proj.weight", "attn_k.weight"),
                                      {kv_dim, hidden}, k_perm, hd, kv_rows));
    SS_ASSIGN_OR_RETURN(w.wv, up.Load(n("self_attn.v_proj.weight", "attn_v.weight"),
                                      {kv_dim, hidden}, 0, 0, kv_rows));
    SS_ASSIGN_OR_RETURN(w.wo, up.Load(n("self_attn.o_proj.weight", "attn_output.weight"),
                                      {hidden, q_dim}, 0, 0, q_cols));
    if (config.attention_bias) {
      SS_ASSIGN_OR_RETURN(
          w.bq, up.Load(n("self_attn.q_proj.bias", "attn_q.bias"), {q_dim}, q_perm, hd, q_rows));
      SS_ASSIGN_OR_RETURN(
          w.bk, up.Load(n("self_attn.k_proj.bias", "attn_k.bias"), {kv_dim}, k_perm, hd, kv_rows));
      SS_ASSIGN_OR_RETURN(
          w.bv, up.Load(n("self_attn.v_proj.bias", "attn_v.bias"), {kv_dim}, 0, 0, kv_rows));
      // HF Llama's attention_bias covers o_proj too; Qwen2 has q/k/v biases only. A row-parallel
      // bias is added once, by rank 0, before the all-reduce.
      if (config.arch != ModelArch::kQwen2 && shard.rank == 0) {
        SS_ASSIGN_OR_RETURN(w.bo,
                            up.Load(n("self_attn.o_proj.bias", "attn_output.bias"), {hidden}));
      }
    }
    SS_ASSIGN_OR_RETURN(w.ffn_norm,
                        up.Load(n("post_attention_layernorm.weight", "ffn_norm.weight"), {hidden}));
    SS_ASSIGN_OR_RETURN(w.w_gate, up.Load(n("mlp.gate_proj.weight", "ffn_gate.weight"),
                                          {ffn, hidden}, 0, 0, ffn_rows));
    SS_ASSIGN_OR_RETURN(
        w.w_up, up.Load(n("mlp.up_proj.weight", "ffn_up.weight"), {ffn, hidden}, 0, 0, ffn_rows));
    SS_ASSIGN_OR_RETURN(w.w_down, up.Load(n("mlp.down_proj.weight", "ffn_down.weight"),
                                          {hidden, ffn}, 0, 0, ffn_cols));
    model->layers_.push_back(std::move(w));
  }

  SS_RETURN_IF_ERROR(model->StackProjections());
  SS_RETURN_IF_ERROR(model->UploadInverseFrequencies());
  return model;
}

absl::Status LlamaModel::LoadDraftHeads(const TensorFile& file) {
  if (tensor_parallel()) {
    return absl::UnimplementedError("TokenSwift's draft heads need --tensor-parallel 1");
  }
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
  if (tensor_parallel()) {
    return absl::UnimplementedError("Kangaroo's early-exit adapter needs --tensor-parallel 1");
  }
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
