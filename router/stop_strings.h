// StopStringMatcher: finds client stop strings in streamed output text and holds back any tail
// that could still grow into one, so that text at or after a stop string is never sent.
//
// Text is pushed as it is detokenized; Push returns what is safe to send now. The held-back tail
// is the longest suffix of the unsent text that is a proper prefix of some stop string (a stop
// string starts at a UTF-8 character boundary, so the split never cuts a character). One matcher
// per request; not thread-safe.
#ifndef SPARSESERVE_ROUTER_STOP_STRINGS_H_
#define SPARSESERVE_ROUTER_STOP_STRINGS_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace sparseserve::router {

class StopStringMatcher {
 public:
  // Empty strings in `stop_strings` are ignored.
  explicit StopStringMatcher(std::vector<std::string> stop_strings);

  // Appends `text` and returns the text that can be sent: everything before the earliest stop
  // string once one is found (stopped() becomes true), otherwise everything except the tail that
  // may begin a stop string. After a stop, returns "" and ignores its input.
  std::string Push(absl::string_view text);

  // The held-back tail (the stream ended, so it cannot become a stop string); "" after a stop.
  std::string Flush();

  // True once a stop string was found.
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stop_strings_;
  std::string held_;  // unsent text: a proper prefix of some stop string
  bool stopped_ = false;
};

}  // namespace sparseserve::router

#endif  // SPARSESERVE_ROUTER_STOP_STRINGS_H_
