// CudaBackend: memory, copies, op checks and launches, and the attention plan's device metadata.
#include "kernels/cuda/cuda_backend.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/core/status.h"
#include "kernels/attention_plan_check.h"
#include "kernels/cuda/cuda_backend_state.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cuda_status.h"

namespace sparseserve::kernels {
namespace {

using cuda::bf16_t;

// kInvalidArgument unless `t` is a contiguous tensor of this backend of `dtype` with `ndim` dims.
absl::Status CheckCuda(const Tensor& t, DType dtype, int ndim, const char* op, const char* name) {
  if (t.device() != Device::kCuda || t.dtype() != dtype || t.ndim() != ndim || !t.is_contiguous()) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": ", name, " must be a contiguous CUDA ", DTypeName(dtype), " tensor of ", ndim,
        " dims, got ", t.DebugString(), t.device() == Device::kHost ? " (host)" : ""));
  }
  return absl::OkStatus();
}

absl::Status CheckShape(const Tensor& t, Shape expected, const char* op, const char* name) {
  if (!(t.shape() == expected)) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", name, " is ", t.DebugString(),
                                                   ", expected shape ", expected.ToString()));
  }
  return absl::OkStatus();
}

const bf16_t* Bf16(const Tensor& t) {
  return t.data<bf16_t>();
}
bf16_t* MutableBf16(const Tensor& t) {
  return t.data<bf16_t>();
}

bool IsF32(const Tensor& t) {
  return t.dtype() == DType::kF32;
}

// The outputs and indices RoPE + KV write takes for n token rows (RopeWriteKv and the fused
// LinearRopeWriteKv): q [n, heads, hd], kv_layer [.., .., kv_heads, hd], positions and slots [n],
// inv_freq [hd / 2], hd even.
absl::Status CheckRopeKvTargets(int64_t n, const Tensor& positions, const Tensor& inv_freq,
                                const Tensor& slots, const Tensor& q, const Tensor& kv_layer,
                                const char* op) {
  SS_RETURN_IF_ERROR(CheckCuda(positions, DType::kI32, 1, op, "positions"));
  SS_RETURN_IF_ERROR(CheckCuda(inv_freq, DType::kF32, 1, op, "inv_freq"));
  SS_RETURN_IF_ERROR(CheckCuda(slots, DType::kI32, 1, op, "slots"));
  SS_RETURN_IF_ERROR(CheckCuda(q, DType::kBf16, 3, op, "q"));
  SS_RETURN_IF_ERROR(CheckCuda(kv_layer, DType::kBf16, 4, op, "kv_layer"));
  const int64_t hd = q.dim(2);
  if (q.dim(0) != n || positions.dim(0) != n || slots.dim(0) != n || kv_layer.dim(3) != hd ||
      hd % 2 != 0 || inv_freq.dim(0) != hd / 2) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": shape mismatch for ", n, " rows: q ", q.DebugString(), " kv_layer ",
                     kv_layer.DebugString(), " positions ", positions.DebugString(), " slots ",
                     slots.DebugString(), " inv_freq ", inv_freq.DebugString()));
  }
  return absl::OkStatus();
}

}  // namespace

CudaBackend::StreamHolder::~StreamHolder() {
  if (owned) cudaStreamDestroy(stream);
}

