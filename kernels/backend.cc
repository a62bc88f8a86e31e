#include "kernels/backend.h"

#include "absl/strings/str_cat.h"
#include "kernels/cpu/cpu_backend.h"
#ifdef SPARSESERVE_WITH_CUDA
#include "kernels/cuda/cuda_backend.h"
#endif

namespace sparseserve::kernels {

absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(Device device) {
  if (device == Device::kHost) return std::make_unique<CpuBackend>(&core::ThreadPool::Default());
#ifdef SPARSESERVE_WITH_CUDA
  return CreateCudaBackend();
#else
  return absl::UnimplementedError(
      "this binary was built without CUDA (SPARSESERVE_CUDA=OFF or no nvcc); use --device cpu");
#endif
}

}  // namespace sparseserve::kernels
