// CpuBackend: memory, embedding, normalisation, RoPE, SwiGLU, KV writes and row gathers.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/core/status.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_checks.h"
#include "kernels/uniform_random.h"

namespace sparseserve::kernels {

using cpu_internal::CheckDim;
using cpu_internal::CheckTensor;

absl::StatusOr<Tensor> CpuBackend::Allocate(DType dtype, Shape shape) {
  return Tensor::Zeros(dtype, shape);
}

namespace {
absl::Status ConvertCopy(const Tensor& src, const Tensor& dst, const char* op) {
  if (src.device() != Device::kHost || dst.device() != Device::kHost) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": both tensors must be host tensors"));
  }
  if (!(src.shape() == dst.shape())) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": shape mismatch ", src.DebugString(), " vs ", dst.DebugString()));
  }
  if (!dst.is_contiguous()) return absl::InvalidArgumentError(absl::StrCat(op, ": dst strided"));
  if (src.dtype() == dst.dtype() && src.is_contiguous()) {
    std::memcpy(dst.raw_data(), src.raw_data(), src.nbytes());
    return absl::OkStatus();
  }
  if (dst.dtype() != DType::kF32) {
    return absl::UnimplementedError(absl::StrCat(op, ": conversion to ", DTypeName(dst.dtype())));
  }
  SS_ASSIGN_OR_RETURN(Tensor f32, src.ToF32());
  std::memcpy(dst.raw_data(), f32.raw_data(), f32.nbytes());
  return absl::OkStatus();
}
}  // namespace

absl::Status CpuBackend::CopyFromHost(const Tensor& src, const Tensor& dst) {
  return ConvertCopy(src, dst, "CopyFromHost");
}

absl::Status CpuBackend::CopyToHost(const Tensor& src, const Tensor& dst) {
  return ConvertCopy(src, dst, "CopyToHost");
}

absl::Status CpuBackend::Copy(const Tensor& src, const Tensor& dst) {
  if (src.dtype() != dst.dtype()) {
    return absl::InvalidArgumentError(
        absl::StrCat("Copy: dtype mismatch ", src.DebugString(), " vs ", dst.DebugString()));
  }
  return ConvertCopy(src, dst, "Copy");
}

absl::Status CpuBackend::FillUniform(const Tensor& t, uint64_t seed, float lo, float hi) {
  SS_RETURN_IF_ERROR(CheckTensor(t, DType::kF32, t.ndim(), "FillUniform", "t"));
  const float span = hi - lo;
  pool_->ParallelFor(t.numel(), 4096, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      t.data<float>()[i] = lo + span * UniformAt(seed, static_cast<uint64_t>(i));
    }
  });
  return absl::OkStatus();
}

absl::StatusOr<Backend::MemoryInfo> CpuBackend::GetMemoryInfo() {
  return absl::UnimplementedError("GetMemoryInfo: host memory is not a bounded device pool");
}

namespace {
// out[i, :] = x[rows[i], :] — the one row gather behind Embedding and GatherRows; `what` names
// the indices in errors ("token id", "row").
absl::Status GatherRowsF32(const Tensor& x, const Tensor& rows, const Tensor& out, const char* op,
                           const char* what) {
  SS_RETURN_IF_ERROR(CheckTensor(x, DType::kF32, 2, op, "x"));
  SS_RETURN_IF_ERROR(CheckTensor(rows, DType::kI32, 1, op, "rows"));
  SS_RETURN_IF_ERROR(CheckTensor(out, DType::kF32, 2, op, "out"));
  SS_RETURN_IF_ERROR(CheckDim(out, 0, rows.dim(0), op, "out"));
  SS_RETURN_IF_ERROR(CheckDim(out, 1, x.dim(1), op, "out"));
  const int64_t d = x.dim(1);
  for (int64_t i = 0; i < rows.dim(0); ++i) {
    const int32_t r = rows.data<int32_t>()[i];
    if (r < 0 || r >= x.dim(0)) {
      return absl::InvalidArgumentError(
          absl::StrCat(op, ": ", what, " ", r, " outside [0, ", x.dim(0), ")"));
    }
    std::memcpy(out.data<float>() + i * d, x.data<float>() + r * d, d * sizeof(float));
  }
  return absl::OkStatus();
}
}  // namespace

absl::Status CpuBackend::Embedding(const Tensor& table, const Tensor& ids, const Tensor& out) {
  return GatherRowsF32(table, ids, out, "Embedding", "token id");
}

