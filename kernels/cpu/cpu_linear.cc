// CpuBackend::Linear — OpenBLAS SGEMM, split over output columns on the shared thread pool.
#include <cblas.h>

#include <algorithm>

#include "common/core/status.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_checks.h"

namespace sparseserve::kernels {

using cpu_internal::CheckDim;
using cpu_internal::CheckTensor;

CpuBackend::CpuBackend(core::ThreadPool* pool) : pool_(pool) {
  // OpenBLAS must not start threads of its own: the one thread pool splits the work instead.
  openblas_set_num_threads(1);
}

absl::Status CpuBackend::Linear(const Tensor& x, const Tensor& w, const Tensor& bias,
                                const Tensor& out) {
  SS_RETURN_IF_ERROR(CheckTensor(x, DType::kF32, 2, "Linear", "x"));
  SS_RETURN_IF_ERROR(CheckTensor(w, DType::kF32, 2, "Linear", "w"));
  SS_RETURN_IF_ERROR(CheckTensor(out, DType::kF32, 2, "Linear", "out"));
  SS_RETURN_IF_ERROR(CheckDim(w, 1, x.dim(1), "Linear", "w"));
  SS_RETURN_IF_ERROR(CheckDim(out, 0, x.dim(0), "Linear", "out"));
  SS_RETURN_IF_ERROR(CheckDim(out, 1, w.dim(0), "Linear", "out"));
  if (!bias.empty()) {
    SS_RETURN_IF_ERROR(CheckTensor(bias, DType::kF32, 1, "Linear", "bias"));
    SS_RETURN_IF_ERROR(CheckDim(bias, 0, w.dim(0), "Linear", "bias"));
  }
  const int64_t n = x.dim(0);
  const int64_t in = x.dim(1);
  const int64_t out_features = w.dim(0);
  if (n == 0) return absl::OkStatus();
  // Batch invariance: every (row, column block) is one GEMV over the same fixed column blocks,
  // whatever the number of rows, so a row's outputs are bitwise those it gets alone (an SGEMM's
  // blocking, and with it the summation order, would change with the batch). A block of weights
  // stays in cache while the rows of a chunk stream past it.
  constexpr int64_t kColumns = 64;
  const int64_t num_col_blocks = (out_features + kColumns - 1) / kColumns;
  const int64_t items = num_col_blocks * n;  // item = col_block * n + row
  // Each chunk gets at least ~256K multiply-adds so tiny models do not drown in task overhead.
  const int64_t min_items =
      std::max<int64_t>(1, (256 * 1024) / std::max<int64_t>(1, kColumns * in));
  pool_->ParallelFor(items, min_items, [&](int64_t i0, int64_t i1) {
    for (int64_t item = i0; item < i1; ++item) {
      const int64_t c0 = (item / n) * kColumns;
      const int64_t c1 = std::min(out_features, c0 + kColumns);
      const int64_t row = item % n;
      float* y = out.data<float>() + row * out_features;
      cblas_sgemv(CblasRowMajor, CblasNoTrans, static_cast<int>(c1 - c0), static_cast<int>(in),
                  1.0f, w.data<float>() + c0 * in, static_cast<int>(in), x.data<float>() + row * in,
                  1, 0.0f, y + c0, 1);
      if (!bias.empty()) {
        for (int64_t c = c0; c < c1; ++c) y[c] += bias.data<float>()[c];
      }
    }
  });
  return absl::OkStatus();
}

}  // namespace sparseserve::kernels
