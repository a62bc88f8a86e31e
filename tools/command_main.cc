// What every sparseserve executable's main shares: crash reports, help and flag parsing.
#include <signal.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "absl/debugging/failure_signal_handler.h"
#include "absl/debugging/symbolize.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "tools/command.h"

namespace sparseserve::tools {

bool IsHelpFlag(const char* arg) {
  return std::strcmp(arg, "--help") == 0 || std::strcmp(arg, "-h") == 0 ||
         std::strcmp(arg, "--helpfull") == 0 || std::strcmp(arg, "help") == 0;
}

void InstallCrashHandler(const char* argv0) {
  absl::InitializeSymbolizer(argv0);
  absl::InstallFailureSignalHandler({});
  signal(SIGTERM, SIG_DFL);
}

int RunCommand(const Command& command, std::string program, int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (IsHelpFlag(argv[i])) {
      PrintCommandHelp(command);
      return 0;
    }
  }
  absl::SetProgramUsageMessage(command.usage);
  // absl flag names use '_'; accept the documented '--max-tokens' spelling as well.
  std::vector<std::string> normalized(argv, argv + argc);
  for (std::string& arg : normalized) {
    if (arg.rfind("--", 0) != 0) continue;
    const size_t end = std::min(arg.find('='), arg.size());
    std::replace(arg.begin() + 2, arg.begin() + static_cast<std::ptrdiff_t>(end), '-', '_');
  }
  std::vector<char*> args;
  args.push_back(program.data());
  for (size_t i = 1; i < normalized.size(); ++i) args.push_back(normalized[i].data());
  std::vector<char*> positional =
      absl::ParseCommandLine(static_cast<int>(args.size()), args.data());
  if (!ApplyCommonFlags()) return 2;
  return command.run(positional);
}

}  // namespace sparseserve::tools
