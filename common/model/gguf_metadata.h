// GgufMetadata: the key/value metadata section of a GGUF file (architecture hyper-parameters,
// tokenizer vocabulary, ...) with typed, checked accessors.
//
// Values are copied out of the file when it is parsed (GgufFile does that), so a GgufMetadata
// does not depend on the mapping. Arrays of fixed-size scalars are kept packed (their encoded
// bytes), so a value costs about what its encoding does. Immutable after parsing; safe to read
// from any thread.
#ifndef SPARSESERVE_COMMON_MODEL_GGUF_METADATA_H_
#define SPARSESERVE_COMMON_MODEL_GGUF_METADATA_H_

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace sparseserve::model {

// GGUF metadata value types, numbered as in the file format.
enum class GgufType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};

// "uint32", "string", ...; "unknown" for values outside the enum.
absl::string_view GgufTypeName(GgufType type);
// Bytes of one value of a fixed-size scalar type; 0 for kString, kArray and unknown values.
size_t GgufScalarSize(GgufType type);

// One metadata value.
struct GgufValue {
  GgufType type = GgufType::kUint8;
  std::array<uint8_t, 8> scalar{};  // fixed-size scalar types: the value's bytes, zero-padded
  std::string str;                  // kString
  // kArray only:
  GgufType elem_type = GgufType::kUint8;
  uint64_t num_elems = 0;
  std::string packed_elems;            // fixed-size scalar elements: num_elems encoded values
  std::vector<std::string> str_elems;  // kString elements
  std::vector<GgufValue> array_elems;  // kArray elements (nested arrays)
};

class GgufMetadata {
 public:
  // `source` (the file path) prefixes every error message.
  explicit GgufMetadata(std::string source) : source_(std::move(source)) {}

  // Appends a key (parser use). Returns kInvalidArgument if the key is already present.
  absl::Status Insert(std::string key, GgufValue value);

  bool Has(absl::string_view key) const { return index_.contains(key); }
  // Keys in file order.
  std::vector<std::string> Keys() const;
  size_t size() const { return entries_.size(); }
  // The raw value, or nullptr when absent.
  const GgufValue* Find(absl::string_view key) const;

  // Typed accessors. Each returns kNotFound naming the key when it is absent and
  // kInvalidArgument naming the key and the stored type when the type does not fit.
  absl::StatusOr<std::string> GetString(absl::string_view key) const;
  // Any integer type. Also kInvalidArgument for a negative value.
  absl::StatusOr<uint64_t> GetUint(absl::string_view key) const;
  // Any integer type. Also kInvalidArgument for a uint64 above INT64_MAX.
  absl::StatusOr<int64_t> GetInt(absl::string_view key) const;
  // float32, float64 or any integer type.
  absl::StatusOr<double> GetFloat(absl::string_view key) const;
  absl::StatusOr<bool> GetBool(absl::string_view key) const;
  // Number of elements of an array of any element type.
  absl::StatusOr<uint64_t> GetArrayLength(absl::string_view key) const;
  // Array of string.
  absl::StatusOr<std::vector<std::string>> GetStringArray(absl::string_view key) const;
  // Array of float32, float64 or any integer type, converted to float.
  absl::StatusOr<std::vector<float>> GetFloatArray(absl::string_view key) const;
  // Array of any integer type. Also kInvalidArgument for a uint64 element above INT64_MAX.
  absl::StatusOr<std::vector<int64_t>> GetIntArray(absl::string_view key) const;

 private:
  // The value of `key` if it has type `type`, else kNotFound / kInvalidArgument.
  absl::StatusOr<const GgufValue*> FindTyped(absl::string_view key, GgufType type) const;
  absl::Status TypeError(absl::string_view key, const GgufValue& value,
                         absl::string_view wanted) const;

  std::string source_;
  std::vector<std::pair<std::string, GgufValue>> entries_;
  absl::flat_hash_map<std::string, size_t> index_;  // key -> entries_ index
};

}  // namespace sparseserve::model

#endif  // SPARSESERVE_COMMON_MODEL_GGUF_METADATA_H_