absl::StatusOr<std::unique_ptr<CudaBackend>> CudaBackend::Create(const CudaDeviceInfo& info,
                                                                 bool use_legacy_stream) {
  SS_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(info.device_idx), "cudaSetDevice"));
  auto holder = std::make_shared<StreamHolder>();
  if (!use_legacy_stream) {
    SS_RETURN_IF_ERROR(CudaStatus(cudaStreamCreateWithFlags(&holder->stream, cudaStreamNonBlocking),
                                  "cudaStreamCreate"));
    holder->owned = true;
  }
  // Keep freed blocks in the stream-ordered pool: a forward step frees and re-allocates the same
  // activation sizes every time, and returning them to the driver would cost a sync each step.
  cudaMemPool_t pool;
  SS_RETURN_IF_ERROR(CudaStatus(cudaDeviceGetDefaultMemPool(&pool, info.device_idx),
                                "cudaDeviceGetDefaultMemPool"));
  uint64_t threshold = UINT64_MAX;
  SS_RETURN_IF_ERROR(CudaStatus(
      cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold), "mem pool"));
  std::unique_ptr<CudaBackend> backend(new CudaBackend(std::move(holder)));
  backend->device_idx_ = info.device_idx;
  SS_RETURN_IF_ERROR(CudaStatus(
      cudaDeviceGetAttribute(&backend->sm_count_, cudaDevAttrMultiProcessorCount, info.device_idx),
      "cudaDeviceGetAttribute"));
  SS_ASSIGN_OR_RETURN(backend->error_flag_, backend->Allocate(DType::kI32, {1}));
  return backend;
}

absl::StatusOr<Tensor> CudaBackend::Allocate(DType dtype, Shape shape) {
  SS_RETURN_IF_ERROR(CheckNotCapturing("Allocate"));
  const size_t bytes = static_cast<size_t>(shape.numel()) * DTypeSize(dtype);
  void* ptr = nullptr;
  // cudaMallocAsync does not accept 0 bytes; an empty tensor still needs a distinct address.
  const size_t alloc_bytes = std::max<size_t>(bytes, 16);
  if (cudaError_t err = cudaMallocAsync(&ptr, alloc_bytes, stream()); err != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free error so later calls are not blamed
    return CudaStatus(
        err, absl::StrCat("Allocate ", DTypeName(dtype), shape.ToString(), " (", bytes, " bytes)"));
  }
  std::shared_ptr<StreamHolder> holder = stream_;
  std::shared_ptr<void> owner(ptr, [holder](void* p) { cudaFreeAsync(p, holder->stream); });
  SS_RETURN_IF_ERROR(CudaStatus(cudaMemsetAsync(ptr, 0, alloc_bytes, stream()), "Allocate memset"));
  return Tensor::Wrap(ptr, dtype, shape, Device::kCuda, std::move(owner));
}

absl::StatusOr<Tensor> CudaBackend::AllocateShareable(DType dtype, Shape shape) {
  SS_RETURN_IF_ERROR(CheckNotCapturing("AllocateShareable"));
  const size_t bytes = std::max<size_t>(static_cast<size_t>(shape.numel()) * DTypeSize(dtype), 16);
  // cudaMalloc allocates on the calling thread's current device: make it this backend's.
  int previous = 0;
  SS_RETURN_IF_ERROR(CudaStatus(cudaGetDevice(&previous), "cudaGetDevice"));
  SS_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(device_idx_), "cudaSetDevice"));
  void* ptr = nullptr;
  const cudaError_t err = cudaMalloc(&ptr, bytes);
  cudaSetDevice(previous);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return CudaStatus(err, absl::StrCat("AllocateShareable ", DTypeName(dtype), shape.ToString(),
                                        " (", bytes, " bytes)"));
  }
  shareable_bytes_->fetch_add(static_cast<int64_t>(bytes), std::memory_order_relaxed);
  // cudaFree waits for the device, so no queued kernel can still touch the memory.
  std::shared_ptr<void> owner(ptr, [counter = shareable_bytes_, bytes](void* p) {
    cudaFree(p);
    counter->fetch_sub(static_cast<int64_t>(bytes), std::memory_order_relaxed);
  });
  SS_RETURN_IF_ERROR(
      CudaStatus(cudaMemsetAsync(ptr, 0, bytes, stream()), "AllocateShareable memset"));
  // Another process may write the memory as soon as it is published, unordered with our stream.
  SS_RETURN_IF_ERROR(CudaStatus(cudaStreamSynchronize(stream()), "AllocateShareable memset"));
  return Tensor::Wrap(ptr, dtype, shape, Device::kCuda, std::move(owner));
}

