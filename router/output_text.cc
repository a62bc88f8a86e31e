#include "router/output_text.h"

#include <utility>

namespace sparseserve::router {

OutputText::OutputText(const tokenizer::Tokenizer& tokenizer, std::vector<std::string> stop_strings)
    : decoder_(tokenizer, /*at_sequence_start=*/false), matcher_(std::move(stop_strings)) {}

std::string OutputText::Push(int32_t id) {
  if (matcher_.stopped()) return "";
  return matcher_.Push(decoder_.Push(id));
}

std::string OutputText::Flush() {
  if (matcher_.stopped()) return "";
  std::string out = matcher_.Push(decoder_.Flush());
  if (matcher_.stopped()) return out;
  return out + matcher_.Flush();
}

}  // namespace sparseserve::router
