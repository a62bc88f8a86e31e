// ByteLevelBpeTokenizer: GPT-2 style byte-level BPE (GPT-2, Llama-3, Qwen2): literal added
// tokens first, then a regex pre-tokenizer, then each word's bytes (mapped to GPT-2's unicode
// alphabet) merged by merge rank, lowest first. Built from a BpeVocab (GGUF "gpt2" vocabularies)
// or a tokenizer.json via tokenizer_json.h.
//
// Immutable after Create; thread-safe.
#ifndef SPARSESERVE_COMMON_TOKENIZER_BYTE_LEVEL_BPE_TOKENIZER_H_
#define SPARSESERVE_COMMON_TOKENIZER_BYTE_LEVEL_BPE_TOKENIZER_H_

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/tokenizer/pretokenizer.h"
#include "common/tokenizer/tokenizer.h"

namespace sparseserve::tokenizer {

namespace internal {
class SpecialTokenMatcher;
}  // namespace internal

struct BpeVocab {
  // By id. Normal tokens are written in GPT-2's byte-level alphabet ("Ġthe"); control and
  // user-defined tokens are literal text ("<|im_end|>").
  std::vector<std::string> tokens;
  // Merge rules in rank order (first = applied first); both sides and their concatenation
  // must be tokens. GGUF stores them as "a b": split at the space.
  std::vector<std::pair<std::string, std::string>> merges;
  // By id, GGUF types (1 normal, 3 control, 4 user-defined, ...). Empty = all normal but
  // bos/eos (control).
  std::vector<int32_t> token_types;
  int32_t bos_id = -1;  // -1 when absent
  int32_t eos_id = -1;
  bool add_bos = false;  // Encode(..., add_special=true) prepends bos_id (Llama-3: true)
  // Pre-tokenizer regexes applied in order; empty = kGpt2Pattern (see PatternForGgufPre).
  std::vector<std::string> pre_patterns;
  bool add_prefix_space = false;  // HF ByteLevel add_prefix_space: prepend ' ' to each text
  bool ignore_merges = false;     // HF ignore_merges: a word that is a token is used whole
};

class ByteLevelBpeTokenizer final : public Tokenizer {
 public:
  // Returns kInvalidArgument for an empty vocabulary, token_types of the wrong length, ids out
  // of range, merges naming unknown tokens, or a pre-tokenizer regex that does not compile.
  static absl::StatusOr<std::unique_ptr<ByteLevelBpeTokenizer>> Create(BpeVocab vocab);

  ~ByteLevelBpeTokenizer() override;

  absl::StatusOr<std::vector<int32_t>> Encode(absl::string_view text,
                                              bool add_special) const override;
  std::string TokenBytes(int32_t id, bool with_special = false) const override;

  // The words the pre-tokenizer cuts plain `text` into (no added-token matching, no prefix
  // space). Exposed for tests. Returns kInvalidArgument for invalid UTF-8.
  absl::StatusOr<std::vector<std::string>> PreTokenize(absl::string_view text) const;

 private:
  struct MergeRule {
    int32_t rank;
    int32_t result_id;
  };
  ByteLevelBpeTokenizer(TokenizerInfo info, BpeVocab vocab,
                        std::unique_ptr<Pretokenizer> pretokenizer);
  absl::Status Build();
  // Appends the ids of one pre-tokenized word.
  absl::Status EncodeWord(absl::string_view word, std::vector<int32_t>* ids) const;
  int32_t TypeOf(int32_t id) const;

  BpeVocab vocab_;
  std::unique_ptr<Pretokenizer> pretokenizer_;
  absl::flat_hash_map<std::string, int32_t> token_ids_;      // normal tokens, byte-level text
  absl::flat_hash_map<uint64_t, MergeRule> merge_rules_;     // (left id << 32 | right id)
  std::array<int32_t, 256> byte_ids_;                        // single-byte token ids, -1 if none
  std::vector<std::string> token_bytes_;                     // by id, TokenBytes without specials
  std::unique_ptr<internal::SpecialTokenMatcher> specials_;  // control and user-defined tokens
};

// Shorthand for ByteLevelBpeTokenizer::Create.
absl::StatusOr<std::unique_ptr<Tokenizer>> MakeByteLevelBpeTokenizer(BpeVocab vocab);

}  // namespace sparseserve::tokenizer

#endif  // SPARSESERVE_COMMON_TOKENIZER_BYTE_LEVEL_BPE_TOKENIZER_H_
