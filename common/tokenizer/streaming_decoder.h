// StreamingDecoder: turns generated token ids into text one token at a time, emitting only
// complete UTF-8 (a character split over several byte tokens is held back until its last byte)
// and dropping the dummy-prefix space of SPM vocabularies (llama2.c rule: strip one leading ' '
// from the first piece after BOS, or at the start).
//
// One decoder per request stream; not thread-safe. The Tokenizer is borrowed and must outlive
// the decoder.
#ifndef SPARSESERVE_COMMON_TOKENIZER_STREAMING_DECODER_H_
#define SPARSESERVE_COMMON_TOKENIZER_STREAMING_DECODER_H_

#include <cstdint>
#include <string>

#include "common/tokenizer/tokenizer.h"

namespace sparseserve::tokenizer {

class StreamingDecoder {
 public:
  // `at_sequence_start`: the first pushed token starts the sequence (its leading space is
  // stripped for SPM vocabularies). Pass false to continue a sequence decoded elsewhere, e.g.
  // when only generated tokens are pushed after a prompt.
  explicit StreamingDecoder(const Tokenizer& tokenizer, bool at_sequence_start = true);

  // Returns the text completed by token `id` (possibly ""): valid UTF-8, invalid bytes
  // replaced by U+FFFD, an incomplete trailing character kept for the next call.
  std::string Push(int32_t id);

  // Returns whatever is held back (an incomplete character becomes U+FFFD) and resets the
  // UTF-8 state; the leading-space state is kept.
  std::string Flush();

 private:
  const Tokenizer& tokenizer_;
  bool strip_next_space_;  // the next non-empty piece loses one leading ' '
  std::string pending_;    // bytes of an incomplete UTF-8 character
};

}  // namespace sparseserve::tokenizer

#endif  // SPARSESERVE_COMMON_TOKENIZER_STREAMING_DECODER_H_
