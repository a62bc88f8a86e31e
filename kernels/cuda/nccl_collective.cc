#include "kernels/cuda/nccl_collective.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "common/core/logging.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/peer_allreduce.h"

namespace sparseserve::kernels {
namespace {

absl::Status NcclStatus(ncclResult_t result, absl::string_view what) {
  if (result == ncclSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": NCCL error ", ncclGetErrorString(result)));
}

absl::StatusOr<ncclDataType_t> NcclType(const Tensor& t, const char* op) {
  if (!t.is_contiguous() || t.device() != Device::kCuda) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": needs a contiguous CUDA tensor, got ", t.DebugString()));
  }
  switch (t.dtype()) {
    case DType::kF32: return ncclFloat32;
    case DType::kBf16: return ncclBfloat16;
    case DType::kF16: return ncclFloat16;
    case DType::kI32: return ncclInt32;
    default: break;
  }
  return absl::InvalidArgumentError(absl::StrCat(op, ": no NCCL type for ", t.DebugString()));
}

// The peer all-reduce's memory (kernels/cuda/peer_allreduce.h): per rank, on its GPU, the inbox
// the other ranks write and its call counter; one host-mapped abort flag.
struct PeerBuffers {
  std::vector<int> devices;
  std::vector<char*> inbox;
  std::vector<unsigned*> calls;
  int* aborted = nullptr;  // host-mapped

  bool on() const { return aborted != nullptr; }
  void Free() {
    int current = 0;
    cudaGetDevice(&current);
    // Every GPU's kernels first: one still running (an aborted group's) may write another's inbox
    // or read the abort flag.
    for (int device : devices) {
      cudaSetDevice(device);
      cudaDeviceSynchronize();
    }
    cudaGetLastError();
    for (size_t r = 0; r < devices.size(); ++r) {
      cudaSetDevice(devices[r]);
      if (r < inbox.size()) cudaFree(inbox[r]);
      if (r < calls.size()) cudaFree(calls[r]);
    }
    cudaSetDevice(current);
    if (aborted != nullptr) cudaFreeHost(aborted);
    inbox.clear(), calls.clear(), aborted = nullptr;
  }
};

// Owns the group's communicators (destroyed together, after every rank's last call).
struct NcclGroup {
  std::vector<ncclComm_t> comms;
  std::atomic<bool> aborted{false};
  PeerBuffers peer;
  ~NcclGroup() {
    peer.Free();
    if (aborted) return;  // ncclCommAbort freed them
    for (ncclComm_t c : comms) ncclCommDestroy(c);
  }
};

// $SPARSESERVE_TP_PEER_ALLREDUCE=0 sends every sum to NCCL (read when a group is made): the A/B
// switch, and a way out should a platform's peer access misbehave.
bool PeerAllReduceWanted() {
  const char* env = std::getenv("SPARSESERVE_TP_PEER_ALLREDUCE");
  return env == nullptr || std::string_view(env) != "0";
}

// Peer access between every pair of the group's GPUs and the peer all-reduce's buffers. Where
// that cannot be had (a GPU pair without peer access, a failed allocation) `peer` stays off and
// NCCL carries every sum.
void SetUpPeerAllReduce(const std::vector<int>& devices, PeerBuffers& peer) {
  const int n = static_cast<int>(devices.size());
  if (n < 2 || n > cuda::kPeerMaxRanks || !PeerAllReduceWanted()) return;
  for (int a : devices) {
    for (int b : devices) {
      int can = 0;
      if (a != b && (cudaDeviceCanAccessPeer(&can, a, b) != cudaSuccess || can == 0)) {
        cudaGetLastError();  // clears a failed query's error
        SS_LOG_INFO("tensor parallel: GPUs {} and {} have no peer access; all-reduces on NCCL", a,
                    b);
        return;
      }
    }
  }
  int current = 0;
  cudaGetDevice(&current);
  peer.devices = devices;
  absl::Status status = absl::OkStatus();
  for (int r = 0; r < n && status.ok(); ++r) {
    cudaSetDevice(devices[r]);
    for (int other : devices) {
      if (other == devices[r]) continue;
      const cudaError_t e = cudaDeviceEnablePeerAccess(other, 0);
      if (e == cudaErrorPeerAccessAlreadyEnabled) {
        cudaGetLastError();  // clears it
      } else if (e != cudaSuccess) {
        status = CudaStatus(e, "cudaDeviceEnablePeerAccess");
      }
    }
    char* inbox = nullptr;
    unsigned* calls = nullptr;
    const int64_t bytes = cuda::PeerInboxBytes(n);
    if (status.ok()) status = CudaStatus(cudaMalloc(&inbox, bytes), "peer all-reduce inbox");
    const size_t counter_bytes = 2 * sizeof(unsigned);  // the call number, the CTAs done
    if (status.ok()) status = CudaStatus(cudaMalloc(&calls, counter_bytes), "peer counter");
    if (status.ok()) status = CudaStatus(cuda::EmptyPeerInbox(inbox, bytes, nullptr), "peer inbox");
    if (status.ok()) status = CudaStatus(cudaMemset(calls, 0, counter_bytes), "peer counter");
    // The ranks' streams may not wait for the legacy stream these ran on: done before use.
    if (status.ok()) status = CudaStatus(cudaDeviceSynchronize(), "peer all-reduce set-up");
    peer.inbox.push_back(inbox);
    peer.calls.push_back(calls);
  }
  if (status.ok()) {
    status = CudaStatus(
        cudaHostAlloc(&peer.aborted, sizeof(int), cudaHostAllocMapped | cudaHostAllocPortable),
        "peer abort flag");
  }
  if (status.ok()) *peer.aborted = 0;
  cudaSetDevice(current);
  if (!status.ok()) {  // NCCL alone still works
    peer.Free();
    cudaGetLastError();
    SS_LOG_WARNING("tensor parallel: no peer all-reduce ({}); all-reduces on NCCL",
                   status.ToString());
    return;
  }
  SS_LOG_INFO(
      "tensor parallel: all-reduces of up to {} KiB one-shot over peer access, larger on NCCL "
      "(SPARSESERVE_TP_PEER_ALLREDUCE=0: all on NCCL)",
      cuda::kPeerSlotBytes >> 10);
}

