// OutputText: the text side of one request's output stream — incremental detokenization of
// generated ids (continuing after the prompt) followed by stop-string matching.
//
// The router keeps one per request across migrations, so the client's text is continuous when
// the request moves to another decode worker. The Tokenizer is borrowed (the Router owns it and
// outlives every request). Not thread-safe: the owning GenerateCall serializes calls.
#ifndef SPARSESERVE_ROUTER_OUTPUT_TEXT_H_
#define SPARSESERVE_ROUTER_OUTPUT_TEXT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "common/tokenizer/streaming_decoder.h"
#include "common/tokenizer/tokenizer.h"
#include "router/stop_strings.h"

namespace sparseserve::router {

class OutputText {
 public:
  OutputText(const tokenizer::Tokenizer& tokenizer, std::vector<std::string> stop_strings);

  OutputText(const OutputText&) = delete;
  OutputText& operator=(const OutputText&) = delete;

  // Text to send for generated token `id` (possibly ""). Once a stop string is complete,
  // stopped() is true and this returns the text before it, then "" for later ids.
  std::string Push(int32_t id);

  // Everything still held back (an incomplete UTF-8 character, a possible stop-string prefix);
  // call once when the stream ends for another reason than a stop string.
  std::string Flush();

  bool stopped() const { return matcher_.stopped(); }

 private:
  tokenizer::StreamingDecoder decoder_;
  StopStringMatcher matcher_;
};

}  // namespace sparseserve::router

#endif  // SPARSESERVE_ROUTER_OUTPUT_TEXT_H_
