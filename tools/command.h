// The subcommands of the `sparseserve` binary and their shared help printer.
//
// Each subcommand lives in its own `<name>_command.cc`, defines its flags with ABSL_FLAG in that
// file (so `sparseserve <name> --help` can list exactly them, plus tools/common_flags.cc) and
// exposes one `int Run<Name>Command(const std::vector<char*>& positional)`.
#ifndef SPARSESERVE_TOOLS_COMMAND_H_
#define SPARSESERVE_TOOLS_COMMAND_H_

#include <string>
#include <vector>

namespace sparseserve::tools {

struct Command {
  const char* name;
  const char* summary;      // one line for the command list
  const char* usage;        // "sparseserve generate --model PATH --prompt TEXT [flags]"
  const char* description;  // a paragraph for `--help`
  std::vector<const char*> flag_files;  // source files whose flags belong to this command
  int (*run)(const std::vector<char*>& positional);
};

// All subcommands, in help order.
const std::vector<Command>& Commands();

// Prints `sparseserve <command> --help`: usage, description, then this command's flags and the
// common flags with their defaults.
void PrintCommandHelp(const Command& command);

// Applies the common flags (--log-level, --threads). Returns false after printing an error.
bool ApplyCommonFlags();

int RunGenerateCommand(const std::vector<char*>& positional);
int RunDecodeCommand(const std::vector<char*>& positional);

}  // namespace sparseserve::tools

#endif  // SPARSESERVE_TOOLS_COMMAND_H_
