// ByteReader: a bounds-checked little-endian cursor over an untrusted byte buffer, used by the
// GGUF parser. Every read checks the bytes left before touching memory and fails with
// kInvalidArgument "<source>: <what> at byte <offset>"; nothing is allocated from a size read
// out of the buffer before that size has been checked against the bytes left.
//
// Private to common/model. Not thread-safe (a cursor); the buffer is borrowed.
#ifndef SPARSESERVE_COMMON_MODEL_INTERNAL_BYTE_READER_H_
#define SPARSESERVE_COMMON_MODEL_INTERNAL_BYTE_READER_H_

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace sparseserve::model::internal {

static_assert(std::endian::native == std::endian::little,
              "weight file readers assume a little-endian host");

class ByteReader {
 public:
  // `data` (borrowed, `size` bytes) must outlive the reader; `source` names it in errors.
  ByteReader(absl::string_view source, const uint8_t* data, size_t size)
      : source_(source), data_(data), size_(size) {}

  size_t pos() const { return pos_; }
  size_t size() const { return size_; }
  size_t remaining() const { return size_ - pos_; }

  // kInvalidArgument "<source>: <what> at byte <pos>".
  absl::Status ErrorAt(size_t pos, absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat(source_, ": ", what, " at byte ", pos));
  }
  absl::Status Error(absl::string_view what) const { return ErrorAt(pos_, what); }

  // Returns a pointer to the next `n` bytes and advances past them, or kInvalidArgument
  // ("truncated <what>") when fewer than `n` bytes are left.
  absl::StatusOr<const uint8_t*> ReadBytes(uint64_t n, absl::string_view what) {
    if (n > remaining()) {
      return Error(
          absl::StrCat("truncated ", what, " (needs ", n, " bytes, ", remaining(), " left)"));
    }
    const uint8_t* p = data_ + pos_;
    pos_ += static_cast<size_t>(n);
    return p;
  }

  absl::StatusOr<uint32_t> ReadU32(absl::string_view what) {
    auto p = ReadBytes(sizeof(uint32_t), what);
    if (!p.ok()) return p.status();
    uint32_t v;
    std::memcpy(&v, *p, sizeof(v));
    return v;
  }

  absl::StatusOr<uint64_t> ReadU64(absl::string_view what) {
    auto p = ReadBytes(sizeof(uint64_t), what);
    if (!p.ok()) return p.status();
    uint64_t v;
    std::memcpy(&v, *p, sizeof(v));
    return v;
  }

  // A uint64 byte length followed by that many bytes (GGUF's string encoding). The view points
  // into the buffer.
  absl::StatusOr<absl::string_view> ReadStringView(absl::string_view what) {
    const size_t start = pos_;
    auto len = ReadU64(absl::StrCat(what, " length"));
    if (!len.ok()) return len.status();
    if (*len > remaining()) {
      const size_t left = remaining();
      pos_ = start;
      return Error(absl::StrCat(what, " length ", *len, " exceeds the ", left, " bytes left"));
    }
    const char* p = reinterpret_cast<const char*>(data_ + pos_);
    pos_ += static_cast<size_t>(*len);
    return absl::string_view(p, static_cast<size_t>(*len));
  }

 private:
  absl::string_view source_;
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

}  // namespace sparseserve::model::internal

#endif  // SPARSESERVE_COMMON_MODEL_INTERNAL_BYTE_READER_H_
