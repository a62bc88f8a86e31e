// CUDA runtime errors as absl::Status (private to kernels/cuda).
#ifndef SPARSESERVE_KERNELS_CUDA_CUDA_STATUS_H_
#define SPARSESERVE_KERNELS_CUDA_CUDA_STATUS_H_

#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace sparseserve::kernels {

// OK for cudaSuccess; kResourceExhausted for out-of-memory; kInternal naming `what` otherwise.
inline absl::Status CudaStatus(cudaError_t err, absl::string_view what) {
  if (err == cudaSuccess) return absl::OkStatus();
  const std::string message = absl::StrCat(what, ": CUDA error ", cudaGetErrorName(err), " (",
                                           cudaGetErrorString(err), ")");
  if (err == cudaErrorMemoryAllocation) return absl::ResourceExhaustedError(message);
  return absl::InternalError(message);
}

}  // namespace sparseserve::kernels

#endif  // SPARSESERVE_KERNELS_CUDA_CUDA_STATUS_H_
