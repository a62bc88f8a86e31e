// SafetensorsFile: reader for one Hugging Face `.safetensors` file (an 8-byte little-endian
// header length N, an N-byte JSON header mapping tensor names to {dtype, shape, data_offsets},
// then the data section), with zero-copy host views of F32, F16 and BF16 tensors.
//
// The file is untrusted input: the header length, the JSON and every offset are checked
// (overflow-safe) before use; a malformed file gives kInvalidArgument naming the file, never a
// crash. Tensor views point into the read-only mapping (writing through them faults) and keep
// it alive. Immutable after opening; safe to read from any thread.
#ifndef SPARSESERVE_COMMON_MODEL_SAFETENSORS_FILE_H_
#define SPARSESERVE_COMMON_MODEL_SAFETENSORS_FILE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/model/tensor_file.h"
#include "common/tensor/tensor.h"

namespace sparseserve::model {

// Largest JSON header accepted (the format's own limit).
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;

// One entry of the header.
struct SafetensorsTensorInfo {
  std::string name;
  std::string dtype;           // as written: "F32", "BF16", "I64", ...
  std::vector<int64_t> shape;  // may have more than 4 dimensions (then GetTensor fails)
  uint64_t begin = 0;          // data_offsets, relative to the data section
  uint64_t end = 0;
};

class SafetensorsFile : public TensorFile {
 public:
  // Maps and parses `path`. Returns MappedFile::Open's errors for I/O failures and
  // kInvalidArgument "<path>: ..." for a malformed file: header length beyond the file or
  // kMaxSafetensorsHeaderBytes, header not a JSON object, an unknown dtype, a shape or
  // data_offsets of the wrong type, offsets outside the data section, or a byte size that does
  // not match the shape and dtype.
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);

  // Parses `size` bytes at `data` (the fuzzer and tests use this). `holder` keeps the bytes
  // alive; it is co-owned by the file and every tensor view, and may be null when the caller
  // guarantees the bytes outlive them. `source` names the bytes in messages. Same errors as Open.
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> FromBuffer(
      const std::string& source, const uint8_t* data, size_t size,
      std::shared_ptr<const void> holder);

  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& source() const { return source_; }
  // The optional "__metadata__" string map of the header.
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // Header entries ordered by data offset (file order).
  const std::vector<SafetensorsTensorInfo>& tensor_infos() const { return tensors_; }
  const SafetensorsTensorInfo* FindTensorInfo(absl::string_view name) const;

  // TensorFile. GetTensor returns kNotFound for an absent name and kUnimplemented for dtypes
  // other than F32/F16/BF16 or more than 4 dimensions. A 0-dimensional (scalar) tensor is
  // returned with shape [1]. Data not aligned to its element size is returned as an aligned
  // copy.
  std::vector<std::string> TensorNames() const override;
  bool HasTensor(absl::string_view name) const override;
  absl::StatusOr<Tensor> GetTensor(absl::string_view name) const override;

 private:
  explicit SafetensorsFile(std::string source) : source_(std::move(source)) {}

  std::string source_;
  std::map<std::string, std::string> metadata_;
  std::vector<SafetensorsTensorInfo> tensors_;
  absl::flat_hash_map<std::string, size_t> tensor_index_;  // name -> tensors_ index
  const uint8_t* data_ = nullptr;  // the data section, inside the bytes `holder_` keeps alive
  uint64_t data_size_ = 0;
  std::shared_ptr<const void> holder_;
};

}  // namespace sparseserve::model

#endif  // SPARSESERVE_COMMON_MODEL_SAFETENSORS_FILE_H_
