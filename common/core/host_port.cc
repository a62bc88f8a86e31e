#include "common/core/host_port.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace sparseserve::core {

HostPort SplitHostPort(absl::string_view address) {
  const size_t colon = address.rfind(':');
  if (colon == absl::string_view::npos) return {"", std::string(address)};
  absl::string_view host = address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  return {std::string(host), std::string(address.substr(colon + 1))};
}

absl::StatusOr<ListenAddress> ParseListenAddress(absl::string_view address) {
  HostPort parts = SplitHostPort(address);
  ListenAddress out;
  out.host = parts.host.empty() ? "0.0.0.0" : std::move(parts.host);
  if (address.empty() || !absl::SimpleAtoi(parts.port, &out.port) || out.port < 0 ||
      out.port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad listen address '", address, "' (want host:port, :port or port)"));
  }
  return out;
}

}  // namespace sparseserve::core
