// GPU discovery for the CUDA backend. Only built when SPARSESERVE_CUDA is on; the rest of the
// project reaches it through kernels::CreateBackend. Thread-safe (stateless CUDA runtime calls).
#ifndef SPARSESERVE_KERNELS_CUDA_CUDA_DEVICE_H_
#define SPARSESERVE_KERNELS_CUDA_CUDA_DEVICE_H_

#include <string>

#include "absl/status/statusor.h"

namespace sparseserve::kernels {

struct CudaDeviceInfo {
  int device_idx = 0;
  std::string name;
  int compute_major = 0;
  int compute_minor = 0;
  size_t total_memory_bytes = 0;
};

// CUDA device `ordinal` (0 = the first). kUnavailable (with the runtime's reason) when there is
// no usable GPU or driver, kInvalidArgument when there are fewer GPUs than ordinal + 1;
// kFailedPrecondition when the GPU is not Hopper (sm_90), which this build targets.
absl::StatusOr<CudaDeviceInfo> FindCudaDevice(int ordinal = 0);

}  // namespace sparseserve::kernels

#endif  // SPARSESERVE_KERNELS_CUDA_CUDA_DEVICE_H_