absl::Status CudaBackend::CopyFromHost(const Tensor& src, const Tensor& dst) {
  SS_RETURN_IF_ERROR(CheckNotCapturing("CopyFromHost"));
  if (src.device() != Device::kHost || dst.device() != Device::kCuda || !dst.is_contiguous()) {
    return absl::InvalidArgumentError(
        absl::StrCat("CopyFromHost: needs a host source and a "
                     "contiguous CUDA destination, got ",
                     src.DebugString(), " -> ", dst.DebugString()));
  }
  SS_RETURN_IF_ERROR(CheckShape(src, dst.shape(), "CopyFromHost", "src"));
  if (src.dtype() == dst.dtype() && src.is_contiguous()) {
    // Pageable source: the call returns once the bytes are staged, so `src` may change after.
    return CudaStatus(cudaMemcpyAsync(dst.raw_data(), src.raw_data(), src.nbytes(),
                                      cudaMemcpyHostToDevice, stream()),
                      "CopyFromHost");
  }
  if (src.dtype() == DType::kI32 || dst.dtype() == DType::kI32 || dst.dtype() == DType::kF16) {
    return absl::UnimplementedError(
        absl::StrCat("CopyFromHost: conversion ", src.DebugString(), " -> ", dst.DebugString()));
  }
  SS_ASSIGN_OR_RETURN(Tensor f32, src.ToF32());
  if (dst.dtype() == DType::kF32) {
    return CudaStatus(cudaMemcpyAsync(dst.raw_data(), f32.raw_data(), f32.nbytes(),
                                      cudaMemcpyHostToDevice, stream()),
                      "CopyFromHost");
  }
  std::vector<uint16_t> bf16(static_cast<size_t>(f32.numel()));
  const float* values = f32.data<float>();
  for (size_t i = 0; i < bf16.size(); ++i) bf16[i] = F32ToBf16(values[i]);
  return CudaStatus(cudaMemcpyAsync(dst.raw_data(), bf16.data(), bf16.size() * 2,
                                    cudaMemcpyHostToDevice, stream()),
                    "CopyFromHost");
}

absl::Status CudaBackend::CheckEmbeddingFlag() {
  int flag = 0;
  SS_RETURN_IF_ERROR(
      CudaStatus(cudaMemcpy(&flag, error_flag_.raw_data(), sizeof(flag), cudaMemcpyDeviceToHost),
                 "read error flag"));
  if (flag == 0) return absl::OkStatus();
  SS_RETURN_IF_ERROR(CudaStatus(cudaMemset(error_flag_.raw_data(), 0, sizeof(int)), "reset flag"));
  return absl::InvalidArgumentError(
      "Embedding/GatherRows: an index was outside the table (the rows were zero-filled)");
}

absl::Status CudaBackend::BindThread() {
  return CudaStatus(cudaSetDevice(device_idx_), "cudaSetDevice");
}

absl::Status CudaBackend::Synchronize() {
  SS_RETURN_IF_ERROR(CheckNotCapturing("Synchronize"));
  SS_RETURN_IF_ERROR(CudaStatus(cudaStreamSynchronize(stream()), "asynchronous CUDA work"));
  return CheckEmbeddingFlag();
}

