// Tensor: the one tensor type of sparseserve — a strided view of up to 4 dimensions over a
// buffer in host or device memory.
//
// A Tensor is a value: copying it copies the view, not the data. The buffer is kept alive by a
// shared holder whose co-owners are every view of it (and, for mapped weights, the MappedFile).
// Views are not synchronised: concurrent writes to one buffer need outside coordination.
#ifndef SPARSESERVE_COMMON_TENSOR_TENSOR_H_
#define SPARSESERVE_COMMON_TENSOR_TENSOR_H_

#include <array>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/core/check.h"
#include "common/tensor/dtype.h"

namespace sparseserve {

enum class Device : uint8_t { kHost, kCuda };

inline constexpr int kMaxTensorDims = 4;

class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims);
  int ndim() const { return ndim_; }
  int64_t operator[](int i) const { return dims_[i]; }
  int64_t& operator[](int i) { return dims_[i]; }
  int64_t numel() const;
  bool operator==(const Shape& other) const;
  std::string ToString() const;  // "[2, 3]"

 private:
  std::array<int64_t, kMaxTensorDims> dims_{};
  int ndim_ = 0;
};

class Tensor {
 public:
  Tensor() = default;  // empty: numel() == 0, data() == nullptr

  // Allocates a contiguous, zero-filled host tensor (64-byte aligned).
  static Tensor Zeros(DType dtype, Shape shape);
  // Wraps memory owned elsewhere; `holder` (may be null for borrowed memory) keeps it alive.
  static Tensor Wrap(void* data, DType dtype, Shape shape, Device device,
                     std::shared_ptr<void> holder);

  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  const Shape& shape() const { return shape_; }
  int ndim() const { return shape_.ndim(); }
  int64_t dim(int i) const { return shape_[i]; }
  int64_t stride(int i) const { return strides_[i]; }  // in elements
  int64_t numel() const { return shape_.numel(); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * DTypeSize(dtype_); }
  bool is_contiguous() const;
  bool empty() const { return data_ == nullptr; }

  void* raw_data() const { return data_; }
  template <typename T>
  T* data() const {
    return static_cast<T*>(data_);
  }

  // View of rows [begin, end) along dimension `axis`.
  // REQUIRES: 0 <= begin <= end <= dim(axis).
  Tensor Slice(int axis, int64_t begin, int64_t end) const;
  // Same buffer with a new shape. Returns kInvalidArgument if the element count differs or the
  // view is not contiguous.
  absl::StatusOr<Tensor> Reshape(Shape shape) const;

  // Host-only element access for tests and reference code; f32/bf16/f16 read as float.
  // REQUIRES: device() == Device::kHost, ndim() == number of indices.
  float GetFloat(std::initializer_list<int64_t> idx) const;
  void SetFloat(std::initializer_list<int64_t> idx, float value) const;

  // Copies into a new contiguous host f32 tensor (host source only). Returns kUnimplemented for
  // device tensors and kInvalidArgument for integer tensors.
  absl::StatusOr<Tensor> ToF32() const;

  std::string DebugString() const;  // "f32[2, 3]"

 private:
  int64_t Offset(std::initializer_list<int64_t> idx) const;

  void* data_ = nullptr;
  DType dtype_ = DType::kF32;
  Device device_ = Device::kHost;
  Shape shape_;
  std::array<int64_t, kMaxTensorDims> strides_{};
  std::shared_ptr<void> holder_;
};

}  // namespace sparseserve

#endif  // SPARSESERVE_COMMON_TENSOR_TENSOR_H_
