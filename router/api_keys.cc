#include "router/api_keys.h"

#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace sparseserve::router {

absl::StatusOr<std::vector<std::string>> LoadApiKeys(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("API key file ", path, ": cannot read it"));
  std::stringstream text;
  text << in.rdbuf();
  std::vector<std::string> keys;
  const std::string contents = text.str();
  absl::string_view all = contents;
  absl::ConsumePrefix(&all, "\xEF\xBB\xBF");  // a UTF-8 byte-order mark some editors write
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(all, '\n')) {
    ++line_number;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line.front() == '#') continue;
    // Keys travel in HTTP headers and gRPC metadata: printable ASCII without spaces only.
    for (const char c : line) {
      if (c < 0x21 || c > 0x7E) {
        return absl::InvalidArgumentError(absl::StrCat(
            "API key file ", path, ": line ", line_number,
            " holds a byte that is not printable ASCII (keys are printable ASCII, no spaces)"));
      }
    }
    keys.emplace_back(line);
  }
  if (keys.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("API key file ", path, ": no key in it"));
  }
  return keys;
}

bool AuthorizationAccepted(absl::string_view authorization, const std::vector<std::string>& keys) {
  if (keys.empty()) return true;
  constexpr absl::string_view kBearer = "Bearer ";
  if (!absl::StartsWith(authorization, kBearer)) return false;
  const absl::string_view presented = authorization.substr(kBearer.size());
  bool accepted = false;
  for (const std::string& key : keys) {
    unsigned char diff = presented.size() == key.size() ? 0 : 1;
    for (size_t i = 0; i < key.size(); ++i) {
      diff |= static_cast<unsigned char>(key[i] ^ (i < presented.size() ? presented[i] : 0));
    }
    accepted |= diff == 0;
  }
  return accepted;
}

}  // namespace sparseserve::router