absl::Status CudaBackend::CopyToHost(const Tensor& src, const Tensor& dst) {
  SS_RETURN_IF_ERROR(CheckNotCapturing("CopyToHost"));
  if (src.device() != Device::kCuda || dst.device() != Device::kHost || !dst.is_contiguous() ||
      !src.is_contiguous()) {
    return absl::InvalidArgumentError(
        absl::StrCat("CopyToHost: needs a contiguous CUDA source "
                     "and host destination, got ",
                     src.DebugString(), " -> ", dst.DebugString()));
  }
  SS_RETURN_IF_ERROR(CheckShape(dst, src.shape(), "CopyToHost", "dst"));
  SS_RETURN_IF_ERROR(Synchronize());
  if (src.dtype() == dst.dtype()) {
    return CudaStatus(
        cudaMemcpy(dst.raw_data(), src.raw_data(), src.nbytes(), cudaMemcpyDeviceToHost),
        "CopyToHost");
  }
  if (src.dtype() != DType::kBf16 || dst.dtype() != DType::kF32) {
    return absl::UnimplementedError(
        absl::StrCat("CopyToHost: conversion ", src.DebugString(), " -> ", dst.DebugString()));
  }
  std::vector<uint16_t> bf16(static_cast<size_t>(src.numel()));
  SS_RETURN_IF_ERROR(CudaStatus(
      cudaMemcpy(bf16.data(), src.raw_data(), src.nbytes(), cudaMemcpyDeviceToHost), "CopyToHost"));
  float* values = dst.data<float>();
  for (size_t i = 0; i < bf16.size(); ++i) values[i] = Bf16ToF32(bf16[i]);
  return absl::OkStatus();
}

absl::Status CudaBackend::Copy(const Tensor& src, const Tensor& dst) {
  SS_RETURN_IF_ERROR(CheckCuda(src, src.dtype(), src.ndim(), "Copy", "src"));
  SS_RETURN_IF_ERROR(CheckCuda(dst, src.dtype(), src.ndim(), "Copy", "dst"));
  SS_RETURN_IF_ERROR(CheckShape(dst, src.shape(), "Copy", "dst"));
  return CudaStatus(cudaMemcpyAsync(dst.raw_data(), src.raw_data(), src.nbytes(),
                                    cudaMemcpyDeviceToDevice, stream()),
                    "Copy");
}

absl::Status CudaBackend::FillUniform(const Tensor& t, uint64_t seed, float lo, float hi) {
  if (t.device() != Device::kCuda || !t.is_contiguous() ||
      (t.dtype() != DType::kBf16 && t.dtype() != DType::kF32)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "FillUniform: needs a contiguous CUDA bf16/f32 tensor, got ", t.DebugString()));
  }
  return CudaStatus(cuda::LaunchFillUniform(t.raw_data(), t.dtype() == DType::kBf16, t.numel(),
                                            seed, lo, hi, stream()),
                    "FillUniform");
}

absl::StatusOr<Backend::MemoryInfo> CudaBackend::GetMemoryInfo() {
  size_t free_bytes = 0, total_bytes = 0;
  SS_RETURN_IF_ERROR(Synchronize());  // frees queued on the stream count as free after this
  SS_RETURN_IF_ERROR(CudaStatus(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo"));
  // Memory the stream-ordered pool holds for reuse is free to us but not to the driver.
  cudaMemPool_t pool;
  int device = 0;
  SS_RETURN_IF_ERROR(CudaStatus(cudaGetDevice(&device), "cudaGetDevice"));
  SS_RETURN_IF_ERROR(CudaStatus(cudaDeviceGetDefaultMemPool(&pool, device), "mem pool"));
  uint64_t reserved = 0, used = 0;
  SS_RETURN_IF_ERROR(CudaStatus(
      cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &reserved), "mem pool"));
  SS_RETURN_IF_ERROR(
      CudaStatus(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &used), "mem pool"));
  MemoryInfo info;
  info.free_bytes = static_cast<int64_t>(free_bytes + (reserved - used));
  info.total_bytes = static_cast<int64_t>(total_bytes);
  info.used_bytes = static_cast<int64_t>(used) + shareable_bytes_->load(std::memory_order_relaxed);
  return info;
}

