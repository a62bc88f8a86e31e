// The one logging funnel of sparseserve (spdlog behind it; Debian 12's Abseil has no absl/log).
//
// Libraries log through these macros only; no printf/std::cerr. Log state changes and errors
// (with the request id where there is one), nothing per token or per layer above DEBUG.
// Output goes to stderr so stdout stays free for generated text. Thread-safe.
#ifndef SPARSESERVE_COMMON_CORE_LOGGING_H_
#define SPARSESERVE_COMMON_CORE_LOGGING_H_

#include "absl/strings/string_view.h"

#include "absl/status/status.h"
#include "spdlog/spdlog.h"

namespace sparseserve::core {

enum class LogLevel { kDebug, kInfo, kWarning, kError, kOff };

// Parses "debug" | "info" | "warning" | "error" | "off".
// Returns kInvalidArgument for anything else.
absl::Status SetLogLevel(absl::string_view level);
void SetLogLevel(LogLevel level);

}  // namespace sparseserve::core

#define SS_LOG_DEBUG(...) ::spdlog::debug(__VA_ARGS__)
#define SS_LOG_INFO(...) ::spdlog::info(__VA_ARGS__)
#define SS_LOG_WARNING(...) ::spdlog::warn(__VA_ARGS__)
#define SS_LOG_ERROR(...) ::spdlog::error(__VA_ARGS__)

#endif  // SPARSESERVE_COMMON_CORE_LOGGING_H_
