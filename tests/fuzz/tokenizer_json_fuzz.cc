// libFuzzer target: TokenizerFromTokenizerJsonText on arbitrary bytes; when a tokenizer loads,
// encode and decode a fixed multilingual string (plus the input's first bytes as text) and
// stream-decode every id. Any crash, sanitizer report or huge allocation is a bug.
#include <cstddef>
#include <cstdint>
#include <string>

#include "common/tokenizer/streaming_decoder.h"
#include "common/tokenizer/tokenizer_json.h"

namespace {

using sparseserve::tokenizer::StreamingDecoder;
using sparseserve::tokenizer::Tokenizer;

void Exercise(const Tokenizer& tokenizer, const std::string& text) {
  for (bool add_special : {false, true}) {
    auto ids = tokenizer.Encode(text, add_special);
    if (!ids.ok()) continue;
    StreamingDecoder decoder(tokenizer);
    std::string streamed;
    for (int32_t id : *ids) {
      if (id < 0 || id >= tokenizer.vocab_size()) __builtin_trap();
      streamed += decoder.Push(id);
      (void)tokenizer.TokenBytes(id, /*with_special=*/true);
      (void)tokenizer.IsEndOfGeneration(id);
    }
    streamed += decoder.Flush();
    if (streamed != tokenizer.Decode(*ids)) __builtin_trap();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string json(reinterpret_cast<const char*>(data), size);
  auto tokenizer = sparseserve::tokenizer::TokenizerFromTokenizerJsonText(json, "fuzz.json");
  if (!tokenizer.ok()) return 0;
  Exercise(**tokenizer,
           "Hello world 12345 it's \xC3\xA9t\xC3\xA9 \xE6\x97\xA5\xE6\x9C\xAC "
           "\xF0\x9F\x99\x82 <|endoftext|></s>\n\n  end");
  Exercise(**tokenizer, json.substr(0, 64));
  (void)(*tokenizer)->Decode({-1, 0, 1, 2, (*tokenizer)->vocab_size(), 1 << 30});
  return 0;
}