absl::Status CudaBackend::Embedding(const Tensor& table, const Tensor& ids, const Tensor& out) {
  SS_RETURN_IF_ERROR(CheckCuda(table, DType::kBf16, 2, "Embedding", "table"));
  SS_RETURN_IF_ERROR(CheckCuda(ids, DType::kI32, 1, "Embedding", "ids"));
  SS_RETURN_IF_ERROR(
      CheckCuda(out, IsF32(out) ? DType::kF32 : DType::kBf16, 2, "Embedding", "out"));
  SS_RETURN_IF_ERROR(CheckShape(out, {ids.dim(0), table.dim(1)}, "Embedding", "out"));
  return CudaStatus(cuda::LaunchGatherRows(Bf16(table), false, table.dim(0), table.dim(1),
                                           ids.data<int32_t>(), ids.dim(0), out.raw_data(),
                                           IsF32(out), error_flag_.data<int>(), stream()),
                    "Embedding");
}

absl::Status CudaBackend::GatherRows(const Tensor& x, const Tensor& rows, const Tensor& out) {
  // bf16 activations, or rows of the f32 residual stream (TokenSwift's draft heads).
  const DType dt = IsF32(x) ? DType::kF32 : DType::kBf16;
  SS_RETURN_IF_ERROR(CheckCuda(x, dt, 2, "GatherRows", "x"));
  SS_RETURN_IF_ERROR(CheckCuda(rows, DType::kI32, 1, "GatherRows", "rows"));
  SS_RETURN_IF_ERROR(CheckCuda(out, dt, 2, "GatherRows", "out"));
  SS_RETURN_IF_ERROR(CheckShape(out, {rows.dim(0), x.dim(1)}, "GatherRows", "out"));
  return CudaStatus(cuda::LaunchGatherRows(x.raw_data(), IsF32(x), x.dim(0), x.dim(1),
                                           rows.data<int32_t>(), rows.dim(0), out.raw_data(),
                                           IsF32(out), error_flag_.data<int>(), stream()),
                    "GatherRows");
}

absl::Status CudaBackend::RelativeL2Error(const Tensor& actual, const Tensor& expected,
                                          const Tensor& ranges, const Tensor& out) {
  SS_RETURN_IF_ERROR(CheckCuda(actual, DType::kBf16, actual.ndim(), "RelativeL2Error", "actual"));
  SS_RETURN_IF_ERROR(
      CheckCuda(expected, DType::kBf16, actual.ndim(), "RelativeL2Error", "expected"));
  SS_RETURN_IF_ERROR(CheckShape(expected, actual.shape(), "RelativeL2Error", "expected"));
  SS_RETURN_IF_ERROR(CheckCuda(ranges, DType::kI32, 2, "RelativeL2Error", "ranges"));
  SS_RETURN_IF_ERROR(CheckCuda(out, DType::kF32, 1, "RelativeL2Error", "out"));
  if (actual.ndim() < 1 || ranges.dim(1) != 2 || out.dim(0) != ranges.dim(0)) {
    return absl::InvalidArgumentError(absl::StrCat("RelativeL2Error: ranges ", ranges.DebugString(),
                                                   " and out ", out.DebugString(),
                                                   " do not match"));
  }
  if (out.dim(0) == 0) return absl::OkStatus();
  const int64_t rows = actual.dim(0);
  return CudaStatus(cuda::LaunchRelativeL2Error(
                        Bf16(actual), Bf16(expected), rows, rows == 0 ? 0 : actual.numel() / rows,
                        ranges.data<int32_t>(), ranges.dim(0), out.data<float>(), stream()),
                    "RelativeL2Error");
}

absl::Status CudaBackend::RmsNorm(const Tensor& x, const Tensor& weight, float eps,
                                  const Tensor& out) {
  SS_RETURN_IF_ERROR(CheckCuda(x, IsF32(x) ? DType::kF32 : DType::kBf16, 2, "RmsNorm", "x"));
  SS_RETURN_IF_ERROR(CheckCuda(weight, DType::kBf16, 1, "RmsNorm", "weight"));
  SS_RETURN_IF_ERROR(CheckCuda(out, DType::kBf16, 2, "RmsNorm", "out"));
  SS_RETURN_IF_ERROR(CheckShape(weight, {x.dim(1)}, "RmsNorm", "weight"));
  SS_RETURN_IF_ERROR(CheckShape(out, x.shape(), "RmsNorm", "out"));
  return CudaStatus(cuda::LaunchRmsNorm(nullptr, false, x.raw_data(), IsF32(x), Bf16(weight),
                                        x.dim(0), x.dim(1), eps, MutableBf16(out), stream()),
                    "RmsNorm");
}

