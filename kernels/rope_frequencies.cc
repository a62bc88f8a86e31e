#include "kernels/rope_frequencies.h"

#include <cmath>
#include <numbers>

namespace sparseserve::kernels {

std::vector<float> RopeInverseFrequencies(const RopeFrequencyParams& p) {
  const int half = p.head_dim / 2;
  std::vector<float> inv_freq(half);
  for (int i = 0; i < half; ++i) {
    // Computed in double: small-model goldens (llama2.c) use powf, which agrees to float rounding.
    double f = 1.0 / std::pow(static_cast<double>(p.theta), 2.0 * i / p.head_dim);
    if (p.scaling == 1) {
      f /= p.factor;
    } else if (p.scaling == 2) {
      const double low_wavelen = p.original_max_position_embeddings / p.low_freq_factor;
      const double high_wavelen = p.original_max_position_embeddings / p.high_freq_factor;
      const double wavelen = 2.0 * std::numbers::pi / f;
      if (wavelen > low_wavelen) {
        f /= p.factor;
      } else if (wavelen >= high_wavelen) {
        const double smooth = (p.original_max_position_embeddings / wavelen - p.low_freq_factor) /
                              (p.high_freq_factor - p.low_freq_factor);
        f = (1.0 - smooth) * f / p.factor + smooth * f;
      }
    }
    inv_freq[i] = static_cast<float>(f);
  }
  return inv_freq;
}

}  // namespace sparseserve::kernels
