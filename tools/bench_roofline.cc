#include "tools/bench_roofline.h"

#include <algorithm>

namespace sparseserve::tools {
namespace {

using model::LayerMatrixParams;

double LmHeadParams(const model::ModelConfig& c) {
  return double{1} * c.vocab_size * c.hidden_size;
}

// FLOPs of every layer's attention for one query over `num_keys` keys: Q·Kᵀ and P·V are each
// heads * head_dim multiply-adds per key.
double AttentionFlopsPerQuery(const model::ModelConfig& c, double num_keys) {
  return 4.0 * c.num_layers * c.num_heads * c.head_dim * num_keys;
}

}  // namespace

double StepWeightBytes(const model::ModelConfig& c, DType dtype) {
  return static_cast<double>(model::StepWeightParams(c)) * DTypeSize(dtype);
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

WorkCost DecodeStepCost(const model::ModelConfig& c, DType dtype, int64_t batch, int64_t context,
                        int64_t visible_keys) {
  const double b = static_cast<double>(batch);
  // Keys each query reads, averaged over layers: a layer with the model's own sliding window
  // reads at most the window.
  double keys = static_cast<double>(context) + 1;
  if (visible_keys > 0) keys = std::min<double>(keys, static_cast<double>(visible_keys));
  if (c.sliding_window > 0) {
    const double windowed =
        static_cast<double>(std::count(c.windowed_layers.begin(), c.windowed_layers.end(), true));
    keys =
        (keys * (c.num_layers - windowed) + std::min<double>(keys, c.sliding_window) * windowed) /
        c.num_layers;
  }
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
