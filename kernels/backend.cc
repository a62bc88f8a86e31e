#include "kernels/backend.h"

#include "absl/strings/str_cat.h"
#include "kernels/cpu/cpu_backend.h"
#ifdef SPARSESERVE_WITH_CUDA
#include "kernels/cuda/cuda_device.h"
#endif

namespace sparseserve::kernels {

absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(Device device) {
  if (device == Device::kHost) return std::make_unique<CpuBackend>(&core::ThreadPool::Default());
#ifdef SPARSESERVE_WITH_CUDA
  absl::StatusOr<CudaDeviceInfo> gpu = FindCudaDevice();
  if (!gpu.ok()) return gpu.status();
  return absl::UnimplementedError(
      absl::StrCat("found ", gpu->name,
                   ", but the CUDA backend's ops are not implemented yet (issue 4); use "
                   "--device cpu"));
#else
  return absl::UnimplementedError(
      "this binary was built without CUDA (SPARSESERVE_CUDA=OFF or no nvcc); use --device cpu");
#endif
}

}  // namespace sparseserve::kernels
