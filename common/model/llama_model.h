// LlamaModel: the forward pass of Llama-family decoders (Llama, Mistral, Qwen2) over a paged KV
// cache, written only in kernels::Backend ops (no device code here).
//
// A forward step takes a batch of sequences, each contributing a chunk of new tokens at known
// positions with its block table; it writes their K/V into the cache and returns logits for the
// rows each sequence asks for. The model owns its weights (in backend memory) and borrows the
// backend. Not thread-safe: one engine thread runs forward steps.
#ifndef SPARSESERVE_COMMON_MODEL_LLAMA_MODEL_H_
#define SPARSESERVE_COMMON_MODEL_LLAMA_MODEL_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "common/model/model_config.h"
#include "common/model/paged_kv_cache.h"
#include "common/model/tensor_file.h"
#include "common/tensor/tensor.h"
#include "kernels/attention_plan.h"
#include "kernels/backend.h"
#include "kernels/sampling_plan.h"

namespace sparseserve::model {

// How tensors are named in the checkpoint.
enum class WeightNaming { kHuggingFace, kGguf };

// One sequence's part of a forward step.
struct ForwardSequence {
  std::vector<int32_t> tokens;  // new tokens, at positions start_pos, start_pos + 1, ...
  int32_t start_pos = 0;        // tokens already in this sequence's KV cache
  // Block ids covering positions [0, start_pos + tokens.size()).
  std::vector<int32_t> block_table;
  bool all_logits = false;            // logits for every new token, else only for the last one
  kernels::AttentionPattern pattern;  // dense unless a sparse method says otherwise
};

struct LayerWeights {
  Tensor attn_norm, wq, wk, wv, wo;
  Tensor bq, bk, bv, bo;  // empty without attention bias; bo only for Llama's attention_bias
  Tensor ffn_norm, w_gate, w_up, w_down;
};

class LlamaModel {
 public:
  // Loads and validates every tensor from `file` (shapes checked against `config`), converts
  // Q/K rows of adjacent-pair checkpoints to the halves layout, and uploads to `backend`
  // (borrowed; must outlive the model). kNotFound for a missing tensor, kInvalidArgument for a
  // shape mismatch, both naming the tensor.
  static absl::StatusOr<std::unique_ptr<LlamaModel>> Load(const ModelConfig& config,
                                                          const TensorFile& file,
                                                          WeightNaming naming,
                                                          kernels::Backend* backend);
  // A model of `config`'s shape with uniform random weights, allocated in the backend's compute
  // dtype and filled there by Backend::FillUniform: no host staging, so an 8B model never passes
  // through host RAM. The same (config, seed) gives the same weights on every backend, each
  // tensor from its own seed. Norm weights lie in [0.9, 1.1) and projections in ±1/sqrt(in
  // features), so activations stay finite through any depth. For benchmarks and tests: the
  // weights are noise. kInvalidArgument for an invalid config; kResourceExhausted (naming the
  // tensor) when the backend runs out of memory.
  static absl::StatusOr<std::unique_ptr<LlamaModel>> CreateRandom(const ModelConfig& config,
                                                                  kernels::Backend* backend,
                                                                  uint64_t seed);
  LlamaModel(const LlamaModel&) = delete;
  LlamaModel& operator=(const LlamaModel&) = delete;

  const ModelConfig& config() const { return config_; }
  kernels::Backend& backend() const { return *backend_; }

  // Runs one step. Returns host f32 logits [rows, vocab]: for each sequence in order, one row
  // per new token if all_logits else one row for its last token.
  // kInvalidArgument for empty sequences, positions beyond max_position_embeddings, token ids
  // outside the vocabulary or block tables too short for the cache.
  //
  // `on_layer_kv_written(layer)`, when given, runs right after each layer's K/V are in the cache
  // (before that layer's attention): a prefill worker starts that layer's KV transfer there.
  // Its error aborts the step.
  absl::StatusOr<Tensor> Forward(
      const std::vector<ForwardSequence>& batch, PagedKvCache& cache,
      const std::function<absl::Status(int layer)>& on_layer_kv_written = nullptr);

  // Forward, then the argmax of each logits row on the backend: greedy decoding without
  // copying [rows, vocab] logits to the host. Returns one token id per logits row.
  absl::StatusOr<std::vector<int32_t>> ForwardArgMax(const std::vector<ForwardSequence>& batch,
                                                     PagedKvCache& cache);

  // Forward, then Backend::Sample of each logits row under `sampling` (one SamplingRow per logits
  // row): sampling on the backend without copying [rows, vocab] logits to the host. Returns one
  // token id per logits row. Errors of Forward, and kInvalidArgument from Backend::Sample for a
  // plan that does not match the rows.
  absl::StatusOr<std::vector<int32_t>> ForwardSample(const std::vector<ForwardSequence>& batch,
                                                     PagedKvCache& cache,
                                                     const kernels::SamplingBatch& sampling);

 private:
  LlamaModel(ModelConfig config, kernels::Backend* backend)
      : config_(std::move(config)), backend_(backend) {}
  // Sets inv_freq_ from the config's rope_theta and rope_scaling (computed on the host, uploaded);
  // shared by Load and CreateRandom so both rotate identically.
  absl::Status UploadInverseFrequencies();

  // The buffers of one forward step, kept for the next step with the same shape (decode steps
  // repeat it): allocations and their zero-fills cost launches that a decode step notices.
  struct StepBuffers {
    int64_t rows = -1, logit_rows = -1;
    Tensor indices;  // i32 [3 * rows + logit_rows]: token ids, positions, KV slots, logit rows
    Tensor h, x, q, k, v, attn_out, gate, up, branch, last, logits;
    Tensor argmax;  // i32 [logit_rows] the picked token ids (ForwardArgMax, ForwardSample)
  };
  absl::Status PrepareStepBuffers(int64_t rows, int64_t logit_rows);
  // One step up to the logits, left in step_.logits on the backend.
  absl::Status ComputeLogits(const std::vector<ForwardSequence>& batch, PagedKvCache& cache,
                             const std::function<absl::Status(int layer)>& on_layer_kv_written);

  ModelConfig config_;
  kernels::Backend* backend_;  // borrowed
  StepBuffers step_;
  Tensor embedding_;   // [vocab, hidden]
  Tensor final_norm_;  // [hidden]
  Tensor lm_head_;     // [vocab, hidden] (the embedding when tied)
  Tensor inv_freq_;    // f32 [head_dim / 2]
  std::vector<LayerWeights> layers_;
};

}  // namespace sparseserve::model

#endif  // SPARSESERVE_COMMON_MODEL_LLAMA_MODEL_H_
