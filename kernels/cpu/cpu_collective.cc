// The in-process collective: ranks are threads of one process, so a rank reads the others'
// tensors directly. Each rank sums (or copies) a disjoint part, and the sums run over ranks in
// rank order, so every rank gets bitwise the same result.
#include <algorithm>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "kernels/collective.h"

namespace sparseserve::kernels {
namespace {

absl::Status CheckHostF32(const Tensor& t, const char* op, const char* name) {
  if (t.device() != Device::kHost || t.dtype() != DType::kF32 || !t.is_contiguous()) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", name, " must be a contiguous f32 ",
                                                   "host tensor, got ", t.DebugString()));
  }
  return absl::OkStatus();
}

class InProcessCollective final : public Collective {
 public:
  InProcessCollective(int rank, std::shared_ptr<HostRendezvous> rendezvous)
      : rank_(rank), rendezvous_(std::move(rendezvous)) {}

  int rank() const override { return rank_; }
  int size() const override { return rendezvous_->size(); }

  absl::Status Agree(absl::Status local) override {
    return rendezvous_->Agree(rank_, std::move(local));
  }

  absl::Status AllReduceSum(const Tensor& x) override {
    // Shapes are checked by every rank alike before anyone waits, so a bad call fails everywhere.
    if (absl::Status s = CheckHostF32(x, "AllReduceSum", "x"); !s.ok()) return s;
    absl::StatusOr<std::vector<Tensor>> exchanged = rendezvous_->Exchange(rank_, x);
    if (!exchanged.ok()) return exchanged.status();
    const std::vector<Tensor>& all = *exchanged;
    for (const Tensor& t : all) {
      if (t.numel() != x.numel()) {
        rendezvous_->Wait().IgnoreError();
        return absl::InvalidArgumentError(absl::StrCat(
            "AllReduceSum: ranks disagree on the size: ", t.numel(), " vs ", x.numel()));
      }
    }
    // Rank r sums elements [r * part, (r + 1) * part) and writes them into every rank's x.
    const int64_t n = x.numel(), ranks = size();
    const int64_t part = (n + ranks - 1) / ranks;
    const int64_t begin = std::min(n, rank_ * part), end = std::min(n, begin + part);
    for (int64_t i = begin; i < end; ++i) {
      float sum = 0;
      for (const Tensor& t : all) sum += t.data<float>()[i];
      for (const Tensor& t : all) t.data<float>()[i] = sum;
    }
    return rendezvous_->Wait();
  }

  absl::Status AllGatherColumns(const Tensor& local, const Tensor& /*scratch*/,
                                const Tensor& out) override {
    if (absl::Status s = CheckHostF32(local, "AllGatherColumns", "local"); !s.ok()) return s;
    if (absl::Status s = CheckHostF32(out, "AllGatherColumns", "out"); !s.ok()) return s;
    const int64_t m = local.dim(0), c = local.numel() / std::max<int64_t>(m, 1);
    const int64_t total = out.dim(1);
    if (local.ndim() != 2 || out.ndim() != 2 || out.dim(0) != m || total > c * size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("AllGatherColumns: local ", local.DebugString(), " and out ",
                       out.DebugString(), " do not fit ", size(), " ranks"));
    }
    absl::StatusOr<std::vector<Tensor>> exchanged = rendezvous_->Exchange(rank_, local);
    if (!exchanged.ok()) return exchanged.status();
    const std::vector<Tensor>& all = *exchanged;
    for (int r = 0; r < size(); ++r) {
      const int64_t first = r * c, width = std::min(c, total - first);
      if (width <= 0) continue;
      for (int64_t i = 0; i < m; ++i) {
        std::memcpy(out.data<float>() + i * total + first, all[r].data<float>() + i * c,
                    static_cast<size_t>(width) * sizeof(float));
      }
    }
    return rendezvous_->Wait();  // the others may still be reading this rank's `local`
  }

  void Abort() override { rendezvous_->Abort(); }

 private:
  const int rank_;
  std::shared_ptr<HostRendezvous> rendezvous_;
};

}  // namespace

std::vector<std::unique_ptr<Collective>> CreateInProcessCollectives(int size) {
  auto rendezvous = std::make_shared<HostRendezvous>(size);
  std::vector<std::unique_ptr<Collective>> group;
  group.reserve(size);
  for (int r = 0; r < size; ++r) {
    group.push_back(std::make_unique<InProcessCollective>(r, rendezvous));
  }
  return group;
}

}  // namespace sparseserve::kernels
