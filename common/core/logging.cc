#include "common/core/logging.h"

#include <memory>

#include "absl/strings/str_cat.h"
#include "spdlog/sinks/stdout_color_sinks.h"

namespace sparseserve::core {
namespace {

// Installs a stderr logger once; spdlog's default logger writes to stdout, which carries
// generated text in the CLI.
bool InstallStderrLogger() {
  auto logger = spdlog::stderr_color_mt("sparseserve");
  logger->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%^%l%$] %v");
  spdlog::set_default_logger(std::move(logger));
  spdlog::set_level(spdlog::level::info);
  return true;
}
[[maybe_unused]] const bool kLoggerInstalled = InstallStderrLogger();

}  // namespace

void SetLogLevel(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug: spdlog::set_level(spdlog::level::debug); break;
    case LogLevel::kInfo: spdlog::set_level(spdlog::level::info); break;
    case LogLevel::kWarning: spdlog::set_level(spdlog::level::warn); break;
    case LogLevel::kError: spdlog::set_level(spdlog::level::err); break;
    case LogLevel::kOff: spdlog::set_level(spdlog::level::off); break;
  }
}

absl::Status SetLogLevel(absl::string_view level) {
  if (level == "debug")
    SetLogLevel(LogLevel::kDebug);
  else if (level == "info")
    SetLogLevel(LogLevel::kInfo);
  else if (level == "warning")
    SetLogLevel(LogLevel::kWarning);
  else if (level == "error")
    SetLogLevel(LogLevel::kError);
  else if (level == "off")
    SetLogLevel(LogLevel::kOff);
  else
    return absl::InvalidArgumentError(
        absl::StrCat("unknown log level '", level, "' (debug|info|warning|error|off)"));
  return absl::OkStatus();
}

}  // namespace sparseserve::core
