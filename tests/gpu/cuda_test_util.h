// Shared fixture of the GPU tests: a CUDA backend beside the CPU reference backend, random
// bf16-representable inputs uploaded to both, NaN-poisoned outputs and relative-error checks.
// Tests skip (GTEST_SKIP) on a machine without a usable GPU.
#ifndef SPARSESERVE_TESTS_GPU_CUDA_TEST_UTIL_H_
#define SPARSESERVE_TESTS_GPU_CUDA_TEST_UTIL_H_

#include <cmath>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>

#include "common/core/thread_pool.h"
#include "common/tensor/tensor.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/cpu/cpu_backend.h"

namespace sparseserve::testing {

// Test data directory: $SPARSESERVE_TEST_DATA_DIR (the GPU machine runs a copy of the tree at
// another path), else the one compiled in.
inline std::string TestDataDir() {
  if (const char* dir = std::getenv("SPARSESERVE_TEST_DATA_DIR")) return dir;
  return SPARSESERVE_TEST_DATA_DIR;
}

class CudaTest : public ::testing::Test {
 public:
  void SetUp() override {
    auto backend = kernels::CreateBackend(Device::kCuda);
    if (!backend.ok()) GTEST_SKIP() << "no CUDA backend here: " << backend.status();
    gpu_ = std::move(*backend);
    const unsigned seed = std::random_device{}();
    rng_.seed(seed);
    RecordProperty("seed", static_cast<int>(seed));
    std::printf("[ seed     ] %u\n", seed);
  }

  // Host f32 tensor of values uniform in [-a, a), each exactly representable in bf16 so that
  // both backends compute on identical inputs.
  Tensor RandomHost(Shape shape, float a = 1.0f) {
    Tensor t = Tensor::Zeros(DType::kF32, shape);
    std::uniform_real_distribution<float> dist(-a, a);
    float* p = t.data<float>();
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = Bf16ToF32(F32ToBf16(dist(rng_)));
    return t;
  }

  Tensor ToGpu(const Tensor& host, DType dtype = DType::kBf16) {
    auto t = gpu_->Allocate(dtype, host.shape());
    EXPECT_TRUE(t.ok()) << t.status();
    EXPECT_TRUE(gpu_->CopyFromHost(host, *t).ok());
    return *t;
  }

  // A GPU tensor filled with NaN: any element an op fails to write stays NaN.
  Tensor Poisoned(DType dtype, Shape shape) {
    auto t = gpu_->Allocate(dtype, shape);
    EXPECT_TRUE(t.ok()) << t.status();
    EXPECT_TRUE(gpu_->FillUniform(*t, 0, NAN, NAN).ok());
    return *t;
  }

  Tensor ToHost(const Tensor& dev) {
    Tensor host = Tensor::Zeros(DType::kF32, dev.shape());
    const absl::Status s = gpu_->CopyToHost(dev, host);
    EXPECT_TRUE(s.ok()) << s;
    return host;
  }

  // ‖got − ref‖ / ‖ref‖ in double; infinity if `got` holds a NaN or Inf.
  static double RelError(const Tensor& got, const Tensor& ref) {
    EXPECT_EQ(got.numel(), ref.numel());
    double num = 0, den = 0;
    for (int64_t i = 0; i < ref.numel(); ++i) {
      const double g = got.data<float>()[i];
      const double r = ref.data<float>()[i];
      if (!std::isfinite(g)) return INFINITY;
      num += (g - r) * (g - r);
      den += r * r;
    }
    return std::sqrt(num) / std::max(std::sqrt(den), 1e-30);
  }

  core::ThreadPool pool_{2};
  kernels::CpuBackend cpu_{&pool_};
  std::unique_ptr<kernels::Backend> gpu_;
  std::mt19937 rng_;
};

// Relative error bound for one bf16 rounding of outputs computed in f32 (2^-8 per element, plus
// the bf16 rounding of intermediates the kernels store).
inline constexpr double kBf16Tolerance = 1e-2;

}  // namespace sparseserve::testing

#endif  // SPARSESERVE_TESTS_GPU_CUDA_TEST_UTIL_H_
