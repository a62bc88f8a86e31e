// MappedFile: a read-only memory map of a whole file (RAII over mmap/munmap).
//
// Model loaders map weight files and read tensors in place. Immutable after Create, so it can be
// read from any thread.
#ifndef SPARSESERVE_COMMON_CORE_MAPPED_FILE_H_
#define SPARSESERVE_COMMON_CORE_MAPPED_FILE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include "absl/strings/string_view.h"

#include "absl/status/statusor.h"

namespace sparseserve::core {

class MappedFile {
 public:
  // Returns kNotFound if the file does not exist, kPermissionDenied / kInternal for other
  // open or mmap failures; the message names the path.
  static absl::StatusOr<std::unique_ptr<MappedFile>> Open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }
  absl::string_view view() const { return {reinterpret_cast<const char*>(data_), size_}; }

 private:
  MappedFile(std::string path, const uint8_t* data, size_t size)
      : path_(std::move(path)), data_(data), size_(size) {}
  std::string path_;
  const uint8_t* data_;
  size_t size_;
};

// Reads a whole (small) file into a string. Same errors as MappedFile::Open.
absl::StatusOr<std::string> ReadFileToString(const std::string& path);

}  // namespace sparseserve::core

#endif  // SPARSESERVE_COMMON_CORE_MAPPED_FILE_H_