absl::Status CudaBackend::AddRmsNorm(const Tensor& residual, const Tensor& x, const Tensor& weight,
                                     float eps, const Tensor& out) {
  SS_RETURN_IF_ERROR(CheckCuda(residual, IsF32(residual) ? DType::kF32 : DType::kBf16, 2,
                               "AddRmsNorm", "residual"));
  SS_RETURN_IF_ERROR(CheckCuda(x, DType::kBf16, 2, "AddRmsNorm", "x"));
  SS_RETURN_IF_ERROR(CheckCuda(weight, DType::kBf16, 1, "AddRmsNorm", "weight"));
  SS_RETURN_IF_ERROR(CheckCuda(out, DType::kBf16, 2, "AddRmsNorm", "out"));
  SS_RETURN_IF_ERROR(CheckShape(x, residual.shape(), "AddRmsNorm", "x"));
  SS_RETURN_IF_ERROR(CheckShape(out, residual.shape(), "AddRmsNorm", "out"));
  SS_RETURN_IF_ERROR(CheckShape(weight, {x.dim(1)}, "AddRmsNorm", "weight"));
  return CudaStatus(
      cuda::LaunchRmsNorm(residual.raw_data(), IsF32(residual), x.raw_data(), false, Bf16(weight),
                          x.dim(0), x.dim(1), eps, MutableBf16(out), stream()),
      "AddRmsNorm");
}

absl::Status CudaBackend::Rope(const Tensor& q, const Tensor& k, const Tensor& positions,
                               const Tensor& inv_freq) {
  SS_RETURN_IF_ERROR(CheckCuda(q, DType::kBf16, 3, "Rope", "q"));
  SS_RETURN_IF_ERROR(CheckCuda(k, DType::kBf16, 3, "Rope", "k"));
  SS_RETURN_IF_ERROR(CheckCuda(positions, DType::kI32, 1, "Rope", "positions"));
  SS_RETURN_IF_ERROR(CheckCuda(inv_freq, DType::kF32, 1, "Rope", "inv_freq"));
  const int64_t n = q.dim(0);
  const int64_t hd = q.dim(2);
  if (k.dim(0) != n || k.dim(2) != hd || positions.dim(0) != n || hd % 2 != 0 ||
      inv_freq.dim(0) != hd / 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("Rope: shape mismatch q ", q.DebugString(), " k ", k.DebugString(),
                     " positions ", positions.DebugString(), " inv_freq ", inv_freq.DebugString()));
  }
  return CudaStatus(cuda::LaunchRope(MutableBf16(q), MutableBf16(k), n, static_cast<int>(q.dim(1)),
                                     static_cast<int>(k.dim(1)), static_cast<int>(hd),
                                     positions.data<int32_t>(), inv_freq.data<float>(), stream()),
                    "Rope");
}

absl::Status CudaBackend::SiluMul(const Tensor& gate, const Tensor& up, const Tensor& out) {
  SS_RETURN_IF_ERROR(CheckCuda(out, DType::kBf16, 2, "SiluMul", "out"));
  for (const auto& [t, name] : {std::pair{&gate, "gate"}, {&up, "up"}}) {
    if (t->device() != Device::kCuda || t->dtype() != DType::kBf16 || t->ndim() != 2 ||
        t->stride(1) != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("SiluMul: ", name, " must be a CUDA bf16 matrix with contiguous rows, got ",
                       t->DebugString()));
    }
  }
  SS_RETURN_IF_ERROR(CheckShape(up, gate.shape(), "SiluMul", "up"));
  SS_RETURN_IF_ERROR(CheckShape(out, gate.shape(), "SiluMul", "out"));
  return CudaStatus(cuda::LaunchSiluMul(Bf16(gate), gate.stride(0), Bf16(up), up.stride(0),
                                        gate.dim(0), gate.dim(1), MutableBf16(out), stream()),
                    "SiluMul");
}

