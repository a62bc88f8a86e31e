#include "common/tokenizer/streaming_decoder.h"

#include "common/tokenizer/utf8.h"

namespace sparseserve::tokenizer {

StreamingDecoder::StreamingDecoder(const Tokenizer& tokenizer, bool at_sequence_start)
    : tokenizer_(tokenizer),
      strip_next_space_(at_sequence_start && tokenizer.strips_leading_space()) {}

std::string StreamingDecoder::Push(int32_t id) {
  if (id >= 0 && id == tokenizer_.bos_id()) {
    strip_next_space_ = tokenizer_.strips_leading_space();
    return "";
  }
  std::string piece = tokenizer_.TokenBytes(id);
  if (piece.empty()) return "";
  absl::string_view bytes = piece;
  if (strip_next_space_) {
    strip_next_space_ = false;
    if (bytes.front() == ' ') bytes.remove_prefix(1);
  }
  std::string input = std::move(pending_);
  input.append(bytes.data(), bytes.size());
  std::string out;
  AppendRepairedUtf8(input, &out, &pending_);
  return out;
}

std::string StreamingDecoder::Flush() {
  std::string out;
  AppendRepairedUtf8(pending_, &out, nullptr);
  pending_.clear();
  return out;
}

}  // namespace sparseserve::tokenizer
