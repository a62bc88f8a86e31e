// PeerAllReduce: a one-shot all-reduce for the small sums of tensor-parallel decode steps (issue
// 19), between the GPUs of one process over NVLink peer access, beside NCCL for everything else.
//
// A decode step's row-parallel sums are 8-128 KiB (B rows of the hidden size), where NCCL's ring
// pays ~7-10 µs of protocol per call and a TP 2 step of the synthetic Llama-3-8B makes 64 of them.
// Here one CTA per rank pushes its data into a slot of every other rank's inbox with peer stores,
// raises a flag in each, waits for every rank's flag in its own memory and sums the slots in rank
// order — so every rank gets the same bits (as with NCCL, the ranks' residual streams must stay
// identical). Inboxes are double-buffered by call parity: a rank can be at most one call ahead of
// another (it cannot pass a call's wait before every rank has finished the call before it), so
// the slot it writes is never one a slower rank still reads. The call counter lives on the
// device, so the kernel is graph-safe: a replayed step continues the count.
//
// Opt-in ($SPARSESERVE_TP_PEER_ALLREDUCE=1, kernels/cuda/nccl_collective.cc) until its GPU test
// and the TP 2 decode A/B have run on a multi-GPU machine.
#ifndef SPARSESERVE_KERNELS_CUDA_PEER_ALLREDUCE_H_
#define SPARSESERVE_KERNELS_CUDA_PEER_ALLREDUCE_H_

#include <cuda_runtime_api.h>

#include <cstdint>

namespace sparseserve::kernels::cuda {

inline constexpr int kPeerMaxRanks = 8;
// Bytes of one rank's slot: larger sums (prefill chunks) go to NCCL, whose ring wins there.
inline constexpr int64_t kPeerSlotBytes = int64_t{256} << 10;

struct PeerAllReduceParams {
  void* x = nullptr;  // this rank's data, summed in place
  int64_t count = 0;  // elements; count * element size <= kPeerSlotBytes
  bool bf16 = false;  // element type: bf16 (summed in f32) or f32
  int rank = 0, ranks = 0;
  // Every rank's inbox, [2 parities][ranks][kPeerSlotBytes], and flags, [ranks] ints (the last
  // call number received from each sender), on that rank's GPU; reachable through peer access.
  char* inbox[kPeerMaxRanks] = {};
  int* flags[kPeerMaxRanks] = {};
  int* calls = nullptr;                   // this rank's call counter, on its GPU
  const volatile int* aborted = nullptr;  // host-mapped: set when the group is aborted
};

// Queues the all-reduce on `stream` (this rank's GPU current). Every rank must queue the same
// calls in the same order, each concurrently runnable (one CTA spins until every rank's data
// arrived, or until *aborted).
cudaError_t LaunchPeerAllReduce(const PeerAllReduceParams& p, cudaStream_t stream);

}  // namespace sparseserve::kernels::cuda

#endif  // SPARSESERVE_KERNELS_CUDA_PEER_ALLREDUCE_H_
