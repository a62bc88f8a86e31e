// RoPE inverse frequencies, with the context-extension rescalings of config.json.
//
// Computed once on the host at model load and uploaded; stateless and thread-safe.
#ifndef SPARSESERVE_KERNELS_ROPE_FREQUENCIES_H_
#define SPARSESERVE_KERNELS_ROPE_FREQUENCIES_H_

#include <vector>

namespace sparseserve::kernels {

struct RopeFrequencyParams {
  int head_dim = 0;
  float theta = 10000.0f;
  // 0 none, 1 linear (divide every frequency by factor), 2 llama3 (Llama 3.1: rescale only
  // wavelengths longer than original_max_position_embeddings / low_freq_factor, blend between).
  int scaling = 0;
  float factor = 1.0f;
  float low_freq_factor = 1.0f;
  float high_freq_factor = 4.0f;
  int original_max_position_embeddings = 8192;
};

// inv_freq[i] = theta^(-2i/head_dim) after scaling, i in [0, head_dim/2).
std::vector<float> RopeInverseFrequencies(const RopeFrequencyParams& params);

}  // namespace sparseserve::kernels

#endif  // SPARSESERVE_KERNELS_ROPE_FREQUENCIES_H_
