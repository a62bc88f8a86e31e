// The scalar formulas of the sampling pipeline (kernels/sampling_plan.h), shared by the host
// reference (kernels/sampling_reference.cc) and the CUDA kernel (kernels/cuda/
// sampling_kernels.cu) so that both compute every weight, mass and threshold with the same IEEE
// operations in the same order, and so agree bit for bit.
//
// REQUIRES: callers are compiled without floating-point contraction into fused multiply-adds
// (-ffp-contract=off for C++, -fmad=false for nvcc) and without flush-to-zero; kernels/
// CMakeLists.txt sets this for the files that include this header. Pure functions.
#ifndef SPARSESERVE_KERNELS_SAMPLING_MATH_H_
#define SPARSESERVE_KERNELS_SAMPLING_MATH_H_

#include <cmath>
#include <cstdint>

#ifndef __CUDA_ARCH__
#include <bit>
#endif

#ifdef __CUDACC__
#define SS_HOST_DEVICE __host__ __device__
#else
#define SS_HOST_DEVICE
#endif

namespace sparseserve::kernels {

// A token's mass is floor(weight * 2^kSamplingMassBits): integer sums are exact in any order, so
// every backend reaches the same top-p cut-off and draw. Weights below 2^-40 of the max count 0.
inline constexpr int kSamplingMassBits = 40;

// A logit as the pipeline reads it: NaN counts as -inf (never picked unless all are -inf).
SS_HOST_DEVICE inline float SamplingLogit(float logit) {
  return logit != logit ? -INFINITY : logit;  // only NaN differs from itself
}

// CTRL / HF repetition penalty θ of one penalised token's logit.
SS_HOST_DEVICE inline float PenalizedLogit(float logit, float theta) {
  return logit > 0.0f ? logit / theta : logit * theta;
}

// The float bits of a weight in [0, 1]: monotone in the weight, so they order it as integers.
SS_HOST_DEVICE inline uint32_t WeightBits(float weight) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(weight);
#else
  return std::bit_cast<uint32_t>(weight);
#endif
}

// e^x for x <= 0, rounded to float. Written out (Cody-Waite reduction to |r| <= ln2/2, Taylor
// series of degree 13, scaling by 2^k) rather than calling exp() because libm and CUDA's exp may
// differ in the last bit; this sequence of double operations gives the same bits everywhere and
// is within a few double ulps of e^x, so after rounding to float it is e^x rounded to float.
// Hand-written because no library offers an exp that is reproducible across host and device.
SS_HOST_DEVICE inline float SamplingExp(double x) {
  if (!(x > -104.0)) return 0.0f;  // e^-104 < 2^-150 rounds to 0 in float; also -inf and NaN
  if (x >= 0.0) return 1.0f;
  const double k = floor(x * 0x1.71547652b82fep+0 + 0.5);  // round(x / ln 2), in [-150, 0]
  // ln 2 split so that k * hi is exact (hi has 32 significant bits).
  const double r = (x - k * 0x1.62e42fee00000p-1) - k * 0x1.a39ef35793c76p-33;
  double p = 0x1.6124613a86d09p-33;   // 1/13!
  p = p * r + 0x1.1eed8eff8d898p-29;  // 1/12!
  p = p * r + 0x1.ae64567f544e4p-26;
  p = p * r + 0x1.27e4fb7789f5cp-22;
  p = p * r + 0x1.71de3a556c734p-19;
  p = p * r + 0x1.a01a01a01a01ap-16;
  p = p * r + 0x1.a01a01a01a01ap-13;
  p = p * r + 0x1.6c16c16c16c17p-10;
  p = p * r + 0x1.1111111111111p-7;
  p = p * r + 0x1.5555555555555p-5;
  p = p * r + 0x1.5555555555555p-3;
  p = p * r + 0.5;
  p = p * r + 1.0;
  p = p * r + 1.0;
  // 2^k as a double (k >= -150 keeps it normal), then an exact scaling and one rounding.
  const uint64_t scale_bits = static_cast<uint64_t>(static_cast<int64_t>(k) + 1023) << 52;
#ifdef __CUDA_ARCH__
  const double scale = __longlong_as_double(static_cast<long long>(scale_bits));
#else
  const double scale = std::bit_cast<double>(scale_bits);
#endif
  return static_cast<float>(p * scale);
}

// Unnormalised probability of a logit: e^((logit - max) / temperature), 1 for the max itself.
// `inv_temperature` is 1.0f / temperature (float); the product is taken in float.
SS_HOST_DEVICE inline float SamplingWeight(float logit, float max_logit, float inv_temperature) {
  if (logit == max_logit) return 1.0f;  // also when inv_temperature is +inf
  return SamplingExp(static_cast<double>((logit - max_logit) * inv_temperature));
}

// The integer mass of a weight in [0, 1].
SS_HOST_DEVICE inline uint64_t SamplingMass(float weight) {
  return static_cast<uint64_t>(static_cast<double>(weight) * 0x1p40);
}

// The mass the top-p prefix must reach: ceil(top_p * top_k_mass), at most top_k_mass.
SS_HOST_DEVICE inline uint64_t TopPTarget(float top_p, uint64_t top_k_mass) {
  const double target = ceil(static_cast<double>(top_p) * static_cast<double>(top_k_mass));
  return target >= static_cast<double>(top_k_mass) ? top_k_mass : static_cast<uint64_t>(target);
}

// Where the draw lands in the kept mass: min(floor(uniform * kept_mass), kept_mass - 1).
// REQUIRES: 0 <= uniform < 1; 0 < kept_mass < 2^64.
SS_HOST_DEVICE inline uint64_t DrawThreshold(double uniform, uint64_t kept_mass) {
  const uint64_t r = static_cast<uint64_t>(uniform * static_cast<double>(kept_mass));
  return r < kept_mass ? r : kept_mass - 1;
}

}  // namespace sparseserve::kernels

#undef SS_HOST_DEVICE

#endif  // SPARSESERVE_KERNELS_SAMPLING_MATH_H_
