// OncePerDevice: runs a kernel's one-time set-up (cudaFuncSetAttribute) once on every GPU the
// process uses. A kernel attribute applies to the calling thread's current device only, so a
// process-wide `static` set-up leaves the other GPUs of a tensor-parallel worker without it: their
// launches fail, and the ranks waiting for them inside NCCL hang (measured on two H100s).
#ifndef SPARSESERVE_KERNELS_CUDA_PER_DEVICE_ONCE_CUH_
#define SPARSESERVE_KERNELS_CUDA_PER_DEVICE_ONCE_CUH_

#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdint>

namespace sparseserve::kernels {

// `done` holds one bit per device (the call site's own static); `setup` returns a cudaError_t. A
// failed set-up is tried again at the next call.
template <typename Setup>
cudaError_t OncePerDevice(std::atomic<uint64_t>& done, Setup setup) {
  int device = 0;
  if (const cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) return e;
  const uint64_t bit = uint64_t{1} << (device & 63);
  if ((done.load(std::memory_order_acquire) & bit) != 0) return cudaSuccess;
  const cudaError_t e = setup();
  if (e == cudaSuccess) done.fetch_or(bit, std::memory_order_acq_rel);
  return e;
}

}  // namespace sparseserve::kernels

#endif  // SPARSESERVE_KERNELS_CUDA_PER_DEVICE_ONCE_CUH_
