// Shape and dtype checks shared by the CPU ops (private to kernels/cpu).
#ifndef SPARSESERVE_KERNELS_CPU_CPU_CHECKS_H_
#define SPARSESERVE_KERNELS_CPU_CPU_CHECKS_H_

#include <initializer_list>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/tensor/tensor.h"

namespace sparseserve::kernels::cpu_internal {

// kInvalidArgument unless `t` is a contiguous host tensor of `dtype` with `ndim` dims.
inline absl::Status CheckTensor(const Tensor& t, DType dtype, int ndim, const char* op,
                                const char* name) {
  if (t.device() != Device::kHost || t.dtype() != dtype || t.ndim() != ndim || !t.is_contiguous()) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", name, " must be a contiguous host ",
                                                   DTypeName(dtype), " tensor of ", ndim,
                                                   " dims, got ", t.DebugString()));
  }
  return absl::OkStatus();
}

inline absl::Status CheckDim(const Tensor& t, int axis, int64_t expected, const char* op,
                             const char* name) {
  if (t.dim(axis) != expected) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", name, " dim ", axis, " is ",
                                                   t.dim(axis), ", expected ", expected, " (",
                                                   t.DebugString(), ")"));
  }
  return absl::OkStatus();
}

}  // namespace sparseserve::kernels::cpu_internal

#endif  // SPARSESERVE_KERNELS_CPU_CPU_CHECKS_H_
