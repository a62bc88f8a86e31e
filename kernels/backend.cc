#include "kernels/backend.h"

#include "kernels/cpu/cpu_backend.h"

namespace sparseserve::kernels {

absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(Device device) {
  if (device == Device::kHost) return std::make_unique<CpuBackend>(&core::ThreadPool::Default());
  return absl::UnimplementedError(
      "the CUDA backend is not implemented yet (issue 4); use --device cpu");
}

}  // namespace sparseserve::kernels
