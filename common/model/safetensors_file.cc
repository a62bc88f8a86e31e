#include "common/model/safetensors_file.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/core/mapped_file.h"
#include "common/core/status.h"
#include "nlohmann/json.hpp"

namespace sparseserve::model {
namespace {

using Json = nlohmann::json;

constexpr uint64_t kInt64Max = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());

// Element sizes of the dtypes the safetensors format defines (sub-byte types excluded).
uint64_t SafetensorsDTypeSize(absl::string_view dtype) {
  struct Entry {
    absl::string_view name;
    uint64_t size;
  };
  static constexpr Entry kEntries[] = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"F8_E8M0", 1},
      {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},     {"U32", 4},
      {"F32", 4},  {"F64", 8}, {"I64", 8}, {"U64", 8},
  };
  for (const Entry& e : kEntries) {
    if (e.name == dtype) return e.size;
  }
  return 0;
}

bool SafetensorsDTypeToDType(absl::string_view dtype, DType* out) {
  if (dtype == "F32") {
    *out = DType::kF32;
  } else if (dtype == "BF16") {
    *out = DType::kBf16;
  } else if (dtype == "F16") {
    *out = DType::kF16;
  } else {
    return false;
  }
  return true;
}

// Parses one header entry {"dtype", "shape", "data_offsets"} of tensor `name`.
absl::StatusOr<SafetensorsTensorInfo> ParseEntry(const std::string& source, const std::string& name,
                                                 const Json& entry, uint64_t data_size) {
  auto error = [&](absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": tensor '", name, "': ", what));
  };
  if (!entry.is_object()) return error("header entry is not a JSON object");
  SafetensorsTensorInfo info;
  info.name = name;

  auto dtype = entry.find("dtype");
  if (dtype == entry.end() || !dtype->is_string()) return error("missing or non-string dtype");
  info.dtype = dtype->get_ref<const std::string&>();
  const uint64_t elem_size = SafetensorsDTypeSize(info.dtype);
  if (elem_size == 0) return error(absl::StrCat("unknown dtype '", info.dtype, "'"));

  auto shape = entry.find("shape");
  if (shape == entry.end() || !shape->is_array()) return error("missing or non-array shape");
  uint64_t numel = 1;
  uint64_t nonzero_product = 1;  // bounds every partial product, so Shape::numel cannot overflow
  for (const Json& dim : *shape) {
    if (!dim.is_number_unsigned() || dim.get<uint64_t>() > kInt64Max) {
      return error(absl::StrCat("shape ", shape->dump(), " is not a list of non-negative ints"));
    }
    const uint64_t d = dim.get<uint64_t>();
    if (d != 0 && nonzero_product > kInt64Max / d) {
      return error(absl::StrCat("shape ", shape->dump(), " element count overflows"));
    }
    if (d != 0) nonzero_product *= d;
    numel *= d;
    info.shape.push_back(static_cast<int64_t>(d));
  }

  auto offsets = entry.find("data_offsets");
  if (offsets == entry.end() || !offsets->is_array() || offsets->size() != 2 ||
      !(*offsets)[0].is_number_unsigned() || !(*offsets)[1].is_number_unsigned()) {
    return error("data_offsets is not a list of two non-negative ints");
  }
  info.begin = (*offsets)[0].get<uint64_t>();
  info.end = (*offsets)[1].get<uint64_t>();
  if (info.begin > info.end || info.end > data_size) {
    return error(absl::StrCat("data_offsets [", info.begin, ", ", info.end, "] outside the ",
                              data_size, "-byte data section"));
  }
  if (numel > std::numeric_limits<uint64_t>::max() / elem_size ||
      numel * elem_size != info.end - info.begin) {
    return error(absl::StrCat("data_offsets [", info.begin, ", ", info.end, "] hold ",
                              info.end - info.begin, " bytes but ", info.dtype, " shape [",
                              absl::StrJoin(info.shape, ", "), "] needs ", numel, " x ",
                              elem_size));
  }
  return info;
}

}  // namespace

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  SS_ASSIGN_OR_RETURN(std::unique_ptr<core::MappedFile> mapped, core::MappedFile::Open(path));
  std::shared_ptr<const core::MappedFile> shared(std::move(mapped));
  const uint8_t* data = shared->data();
  const size_t size = shared->size();
  return FromBuffer(path, data, size, std::move(shared));
}

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::FromBuffer(
    const std::string& source, const uint8_t* data, size_t size,
    std::shared_ptr<const void> holder) {
  if (size < 8) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": file of ", size, " bytes is too short for the 8-byte header length"));
  }
  uint64_t header_size;
  std::memcpy(&header_size, data, sizeof(header_size));  // little-endian host (see byte_reader.h)
  if (header_size > size - 8 || header_size > kMaxSafetensorsHeaderBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": header length ", header_size, " exceeds the ", size - 8,
                     " bytes after it or the limit of ", kMaxSafetensorsHeaderBytes));
  }
  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile(source));
  file->data_ = data + 8 + header_size;
  file->data_size_ = size - 8 - header_size;
  file->holder_ = std::move(holder);

  // nlohmann-json throws from accessors (and bad_alloc); nothing may escape this function.
  try {
    const char* text = reinterpret_cast<const char*>(data + 8);
    const Json header = Json::parse(text, text + header_size, /*cb=*/nullptr,
                                    /*allow_exceptions=*/false);
    if (header.is_discarded()) {
      return absl::InvalidArgumentError(absl::StrCat(source, ": header is not valid JSON"));
    }
    if (!header.is_object()) {
      return absl::InvalidArgumentError(absl::StrCat(source, ": header is not a JSON object"));
    }
    for (const auto& [key, value] : header.items()) {
      if (key == "__metadata__") {
        if (!value.is_object()) {
          return absl::InvalidArgumentError(
              absl::StrCat(source, ": __metadata__ is not a JSON object"));
        }
        for (const auto& [meta_key, meta_value] : value.items()) {
          if (!meta_value.is_string()) {
            return absl::InvalidArgumentError(
                absl::StrCat(source, ": __metadata__ value of '", meta_key, "' is not a string"));
          }
          file->metadata_[meta_key] = meta_value.get_ref<const std::string&>();
        }
        continue;
      }
      SS_ASSIGN_OR_RETURN(SafetensorsTensorInfo info,
                          ParseEntry(source, key, value, file->data_size_));
      file->tensors_.push_back(std::move(info));
    }
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": malformed header: ", e.what()));
  }

  std::stable_sort(file->tensors_.begin(), file->tensors_.end(),
                   [](const SafetensorsTensorInfo& a, const SafetensorsTensorInfo& b) {
                     return a.begin < b.begin;
                   });
  for (size_t i = 0; i < file->tensors_.size(); ++i) {
    file->tensor_index_.emplace(file->tensors_[i].name, i);
  }
  return file;
}

