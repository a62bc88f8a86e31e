#include "common/tensor/tensor.h"

#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace sparseserve {

Shape::Shape(std::initializer_list<int64_t> dims) {
  SS_CHECK(dims.size() <= kMaxTensorDims);
  for (int64_t d : dims) dims_[ndim_++] = d;
}

int64_t Shape::numel() const {
  if (ndim_ == 0) return 0;
  int64_t n = 1;
  for (int i = 0; i < ndim_; ++i) n *= dims_[i];
  return n;
}

bool Shape::operator==(const Shape& other) const {
  if (ndim_ != other.ndim_) return false;
  for (int i = 0; i < ndim_; ++i) {
    if (dims_[i] != other.dims_[i]) return false;
  }
  return true;
}

std::string Shape::ToString() const {
  return absl::StrCat("[", absl::StrJoin(dims_.begin(), dims_.begin() + ndim_, ", "), "]");
}

namespace {
void FillContiguousStrides(const Shape& shape, std::array<int64_t, kMaxTensorDims>& strides) {
  int64_t s = 1;
  for (int i = shape.ndim() - 1; i >= 0; --i) {
    strides[i] = s;
    s *= shape[i];
  }
}
}  // namespace

Tensor Tensor::Zeros(DType dtype, Shape shape) {
  const size_t bytes = static_cast<size_t>(shape.numel()) * DTypeSize(dtype);
  const size_t rounded = (bytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
  SS_CHECK(p != nullptr);  // host OOM is not recoverable here
  std::memset(p, 0, rounded == 0 ? 64 : rounded);
  std::shared_ptr<void> holder(p, [](void* q) { std::free(q); });
  return Wrap(p, dtype, shape, Device::kHost, std::move(holder));
}

Tensor Tensor::Wrap(void* data, DType dtype, Shape shape, Device device,
                    std::shared_ptr<void> holder) {
  Tensor t;
  t.data_ = data;
  t.dtype_ = dtype;
  t.device_ = device;
  t.shape_ = shape;
  FillContiguousStrides(shape, t.strides_);
  t.holder_ = std::move(holder);
  return t;
}

bool Tensor::is_contiguous() const {
  int64_t s = 1;
  for (int i = ndim() - 1; i >= 0; --i) {
    if (shape_[i] != 1 && strides_[i] != s) return false;
    s *= shape_[i];
  }
  return true;
}

Tensor Tensor::Slice(int axis, int64_t begin, int64_t end) const {
  SS_CHECK(axis >= 0 && axis < ndim());
  SS_CHECK(0 <= begin && begin <= end && end <= shape_[axis]);
  Tensor t = *this;
  t.data_ = static_cast<uint8_t*>(data_) +
            static_cast<size_t>(begin * strides_[axis]) * DTypeSize(dtype_);
  t.shape_[axis] = end - begin;
  return t;
}

absl::StatusOr<Tensor> Tensor::Reshape(Shape shape) const {
  if (shape.numel() != numel()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot reshape ", DebugString(), " to ", shape.ToString()));
  }
  if (!is_contiguous()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot reshape non-contiguous ", DebugString()));
  }
  Tensor t = *this;
  t.shape_ = shape;
  FillContiguousStrides(shape, t.strides_);
  return t;
}

int64_t Tensor::Offset(std::initializer_list<int64_t> idx) const {
  SS_CHECK(static_cast<int>(idx.size()) == ndim());
  int64_t off = 0;
  int i = 0;
  for (int64_t v : idx) {
    SS_CHECK(v >= 0 && v < shape_[i]);
    off += v * strides_[i++];
  }
  return off;
}

float Tensor::GetFloat(std::initializer_list<int64_t> idx) const {
  SS_CHECK(device_ == Device::kHost);
  const int64_t off = Offset(idx);
  switch (dtype_) {
    case DType::kF32: return data<float>()[off];
    case DType::kBf16: return Bf16ToF32(data<uint16_t>()[off]);
    case DType::kF16: return F16ToF32(data<uint16_t>()[off]);
    case DType::kI32: return static_cast<float>(data<int32_t>()[off]);
  }
  return 0;
}

void Tensor::SetFloat(std::initializer_list<int64_t> idx, float value) const {
  SS_CHECK(device_ == Device::kHost);
  const int64_t off = Offset(idx);
  switch (dtype_) {
    case DType::kF32: data<float>()[off] = value; break;
    case DType::kBf16: data<uint16_t>()[off] = F32ToBf16(value); break;
    case DType::kF16: data<uint16_t>()[off] = F32ToF16(value); break;
    case DType::kI32: data<int32_t>()[off] = static_cast<int32_t>(value); break;
  }
}

absl::StatusOr<Tensor> Tensor::ToF32() const {
  if (device_ != Device::kHost) return absl::UnimplementedError("ToF32 of a device tensor");
  if (dtype_ == DType::kI32) return absl::InvalidArgumentError("ToF32 of an integer tensor");
  Tensor out = Zeros(DType::kF32, shape_);
  float* dst = out.data<float>();
  // Walk the (possibly strided) source in row-major order.
  std::array<int64_t, kMaxTensorDims> idx{};
  const int64_t n = numel();
  for (int64_t i = 0; i < n; ++i) {
    int64_t off = 0;
    for (int d = 0; d < ndim(); ++d) off += idx[d] * strides_[d];
    switch (dtype_) {
      case DType::kF32: dst[i] = data<float>()[off]; break;
      case DType::kBf16: dst[i] = Bf16ToF32(data<uint16_t>()[off]); break;
      case DType::kF16: dst[i] = F16ToF32(data<uint16_t>()[off]); break;
      case DType::kI32: break;
    }
    for (int d = ndim() - 1; d >= 0; --d) {
      if (++idx[d] < shape_[d]) break;
      idx[d] = 0;
    }
  }
  return out;
}

std::string Tensor::DebugString() const {
  return absl::StrCat(DTypeName(dtype_), shape_.ToString(),
                      device_ == Device::kCuda ? "@cuda" : "");
}

}  // namespace sparseserve