class NcclCollective final : public Collective {
 public:
  NcclCollective(int rank, std::shared_ptr<NcclGroup> group, CudaBackend* backend,
                 std::shared_ptr<HostRendezvous> rendezvous)
      : rank_(rank),
        group_(std::move(group)),
        backend_(backend),
        rendezvous_(std::move(rendezvous)) {}

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(group_->comms.size()); }

  absl::Status Agree(absl::Status local) override {
    return rendezvous_->Agree(rank_, std::move(local));
  }

  void Abort() override {
    rendezvous_->Abort();
    if (group_->peer.on()) *reinterpret_cast<volatile int*>(group_->peer.aborted) = 1;
    if (group_->aborted.exchange(true)) return;
    for (ncclComm_t c : group_->comms) ncclCommAbort(c);
  }

  absl::Status AllReduceSum(const Tensor& x) override {
    if (group_->aborted) return absl::AbortedError("the tensor-parallel group was aborted");
    absl::StatusOr<ncclDataType_t> type = NcclType(x, "AllReduceSum");
    if (!type.ok()) return type.status();
    // The same choice on every rank: it depends on the shape and type alone.
    if (*type == ncclFloat32 || *type == ncclBfloat16) {
      cuda::PeerAllReduceParams p = PeerParams(x);
      if (group_->peer.on() && cuda::PeerAllReduceFits(p)) {
        return CudaStatus(cuda::LaunchPeerAllReduce(p, backend_->stream()), "peer all-reduce");
      }
    }
    return NcclStatus(ncclAllReduce(x.raw_data(), x.raw_data(), static_cast<size_t>(x.numel()),
                                    *type, ncclSum, group_->comms[rank_], backend_->stream()),
                      "ncclAllReduce");
  }

  absl::Status AllReduceAddRmsNorm(const Tensor& x, const Tensor& residual, const Tensor& weight,
                                   float eps, const Tensor& out, Backend& backend) override {
    if (group_->aborted) return absl::AbortedError("the tensor-parallel group was aborted");
    // The same choice on every rank (shapes and types alone). The kernel runs on this rank's
    // stream, which `backend` (the rank's, perhaps behind a decorator) queues on too.
    if (group_->peer.on() && x.device() == Device::kCuda && x.dtype() == DType::kBf16 &&
        residual.dtype() == DType::kF32 && weight.dtype() == DType::kBf16 &&
        out.dtype() == DType::kBf16 && x.ndim() == 2 && x.is_contiguous() &&
        residual.shape() == x.shape() && residual.is_contiguous() && out.shape() == x.shape() &&
        out.is_contiguous() && weight.ndim() == 1 && weight.dim(0) == x.dim(1) &&
        weight.is_contiguous()) {
      cuda::PeerAllReduceParams p = PeerParams(x);
      p.residual = static_cast<float*>(residual.raw_data());
      p.weight = static_cast<const __nv_bfloat16*>(weight.raw_data());
      p.out = static_cast<__nv_bfloat16*>(out.raw_data());
      p.d = x.dim(1);
      p.eps = eps;
      if (cuda::PeerAllReduceFits(p)) {
        return CudaStatus(cuda::LaunchPeerAllReduce(p, backend_->stream()),
                          "peer all-reduce + RMSNorm");
      }
    }
    return Collective::AllReduceAddRmsNorm(x, residual, weight, eps, out, backend);
  }

  absl::Status AllGatherColumns(const Tensor& local, const Tensor& scratch,
                                const Tensor& out) override {
    if (group_->aborted) return absl::AbortedError("the tensor-parallel group was aborted");
    absl::StatusOr<ncclDataType_t> type = NcclType(local, "AllGatherColumns");
    if (!type.ok()) return type.status();
    const int64_t m = local.ndim() == 2 ? local.dim(0) : 0,
                  c = local.ndim() == 2 ? local.dim(1) : 0;
    const int64_t total = out.ndim() == 2 ? out.dim(1) : 0;
    if (local.ndim() != 2 || out.ndim() != 2 || out.dim(0) != m || total > c * size() ||
        scratch.numel() < m * c * size() || scratch.dtype() != local.dtype() ||
        out.dtype() != local.dtype() || !out.is_contiguous() || !scratch.is_contiguous()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "AllGatherColumns: local ", local.DebugString(), ", scratch ", scratch.DebugString(),
          " and out ", out.DebugString(), " do not fit ", size(), " ranks"));
    }
    const size_t elem = DTypeSize(local.dtype());
    if (absl::Status s = NcclStatus(
            ncclAllGather(local.raw_data(), scratch.raw_data(), static_cast<size_t>(m * c), *type,
                          group_->comms[rank_], backend_->stream()),
            "ncclAllGather");
        !s.ok()) {
      return s;
    }
    // scratch holds [rank][m][c]; out wants [m][rank * c]: one strided copy per rank.
    for (int r = 0; r < size(); ++r) {
      const int64_t first = r * c, width = std::min(c, total - first);
      if (width <= 0 || m == 0) continue;
      const char* src = static_cast<const char*>(scratch.raw_data()) + r * m * c * elem;
      char* dst = static_cast<char*>(out.raw_data()) + first * elem;
      if (absl::Status s =
              CudaStatus(cudaMemcpy2DAsync(dst, total * elem, src, c * elem, width * elem, m,
                                           cudaMemcpyDeviceToDevice, backend_->stream()),
                         "AllGatherColumns copy");
          !s.ok()) {
        return s;
      }
    }
    return absl::OkStatus();
  }

 private:
  // The peer all-reduce of x alone (the caller checks PeerAllReduceFits and the group's peer).
  cuda::PeerAllReduceParams PeerParams(const Tensor& x) const {
    cuda::PeerAllReduceParams p;
    const PeerBuffers& peer = group_->peer;
    p.x = x.raw_data();
    p.count = x.numel();
    p.bf16 = x.dtype() == DType::kBf16;
    p.rank = rank_;
    p.ranks = size();
    for (int r = 0; r < size() && r < static_cast<int>(peer.inbox.size()); ++r) {
      p.inbox[r] = peer.inbox[r];
    }
    p.calls = peer.on() ? peer.calls[rank_] : nullptr;
    p.aborted = peer.aborted;
    return p;
  }

  const int rank_;
  std::shared_ptr<NcclGroup> group_;
  CudaBackend* backend_;  // borrowed: the rank's backend
  std::shared_ptr<HostRendezvous> rendezvous_;
};

}  // namespace

