#include "common/model/gguf_file.h"

#include <cstring>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/core/mapped_file.h"
#include "common/core/status.h"
#include "common/model/internal/byte_reader.h"
#include "common/model/internal/gguf_metadata_reader.h"

namespace sparseserve::model {
namespace {

constexpr uint64_t kDefaultAlignment = 32;
constexpr uint64_t kMaxAlignment = uint64_t{1} << 30;
constexpr uint64_t kInt64Max = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
// Smallest encodings: key length + value type + a one-byte value; name length + n_dims + one
// ne + type + offset.
constexpr uint64_t kMinKvBytes = 8 + 4 + 1;
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 8 + 4 + 8;

// REQUIRES: 1 <= n <= kMaxTensorDims.
Shape MakeShape(const int64_t* dims, int n) {
  switch (n) {
    case 1: return Shape{dims[0]};
    case 2: return Shape{dims[0], dims[1]};
    case 3: return Shape{dims[0], dims[1], dims[2]};
    default: return Shape{dims[0], dims[1], dims[2], dims[3]};
  }
}

// The DType of a supported ggml type; false for the others.
bool GgmlTypeToDType(uint32_t ggml_type, DType* dtype) {
  switch (ggml_type) {
    case kGgmlTypeF32: *dtype = DType::kF32; return true;
    case kGgmlTypeF16: *dtype = DType::kF16; return true;
    case kGgmlTypeBf16: *dtype = DType::kBf16; return true;
    default: return false;
  }
}

// Reads one tensor directory entry; `alignment` is the file's data alignment.
absl::StatusOr<GgufTensorInfo> ReadTensorInfo(internal::ByteReader& reader, uint64_t alignment) {
  GgufTensorInfo info;
  SS_ASSIGN_OR_RETURN(absl::string_view name, reader.ReadStringView("tensor name"));
  info.name = std::string(name);
  const std::string what = absl::StrCat("tensor '", info.name, "'");
  const size_t dims_pos = reader.pos();
  SS_ASSIGN_OR_RETURN(uint32_t n_dims, reader.ReadU32(absl::StrCat(what, " dimension count")));
  if (n_dims == 0 || n_dims > static_cast<uint32_t>(kMaxTensorDims)) {
    return reader.ErrorAt(dims_pos,
                          absl::StrCat(what, " has ", n_dims, " dimensions (1 to 4 supported)"));
  }
  int64_t dims[kMaxTensorDims] = {};
  uint64_t numel = 1;
  // The product of the non-zero dims bounds every partial product in any order (Shape
  // multiplies them slowest-first), so checking it keeps all of them within int64.
  uint64_t nonzero_product = 1;
  for (uint32_t d = 0; d < n_dims; ++d) {
    const size_t ne_pos = reader.pos();
    SS_ASSIGN_OR_RETURN(uint64_t ne, reader.ReadU64(absl::StrCat(what, " ne[", d, "]")));
    if (ne > kInt64Max || (ne != 0 && nonzero_product > kInt64Max / ne)) {
      return reader.ErrorAt(
          ne_pos, absl::StrCat(what, " element count overflows (ne[", d, "] = ", ne, ")"));
    }
    if (ne != 0) nonzero_product *= ne;
    numel *= ne;
    dims[n_dims - 1 - d] = static_cast<int64_t>(ne);  // ggml's ne[0] is the fastest dimension
  }
  info.shape = MakeShape(dims, static_cast<int>(n_dims));
  SS_ASSIGN_OR_RETURN(info.ggml_type, reader.ReadU32(absl::StrCat(what, " type")));
  const size_t offset_pos = reader.pos();
  SS_ASSIGN_OR_RETURN(info.offset, reader.ReadU64(absl::StrCat(what, " offset")));
  if (info.offset % alignment != 0) {
    return reader.ErrorAt(offset_pos,
                          absl::StrCat(what, " offset ", info.offset,
                                       " is not a multiple of the alignment ", alignment));
  }
  DType dtype;
  if (GgmlTypeToDType(info.ggml_type, &dtype)) {
    const uint64_t elem_size = DTypeSize(dtype);
    if (numel > std::numeric_limits<uint64_t>::max() / elem_size) {
      return reader.ErrorAt(dims_pos, absl::StrCat(what, " byte size overflows"));
    }
    info.nbytes = numel * elem_size;
  }
  return info;
}

}  // namespace

absl::string_view GgmlTypeName(uint32_t ggml_type) {
  switch (ggml_type) {
    case 0: return "F32";
    case 1: return "F16";
    case 2: return "Q4_0";
    case 3: return "Q4_1";
    case 6: return "Q5_0";
    case 7: return "Q5_1";
    case 8: return "Q8_0";
    case 9: return "Q8_1";
    case 10: return "Q2_K";
    case 11: return "Q3_K";
    case 12: return "Q4_K";
    case 13: return "Q5_K";
    case 14: return "Q6_K";
    case 15: return "Q8_K";
    case 16: return "IQ2_XXS";
    case 17: return "IQ2_XS";
    case 18: return "IQ3_XXS";
    case 19: return "IQ1_S";
    case 20: return "IQ4_NL";
    case 21: return "IQ3_S";
    case 22: return "IQ2_S";
    case 23: return "IQ4_XS";
    case 24: return "I8";
    case 25: return "I16";
    case 26: return "I32";
    case 27: return "I64";
    case 28: return "F64";
    case 29: return "IQ1_M";
    case 30: return "BF16";
    case 34: return "TQ1_0";
    case 35: return "TQ2_0";
    case 39: return "MXFP4";
    default: return "unknown";
  }
}

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::Open(const std::string& path) {
  SS_ASSIGN_OR_RETURN(std::unique_ptr<core::MappedFile> mapped, core::MappedFile::Open(path));
  std::shared_ptr<const core::MappedFile> shared(std::move(mapped));
  const uint8_t* data = shared->data();
  const size_t size = shared->size();
  return FromBuffer(path, data, size, std::move(shared));
}

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::FromBuffer(const std::string& source,
                                                               const uint8_t* data, size_t size,
                                                               std::shared_ptr<const void> holder) {
  internal::ByteReader reader(source, data, size);
  SS_ASSIGN_OR_RETURN(const uint8_t* magic, reader.ReadBytes(4, "magic"));
  if (std::memcmp(magic, "GGUF", 4) != 0) return reader.ErrorAt(0, "bad magic (not a GGUF file)");
  SS_ASSIGN_OR_RETURN(uint32_t version, reader.ReadU32("version"));
  if (version != 2 && version != 3) {
    return reader.ErrorAt(
        4, absl::StrCat("unsupported GGUF version ", version, " (2 and 3 are supported)"));
  }
  SS_ASSIGN_OR_RETURN(uint64_t num_tensors, reader.ReadU64("tensor count"));
  SS_ASSIGN_OR_RETURN(uint64_t num_kv, reader.ReadU64("metadata count"));
  if (num_kv > reader.remaining() / kMinKvBytes) {
    return reader.ErrorAt(16, absl::StrCat("metadata count ", num_kv, " cannot fit in the ",
                                           reader.remaining(), " bytes left"));
  }
  if (num_tensors > reader.remaining() / kMinTensorInfoBytes) {
    return reader.ErrorAt(8, absl::StrCat("tensor count ", num_tensors, " cannot fit in the ",
                                          reader.remaining(), " bytes left"));
  }
  SS_ASSIGN_OR_RETURN(GgufMetadata metadata, internal::ReadGgufMetadata(reader, num_kv, source));
  std::unique_ptr<GgufFile> file(new GgufFile(source, std::move(metadata)));
  file->version_ = version;
  file->holder_ = std::move(holder);

  if (file->metadata_.Has("general.alignment")) {
    SS_ASSIGN_OR_RETURN(file->alignment_, file->metadata_.GetUint("general.alignment"));
    const uint64_t a = file->alignment_;
    if (a == 0 || a > kMaxAlignment || (a & (a - 1)) != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          source, ": general.alignment ", a, " is not a power of two up to ", kMaxAlignment));
    }
  } else {
    file->alignment_ = kDefaultAlignment;
  }

  std::vector<size_t> info_pos;  // where each directory entry starts, for error messages
  file->tensors_.reserve(static_cast<size_t>(num_tensors));
  for (uint64_t i = 0; i < num_tensors; ++i) {
    info_pos.push_back(reader.pos());
    SS_ASSIGN_OR_RETURN(GgufTensorInfo info, ReadTensorInfo(reader, file->alignment_));
    if (!file->tensor_index_.emplace(info.name, file->tensors_.size()).second) {
      return reader.ErrorAt(info_pos.back(), absl::StrCat("duplicate tensor '", info.name, "'"));
    }
    file->tensors_.push_back(std::move(info));
  }

  // pos <= size and alignment <= 2^30, so this cannot overflow.
  const uint64_t a = file->alignment_;
  file->data_offset_ = (static_cast<uint64_t>(reader.pos()) + a - 1) / a * a;
  file->data_size_ = size > file->data_offset_ ? size - file->data_offset_ : 0;
  file->data_ = data + (size > file->data_offset_ ? file->data_offset_ : size);
  for (size_t i = 0; i < file->tensors_.size(); ++i) {
    const GgufTensorInfo& info = file->tensors_[i];
    if (info.offset > file->data_size_ || info.nbytes > file->data_size_ - info.offset) {
      return reader.ErrorAt(
          info_pos[i], absl::StrCat("tensor '", info.name, "' data [", info.offset, ", +",
                                    info.nbytes, ") runs past the end of the ", file->data_size_,
                                    "-byte data section at file byte ", file->data_offset_));
    }
  }
  return file;
}

