// PeerAllReduce: a one-shot all-reduce for the small sums of tensor-parallel decode steps (issue
// 19), between the GPUs of one process over NVLink peer access, beside NCCL for everything else,
// optionally fused with the residual add and RMSNorm that follow every row-parallel projection.
//
// A decode step's row-parallel sums are 8-512 KiB (B rows of the hidden size), where a kernel
// boundary and a protocol round trip cost as much as the data. Here each CTA pushes its piece of
// the rank's data into a slot of every other rank's inbox with plain peer stores and polls its own
// inbox for the others' pieces — no flags and no fences: an inbox holds an "empty" pattern (every
// 16-bit lane 0x8000, bf16's -0.0) between calls, senders never send that pattern (a -0.0 goes as
// +0.0), and a piece has arrived when none of its lanes is empty (32-bit stores are single-copy
// atomic, so a lane is never half written). The reader empties each piece after reading it.
// Inboxes are double-buffered by call parity: a rank can be at most one call ahead of another (it
// cannot finish a call before every rank has started it), so the parity it writes is never one a
// slower rank still reads, and a parity is emptied in call c before anyone writes it in c + 2.
// The call counter lives on the device (the last CTA of a call advances it), so the kernel is
// graph-safe: a replayed step continues the count. The sum runs in rank order in f32, so every
// rank gets the same bits (as with NCCL, the ranks' residual streams must stay identical).
//
// On by default for groups whose GPUs have peer access; $SPARSESERVE_TP_PEER_ALLREDUCE=0 sends
// every sum to NCCL (kernels/cuda/nccl_collective.cc).
#ifndef SPARSESERVE_KERNELS_CUDA_PEER_ALLREDUCE_H_
#define SPARSESERVE_KERNELS_CUDA_PEER_ALLREDUCE_H_

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace sparseserve::kernels::cuda {

inline constexpr int kPeerMaxRanks = 8;
// Bytes of one sender's slot per parity: larger sums (prefill chunks) go to NCCL, whose ring wins
// there. 1 MiB holds 64 rows of a 8192-wide bf16 residual (the 70B model's decode batch of 64).
inline constexpr int64_t kPeerSlotBytes = int64_t{1} << 20;
// Bytes of each rank's inbox: [2 parities][ranks][kPeerSlotBytes].
inline constexpr int64_t PeerInboxBytes(int ranks) {
  return 2 * ranks * kPeerSlotBytes;
}

struct PeerAllReduceParams {
  void* x = nullptr;  // this rank's data: 16-byte aligned, count * element size a multiple of 16
  int64_t count = 0;  // elements; count * element size <= kPeerSlotBytes
  bool bf16 = false;  // element type: bf16 (summed in f32) or f32
  int rank = 0, ranks = 0;
  char* inbox[kPeerMaxRanks] = {};        // every rank's inbox, reachable through peer access
  unsigned* calls = nullptr;              // this rank's [call counter, CTAs done], on its GPU
  const volatile int* aborted = nullptr;  // host-mapped: set when the group is aborted
  // The fused epilogue when `residual` is set (x bf16 [rows, d]): residual [rows, d] f32 +=
  // the sum (rounded to bf16, as the sum alone would be); out [rows, d] bf16 = RMSNorm(residual)
  // * weight [d]. x itself is then left unspecified. Without it x becomes the sum.
  float* residual = nullptr;
  const __nv_bfloat16* weight = nullptr;
  __nv_bfloat16* out = nullptr;
  int64_t d = 0;  // row width; d % 8 == 0 and d <= 16384
  float eps = 0.0f;
};

// True when `p`'s shapes fit the kernel (alignment, slot size, the fused row width); the caller
// sends the rest to NCCL. The same answer on every rank for the same shapes.
bool PeerAllReduceFits(const PeerAllReduceParams& p);

// Queues the all-reduce on `stream` (this rank's GPU current). Every rank must queue the same
// calls in the same order, each concurrently runnable (CTAs spin until the other ranks' data
// arrived, or until *aborted).
cudaError_t LaunchPeerAllReduce(const PeerAllReduceParams& p, cudaStream_t stream);

// Fills a new inbox of `bytes` with the empty pattern (before the group's first call).
cudaError_t EmptyPeerInbox(char* inbox, int64_t bytes, cudaStream_t stream);

}  // namespace sparseserve::kernels::cuda

#endif  // SPARSESERVE_KERNELS_CUDA_PEER_ALLREDUCE_H_
