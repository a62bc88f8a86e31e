// Loading a Hugging Face tokenizer.json into the matching Tokenizer kind:
//   - model "BPE" with byte_fallback or a Metaspace / Prepend("▁") normalizer or pre-tokenizer
//     (Llama-2 style) -> SpmTokenizer, merge rank giving the priority;
//   - model "BPE" with a ByteLevel pre-tokenizer or decoder (GPT-2, Llama-3, Qwen2)
//     -> ByteLevelBpeTokenizer, regexes from the pre_tokenizer (Split / ByteLevel / Digits).
// Stateless, thread-safe.
#ifndef SPARSESERVE_COMMON_TOKENIZER_TOKENIZER_JSON_H_
#define SPARSESERVE_COMMON_TOKENIZER_TOKENIZER_JSON_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/tokenizer/tokenizer.h"

namespace sparseserve::tokenizer {

// Reads and parses the file at `path`. Errors are those of ReadFileToString and of
// TokenizerFromTokenizerJsonText, with `path` as the source.
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizerJson(const std::string& path);

// Parses tokenizer.json `json`; `source` names it in error messages. Returns
// kInvalidArgument for malformed JSON, a missing model/vocab, merges naming unknown tokens or
// bad ids; kUnimplemented for model types other than BPE or pre-tokenizers/normalizers this
// loader does not know. Never throws.
absl::StatusOr<std::unique_ptr<Tokenizer>> TokenizerFromTokenizerJsonText(absl::string_view json,
                                                                          absl::string_view source);

}  // namespace sparseserve::tokenizer

#endif  // SPARSESERVE_COMMON_TOKENIZER_TOKENIZER_JSON_H_
