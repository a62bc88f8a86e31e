#include "common/model/gguf_metadata.h"

#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/core/status.h"
#include "common/model/internal/gguf_metadata_reader.h"

namespace sparseserve::model {
namespace {

bool IsInteger(GgufType type) {
  switch (type) {
    case GgufType::kUint8:
    case GgufType::kInt8:
    case GgufType::kUint16:
    case GgufType::kInt16:
    case GgufType::kUint32:
    case GgufType::kInt32:
    case GgufType::kUint64:
    case GgufType::kInt64: return true;
    default: return false;
  }
}

bool IsSigned(GgufType type) {
  return type == GgufType::kInt8 || type == GgufType::kInt16 || type == GgufType::kInt32 ||
         type == GgufType::kInt64;
}

bool IsNumber(GgufType type) {
  return IsInteger(type) || type == GgufType::kFloat32 || type == GgufType::kFloat64;
}

// An integer held as sign + magnitude so that every GGUF integer type fits without loss.
struct WideInt {
  bool negative = false;
  uint64_t magnitude = 0;
};

// REQUIRES: IsInteger(type); `p` points at GgufScalarSize(type) bytes.
WideInt DecodeInteger(GgufType type, const uint8_t* p) {
  const size_t n = GgufScalarSize(type);
  uint64_t bits = 0;
  std::memcpy(&bits, p, n);
  if (!IsSigned(type)) return {false, bits};
  // Sign-extend the n-byte value to 64 bits.
  const int shift = static_cast<int>(64 - 8 * n);
  const int64_t v = static_cast<int64_t>(bits << shift) >> shift;
  if (v >= 0) return {false, static_cast<uint64_t>(v)};
  return {true, static_cast<uint64_t>(-(v + 1)) + 1};  // no overflow for INT64_MIN
}

// REQUIRES: IsNumber(type).
double DecodeNumber(GgufType type, const uint8_t* p) {
  if (type == GgufType::kFloat32) {
    float f;
    std::memcpy(&f, p, sizeof(f));
    return f;
  }
  if (type == GgufType::kFloat64) {
    double d;
    std::memcpy(&d, p, sizeof(d));
    return d;
  }
  const WideInt w = DecodeInteger(type, p);
  const double m = static_cast<double>(w.magnitude);
  return w.negative ? -m : m;
}

absl::StatusOr<int64_t> ToInt64(const WideInt& w) {
  constexpr uint64_t kMax = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  if (!w.negative) {
    if (w.magnitude > kMax) return absl::OutOfRangeError(absl::StrCat(w.magnitude));
    return static_cast<int64_t>(w.magnitude);
  }
  if (w.magnitude == kMax + 1) return std::numeric_limits<int64_t>::min();
  return -static_cast<int64_t>(w.magnitude);
}

}  // namespace

absl::string_view GgufTypeName(GgufType type) {
  switch (type) {
    case GgufType::kUint8: return "uint8";
    case GgufType::kInt8: return "int8";
    case GgufType::kUint16: return "uint16";
    case GgufType::kInt16: return "int16";
    case GgufType::kUint32: return "uint32";
    case GgufType::kInt32: return "int32";
    case GgufType::kFloat32: return "float32";
    case GgufType::kBool: return "bool";
    case GgufType::kString: return "string";
    case GgufType::kArray: return "array";
    case GgufType::kUint64: return "uint64";
    case GgufType::kInt64: return "int64";
    case GgufType::kFloat64: return "float64";
  }
  return "unknown";
}

size_t GgufScalarSize(GgufType type) {
  switch (type) {
    case GgufType::kUint8:
    case GgufType::kInt8:
    case GgufType::kBool: return 1;
    case GgufType::kUint16:
    case GgufType::kInt16: return 2;
    case GgufType::kUint32:
    case GgufType::kInt32:
    case GgufType::kFloat32: return 4;
    case GgufType::kUint64:
    case GgufType::kInt64:
    case GgufType::kFloat64: return 8;
    case GgufType::kString:
    case GgufType::kArray: return 0;
  }
  return 0;
}

absl::Status GgufMetadata::Insert(std::string key, GgufValue value) {
  if (index_.contains(key)) {
    return absl::InvalidArgumentError(
        absl::StrCat(source_, ": duplicate metadata key '", key, "'"));
  }
  index_.emplace(key, entries_.size());
  entries_.emplace_back(std::move(key), std::move(value));
  return absl::OkStatus();
}

std::vector<std::string> GgufMetadata::Keys() const {
  std::vector<std::string> keys;
  keys.reserve(entries_.size());
  for (const auto& [key, value] : entries_) keys.push_back(key);
  return keys;
}

const GgufValue* GgufMetadata::Find(absl::string_view key) const {
  auto it = index_.find(key);
  return it == index_.end() ? nullptr : &entries_[it->second].second;
}

absl::Status GgufMetadata::TypeError(absl::string_view key, const GgufValue& value,
                                     absl::string_view wanted) const {
  std::string stored(GgufTypeName(value.type));
  if (value.type == GgufType::kArray) {
    stored = absl::StrCat("array of ", GgufTypeName(value.elem_type));
  }
  return absl::InvalidArgumentError(
      absl::StrCat(source_, ": metadata key '", key, "' is ", stored, ", expected ", wanted));
}

absl::StatusOr<const GgufValue*> GgufMetadata::FindTyped(absl::string_view key,
                                                         GgufType type) const {
  const GgufValue* value = Find(key);
  if (value == nullptr) {
    return absl::NotFoundError(absl::StrCat(source_, ": metadata key '", key, "' not found"));
  }
  if (value->type != type) return TypeError(key, *value, GgufTypeName(type));
  return value;
}

absl::StatusOr<std::string> GgufMetadata::GetString(absl::string_view key) const {
  SS_ASSIGN_OR_RETURN(const GgufValue* value, FindTyped(key, GgufType::kString));
  return value->str;
}

absl::StatusOr<bool> GgufMetadata::GetBool(absl::string_view key) const {
  SS_ASSIGN_OR_RETURN(const GgufValue* value, FindTyped(key, GgufType::kBool));
  return value->scalar[0] != 0;
}

absl::StatusOr<uint64_t> GgufMetadata::GetUint(absl::string_view key) const {
  const GgufValue* value = Find(key);
  if (value == nullptr) {
    return absl::NotFoundError(absl::StrCat(source_, ": metadata key '", key, "' not found"));
  }
  if (!IsInteger(value->type)) return TypeError(key, *value, "an integer");
  const WideInt w = DecodeInteger(value->type, value->scalar.data());
  if (w.negative) {
    return absl::InvalidArgumentError(
        absl::StrCat(source_, ": metadata key '", key, "' is negative (-", w.magnitude, ")"));
  }
  return w.magnitude;
}

absl::StatusOr<int64_t> GgufMetadata::GetInt(absl::string_view key) const {
  const GgufValue* value = Find(key);
  if (value == nullptr) {
    return absl::NotFoundError(absl::StrCat(source_, ": metadata key '", key, "' not found"));
  }
  if (!IsInteger(value->type)) return TypeError(key, *value, "an integer");
  auto v = ToInt64(DecodeInteger(value->type, value->scalar.data()));
  if (!v.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(source_, ": metadata key '", key, "' value ",
                                                   v.status().message(), " exceeds int64"));
  }
  return *v;
}