const SafetensorsTensorInfo* SafetensorsFile::FindTensorInfo(absl::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

std::vector<std::string> SafetensorsFile::TensorNames() const {
  std::vector<std::string> names;
  names.reserve(tensors_.size());
  for (const SafetensorsTensorInfo& info : tensors_) names.push_back(info.name);
  return names;
}

bool SafetensorsFile::HasTensor(absl::string_view name) const {
  return tensor_index_.contains(name);
}

absl::StatusOr<Tensor> SafetensorsFile::GetTensor(absl::string_view name) const {
  const SafetensorsTensorInfo* info = FindTensorInfo(name);
  if (info == nullptr) {
    return absl::NotFoundError(absl::StrCat("tensor '", name, "' not found in ", source_));
  }
  DType dtype;
  if (!SafetensorsDTypeToDType(info->dtype, &dtype)) {
    return absl::UnimplementedError(absl::StrCat(source_, ": tensor '", name, "' has dtype ",
                                                 info->dtype,
                                                 "; only F32, F16 and BF16 are supported"));
  }
  Shape shape;
  switch (info->shape.size()) {
    case 0: shape = Shape{1}; break;
    case 1: shape = Shape{info->shape[0]}; break;
    case 2: shape = Shape{info->shape[0], info->shape[1]}; break;
    case 3: shape = Shape{info->shape[0], info->shape[1], info->shape[2]}; break;
    case 4: shape = Shape{info->shape[0], info->shape[1], info->shape[2], info->shape[3]}; break;
    default:
      return absl::UnimplementedError(absl::StrCat(source_, ": tensor '", name, "' has ",
                                                   info->shape.size(),
                                                   " dimensions; at most 4 are supported"));
  }
  const uint8_t* p = data_ + info->begin;
  if (reinterpret_cast<uintptr_t>(p) % DTypeSize(dtype) != 0) {
    Tensor copy = Tensor::Zeros(dtype, shape);
    const uint64_t nbytes = info->end - info->begin;
    if (nbytes > 0) std::memcpy(copy.raw_data(), p, static_cast<size_t>(nbytes));
    return copy;
  }
  return Tensor::Wrap(const_cast<uint8_t*>(p), dtype, shape, Device::kHost,
                      std::const_pointer_cast<void>(holder_));
}

}  // namespace sparseserve::model
