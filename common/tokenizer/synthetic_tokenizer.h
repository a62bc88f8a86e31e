// A byte-level BPE tokenizer.json of any vocabulary size, for synthetic models (random weights in
// a real model's shape, `--model synthetic:PRESET`): the server builds its tokenizer from this
// text, and `sparseserve synthetic-tokenizer` writes the same file for a load generator (aiperf
// reads it with Hugging Face tokenizers), so both count tokens alike.
//
// Layout: ids 0..255 are the 256 byte symbols (GPT-2's byte-to-unicode alphabet), so any text
// encodes; then lowercase words in order of length and then alphabet ("ab" .. "zz", "aaa" ..),
// each also with a leading space ("Ġa" .. ), each one merge of its prefix and its last letter,
// until vocab_size - 2; the last two ids are <|begin_of_text|> (BOS, prepended to every encoded
// text by the post-processor, as Llama-3's) and <|end_of_text|> (EOS). Pre-tokenization is
// GPT-2's ByteLevel regex. Deterministic; pure functions; thread-safe.
#ifndef SPARSESERVE_COMMON_TOKENIZER_SYNTHETIC_TOKENIZER_H_
#define SPARSESERVE_COMMON_TOKENIZER_SYNTHETIC_TOKENIZER_H_

#include <string>

#include "absl/status/statusor.h"

namespace sparseserve::tokenizer {

// The tokenizer.json text. kInvalidArgument for vocab_size < 258 or > 2^23.
absl::StatusOr<std::string> SyntheticTokenizerJson(int vocab_size);

// A tokenizer_config.json that makes transformers' AutoTokenizer load the file above as a fast
// tokenizer with its BOS and EOS.
std::string SyntheticTokenizerConfigJson();

}  // namespace sparseserve::tokenizer

#endif  // SPARSESERVE_COMMON_TOKENIZER_SYNTHETIC_TOKENIZER_H_
