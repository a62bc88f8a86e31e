#include <algorithm>
#include <cstdio>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/match.h"
#include "tools/command.h"

namespace sparseserve::tools {
namespace {

void PrintFlags(const char* title, const char* file) {
  std::vector<absl::CommandLineFlag*> flags;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    if (absl::StrContains(flag->Filename(), file)) flags.push_back(flag);
  }
  std::sort(flags.begin(), flags.end(), [](auto* a, auto* b) { return a->Name() < b->Name(); });
  std::printf("\nflags from %s:\n", title);
  for (const absl::CommandLineFlag* f : flags) {
    std::string dashed(f->Name());
    std::replace(dashed.begin(), dashed.end(), '_', '-');
    std::printf("  --%s (default: %s)\n      %s\n", dashed.c_str(),
                f->DefaultValue().empty() ? "\"\"" : f->DefaultValue().c_str(), f->Help().c_str());
  }
}

}  // namespace

void PrintCommandHelp(const Command& command) {
  std::printf("usage: %s\n\n%s\n", command.usage, command.description);
  for (const char* file : command.flag_files) PrintFlags(file, file);
  PrintFlags("common flags", "tools/common_flags.cc");
  std::printf(
      "\nFlags are written --name=value or --name value; '-' and '_' are interchangeable.\n");
}

}  // namespace sparseserve::tools
