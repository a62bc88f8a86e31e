// Pretokenizer: splits text into words with one or more PCRE2 regexes (UTF + UCP mode, JIT when
// available), Hugging Face `Split` semantics with behaviour "Isolated": every match is a word,
// and so is any unmatched gap between matches. Stages apply in order, each to the words of the
// previous one. Also holds the patterns of the common byte-level BPE families.
//
// Immutable after Create; Split is thread-safe (match data is per call).
#ifndef SPARSESERVE_COMMON_TOKENIZER_PRETOKENIZER_H_
#define SPARSESERVE_COMMON_TOKENIZER_PRETOKENIZER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace sparseserve::tokenizer {

// GPT-2's pattern (Hugging Face ByteLevel with use_regex).
inline constexpr absl::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
// Llama-3's pattern (digits in groups of at most 3).
inline constexpr absl::string_view kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// Qwen2's pattern (single digits).
inline constexpr absl::string_view kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// The pattern for a GGUF `tokenizer.ggml.pre` value: "default"/"gpt-2"/"gpt2" -> GPT-2,
// "llama3"/"llama-bpe"/"llama-v3" -> Llama-3, "qwen2" -> Qwen2. kUnimplemented otherwise.
absl::StatusOr<std::string> PatternForGgufPre(absl::string_view pre);

class Pretokenizer {
 public:
  // Compiles `patterns` (applied in order; at least one). Returns kInvalidArgument naming the
  // pattern and offset when one does not compile.
  static absl::StatusOr<std::unique_ptr<Pretokenizer>> Create(
      const std::vector<std::string>& patterns);
  ~Pretokenizer();
  Pretokenizer(const Pretokenizer&) = delete;
  Pretokenizer& operator=(const Pretokenizer&) = delete;

  // Splits `text` (REQUIRES: valid UTF-8) into non-empty words covering it in order; views
  // point into `text`. Returns kInvalidArgument if the regex engine fails (e.g. a match limit
  // is hit on pathological input).
  absl::StatusOr<std::vector<absl::string_view>> Split(absl::string_view text) const;

 private:
  class Regex;  // RAII over pcre2_code
  explicit Pretokenizer(std::vector<std::unique_ptr<Regex>> stages);
  std::vector<std::unique_ptr<Regex>> stages_;
};

}  // namespace sparseserve::tokenizer

#endif  // SPARSESERVE_COMMON_TOKENIZER_PRETOKENIZER_H_