absl::Status CudaBackend::LinearSiluMul(const Tensor& x, const Tensor& w_gate_up,
                                        const Tensor& gate_up, const Tensor& out) {
  if (x.ndim() != 2 || !TakesSkinnyGemm(x.dim(0), x.dim(1)) || !FusesDecodeEpilogue("swiglu")) {
    return Backend::LinearSiluMul(x, w_gate_up, gate_up, out);
  }
  SS_RETURN_IF_ERROR(CheckCuda(x, DType::kBf16, 2, "LinearSiluMul", "x"));
  SS_RETURN_IF_ERROR(CheckCuda(w_gate_up, DType::kBf16, 2, "LinearSiluMul", "w_gate_up"));
  SS_RETURN_IF_ERROR(CheckCuda(out, DType::kBf16, 2, "LinearSiluMul", "out"));
  const int64_t n = x.dim(0), ffn = out.dim(1);
  SS_RETURN_IF_ERROR(CheckShape(w_gate_up, {2 * ffn, x.dim(1)}, "LinearSiluMul", "w_gate_up"));
  SS_RETURN_IF_ERROR(CheckShape(out, {n, ffn}, "LinearSiluMul", "out"));
  return CudaStatus(cuda::LaunchSkinnySwiGlu(Bf16(x), Bf16(w_gate_up), n, x.dim(1), ffn,
                                             MutableBf16(out), stream()),
                    "LinearSiluMul");
}

absl::Status CudaBackend::LinearRopeWriteKv(const Tensor& x, const Tensor& w_qkv,
                                            const Tensor& bias, const Tensor& qkv,
                                            const Tensor& positions, const Tensor& inv_freq,
                                            const Tensor& slots, const Tensor& q,
                                            const Tensor& kv_layer) {
  if (x.ndim() != 2 || !TakesSkinnyGemm(x.dim(0), x.dim(1)) || !FusesDecodeEpilogue("rope")) {
    return Backend::LinearRopeWriteKv(x, w_qkv, bias, qkv, positions, inv_freq, slots, q, kv_layer);
  }
  constexpr const char* kOp = "LinearRopeWriteKv";
  SS_RETURN_IF_ERROR(CheckCuda(x, DType::kBf16, 2, kOp, "x"));
  SS_RETURN_IF_ERROR(CheckCuda(w_qkv, DType::kBf16, 2, kOp, "w_qkv"));
  const int64_t n = x.dim(0);
  SS_RETURN_IF_ERROR(CheckRopeKvTargets(n, positions, inv_freq, slots, q, kv_layer, kOp));
  const int64_t heads = q.dim(1), hd = q.dim(2), kv_heads = kv_layer.dim(2);
  const int64_t rows = (heads + 2 * kv_heads) * hd;
  SS_RETURN_IF_ERROR(CheckShape(w_qkv, {rows, x.dim(1)}, kOp, "w_qkv"));
  if (!bias.empty() &&
      (bias.device() != Device::kCuda || bias.dtype() != DType::kBf16 || bias.numel() != rows)) {
    return absl::InvalidArgumentError(
        absl::StrCat(kOp, ": bias ", bias.DebugString(), " for ", rows, " output rows"));
  }
  cuda::SkinnyRopeKv rope;
  rope.positions = positions.data<int32_t>();
  rope.inv_freq = inv_freq.data<float>();
  rope.slots = slots.data<int32_t>();
  rope.q = MutableBf16(q);
  rope.kv_layer = MutableBf16(kv_layer);
  rope.heads = static_cast<int>(heads);
  rope.kv_heads = static_cast<int>(kv_heads);
  rope.head_dim = static_cast<int>(hd);
  rope.block_tokens = static_cast<int>(kv_layer.dim(1));
  // Slots come from block tables the model already checked against the pool.
  return CudaStatus(
      cuda::LaunchSkinnyRopeKv(Bf16(x), Bf16(w_qkv), bias.empty() ? nullptr : Bf16(bias), n,
                               x.dim(1), rope, stream()),
      kOp);
}

