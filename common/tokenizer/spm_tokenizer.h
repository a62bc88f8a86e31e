// SpmTokenizer: SentencePiece-style BPE (llama.cpp "llama" / llama2.c vocabularies): codepoint
// symbols merged by piece score, byte fallback "<0xXX>" for codepoints without a piece, and a
// dummy-prefix space. Built from an SpmVocab (GGUF `tokenizer.ggml.*` arrays, llama2.c
// tokenizer.bin, or a Llama-2 style tokenizer.json via tokenizer_json.h).
//
// Immutable after Create; thread-safe.
#ifndef SPARSESERVE_COMMON_TOKENIZER_SPM_TOKENIZER_H_
#define SPARSESERVE_COMMON_TOKENIZER_SPM_TOKENIZER_H_

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/tokenizer/tokenizer.h"

namespace sparseserve::tokenizer {

namespace internal {
class SpecialTokenMatcher;
}  // namespace internal

struct SpmVocab {
  std::vector<std::string> pieces;  // by id; '▁' (U+2581) or plain ' ' for spaces
  std::vector<float> scores;        // by id, higher merges first; empty = all 0
  // By id, GGUF types: 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte.
  // Empty = all normal except bos/eos (control) and unk; byte pieces are then recognised by
  // their "<0xXX>" text.
  std::vector<int32_t> token_types;
  int32_t bos_id = -1;  // -1 when absent
  int32_t eos_id = -1;
  int32_t unk_id = -1;
  bool add_bos = true;           // Encode(..., add_special=true) prepends bos_id
  bool add_space_prefix = true;  // prepend ' ' to text (and strip it when decoding)
};

class SpmTokenizer final : public Tokenizer {
 public:
  // Returns kInvalidArgument when `vocab` has no pieces, scores/token_types of the wrong
  // length, or bos/eos/unk ids out of range.
  static absl::StatusOr<std::unique_ptr<SpmTokenizer>> Create(SpmVocab vocab);

  ~SpmTokenizer() override;

  absl::StatusOr<std::vector<int32_t>> Encode(absl::string_view text,
                                              bool add_special) const override;
  std::string TokenBytes(int32_t id, bool with_special = false) const override;

  // True when spaces are written '▁' in the pieces (detected from the vocabulary).
  bool uses_metaspace() const { return uses_metaspace_; }

 private:
  SpmTokenizer(TokenizerInfo info, SpmVocab vocab);

  // Appends the ids of one plain-text fragment (no special tokens inside).
  absl::Status EncodeFragment(absl::string_view text, bool add_prefix,
                              std::vector<int32_t>* ids) const;
  int32_t TypeOf(int32_t id) const;

  SpmVocab vocab_;
  bool uses_metaspace_ = false;
  absl::flat_hash_map<std::string, int32_t> mergeable_;      // normal/user-defined piece -> id
  std::array<int32_t, 256> byte_ids_;                        // byte -> "<0xXX>" id, -1 if none
  std::vector<std::string> token_bytes_;                     // by id, TokenBytes without specials
  std::unique_ptr<internal::SpecialTokenMatcher> specials_;  // control and user-defined pieces
};

// Shorthand for SpmTokenizer::Create.
absl::StatusOr<std::unique_ptr<Tokenizer>> MakeSpmTokenizer(SpmVocab vocab);

}  // namespace sparseserve::tokenizer

#endif  // SPARSESERVE_COMMON_TOKENIZER_SPM_TOKENIZER_H_
