#include "kernels/backend.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/core/status.h"
#include "kernels/cpu/cpu_backend.h"
#ifdef SPARSESERVE_WITH_CUDA
#include "kernels/cuda/cuda_backend.h"
#endif

namespace sparseserve::kernels {

absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(Device device,
                                                       [[maybe_unused]] int ordinal) {
  if (device == Device::kHost) return std::make_unique<CpuBackend>(&core::ThreadPool::Default());
#ifdef SPARSESERVE_WITH_CUDA
  return CreateCudaBackend(ordinal);
#else
  return absl::UnimplementedError(
      "this binary was built without CUDA (SPARSESERVE_CUDA=OFF or no nvcc); use --device cpu");
#endif
}

absl::Status RunAttention(Backend& backend, const AttentionBatch& batch, const Tensor& q,
                          const Tensor& kv_layer, const Tensor& out) {
  if (q.ndim() != 3 || kv_layer.ndim() != 4) {
    return absl::InvalidArgumentError(absl::StrCat("Attention: q ", q.DebugString(),
                                                   " and kv_layer ", kv_layer.DebugString(),
                                                   " must be 3- and 4-dimensional"));
  }
  AttentionShape shape;
  shape.num_heads = static_cast<int>(q.dim(1));
  shape.num_kv_heads = static_cast<int>(kv_layer.dim(2));
  shape.head_dim = static_cast<int>(q.dim(2));
  shape.num_rows = q.dim(0);
  shape.num_blocks = kv_layer.dim(0) / 2;
  AttentionWorkspace workspace;
  SS_ASSIGN_OR_RETURN(const AttentionPlan plan, backend.PlanAttention(batch, shape, workspace));
  SS_RETURN_IF_ERROR(backend.BuildAttentionIndex(plan, q, kv_layer, 0));
  // The workspace dies here; its memory is freed in stream order on a GPU, after the kernels.
  return backend.Attention(plan, q, kv_layer, 0, out);
}

absl::Status Backend::MoveKvRows(absl::Span<const Tensor> kv_layers, absl::Span<const int32_t> src,
                                 absl::Span<const int32_t> dst) {
  if (src.size() != dst.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("MoveKvRows: ", src.size(), " sources for ", dst.size(), " destinations"));
  }
  if (src.empty() || kv_layers.empty()) return absl::OkStatus();
  const Tensor& first = kv_layers.front();
  if (first.ndim() != 4) {
    return absl::InvalidArgumentError(
        absl::StrCat("MoveKvRows: kv_layer ", first.DebugString(), " is not 4-dimensional"));
  }
  const int64_t rows = static_cast<int64_t>(src.size());
  Tensor host_slots = Tensor::Zeros(DType::kI32, {2, rows});
  std::copy(src.begin(), src.end(), host_slots.data<int32_t>());
  std::copy(dst.begin(), dst.end(), host_slots.data<int32_t>() + rows);
  SS_ASSIGN_OR_RETURN(Tensor slots, Allocate(DType::kI32, {2, rows}));
  SS_RETURN_IF_ERROR(CopyFromHost(host_slots, slots));
  SS_ASSIGN_OR_RETURN(const Tensor src_slots, slots.Slice(0, 0, 1).Reshape({rows}));
  SS_ASSIGN_OR_RETURN(const Tensor dst_slots, slots.Slice(0, 1, 2).Reshape({rows}));
  const Shape kv_shape{rows, first.dim(2), first.dim(3)};
  SS_ASSIGN_OR_RETURN(Tensor k, Allocate(first.dtype(), kv_shape));
  SS_ASSIGN_OR_RETURN(Tensor v, Allocate(first.dtype(), kv_shape));
  for (const Tensor& layer : kv_layers) {
    SS_RETURN_IF_ERROR(ReadKv(layer, src_slots, k, v));
    SS_RETURN_IF_ERROR(WriteKv(k, v, dst_slots, layer));
  }
  return absl::OkStatus();
}

}  // namespace sparseserve::kernels