namespace {
void RmsNormRow(const float* x, const float* w, float eps, int64_t d, float* out) {
  double ss = 0;  // double: long rows of large activations lose precision in f32 sums
  for (int64_t j = 0; j < d; ++j) ss += static_cast<double>(x[j]) * x[j];
  const float inv = 1.0f / std::sqrt(static_cast<float>(ss / d) + eps);
  for (int64_t j = 0; j < d; ++j) out[j] = x[j] * inv * w[j];
}
}  // namespace

absl::Status CpuBackend::RmsNorm(const Tensor& x, const Tensor& weight, float eps,
                                 const Tensor& out) {
  SS_RETURN_IF_ERROR(CheckTensor(x, DType::kF32, 2, "RmsNorm", "x"));
  SS_RETURN_IF_ERROR(CheckTensor(weight, DType::kF32, 1, "RmsNorm", "weight"));
  SS_RETURN_IF_ERROR(CheckTensor(out, DType::kF32, 2, "RmsNorm", "out"));
  SS_RETURN_IF_ERROR(CheckDim(weight, 0, x.dim(1), "RmsNorm", "weight"));
  if (!(out.shape() == x.shape())) return absl::InvalidArgumentError("RmsNorm: out shape");
  const int64_t d = x.dim(1);
  pool_->ParallelFor(x.dim(0), 4, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      RmsNormRow(x.data<float>() + i * d, weight.data<float>(), eps, d, out.data<float>() + i * d);
    }
  });
  return absl::OkStatus();
}

absl::Status CpuBackend::AddRmsNorm(const Tensor& residual, const Tensor& x, const Tensor& weight,
                                    float eps, const Tensor& out) {
  SS_RETURN_IF_ERROR(CheckTensor(residual, DType::kF32, 2, "AddRmsNorm", "residual"));
  SS_RETURN_IF_ERROR(CheckTensor(x, DType::kF32, 2, "AddRmsNorm", "x"));
  SS_RETURN_IF_ERROR(CheckTensor(out, DType::kF32, 2, "AddRmsNorm", "out"));
  SS_RETURN_IF_ERROR(CheckTensor(weight, DType::kF32, 1, "AddRmsNorm", "weight"));
  if (!(x.shape() == residual.shape()) || !(out.shape() == residual.shape()) ||
      weight.dim(0) != x.dim(1)) {
    return absl::InvalidArgumentError("AddRmsNorm: shape mismatch");
  }
  const int64_t d = x.dim(1);
  pool_->ParallelFor(x.dim(0), 4, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      float* r = residual.data<float>() + i * d;
      const float* xi = x.data<float>() + i * d;
      for (int64_t j = 0; j < d; ++j) r[j] += xi[j];
      RmsNormRow(r, weight.data<float>(), eps, d, out.data<float>() + i * d);
    }
  });
  return absl::OkStatus();
}

absl::Status CpuBackend::Rope(const Tensor& q, const Tensor& k, const Tensor& positions,
                              const Tensor& inv_freq) {
  SS_RETURN_IF_ERROR(CheckTensor(q, DType::kF32, 3, "Rope", "q"));
  SS_RETURN_IF_ERROR(CheckTensor(k, DType::kF32, 3, "Rope", "k"));
  SS_RETURN_IF_ERROR(CheckTensor(positions, DType::kI32, 1, "Rope", "positions"));
  SS_RETURN_IF_ERROR(CheckTensor(inv_freq, DType::kF32, 1, "Rope", "inv_freq"));
  const int64_t n = q.dim(0);
  const int64_t hd = q.dim(2);
  if (k.dim(0) != n || k.dim(2) != hd || positions.dim(0) != n || inv_freq.dim(0) * 2 != hd) {
    return absl::InvalidArgumentError(absl::StrCat("Rope: shape mismatch q ", q.DebugString(),
                                                   " k ", k.DebugString(), " inv_freq ",
                                                   inv_freq.DebugString()));
  }
  const int64_t half = hd / 2;
  pool_->ParallelFor(n, 8, [&](int64_t b, int64_t e) {
    std::vector<float> cos_v(half), sin_v(half);
    for (int64_t t = b; t < e; ++t) {
      const float pos = static_cast<float>(positions.data<int32_t>()[t]);
      for (int64_t i = 0; i < half; ++i) {
        const float angle = pos * inv_freq.data<float>()[i];
        cos_v[i] = std::cos(angle);
        sin_v[i] = std::sin(angle);
      }
      auto rotate = [&](float* head) {
        for (int64_t i = 0; i < half; ++i) {
          const float x1 = head[i];
          const float x2 = head[i + half];
          head[i] = x1 * cos_v[i] - x2 * sin_v[i];
          head[i + half] = x2 * cos_v[i] + x1 * sin_v[i];
        }
      };
      for (int64_t h = 0; h < q.dim(1); ++h) rotate(q.data<float>() + (t * q.dim(1) + h) * hd);
      for (int64_t h = 0; h < k.dim(1); ++h) rotate(k.data<float>() + (t * k.dim(1) + h) * hd);
    }
  });
  return absl::OkStatus();
}

