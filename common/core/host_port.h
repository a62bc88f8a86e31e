// "host:port" addresses: splitting one (IPv6 hosts in brackets) and reading a listen address. The
// one parser of such strings for the HTTP servers (metrics, OpenAI API) and the worker registry's
// dns:/// targets. Pure functions; thread-safe.
#ifndef SPARSESERVE_COMMON_CORE_HOST_PORT_H_
#define SPARSESERVE_COMMON_CORE_HOST_PORT_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace sparseserve::core {

struct HostPort {
  std::string host;  // without IPv6 brackets; "" when the address has none
  std::string port;  // the text after the last ':' ("" when there is no ':')
};

// Splits at the last ':'; "[::1]:80" gives host "::1". Without a ':' the whole text is the port
// ("8000"), as listen addresses write a bare port.
HostPort SplitHostPort(absl::string_view address);

struct ListenAddress {
  std::string host;  // "0.0.0.0" when the address names none
  int port = 0;      // 0 = any free port
};

// "host:port", ":port" or "port". kInvalidArgument naming `address` for an empty one or a port
// outside [0, 65535].
absl::StatusOr<ListenAddress> ParseListenAddress(absl::string_view address);

}  // namespace sparseserve::core

#endif  // SPARSESERVE_COMMON_CORE_HOST_PORT_H_
