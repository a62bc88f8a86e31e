// The subcommands of the `sparseserve` binary and their shared help printer.
//
// Each subcommand lives in its own `<name>_command.cc`, defines its flags with ABSL_FLAG in that
// file (so `sparseserve <name> --help` can list exactly them, plus tools/common_flags.cc) and
// exposes one `int Run<Name>Command(const std::vector<char*>& positional)`.
#ifndef SPARSESERVE_TOOLS_COMMAND_H_
#define SPARSESERVE_TOOLS_COMMAND_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace sparseserve::router {
struct RouterOptions;
}  // namespace sparseserve::router

namespace sparseserve::tools {

struct Command {
  const char* name;
  const char* summary;      // one line for the command list
  const char* usage;        // "sparseserve generate --model PATH --prompt TEXT [flags]"
  const char* description;  // a paragraph for `--help`
  // Source files whose flags belong to this command; "file:flag_a,flag_b" takes only those
  // flags of a file shared with other commands.
  std::vector<const char*> flag_files;
  int (*run)(const std::vector<char*>& positional);
};

// All subcommands, in help order.
const std::vector<Command>& Commands();

// Prints `sparseserve <command> --help`: usage, description, then this command's flags and the
// common flags with their defaults.
void PrintCommandHelp(const Command& command);

// Applies the common flags (--log-level, --threads). Returns false after printing an error.
bool ApplyCommonFlags();

// True for --help, -h, --helpfull and help.
bool IsHelpFlag(const char* arg);

// Makes a crash (SIGSEGV, SIGABRT, ...) print its stack to stderr before the process dies, so a
// worker that dies in production or CI leaves the reason in its log. SIGTERM keeps its default
// (serving commands catch it themselves to drain). `argv0` finds the symbols.
void InstallCrashHandler(const char* argv0);

// Runs `command` on argv[1..argc) (argv[0] is replaced by `program`, the name absl reports):
// prints the command's help for a help flag, accepts '-' for '_' in flag names, parses the
// flags, applies the common ones and returns the command's exit code.
int RunCommand(const Command& command, std::string program, int argc, char** argv);

// The router command's entry (router_command.cc): in `sparseserve` and `sparseserve-router`.
const Command& RouterCommand();

// The router's flags as options, and serving them until SIGINT/SIGTERM (router_command.cc);
// `up` runs the same router in its own process. `on_stop` runs after the router stopped.
router::RouterOptions RouterOptionsFromFlags();
absl::Status ServeRouter(router::RouterOptions options, const char* role,
                         const std::function<void()>& on_stop);

int RunGenerateCommand(const std::vector<char*>& positional);
int RunEvalCommand(const std::vector<char*>& positional);
int RunDecodeCommand(const std::vector<char*>& positional);
int RunPrefillCommand(const std::vector<char*>& positional);
int RunRouterCommand(const std::vector<char*>& positional);
int RunUpCommand(const std::vector<char*>& positional);
int RunBenchCommand(const std::vector<char*>& positional);
int RunSearchPatternsCommand(const std::vector<char*>& positional);
int RunSyntheticTokenizerCommand(const std::vector<char*>& positional);

}  // namespace sparseserve::tools

#endif  // SPARSESERVE_TOOLS_COMMAND_H_