absl::Status CudaBackend::WriteKv(const Tensor& k, const Tensor& v, const Tensor& slots,
                                  const Tensor& kv_layer) {
  SS_RETURN_IF_ERROR(CheckCuda(k, DType::kBf16, 3, "WriteKv", "k"));
  SS_RETURN_IF_ERROR(CheckCuda(v, DType::kBf16, 3, "WriteKv", "v"));
  SS_RETURN_IF_ERROR(CheckCuda(slots, DType::kI32, 1, "WriteKv", "slots"));
  SS_RETURN_IF_ERROR(CheckCuda(kv_layer, DType::kBf16, 4, "WriteKv", "kv_layer"));
  SS_RETURN_IF_ERROR(CheckShape(v, k.shape(), "WriteKv", "v"));
  if (slots.dim(0) != k.dim(0) || kv_layer.dim(2) != k.dim(1) || kv_layer.dim(3) != k.dim(2)) {
    return absl::InvalidArgumentError(absl::StrCat("WriteKv: shape mismatch k ", k.DebugString(),
                                                   " slots ", slots.DebugString(), " kv_layer ",
                                                   kv_layer.DebugString()));
  }
  // Slots come from block tables the model already checked against the pool.
  return CudaStatus(
      cuda::LaunchWriteKv(Bf16(k), Bf16(v), slots.data<int32_t>(), k.dim(0), MutableBf16(kv_layer),
                          static_cast<int>(kv_layer.dim(1)), static_cast<int>(k.dim(1)),
                          static_cast<int>(k.dim(2)), stream()),
      "WriteKv");
}

absl::Status CudaBackend::RopeWriteKv(const Tensor& qkv, const Tensor& positions,
                                      const Tensor& inv_freq, const Tensor& slots, const Tensor& q,
                                      const Tensor& kv_layer) {
  SS_RETURN_IF_ERROR(CheckCuda(qkv, DType::kBf16, 2, "RopeWriteKv", "qkv"));
  const int64_t n = qkv.dim(0);
  SS_RETURN_IF_ERROR(CheckRopeKvTargets(n, positions, inv_freq, slots, q, kv_layer, "RopeWriteKv"));
  const int64_t hd = q.dim(2);
  const int64_t kv_heads = kv_layer.dim(2);
  SS_RETURN_IF_ERROR(CheckShape(qkv, {n, (q.dim(1) + 2 * kv_heads) * hd}, "RopeWriteKv", "qkv"));
  // Slots come from block tables the model already checked against the pool.
  return CudaStatus(
      cuda::LaunchRopeWriteKv(Bf16(qkv), n, static_cast<int>(q.dim(1)), static_cast<int>(kv_heads),
                              static_cast<int>(hd), positions.data<int32_t>(),
                              inv_freq.data<float>(), slots.data<int32_t>(), MutableBf16(q),
                              MutableBf16(kv_layer), static_cast<int>(kv_layer.dim(1)), stream()),
      "RopeWriteKv");
}

absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(int ordinal) {
  SS_ASSIGN_OR_RETURN(CudaDeviceInfo info, FindCudaDevice(ordinal));
  SS_ASSIGN_OR_RETURN(std::unique_ptr<CudaBackend> backend, CudaBackend::Create(info));
  return std::unique_ptr<Backend>(std::move(backend));
}

}  // namespace sparseserve::kernels
