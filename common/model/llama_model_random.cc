// LlamaModel::CreateRandom — a model of a config's shape with noise weights made on the backend.
#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/core/status.h"
#include "common/model/llama_model.h"

namespace sparseserve::model {
namespace {

// The seed of the `tensor_idx`-th tensor of a model seeded with `seed`: a SplitMix64 mix, so
// neighbouring tensors (and neighbouring model seeds) draw unrelated streams.
uint64_t TensorSeed(uint64_t seed, uint64_t tensor_idx) {
  uint64_t z = seed + (tensor_idx + 1) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Allocates tensors in the backend's compute dtype and fills each from the next tensor seed. The
// creation order therefore fixes the weights: it must not change for a seed to keep meaning the
// same model.
class RandomWeightMaker {
 public:
  RandomWeightMaker(kernels::Backend& backend, uint64_t seed) : backend_(backend), seed_(seed) {}

  // Uniform in [lo, hi). Errors name the tensor ("layer 3 w_up: ...").
  absl::StatusOr<Tensor> Uniform(const std::string& name, Shape shape, float lo, float hi) {
    absl::StatusOr<Tensor> t = backend_.Allocate(backend_.compute_dtype(), shape);
    if (!t.ok()) return AnnotateStatus(t.status(), name);
    SS_RETURN_IF_ERROR(
        AnnotateStatus(backend_.FillUniform(*t, TensorSeed(seed_, num_made_++), lo, hi), name));
    return t;
  }

  // A projection weight [out_features, in_features] in ±1/sqrt(fan_in): y = x·wᵀ then has a
  // third of x's mean square, so no layer amplifies the residual stream. fan_in = in_features
  // unless given (a row-parallel slice is bounded by the full input width its sum covers).
  absl::StatusOr<Tensor> Projection(const std::string& name, int64_t out_features,
                                    int64_t in_features, int64_t fan_in = 0) {
    const float bound = 1.0f / std::sqrt(static_cast<float>(fan_in > 0 ? fan_in : in_features));
    return Uniform(name, {out_features, in_features}, -bound, bound);
  }

  // An RMSNorm weight [d] near 1, as trained norms are.
  absl::StatusOr<Tensor> Norm(const std::string& name, int64_t d) {
    return Uniform(name, {d}, 0.9f, 1.1f);
  }

  // A bias [d], small next to the projection it is added to.
  absl::StatusOr<Tensor> Bias(const std::string& name, int64_t d) {
    return Uniform(name, {d}, -0.1f, 0.1f);
  }

 private:
  kernels::Backend& backend_;
  const uint64_t seed_;
  uint64_t num_made_ = 0;
};

}  // namespace

absl::StatusOr<std::unique_ptr<LlamaModel>> LlamaModel::CreateRandom(
    const ModelConfig& config, kernels::Backend* backend, uint64_t seed,
    const TensorParallelShard& shard) {
  SS_ASSIGN_OR_RETURN(std::unique_ptr<LlamaModel> model, New(config, backend, shard));
  const ShardDims& d = model->dims_;
  RandomWeightMaker make(*backend, seed);
  const int64_t hidden = config.hidden_size;
  // This rank's slices (the whole model on one rank); Projection's bound still follows the full
  // input width, so activations keep the one-rank model's scale.
  const int64_t q_dim = int64_t{d.heads} * config.head_dim;
  const int64_t kv_dim = int64_t{d.kv_heads} * config.head_dim;
  const int64_t ffn = d.ffn;
  const int64_t full_q = int64_t{config.num_heads} * config.head_dim;

  // Embedding rows in [-1, 1): the first RMSNorm rescales them anyway.
  SS_ASSIGN_OR_RETURN(model->embedding_,
                      make.Uniform("embedding", {config.vocab_size, hidden}, -1.0f, 1.0f));
  SS_ASSIGN_OR_RETURN(model->final_norm_, make.Norm("final_norm", hidden));
  if (config.tie_word_embeddings && shard.size == 1) {
    model->lm_head_ = model->embedding_;
  } else {
    SS_ASSIGN_OR_RETURN(model->lm_head_, make.Projection("lm_head", d.vocab, hidden));
  }
  model->layers_.reserve(config.num_layers);
  for (int l = 0; l < config.num_layers; ++l) {
    auto n = [l](const char* what) { return absl::StrCat("layer ", l, " ", what); };
    LayerWeights w;
    SS_ASSIGN_OR_RETURN(w.attn_norm, make.Norm(n("attn_norm"), hidden));
    SS_ASSIGN_OR_RETURN(w.wq, make.Projection(n("wq"), q_dim, hidden));
    SS_ASSIGN_OR_RETURN(w.wk, make.Projection(n("wk"), kv_dim, hidden));
    SS_ASSIGN_OR_RETURN(w.wv, make.Projection(n("wv"), kv_dim, hidden));
    SS_ASSIGN_OR_RETURN(w.wo, make.Projection(n("wo"), hidden, q_dim, full_q));
    if (config.attention_bias) {
      SS_ASSIGN_OR_RETURN(w.bq, make.Bias(n("bq"), q_dim));
      SS_ASSIGN_OR_RETURN(w.bk, make.Bias(n("bk"), kv_dim));
      SS_ASSIGN_OR_RETURN(w.bv, make.Bias(n("bv"), kv_dim));
      // As in Load: Llama's attention_bias covers o_proj too; Qwen2 has q/k/v biases only.
      if (config.arch != ModelArch::kQwen2) {
        SS_ASSIGN_OR_RETURN(w.bo, make.Bias(n("bo"), hidden));
        if (shard.rank != 0) w.bo = Tensor();  // a row-parallel bias is added by rank 0 only
      }
    }
    SS_ASSIGN_OR_RETURN(w.ffn_norm, make.Norm(n("ffn_norm"), hidden));
    SS_ASSIGN_OR_RETURN(w.w_gate, make.Projection(n("w_gate"), ffn, hidden));
    SS_ASSIGN_OR_RETURN(w.w_up, make.Projection(n("w_up"), ffn, hidden));
    SS_ASSIGN_OR_RETURN(w.w_down,
                        make.Projection(n("w_down"), hidden, ffn, config.intermediate_size));
    model->layers_.push_back(std::move(w));
  }
  SS_RETURN_IF_ERROR(model->StackProjections());
  SS_RETURN_IF_ERROR(model->UploadInverseFrequencies());
  return model;
}

}  // namespace sparseserve::model
