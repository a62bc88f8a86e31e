// GgufFile: reader for GGUF v2/v3 weight files (llama.cpp's format): header, key/value metadata,
// tensor directory, and zero-copy host views of F32, F16 and BF16 tensors.
//
// The file is untrusted input: every count, length and offset is checked against the bytes that
// are actually there (overflow-safe) before it is used, and a malformed file gives
// kInvalidArgument "<path>: <what> at byte <offset>", never a crash or a huge allocation.
// Tensor views point into the read-only mapping (writing through them faults) and keep it alive.
// Immutable after opening; safe to read from any thread.
#ifndef SPARSESERVE_COMMON_MODEL_GGUF_FILE_H_
#define SPARSESERVE_COMMON_MODEL_GGUF_FILE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/model/gguf_metadata.h"
#include "common/model/tensor_file.h"
#include "common/tensor/tensor.h"

namespace sparseserve::model {

// ggml tensor types that GetTensor supports (the numbering of ggml's type enum).
inline constexpr uint32_t kGgmlTypeF32 = 0;
inline constexpr uint32_t kGgmlTypeF16 = 1;
inline constexpr uint32_t kGgmlTypeBf16 = 30;

// "F32", "Q4_K", ...; "unknown" for numbers ggml does not define.
absl::string_view GgmlTypeName(uint32_t ggml_type);

// One entry of the tensor directory.
struct GgufTensorInfo {
  std::string name;
  uint32_t ggml_type = kGgmlTypeF32;
  Shape shape;          // ne[] reversed: [ne1, ne0] for a matrix, slowest dimension first
  uint64_t offset = 0;  // bytes from the start of the data section
  uint64_t nbytes = 0;  // size of the data; 0 when ggml_type is not F32/F16/BF16 (not checked)
};

class GgufFile : public TensorFile {
 public:
  // Maps and parses `path`. Returns MappedFile::Open's errors for I/O failures and
  // kInvalidArgument for a malformed file (see the header comment).
  static absl::StatusOr<std::unique_ptr<GgufFile>> Open(const std::string& path);

  // Parses `size` bytes at `data` (the fuzzer and tests use this). `holder` keeps the bytes
  // alive; it is co-owned by the GgufFile and by every tensor view it hands out, and may be null
  // when the caller guarantees the bytes outlive them. `source` names the bytes in messages.
  // Same errors as Open.
  static absl::StatusOr<std::unique_ptr<GgufFile>> FromBuffer(const std::string& source,
                                                              const uint8_t* data, size_t size,
                                                              std::shared_ptr<const void> holder);

  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  const std::string& source() const { return source_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  // Byte offset of the data section from the start of the file.
  uint64_t data_offset() const { return data_offset_; }
  const GgufMetadata& metadata() const { return metadata_; }
  // The tensor directory, in file order.
  const std::vector<GgufTensorInfo>& tensor_infos() const { return tensors_; }
  // The directory entry of `name`, or nullptr when absent.
  const GgufTensorInfo* FindTensorInfo(absl::string_view name) const;

  // TensorFile. GetTensor returns kNotFound for an absent name and kUnimplemented naming the
  // ggml type for anything but F32/F16/BF16. A tensor whose data is not aligned to its element
  // size (possible only with general.alignment < 4) is returned as an aligned copy.
  std::vector<std::string> TensorNames() const override;
  bool HasTensor(absl::string_view name) const override;
  absl::StatusOr<Tensor> GetTensor(absl::string_view name) const override;

 private:
  GgufFile(std::string source, GgufMetadata metadata)
      : source_(std::move(source)), metadata_(std::move(metadata)) {}

  std::string source_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  GgufMetadata metadata_;
  std::vector<GgufTensorInfo> tensors_;
  absl::flat_hash_map<std::string, size_t> tensor_index_;  // name -> tensors_ index
  const uint8_t* data_ = nullptr;  // the data section, inside the bytes `holder_` keeps alive
  uint64_t data_size_ = 0;         // bytes from data_ to the end of the file
  std::shared_ptr<const void> holder_;
};

}  // namespace sparseserve::model

#endif  // SPARSESERVE_COMMON_MODEL_GGUF_FILE_H_
