// Programmatic dependent launch (Hopper): letting a kernel start before the one ahead of it in the
// stream has finished.
//
// A decode step is a chain of ~15 kernels per layer, many of them a few microseconds long; with
// plain launches each waits for its predecessor to drain before its blocks are even scheduled.
// A kernel launched with LaunchOverlapping may be scheduled as soon as every block of the kernel
// ahead has called AllowNextKernelLaunch; it must call WaitForPrecedingKernels before it touches
// any memory an earlier kernel reads or writes (that wait returns once those kernels have
// finished and their writes are visible). What it may do before: read memory no kernel writes,
// such as weights — the skinny GEMM streams its first weight tiles while the norm ahead of it
// still runs. The decode chain's kernels (skinny GEMM, RMSNorm, decode attention) allow the next
// launch first thing: a dependent's wait still returns only once this kernel has finished (and
// with it, after its own wait, everything ahead), so the GEMV after a norm may take the SM slots
// the GEMV before it frees and prefetch its weights during that one's tail. Both calls are no-ops
// in a kernel launched without the attribute. A wait covers only the kernel right ahead, which
// covers the one ahead of it by its own wait: every kernel of the chain needs at least one CTA
// that waits (a grid whose CTAs all leave first may end before the kernel ahead, and the next
// kernel would then wait on nothing — the peer all-reduce's call counter relies on the chain).
#ifndef SPARSESERVE_KERNELS_CUDA_GRID_DEPENDENCY_CUH_
#define SPARSESERVE_KERNELS_CUDA_GRID_DEPENDENCY_CUH_

#include <cuda_runtime.h>

#include <cstdlib>

namespace sparseserve::kernels::cuda {

__device__ __forceinline__ void WaitForPrecedingKernels() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void AllowNextKernelLaunch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// False when SPARSESERVE_CUDA_PDL=0: plain launches, for A/B measurements.
inline bool OverlappingLaunchesEnabled() {
  static const bool enabled = [] {
    const char* env = std::getenv("SPARSESERVE_CUDA_PDL");
    return env == nullptr || std::atoi(env) != 0;
  }();
  return enabled;
}

// Launches `kernel` on `stream` with programmatic stream serialisation: it may start while the
// previous kernel in the stream runs (see above). Returns the launch's error.
template <typename... Params, typename... Args>
cudaError_t LaunchOverlapping(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem_bytes,
                              cudaStream_t stream, Args... args) {
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem_bytes;
  config.stream = stream;
  config.attrs = attribute;
  config.numAttrs = OverlappingLaunchesEnabled() ? 1 : 0;
  return cudaLaunchKernelEx(&config, kernel, static_cast<Params>(args)...);
}

}  // namespace sparseserve::kernels::cuda

#endif  // SPARSESERVE_KERNELS_CUDA_GRID_DEPENDENCY_CUH_
