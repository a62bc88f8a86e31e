#include "common/tokenizer/tokenizer.h"

#include <utility>

#include "common/tokenizer/streaming_decoder.h"

namespace sparseserve::tokenizer {

Tokenizer::Tokenizer(TokenizerInfo info)
    : info_(std::move(info)), eos_set_(info_.eos_ids.begin(), info_.eos_ids.end()) {}

std::string Tokenizer::Decode(const std::vector<int32_t>& ids) const {
  StreamingDecoder decoder(*this);
  std::string text;
  for (int32_t id : ids) text += decoder.Push(id);
  text += decoder.Flush();
  return text;
}

}  // namespace sparseserve::tokenizer
