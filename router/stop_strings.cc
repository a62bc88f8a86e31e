#include "router/stop_strings.h"

#include <algorithm>
#include <utility>

namespace sparseserve::router {

StopStringMatcher::StopStringMatcher(std::vector<std::string> stop_strings) {
  for (std::string& s : stop_strings) {
    if (!s.empty()) stop_strings_.push_back(std::move(s));
  }
}

std::string StopStringMatcher::Push(absl::string_view text) {
  if (stopped_) return "";
  held_.append(text.data(), text.size());
  if (stop_strings_.empty()) return std::exchange(held_, std::string());

  // The earliest complete stop string ends the output.
  size_t stop_pos = std::string::npos;
  for (const std::string& s : stop_strings_) stop_pos = std::min(stop_pos, held_.find(s));
  if (stop_pos != std::string::npos) {
    stopped_ = true;
    std::string out = held_.substr(0, stop_pos);
    held_.clear();
    return out;
  }

  // Hold back the longest suffix that is a proper prefix of a stop string.
  size_t keep = 0;
  for (const std::string& s : stop_strings_) {
    const size_t max_len = std::min(s.size() - 1, held_.size());
    for (size_t len = max_len; len > keep; --len) {
      if (absl::string_view(held_).substr(held_.size() - len) ==
          absl::string_view(s).substr(0, len)) {
        keep = len;
        break;
      }
    }
  }
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string StopStringMatcher::Flush() {
  if (stopped_) return "";
  return std::exchange(held_, std::string());
}

}  // namespace sparseserve::router
