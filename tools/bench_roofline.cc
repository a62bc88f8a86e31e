#include "tools/bench_roofline.h"

namespace sparseserve::tools {
namespace {

// Parameters of one decoder layer's matrices: each multiplies every token once.
double LayerMatrixParams(const model::ModelConfig& c) {
  const double h = c.hidden_size;
  const double q = double{1} * c.num_heads * c.head_dim;
  const double kv = double{1} * c.num_kv_heads * c.head_dim;
  return 2 * h * q + 2 * h * kv + 3 * h * c.intermediate_size;
}

// Parameters of one decoder layer's vectors: two norms and the attention biases.
double LayerVectorParams(const model::ModelConfig& c) {
  double n = 2.0 * c.hidden_size;
  if (c.attention_bias) {
    n += double{1} * (c.num_heads + 2 * c.num_kv_heads) * c.head_dim;
    if (c.arch != model::ModelArch::kQwen2) n += c.hidden_size;  // o_proj bias (Llama)
  }
  return n;
}

double LmHeadParams(const model::ModelConfig& c) {
  return double{1} * c.vocab_size * c.hidden_size;
}

// FLOPs of every layer's attention for one query over `num_keys` keys: Q·Kᵀ and P·V are each
// heads * head_dim multiply-adds per key.
double AttentionFlopsPerQuery(const model::ModelConfig& c, double num_keys) {
  return 4.0 * c.num_layers * c.num_heads * c.head_dim * num_keys;
}

}  // namespace

int64_t NumModelParams(const model::ModelConfig& c) {
  const double embeddings = c.tie_word_embeddings ? LmHeadParams(c) : 2 * LmHeadParams(c);
  return static_cast<int64_t>(embeddings + c.hidden_size +
                              c.num_layers * (LayerMatrixParams(c) + LayerVectorParams(c)));
}

double StepWeightBytes(const model::ModelConfig& c, DType dtype) {
  const double params = c.num_layers * (LayerMatrixParams(c) + LayerVectorParams(c)) +
                        c.hidden_size + LmHeadParams(c);
  return params * DTypeSize(dtype);
}

double KvBytesPerToken(const model::ModelConfig& c, DType dtype) {
  return 2.0 * c.num_layers * c.num_kv_heads * c.head_dim * DTypeSize(dtype);
}

WorkCost PrefillCost(const model::ModelConfig& c, DType dtype, int64_t num_tokens,
                     int64_t chunk_tokens) {
  WorkCost cost;
  const double kv_token = KvBytesPerToken(c, dtype);
  for (int64_t begin = 0; begin < num_tokens; begin += chunk_tokens) {
    const int64_t end = begin + chunk_tokens < num_tokens ? begin + chunk_tokens : num_tokens;
    cost.bytes += StepWeightBytes(c, dtype) + kv_token * static_cast<double>(end);
    cost.flops += 2 * LmHeadParams(c);  // the step's last token only
  }
  const double n = static_cast<double>(num_tokens);
  cost.bytes += kv_token * n;  // the writes
  cost.flops += 2 * c.num_layers * LayerMatrixParams(c) * n;
  cost.flops += AttentionFlopsPerQuery(c, n * (n + 1) / 2);  // sum over p of (p + 1) keys
  return cost;
}

WorkCost DecodeStepCost(const model::ModelConfig& c, DType dtype, int64_t batch, int64_t context) {
  const double b = static_cast<double>(batch);
  const double keys = static_cast<double>(context) + 1;
  WorkCost cost;
  cost.bytes = StepWeightBytes(c, dtype) + b * keys * KvBytesPerToken(c, dtype);
  cost.flops = b * (2 * (c.num_layers * LayerMatrixParams(c) + LmHeadParams(c)) +
                    AttentionFlopsPerQuery(c, keys));
  return cost;
}

RooflineFloor FloorOf(const WorkCost& cost, double bandwidth_gbps, double peak_tflops) {
  RooflineFloor f;
  f.bytes_s = cost.bytes / (bandwidth_gbps * 1e9);
  f.flops_s = peak_tflops > 0 ? cost.flops / (peak_tflops * 1e12) : 0;
  f.floor_s = f.bytes_s >= f.flops_s ? f.bytes_s : f.flops_s;
  f.bound = f.bytes_s >= f.flops_s ? "memory" : "compute";
  return f;
}

}  // namespace sparseserve::tools
