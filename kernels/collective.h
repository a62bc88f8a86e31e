// Collective: the communication of one tensor-parallel group (issue 19): the sum after a
// row-parallel projection and the gather of vocabulary-parallel logits (papers/serving.md,
// Megatron-style sharding), behind one interface with two implementations — ranks as threads of
// one process sharing host memory (the CPU backend: CI runs the sharding with it) and NCCL (the
// CUDA backend, one communicator per GPU from ncclCommInitAll).
//
// One Collective per rank, used only by that rank's engine thread; every rank of a group calls
// the same operations in the same order. Device operations are queued like the rank backend's
// ops (NCCL calls are captured into step graphs like any kernel); Agree is host-only.
#ifndef SPARSESERVE_KERNELS_COLLECTIVE_H_
#define SPARSESERVE_KERNELS_COLLECTIVE_H_

#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/tensor/tensor.h"
#include "kernels/backend.h"

namespace sparseserve::kernels {

class Collective {
 public:
  virtual ~Collective() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // Host-side agreement before a step queues device work: every rank passes how its own
  // preparation went and all get the same answer, the first error in rank order or OK. A rank
  // that failed alone (out of memory on its GPU) would otherwise leave the others waiting inside
  // a device collective for ever. Blocks until every rank has called it.
  virtual absl::Status Agree(absl::Status local) = 0;

  // x becomes the elementwise sum of every rank's x, in place: contiguous, in this rank's
  // backend memory, f32 or the compute dtype. Graph-safe.
  virtual absl::Status AllReduceSum(const Tensor& x) = 0;

  // The all-reduce that ends a row-parallel sub-block, fused with the residual add and RMSNorm
  // that always follow it: residual += the sum over ranks of x; out = RMSNorm(residual) * weight,
  // as `backend`.AddRmsNorm computes them (backend: this rank's). x is unspecified afterwards.
  // This default runs AllReduceSum and then AddRmsNorm; the CUDA group does both in one kernel
  // where the shapes allow (kernels/cuda/peer_allreduce.h). Graph-safe.
  virtual absl::Status AllReduceAddRmsNorm(const Tensor& x, const Tensor& residual,
                                           const Tensor& weight, float eps, const Tensor& out,
                                           Backend& backend);

  // out [m, total] (on every rank) = the ranks' local [m, c] side by side: columns [r * c,
  // min((r + 1) * c, total)) come from rank r, so padding columns of the last ranks are dropped
  // (a vocabulary padded to a multiple of the group size). scratch: [size * m * c] of local's
  // dtype in this rank's memory, where NCCL gathers before reordering (unused in-process). All
  // contiguous, f32 or the compute dtype. Graph-safe.
  virtual absl::Status AllGatherColumns(const Tensor& local, const Tensor& scratch,
                                        const Tensor& out) = 0;

  // Called by a rank that failed after a step's agreement (a kernel launch failing on its GPU
  // alone): every rank's waiting and later calls of the group fail with kAborted instead of
  // waiting for it for ever (NCCL: ncclCommAbort of every communicator). The group cannot be used
  // again. Safe from any thread.
  virtual void Abort() = 0;
};

// A reusable barrier of the ranks of one process, with a slot per rank for what they exchange:
// Agree's statuses, and the in-process collective's tensors.
class HostRendezvous {
 public:
  explicit HostRendezvous(int size) : size_(size), statuses_(size), tensors_(size) {}
  int size() const { return size_; }
  // Returns once all ranks have called it in this round: OK, or kAborted once Abort was called.
  absl::Status Wait();
  // The first error of `local` over the ranks (rank order), or OK; every rank gets the same.
  absl::Status Agree(int rank, absl::Status local);
  // Publishes this rank's tensor, waits for every rank's, and returns them all (rank order).
  // The caller must Wait once more before its tensor may change (others may still read it).
  absl::StatusOr<std::vector<Tensor>> Exchange(int rank, const Tensor& mine);
  // Wakes every waiting rank with kAborted, now and from then on.
  void Abort();

 private:
  const int size_;
  absl::Mutex mu_;
  int arrived_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  bool aborted_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<absl::Status> statuses_;  // written before a Wait, read after it
  std::vector<Tensor> tensors_;         // likewise
};

// One Collective per backend, rank r for backends[r] (all of one device kind; CUDA backends on
// distinct GPUs). kInvalidArgument for an empty group or mixed devices; kUnimplemented for CUDA in
// a build without it; NCCL's errors as kInternal.
absl::StatusOr<std::vector<std::unique_ptr<Collective>>> CreateCollectives(
    const std::vector<Backend*>& backends);

// The in-process group for CPU backends (kernels/cpu/cpu_collective.cc): f32 tensors only.
std::vector<std::unique_ptr<Collective>> CreateInProcessCollectives(int size);

}  // namespace sparseserve::kernels

#endif  // SPARSESERVE_KERNELS_COLLECTIVE_H_
