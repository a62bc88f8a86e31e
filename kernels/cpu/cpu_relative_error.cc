// CpuBackend::RelativeL2Error — the shadow-dense monitor's comparison of a sparse attention output
// with its dense reference, per row range, accumulated in double so that equal rows give exactly
// 0 and a tiny difference is not lost against a large norm.
#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/core/status.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_checks.h"

namespace sparseserve::kernels {

using cpu_internal::CheckTensor;

absl::Status CpuBackend::RelativeL2Error(const Tensor& actual, const Tensor& expected,
                                         const Tensor& ranges, const Tensor& out) {
  SS_RETURN_IF_ERROR(CheckTensor(actual, DType::kF32, actual.ndim(), "RelativeL2Error", "actual"));
  SS_RETURN_IF_ERROR(
      CheckTensor(expected, DType::kF32, actual.ndim(), "RelativeL2Error", "expected"));
  SS_RETURN_IF_ERROR(CheckTensor(ranges, DType::kI32, 2, "RelativeL2Error", "ranges"));
  SS_RETURN_IF_ERROR(CheckTensor(out, DType::kF32, 1, "RelativeL2Error", "out"));
  if (actual.ndim() < 1 || !(actual.shape() == expected.shape()) || ranges.dim(1) != 2 ||
      out.dim(0) != ranges.dim(0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "RelativeL2Error: actual ", actual.DebugString(), ", expected ", expected.DebugString(),
        ", ranges ", ranges.DebugString(), " and out ", out.DebugString(), " do not match"));
  }
  const int64_t rows = actual.dim(0);
  const int64_t row_elems = rows == 0 ? 0 : actual.numel() / rows;
  const int32_t* r = ranges.data<int32_t>();
  for (int64_t i = 0; i < ranges.dim(0); ++i) {
    const int64_t first = r[2 * i], count = r[2 * i + 1];
    if (first < 0 || count < 0 || first + count > rows) {
      return absl::InvalidArgumentError(absl::StrCat("RelativeL2Error: range ", i, " rows [", first,
                                                     ", +", count, ") outside ", rows));
    }
    const float* a = actual.data<float>() + first * row_elems;
    const float* b = expected.data<float>() + first * row_elems;
    double diff = 0, ref = 0;
    for (int64_t e = 0; e < count * row_elems; ++e) {
      const double d = static_cast<double>(a[e]) - b[e];
      diff += d * d;
      ref += static_cast<double>(b[e]) * b[e];
    }
    out.data<float>()[i] = diff == 0  ? 0.0f
                           : ref == 0 ? 1.0f
                                      : static_cast<float>(std::sqrt(diff / ref));
  }
  return absl::OkStatus();
}

}  // namespace sparseserve::kernels
