// Hopper's asynchronous hand-off between warps (sm_90): shared-memory mbarriers, the bulk tensor
// copy engine (TMA) completing on them, and named barriers — the pieces of a warp-specialised
// kernel in which a producer warp fills shared-memory stages and consumer warpgroups drain them
// without any CTA-wide barrier (prefill_ws.cuh; papers/kernel-references.md, FlashAttention-3).
//
// A stage has a "full" barrier the producer completes (a TMA's bytes, or an arrive once its
// cp.async copies have landed) and an "empty" barrier the consumers complete when they are done
// reading it. Waits are on a phase's parity: a barrier starts in phase 0, so a producer's first
// wait on an empty barrier asks for parity 1 (the phase "before" it) and passes at once.
#ifndef SPARSESERVE_KERNELS_CUDA_ASYNC_PIPELINE_CUH_
#define SPARSESERVE_KERNELS_CUDA_ASYNC_PIPELINE_CUH_

#include <cuda.h>  // CUtensorMap (the type only: nothing here calls the driver)

#include <cstdint>

#include "kernels/cuda/cuda_async_copy.cuh"

namespace sparseserve::kernels::cuda {

__device__ __forceinline__ void MbarrierInit(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(SharedAddress(bar)), "r"(count)
               : "memory");
}

// Makes the initialised barriers visible to the other threads (and the copy engine); a CTA
// barrier follows it.
__device__ __forceinline__ void FenceMbarrierInit() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

__device__ __forceinline__ void MbarrierArrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(SharedAddress(bar)) : "memory");
}

// Arrives and announces `bytes` that asynchronous copies (TMA) will complete on this phase.
__device__ __forceinline__ void MbarrierArriveExpectTx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(SharedAddress(bar)),
               "r"(bytes)
               : "memory");
}

// Makes the barrier's current phase wait, in addition, for every cp.async this thread issued so
// far (the pending count goes up now and down when they land: no net arrival).
__device__ __forceinline__ void CpAsyncArriveOnLanding(uint64_t* bar) {
  asm volatile("cp.async.mbarrier.arrive.shared::cta.b64 [%0];\n" ::"r"(SharedAddress(bar))
               : "memory");
}

// Returns once the phase of parity `parity` has completed (acquire: what the arrivals released is
// visible after it).
__device__ __forceinline__ void MbarrierWait(uint64_t* bar, uint32_t parity) {
  const uint32_t address = SharedAddress(bar);
  uint32_t done;
  do {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n"
        "}\n"
        : "=r"(done)
        : "r"(address), "r"(parity)
        : "memory");
  } while (done == 0);
}

// Queues the copy of box (x, y) of a 2-D tensor map into `dst` (aligned as the map's swizzle
// needs), completing its bytes on `bar`.
__device__ __forceinline__ void TmaLoad2d(void* dst, const CUtensorMap* map, int x, int y,
                                          uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, "
      "%3}], [%4];\n" ::"r"(SharedAddress(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(x), "r"(y), "r"(SharedAddress(bar))
      : "memory");
}

__device__ __forceinline__ void PrefetchTensorMap(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

// A barrier among `threads` threads (a multiple of 32) of the CTA, id 1..15 (0 is
// __syncthreads'): one warpgroup can synchronise without the rest of the CTA.
__device__ __forceinline__ void NamedBarrierSync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
// Counts this warp's threads in at barrier `id` of `threads` without waiting for the rest.
__device__ __forceinline__ void NamedBarrierArrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

}  // namespace sparseserve::kernels::cuda

#endif  // SPARSESERVE_KERNELS_CUDA_ASYNC_PIPELINE_CUH_