absl::Status CpuBackend::SiluMul(const Tensor& gate, const Tensor& up, const Tensor& out) {
  SS_RETURN_IF_ERROR(CheckTensor(out, DType::kF32, 2, "SiluMul", "out"));
  for (const auto& [t, name] : {std::pair{&gate, "gate"}, {&up, "up"}}) {
    if (t->device() != Device::kHost || t->dtype() != DType::kF32 || t->ndim() != 2 ||
        t->stride(1) != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("SiluMul: ", name, " must be a host f32 matrix with contiguous rows, got ",
                       t->DebugString()));
    }
  }
  if (!(gate.shape() == up.shape()) || !(out.shape() == up.shape())) {
    return absl::InvalidArgumentError("SiluMul: shape mismatch");
  }
  const int64_t cols = out.dim(1);
  pool_->ParallelFor(out.dim(0), 1, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const float* g = gate.data<float>() + r * gate.stride(0);
      const float* u = up.data<float>() + r * up.stride(0);
      float* o = out.data<float>() + r * cols;
      for (int64_t i = 0; i < cols; ++i) o[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
    }
  });
  return absl::OkStatus();
}

absl::Status CpuBackend::WriteKv(const Tensor& k, const Tensor& v, const Tensor& slots,
                                 const Tensor& kv_layer) {
  SS_RETURN_IF_ERROR(CheckTensor(k, DType::kF32, 3, "WriteKv", "k"));
  SS_RETURN_IF_ERROR(CheckTensor(v, DType::kF32, 3, "WriteKv", "v"));
  SS_RETURN_IF_ERROR(CheckTensor(slots, DType::kI32, 1, "WriteKv", "slots"));
  SS_RETURN_IF_ERROR(CheckTensor(kv_layer, DType::kF32, 4, "WriteKv", "kv_layer"));
  if (!(k.shape() == v.shape()) || slots.dim(0) != k.dim(0) || kv_layer.dim(2) != k.dim(1) ||
      kv_layer.dim(3) != k.dim(2) || kv_layer.dim(0) % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat("WriteKv: shape mismatch k ", k.DebugString(),
                                                   " kv_layer ", kv_layer.DebugString()));
  }
  const int64_t block_tokens = kv_layer.dim(1);
  const int64_t num_slots = kv_layer.dim(0) / 2 * block_tokens;
  const int64_t row = k.dim(1) * k.dim(2);  // floats per token per K (or V)
  for (int64_t t = 0; t < k.dim(0); ++t) {
    const int64_t slot = slots.data<int32_t>()[t];
    if (slot < 0 || slot >= num_slots) {
      return absl::InvalidArgumentError(
          absl::StrCat("WriteKv: slot ", slot, " outside pool of ", num_slots, " slots"));
    }
    const int64_t block = slot / block_tokens;
    const int64_t off = slot % block_tokens;
    float* kdst = kv_layer.data<float>() + ((block * 2 + 0) * block_tokens + off) * row;
    float* vdst = kv_layer.data<float>() + ((block * 2 + 1) * block_tokens + off) * row;
    std::memcpy(kdst, k.data<float>() + t * row, row * sizeof(float));
    std::memcpy(vdst, v.data<float>() + t * row, row * sizeof(float));
  }
  return absl::OkStatus();
}

