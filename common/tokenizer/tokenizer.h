// Tokenizer: the one interface between text and token ids (SentencePiece-style BPE and
// byte-level BPE implement it; see spm_tokenizer.h, byte_level_bpe_tokenizer.h and the loaders
// in tokenizer_json.h).
//
// A Tokenizer is immutable after construction: every method is const and thread-safe, so one
// instance is shared by all requests of a process.
#ifndef SPARSESERVE_COMMON_TOKENIZER_TOKENIZER_H_
#define SPARSESERVE_COMMON_TOKENIZER_TOKENIZER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace sparseserve::tokenizer {

// What every tokenizer kind knows about its special ids; filled by the concrete kind.
struct TokenizerInfo {
  int32_t vocab_size = 0;             // ids are [0, vocab_size)
  int32_t bos_id = -1;                // -1 when the vocabulary has none
  bool add_bos = false;               // Encode(..., add_special=true) prepends bos_id
  std::vector<int32_t> eos_ids;       // end-of-generation ids, the vocabulary's eos first
  bool strips_leading_space = false;  // SPM dummy prefix: decoders drop one leading ' '
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // Encodes `text` (UTF-8). With `add_special`, prepends BOS when the vocabulary asks for it.
  // Added/special tokens written literally in the text (e.g. "<|im_end|>") are matched as whole
  // tokens first (longest match); the text between them is encoded normally.
  // Returns kInvalidArgument when `text` is not valid UTF-8 or holds a byte the vocabulary
  // cannot represent.
  virtual absl::StatusOr<std::vector<int32_t>> Encode(absl::string_view text,
                                                      bool add_special) const = 0;

  // The raw bytes token `id` stands for (byte-fallback "<0xXX>" -> that byte; byte-level BPE ->
  // the unmapped bytes; SPM '▁' -> ' '). Special/control tokens give "" unless `with_special`;
  // out-of-range ids give "".
  virtual std::string TokenBytes(int32_t id, bool with_special = false) const = 0;

  int32_t vocab_size() const { return info_.vocab_size; }
  int32_t bos_id() const { return info_.bos_id; }
  bool add_bos() const { return info_.add_bos; }
  const std::vector<int32_t>& eos_ids() const { return info_.eos_ids; }
  bool strips_leading_space() const { return info_.strips_leading_space; }

  // True for eos / eot / im_end style tokens (every id in eos_ids()).
  bool IsEndOfGeneration(int32_t id) const { return eos_set_.contains(id); }

  // Decodes a whole id sequence to text, with the StreamingDecoder's rules (invalid UTF-8 ->
  // U+FFFD, leading-space strip after BOS or at the start).
  std::string Decode(const std::vector<int32_t>& ids) const;

 protected:
  explicit Tokenizer(TokenizerInfo info);

 private:
  TokenizerInfo info_;
  absl::flat_hash_set<int32_t> eos_set_;
};

}  // namespace sparseserve::tokenizer

#endif  // SPARSESERVE_COMMON_TOKENIZER_TOKENIZER_H_
