#include "kernels/cuda/cuda_device.h"

#include <cuda_runtime_api.h>

#include "absl/strings/str_cat.h"

namespace sparseserve::kernels {

absl::StatusOr<CudaDeviceInfo> FindCudaDevice(int ordinal) {
  int count = 0;
  if (cudaError_t err = cudaGetDeviceCount(&count); err != cudaSuccess || count == 0) {
    return absl::UnavailableError(absl::StrCat(
        "no usable CUDA GPU: ", err == cudaSuccess ? "no devices" : cudaGetErrorString(err)));
  }
  if (ordinal < 0 || ordinal >= count) {
    return absl::InvalidArgumentError(absl::StrCat("GPU ", ordinal,
                                                   " does not exist: this machine has ", count,
                                                   " GPU", count == 1 ? "" : "s"));
  }
  cudaDeviceProp prop{};
  if (cudaError_t err = cudaGetDeviceProperties(&prop, ordinal); err != cudaSuccess) {
    return absl::UnavailableError(
        absl::StrCat("cudaGetDeviceProperties: ", cudaGetErrorString(err)));
  }
  CudaDeviceInfo info{ordinal, prop.name, prop.major, prop.minor, prop.totalGlobalMem};
  if (prop.major != 9) {
    return absl::FailedPreconditionError(absl::StrCat(info.name, " is sm_", prop.major, prop.minor,
                                                      "; this build targets Hopper (sm_90a)"));
  }
  return info;
}

}  // namespace sparseserve::kernels
