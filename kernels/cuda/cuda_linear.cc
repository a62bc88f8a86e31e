// CudaBackend::Linear — bf16 GEMMs through cuBLASLt with f32 accumulation.
//
// Row-major out[n, o] = x[n, i] · w[o, i]ᵀ is column-major outᵀ[o, n] = wᵀ-as-stored · x, i.e. a
// cuBLAS "TN" product with m = o, n = n, k = i and every leading dimension the row length.
#include <cublasLt.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/core/status.h"
#include "kernels/cuda/cuda_backend_state.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/cudnn_prefill.h"

namespace sparseserve::kernels {
namespace {

constexpr size_t kWorkspaceBytes = size_t{32} << 20;  // cuBLASLt's suggestion for Hopper
// Rows up to which the skinny kernel beats cuBLASLt (H200, Llama-3-8B shapes, bench/RESULTS.md:
// ahead at 1 row, behind at 8).
constexpr int kDefaultSkinnyMaxRows = 2;

absl::Status BlasStatus(cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat("Linear: ", what, " failed: cuBLAS status ", static_cast<int>(s)));
}

}  // namespace

CudaBackend::GemmCache::~GemmCache() {
  for (auto& [key, plan] : plans) {
    cublasLtMatrixLayoutDestroy(plan.a);
    cublasLtMatrixLayoutDestroy(plan.b);
    cublasLtMatrixLayoutDestroy(plan.c);
    cublasLtMatmulDescDestroy(plan.op);
  }
  if (handle != nullptr) cublasLtDestroy(handle);
}

CudaBackend::CudaBackend(std::shared_ptr<StreamHolder> stream)
    : stream_(std::move(stream)), gemm_(std::make_unique<GemmCache>()) {}

CudaBackend::~CudaBackend() {
  cudaStreamSynchronize(stream());
}

// Decode steps: a weight-streaming kernel (cuBLASLt's tiles are mostly padding at small n).
// SPARSESERVE_CUDA_SKINNY_GEMM=N sets the largest n it takes (0: always cuBLASLt), for A/B runs.
bool TakesSkinnyGemm(int64_t n, int64_t in) {
  static const int skinny_max_rows = [] {
    const char* env = std::getenv("SPARSESERVE_CUDA_SKINNY_GEMM");
    return env == nullptr ? kDefaultSkinnyMaxRows
                          : std::clamp(std::atoi(env), 0, cuda::kMaxSkinnyRows);
  }();
  return n >= 1 && n <= skinny_max_rows && in % 8 == 0;
}

bool FusesDecodeEpilogue(std::string_view name) {
  static const std::vector<std::string> fused = []() -> std::vector<std::string> {
    const char* env = std::getenv("SPARSESERVE_CUDA_FUSE");
    return absl::StrSplit(env == nullptr ? "swiglu,rope" : env, ',');
  }();
  return std::find(fused.begin(), fused.end(), name) != fused.end();
}