absl::Status CpuBackend::ReadKv(const Tensor& kv_layer, const Tensor& slots, const Tensor& k,
                                const Tensor& v) {
  SS_RETURN_IF_ERROR(CheckTensor(k, DType::kF32, 3, "ReadKv", "k"));
  SS_RETURN_IF_ERROR(CheckTensor(v, DType::kF32, 3, "ReadKv", "v"));
  SS_RETURN_IF_ERROR(CheckTensor(slots, DType::kI32, 1, "ReadKv", "slots"));
  SS_RETURN_IF_ERROR(CheckTensor(kv_layer, DType::kF32, 4, "ReadKv", "kv_layer"));
  if (!(k.shape() == v.shape()) || slots.dim(0) != k.dim(0) || kv_layer.dim(2) != k.dim(1) ||
      kv_layer.dim(3) != k.dim(2) || kv_layer.dim(0) % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat("ReadKv: shape mismatch k ", k.DebugString(),
                                                   " kv_layer ", kv_layer.DebugString()));
  }
  const int64_t block_tokens = kv_layer.dim(1);
  const int64_t num_slots = kv_layer.dim(0) / 2 * block_tokens;
  const int64_t row = k.dim(1) * k.dim(2);
  for (int64_t t = 0; t < k.dim(0); ++t) {
    const int64_t slot = slots.data<int32_t>()[t];
    if (slot < 0 || slot >= num_slots) {
      return absl::InvalidArgumentError(
          absl::StrCat("ReadKv: slot ", slot, " outside pool of ", num_slots, " slots"));
    }
    const int64_t block = slot / block_tokens;
    const int64_t off = slot % block_tokens;
    const float* ksrc = kv_layer.data<float>() + ((block * 2 + 0) * block_tokens + off) * row;
    const float* vsrc = kv_layer.data<float>() + ((block * 2 + 1) * block_tokens + off) * row;
    std::memcpy(k.data<float>() + t * row, ksrc, row * sizeof(float));
    std::memcpy(v.data<float>() + t * row, vsrc, row * sizeof(float));
  }
  return absl::OkStatus();
}

absl::Status CpuBackend::RopeWriteKv(const Tensor& qkv, const Tensor& positions,
                                     const Tensor& inv_freq, const Tensor& slots, const Tensor& q,
                                     const Tensor& kv_layer) {
  SS_RETURN_IF_ERROR(CheckTensor(qkv, DType::kF32, 2, "RopeWriteKv", "qkv"));
  SS_RETURN_IF_ERROR(CheckTensor(q, DType::kF32, 3, "RopeWriteKv", "q"));
  SS_RETURN_IF_ERROR(CheckTensor(kv_layer, DType::kF32, 4, "RopeWriteKv", "kv_layer"));
  const int64_t n = qkv.dim(0);
  const int64_t q_cols = q.dim(1) * q.dim(2);
  const int64_t kv_cols = kv_layer.dim(2) * kv_layer.dim(3);
  if (q.dim(0) != n || kv_layer.dim(3) != q.dim(2) || qkv.dim(1) != q_cols + 2 * kv_cols) {
    return absl::InvalidArgumentError(absl::StrCat("RopeWriteKv: shape mismatch qkv ",
                                                   qkv.DebugString(), " q ", q.DebugString(),
                                                   " kv_layer ", kv_layer.DebugString()));
  }
  // The reference is the composition it fuses: split the columns, Rope, WriteKv.
  const Shape kv_shape{n, kv_layer.dim(2), kv_layer.dim(3)};
  Tensor k = Tensor::Zeros(DType::kF32, kv_shape);
  Tensor v = Tensor::Zeros(DType::kF32, kv_shape);
  for (int64_t t = 0; t < n; ++t) {
    const float* row = qkv.data<float>() + t * qkv.dim(1);
    std::memcpy(q.data<float>() + t * q_cols, row, q_cols * sizeof(float));
    std::memcpy(k.data<float>() + t * kv_cols, row + q_cols, kv_cols * sizeof(float));
    std::memcpy(v.data<float>() + t * kv_cols, row + q_cols + kv_cols, kv_cols * sizeof(float));
  }
  SS_RETURN_IF_ERROR(Rope(q, k, positions, inv_freq));
  return WriteKv(k, v, slots, kv_layer);
}

absl::Status CpuBackend::GatherRows(const Tensor& x, const Tensor& rows, const Tensor& out) {
  return GatherRowsF32(x, rows, out, "GatherRows", "row");
}

absl::StatusOr<std::unique_ptr<StepGraph>> CpuBackend::CaptureGraph(
    const std::function<absl::Status()>& /*record*/) {
  return absl::UnimplementedError("CaptureGraph: the CPU backend runs ops as they are called");
}

absl::Status CpuBackend::LaunchGraph(const StepGraph& /*graph*/) {
  return absl::UnimplementedError("LaunchGraph: the CPU backend has no step graphs");
}

}  // namespace sparseserve::kernels