absl::StatusOr<std::vector<std::unique_ptr<Collective>>> CreateNcclCollectives(
    const std::vector<Backend*>& backends) {
  const int n = static_cast<int>(backends.size());
  std::vector<int> devices;
  for (Backend* b : backends) {
    auto* cuda = dynamic_cast<CudaBackend*>(b);
    if (cuda == nullptr) return absl::InvalidArgumentError("NCCL needs CUDA backends");
    if (std::find(devices.begin(), devices.end(), cuda->device_index()) != devices.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("two ranks on GPU ", cuda->device_index(), ": one rank per GPU"));
    }
    devices.push_back(cuda->device_index());
  }
  auto group = std::make_shared<NcclGroup>();
  group->comms.resize(n);
  int current = 0;
  cudaGetDevice(&current);
  const absl::Status init =
      NcclStatus(ncclCommInitAll(group->comms.data(), n, devices.data()), "ncclCommInitAll");
  cudaSetDevice(current);  // ncclCommInitAll leaves the last GPU current
  if (!init.ok()) {
    group->comms.clear();
    return init;
  }
  SetUpPeerAllReduce(devices, group->peer);
  auto rendezvous = std::make_shared<HostRendezvous>(n);
  std::vector<std::unique_ptr<Collective>> out;
  out.reserve(n);
  for (int r = 0; r < n; ++r) {
    out.push_back(std::make_unique<NcclCollective>(r, group, static_cast<CudaBackend*>(backends[r]),
                                                   rendezvous));
  }
  return out;
}

}  // namespace sparseserve::kernels