const GgufTensorInfo* GgufFile::FindTensorInfo(absl::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

std::vector<std::string> GgufFile::TensorNames() const {
  std::vector<std::string> names;
  names.reserve(tensors_.size());
  for (const GgufTensorInfo& info : tensors_) names.push_back(info.name);
  return names;
}

bool GgufFile::HasTensor(absl::string_view name) const {
  return tensor_index_.contains(name);
}

absl::StatusOr<Tensor> GgufFile::GetTensor(absl::string_view name) const {
  const GgufTensorInfo* info = FindTensorInfo(name);
  if (info == nullptr) {
    return absl::NotFoundError(absl::StrCat("tensor '", name, "' not found in ", source_));
  }
  DType dtype;
  if (!GgmlTypeToDType(info->ggml_type, &dtype)) {
    return absl::UnimplementedError(
        absl::StrCat(source_, ": tensor '", name, "' has ggml type ", GgmlTypeName(info->ggml_type),
                     " (", info->ggml_type, "); only F32, F16 and BF16 are supported"));
  }
  const uint8_t* p = data_ + info->offset;
  if (reinterpret_cast<uintptr_t>(p) % DTypeSize(dtype) != 0) {
    Tensor copy = Tensor::Zeros(dtype, info->shape);
    if (info->nbytes > 0) std::memcpy(copy.raw_data(), p, static_cast<size_t>(info->nbytes));
    return copy;
  }
  return Tensor::Wrap(const_cast<uint8_t*>(p), dtype, info->shape, Device::kHost,
                      std::const_pointer_cast<void>(holder_));
}

}  // namespace sparseserve::model
