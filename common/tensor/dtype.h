// Element types of sparseserve tensors and scalar conversions between them.
//
// bf16 and f16 are stored as raw uint16_t; these helpers convert one value at a time
// (round-to-nearest-even on the way down). Stateless, thread-safe.
#ifndef SPARSESERVE_COMMON_TENSOR_DTYPE_H_
#define SPARSESERVE_COMMON_TENSOR_DTYPE_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include "absl/strings/string_view.h"

namespace sparseserve {

enum class DType : uint8_t { kF32, kBf16, kF16, kI32 };

constexpr size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kF32: return 4;
    case DType::kBf16: return 2;
    case DType::kF16: return 2;
    case DType::kI32: return 4;
  }
  return 0;
}

absl::string_view DTypeName(DType dtype);

inline float Bf16ToF32(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

inline uint16_t F32ToBf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  if ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x007fffffu) != 0) {
    return static_cast<uint16_t>((bits >> 16) | 0x40u);  // keep NaN a (quiet) NaN
  }
  const uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);  // round to nearest even
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

float F16ToF32(uint16_t h);
uint16_t F32ToF16(float f);

}  // namespace sparseserve

#endif  // SPARSESERVE_COMMON_TENSOR_DTYPE_H_