absl::Status CudaBackend::Linear(const Tensor& x, const Tensor& w, const Tensor& bias,
                                 const Tensor& out) {
  if (x.device() != Device::kCuda || w.device() != Device::kCuda || out.device() != Device::kCuda ||
      x.dtype() != DType::kBf16 || w.dtype() != DType::kBf16 ||
      (out.dtype() != DType::kBf16 && out.dtype() != DType::kF32) || x.ndim() != 2 ||
      w.ndim() != 2 || out.ndim() != 2 || !x.is_contiguous() || !w.is_contiguous() ||
      !out.is_contiguous()) {
    return absl::InvalidArgumentError(
        absl::StrCat("Linear: needs contiguous CUDA bf16 x and w and a bf16/f32 out, got x ",
                     x.DebugString(), " w ", w.DebugString(), " out ", out.DebugString()));
  }
  const int64_t n = x.dim(0), in = x.dim(1), of = w.dim(0);
  if (w.dim(1) != in || out.dim(0) != n || out.dim(1) != of ||
      (!bias.empty() &&
       (bias.device() != Device::kCuda || bias.dtype() != DType::kBf16 || bias.numel() != of))) {
    return absl::InvalidArgumentError(absl::StrCat("Linear: shape mismatch x ", x.DebugString(),
                                                   " w ", w.DebugString(), " bias ",
                                                   bias.DebugString(), " out ", out.DebugString()));
  }
  if (n == 0) return absl::OkStatus();
  const bool out_f32 = out.dtype() == DType::kF32;
  const uint16_t* bias_ptr = bias.empty() ? nullptr : bias.data<uint16_t>();
  if (TakesSkinnyGemm(n, in)) {
    return CudaStatus(cuda::LaunchSkinnyGemm(x.data<uint16_t>(), w.data<uint16_t>(), bias_ptr, n,
                                             in, of, out.raw_data(), out_f32, stream()),
                      "Linear (skinny)");
  }
  GemmCache& g = *gemm_;
  if (g.handle == nullptr) {
    SS_RETURN_IF_ERROR(BlasStatus(cublasLtCreate(&g.handle), "cublasLtCreate"));
    SS_ASSIGN_OR_RETURN(g.workspace,
                        Allocate(DType::kI32, {static_cast<int64_t>(kWorkspaceBytes / 4)}));
  }
  // bf16 outputs take the bias in cuBLASLt's epilogue (f32, before rounding); f32 outputs (no
  // rounding to avoid) add it in a second pass.
  const bool has_bias = !bias.empty() && !out_f32;
  const GemmCache::Key key{n, in, of, out_f32, has_bias};
  auto it = g.plans.find(key);
  if (it == g.plans.end()) {
    GemmCache::Plan plan;
    SS_RETURN_IF_ERROR(BlasStatus(
        cublasLtMatmulDescCreate(&plan.op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "matmul desc"));
    const cublasOperation_t trans_a = CUBLAS_OP_T, trans_b = CUBLAS_OP_N;
    if (has_bias) {  // added in f32 before the output's rounding
      const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
      const cudaDataType_t bias_type = CUDA_R_16BF;
      SS_RETURN_IF_ERROR(
          BlasStatus(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_EPILOGUE,
                                                    &epilogue, sizeof(epilogue)),
                     "epilogue"));
      SS_RETURN_IF_ERROR(
          BlasStatus(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                                    &bias_type, sizeof(bias_type)),
                     "bias type"));
    }
    SS_RETURN_IF_ERROR(
        BlasStatus(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a,
                                                  sizeof(trans_a)),
                   "transa"));
    SS_RETURN_IF_ERROR(
        BlasStatus(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b,
                                                  sizeof(trans_b)),
                   "transb"));
    // A = w stored [of, in] row-major = column-major [in, of]; B = x as column-major [in, n].
    SS_RETURN_IF_ERROR(
        BlasStatus(cublasLtMatrixLayoutCreate(&plan.a, CUDA_R_16BF, in, of, in), "layout a"));
    SS_RETURN_IF_ERROR(
        BlasStatus(cublasLtMatrixLayoutCreate(&plan.b, CUDA_R_16BF, in, n, in), "layout b"));
    SS_RETURN_IF_ERROR(BlasStatus(
        cublasLtMatrixLayoutCreate(&plan.c, out_f32 ? CUDA_R_32F : CUDA_R_16BF, of, n, of),
        "layout c"));
    cublasLtMatmulPreference_t pref;
    SS_RETURN_IF_ERROR(BlasStatus(cublasLtMatmulPreferenceCreate(&pref), "preference"));
    const size_t ws = kWorkspaceBytes;
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                         sizeof(ws));
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    const cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(
        g.handle, plan.op, plan.a, plan.b, plan.c, plan.c, pref, 1, &result, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (hs != CUBLAS_STATUS_SUCCESS || found == 0) {
      return absl::InternalError(absl::StrCat("Linear: cuBLASLt has no algorithm for [", n, ", ",
                                              in, "] x [", of, ", ", in, "]ᵀ"));
    }
    plan.algo = result.algo;
    it = g.plans.emplace(key, plan).first;
  }
  const GemmCache::Plan& plan = it->second;
  if (has_bias) {  // the pointer changes per layer; the descriptor is ours alone (one thread)
    const void* epilogue_bias = bias.raw_data();
    SS_RETURN_IF_ERROR(
        BlasStatus(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                  &epilogue_bias, sizeof(epilogue_bias)),
                   "bias pointer"));
  }
  const float alpha = 1.0f, beta = 0.0f;
  SS_RETURN_IF_ERROR(
      BlasStatus(cublasLtMatmul(g.handle, plan.op, &alpha, w.raw_data(), plan.a, x.raw_data(),
                                plan.b, &beta, out.raw_data(), plan.c, out.raw_data(), plan.c,
                                &plan.algo, g.workspace.raw_data(), kWorkspaceBytes, stream()),
                 "cublasLtMatmul"));
  if (bias.empty() || has_bias) return absl::OkStatus();
  return CudaStatus(
      cuda::LaunchAddBias(out.raw_data(), out_f32, bias.data<uint16_t>(), n, of, stream()),
      "Linear bias");
}

}  // namespace sparseserve::kernels
