// The NCCL implementation of kernels::Collective (private to kernels/cuda): one communicator per
// GPU of the process, made together by ncclCommInitAll; each rank's calls go on its backend's
// stream, so they order with its kernels and are captured into its step graphs. With
// $SPARSESERVE_TP_PEER_ALLREDUCE=1, sums of up to 256 KiB run one-shot over peer access instead
// (kernels/cuda/peer_allreduce.h; not yet measured on a GPU).
#ifndef SPARSESERVE_KERNELS_CUDA_NCCL_COLLECTIVE_H_
#define SPARSESERVE_KERNELS_CUDA_NCCL_COLLECTIVE_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/collective.h"

namespace sparseserve::kernels {

// backends: CudaBackends on distinct GPUs, rank r = backends[r]. kInvalidArgument when two share
// a GPU; NCCL's errors as kInternal naming the call.
absl::StatusOr<std::vector<std::unique_ptr<Collective>>> CreateNcclCollectives(
    const std::vector<Backend*>& backends);

}  // namespace sparseserve::kernels

#endif  // SPARSESERVE_KERNELS_CUDA_NCCL_COLLECTIVE_H_
