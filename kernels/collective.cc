#include "kernels/collective.h"

#include "absl/strings/str_cat.h"
#include "common/core/status.h"
#ifdef SPARSESERVE_WITH_CUDA
#include "kernels/cuda/nccl_collective.h"
#endif

namespace sparseserve::kernels {

absl::Status Collective::AllReduceAddRmsNorm(const Tensor& x, const Tensor& residual,
                                             const Tensor& weight, float eps, const Tensor& out,
                                             Backend& backend) {
  SS_RETURN_IF_ERROR(AllReduceSum(x));
  return backend.AddRmsNorm(residual, x, weight, eps, out);
}

absl::Status HostRendezvous::Wait() {
  absl::MutexLock lock(&mu_);
  const int64_t generation = generation_;
  if (!aborted_ && ++arrived_ == size_) {
    arrived_ = 0;
    ++generation_;
    return absl::OkStatus();
  }
  auto passed = [this, generation]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return aborted_ || generation_ != generation;
  };
  mu_.Await(absl::Condition(&passed));
  if (aborted_) {
    return absl::AbortedError(
        "the tensor-parallel group was aborted: another rank failed during a step");
  }
  return absl::OkStatus();
}

void HostRendezvous::Abort() {
  absl::MutexLock lock(&mu_);
  aborted_ = true;
}

absl::Status HostRendezvous::Agree(int rank, absl::Status local) {
  statuses_[rank] = std::move(local);
  SS_RETURN_IF_ERROR(Wait());
  absl::Status first;
  for (const absl::Status& s : statuses_) {
    if (!s.ok()) {
      first = s;
      break;
    }
  }
  SS_RETURN_IF_ERROR(Wait());  // nobody overwrites a slot before every rank has read them all
  return first;
}

absl::StatusOr<std::vector<Tensor>> HostRendezvous::Exchange(int rank, const Tensor& mine) {
  tensors_[rank] = mine;
  SS_RETURN_IF_ERROR(Wait());
  return tensors_;
}

absl::StatusOr<std::vector<std::unique_ptr<Collective>>> CreateCollectives(
    const std::vector<Backend*>& backends) {
  if (backends.empty()) return absl::InvalidArgumentError("a collective group needs ranks");
  for (const Backend* b : backends) {
    if (b->device() != backends[0]->device()) {
      return absl::InvalidArgumentError("a collective group's backends must share a device kind");
    }
  }
  if (backends[0]->device() == Device::kHost) {
    return CreateInProcessCollectives(static_cast<int>(backends.size()));
  }
#ifdef SPARSESERVE_WITH_CUDA
  return CreateNcclCollectives(backends);
#else
  return absl::UnimplementedError("this binary was built without CUDA (no NCCL)");
#endif
}

}  // namespace sparseserve::kernels
