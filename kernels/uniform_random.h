// The counter-based uniform generator behind Backend::FillUniform, shared by the CPU and CUDA
// backends so that one (seed, index) gives one value everywhere (a synthetic model is the same
// model on every backend). SplitMix64 finaliser over seed and index; 24 random bits per value.
#ifndef SPARSESERVE_KERNELS_UNIFORM_RANDOM_H_
#define SPARSESERVE_KERNELS_UNIFORM_RANDOM_H_

#include <cstdint>

#ifdef __CUDACC__
#define SS_UNIFORM_HOST_DEVICE __host__ __device__
#else
#define SS_UNIFORM_HOST_DEVICE
#endif

namespace sparseserve::kernels {

// A value uniform in [0, 1) for element `index` of a tensor filled with `seed`.
SS_UNIFORM_HOST_DEVICE inline float UniformAt(uint64_t seed, uint64_t index) {
  uint64_t z = seed * 0xD1B54A32D192ED03ull + index * 0x9E3779B97F4A7C15ull + 1;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<float>(z >> 40) * (1.0f / 16777216.0f);
}

}  // namespace sparseserve::kernels

#undef SS_UNIFORM_HOST_DEVICE

#endif  // SPARSESERVE_KERNELS_UNIFORM_RANDOM_H_