absl::StatusOr<double> GgufMetadata::GetFloat(absl::string_view key) const {
  const GgufValue* value = Find(key);
  if (value == nullptr) {
    return absl::NotFoundError(absl::StrCat(source_, ": metadata key '", key, "' not found"));
  }
  if (!IsNumber(value->type)) return TypeError(key, *value, "a number");
  return DecodeNumber(value->type, value->scalar.data());
}

absl::StatusOr<uint64_t> GgufMetadata::GetArrayLength(absl::string_view key) const {
  SS_ASSIGN_OR_RETURN(const GgufValue* value, FindTyped(key, GgufType::kArray));
  return value->num_elems;
}

absl::StatusOr<std::vector<std::string>> GgufMetadata::GetStringArray(absl::string_view key) const {
  SS_ASSIGN_OR_RETURN(const GgufValue* value, FindTyped(key, GgufType::kArray));
  if (value->elem_type != GgufType::kString) return TypeError(key, *value, "array of string");
  return value->str_elems;
}

absl::StatusOr<std::vector<float>> GgufMetadata::GetFloatArray(absl::string_view key) const {
  SS_ASSIGN_OR_RETURN(const GgufValue* value, FindTyped(key, GgufType::kArray));
  if (!IsNumber(value->elem_type)) return TypeError(key, *value, "array of numbers");
  const size_t elem_size = GgufScalarSize(value->elem_type);
  std::vector<float> out(value->num_elems);
  const auto* p = reinterpret_cast<const uint8_t*>(value->packed_elems.data());
  for (size_t i = 0; i < out.size(); ++i) {
    out[i] = static_cast<float>(DecodeNumber(value->elem_type, p + i * elem_size));
  }
  return out;
}

