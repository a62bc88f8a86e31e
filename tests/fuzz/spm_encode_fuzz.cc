// libFuzzer target: SpmTokenizer::Encode on arbitrary bytes with a small vocabulary (byte
// tokens, a few merges, control tokens), then Decode. The first input byte picks plain-space or
// '▁' pieces. With plain spaces every valid UTF-8 text without '<' must round-trip exactly.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "common/tokenizer/spm_tokenizer.h"
#include "common/tokenizer/streaming_decoder.h"

namespace {

using sparseserve::tokenizer::SpmVocab;
using sparseserve::tokenizer::Tokenizer;

std::unique_ptr<Tokenizer> Build(bool metaspace) {
  const std::string space = metaspace ? "\xE2\x96\x81" : " ";
  SpmVocab vocab;
  vocab.pieces = {"<unk>", "<s>", "</s>"};
  vocab.token_types = {2, 3, 3};
  const char* hex = "0123456789ABCDEF";
  for (int b = 0; b < 256; ++b) {
    vocab.pieces.push_back(std::string("<0x") + hex[b >> 4] + hex[b & 15] + ">");
    vocab.token_types.push_back(6);
  }
  for (const std::string& piece :
       {space, std::string("a"), std::string("b"), std::string("\xC3\xA9"), space + "a",
        std::string("ab"), space + "ab", std::string("aa"), std::string("aaa"), space + space,
        std::string("\xC3\xA9"
                    "a")}) {
    vocab.pieces.push_back(piece);
    vocab.token_types.push_back(1);
  }
  for (size_t i = 0; i < vocab.pieces.size(); ++i) {
    vocab.scores.push_back(-static_cast<float>(i % 7));  // ties on purpose
  }
  vocab.unk_id = 0;
  vocab.bos_id = 1;
  vocab.eos_id = 2;
  return std::move(*sparseserve::tokenizer::MakeSpmTokenizer(std::move(vocab)));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::unique_ptr<Tokenizer> plain = Build(false);
  static const std::unique_ptr<Tokenizer> metaspace = Build(true);
  if (size == 0) return 0;
  const bool use_metaspace = (data[0] & 1) != 0;
  const Tokenizer& tokenizer = use_metaspace ? *metaspace : *plain;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  auto ids = tokenizer.Encode(text, /*add_special=*/true);
  if (!ids.ok()) return 0;  // invalid UTF-8
  const std::string decoded = tokenizer.Decode(*ids);
  if (!use_metaspace && text.find('<') == std::string::npos && decoded != text) {
    __builtin_trap();
  }
  sparseserve::tokenizer::StreamingDecoder decoder(tokenizer);
  std::string streamed;
  for (int32_t id : *ids) streamed += decoder.Push(id);
  streamed += decoder.Flush();
  if (streamed != decoded) __builtin_trap();
  return 0;
}
