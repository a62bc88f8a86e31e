// API keys of the public APIs (--api-key-file): loading the key file and checking a presented
// "Authorization: Bearer KEY" (HTTP header or gRPC metadata) in constant time. Keys are never
// logged. Pure functions; thread-safe.
#ifndef SPARSESERVE_ROUTER_API_KEYS_H_
#define SPARSESERVE_ROUTER_API_KEYS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace sparseserve::router {

// One key per line; blank lines and lines starting with '#' are skipped, surrounding whitespace
// and a leading UTF-8 byte-order mark are dropped. kNotFound when the file cannot be read,
// kInvalidArgument when it holds no key or a key with a byte outside printable ASCII (keys go
// into HTTP headers and gRPC metadata; the message names the line, never the key).
absl::StatusOr<std::vector<std::string>> LoadApiKeys(const std::string& path);

// True when `authorization` is "Bearer KEY" for one of `keys`, or when `keys` is empty (no
// authentication). Every key is compared over its whole length whatever matched before, so the
// time taken does not tell how much of a key was right.
bool AuthorizationAccepted(absl::string_view authorization, const std::vector<std::string>& keys);

}  // namespace sparseserve::router

#endif  // SPARSESERVE_ROUTER_API_KEYS_H_