absl::StatusOr<std::vector<int64_t>> GgufMetadata::GetIntArray(absl::string_view key) const {
  SS_ASSIGN_OR_RETURN(const GgufValue* value, FindTyped(key, GgufType::kArray));
  if (!IsInteger(value->elem_type)) return TypeError(key, *value, "array of integers");
  const size_t elem_size = GgufScalarSize(value->elem_type);
  std::vector<int64_t> out(value->num_elems);
  const auto* p = reinterpret_cast<const uint8_t*>(value->packed_elems.data());
  for (size_t i = 0; i < out.size(); ++i) {
    auto v = ToInt64(DecodeInteger(value->elem_type, p + i * elem_size));
    if (!v.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(source_, ": metadata key '", key, "' element ", i, " exceeds int64"));
    }
    out[i] = *v;
  }
  return out;
}

namespace internal {
namespace {

absl::StatusOr<GgufType> ReadType(ByteReader& reader, absl::string_view what) {
  const size_t at = reader.pos();
  SS_ASSIGN_OR_RETURN(uint32_t raw, reader.ReadU32(what));
  if (raw > static_cast<uint32_t>(GgufType::kFloat64)) {
    return reader.ErrorAt(at, absl::StrCat("unknown ", what, " ", raw));
  }
  return static_cast<GgufType>(raw);
}

// `key` names the entry in error messages.
absl::Status ReadValue(ByteReader& reader, absl::string_view key, GgufType type, int depth,
                       GgufValue* out) {
  out->type = type;
  if (const size_t n = GgufScalarSize(type); n > 0) {
    SS_ASSIGN_OR_RETURN(const uint8_t* p,
                        reader.ReadBytes(n, absl::StrCat("'", key, "' ", GgufTypeName(type))));
    std::memcpy(out->scalar.data(), p, n);
    return absl::OkStatus();
  }
  if (type == GgufType::kString) {
    SS_ASSIGN_OR_RETURN(absl::string_view s,
                        reader.ReadStringView(absl::StrCat("'", key, "' string")));
    out->str = std::string(s);
    return absl::OkStatus();
  }
  if (depth >= kMaxGgufArrayDepth) {
    return reader.Error(
        absl::StrCat("'", key, "' has arrays nested deeper than ", kMaxGgufArrayDepth));
  }
  SS_ASSIGN_OR_RETURN(out->elem_type,
                      ReadType(reader, absl::StrCat("'", key, "' array element type")));
  const size_t count_pos = reader.pos();
  SS_ASSIGN_OR_RETURN(out->num_elems, reader.ReadU64(absl::StrCat("'", key, "' array length")));
  // Smallest encoding of one element: its bytes, a string's length, a nested array's header.
  const size_t elem_size = GgufScalarSize(out->elem_type);
  const uint64_t min_elem_bytes =
      elem_size > 0 ? elem_size : (out->elem_type == GgufType::kString ? 8 : 12);
  if (out->num_elems > reader.remaining() / min_elem_bytes) {
    return reader.ErrorAt(
        count_pos, absl::StrCat("'", key, "' array length ", out->num_elems, " of ",
                                GgufTypeName(out->elem_type), " exceeds the ", reader.remaining(),
                                " bytes left"));
  }
  const size_t count = static_cast<size_t>(out->num_elems);
  if (elem_size > 0) {
    SS_ASSIGN_OR_RETURN(const uint8_t* p, reader.ReadBytes(count * elem_size,
                                                           absl::StrCat("'", key, "' array data")));
    out->packed_elems.assign(reinterpret_cast<const char*>(p), count * elem_size);
  } else if (out->elem_type == GgufType::kString) {
    out->str_elems.reserve(count);
    const std::string what = absl::StrCat("'", key, "' string element");
    for (size_t i = 0; i < count; ++i) {
      SS_ASSIGN_OR_RETURN(absl::string_view s, reader.ReadStringView(what));
      out->str_elems.emplace_back(s);
    }
  } else {
    out->array_elems.resize(count);
    for (size_t i = 0; i < count; ++i) {
      SS_RETURN_IF_ERROR(ReadValue(reader, key, GgufType::kArray, depth + 1, &out->array_elems[i]));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<GgufMetadata> ReadGgufMetadata(ByteReader& reader, uint64_t num_kv,
                                              std::string source) {
  GgufMetadata metadata(std::move(source));
  for (uint64_t i = 0; i < num_kv; ++i) {
    const size_t entry_pos = reader.pos();
    SS_ASSIGN_OR_RETURN(absl::string_view key, reader.ReadStringView("metadata key"));
    SS_ASSIGN_OR_RETURN(GgufType type, ReadType(reader, absl::StrCat("'", key, "' value type")));
    GgufValue value;
    SS_RETURN_IF_ERROR(ReadValue(reader, key, type, 1, &value));
    absl::Status inserted = metadata.Insert(std::string(key), std::move(value));
    if (!inserted.ok()) return reader.ErrorAt(entry_pos, absl::StrCat("duplicate key '", key, "'"));
  }
  return metadata;
}

}  // namespace internal
}  // namespace sparseserve::model
