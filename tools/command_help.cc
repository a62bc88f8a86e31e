#include <algorithm>
#include <cstdio>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "tools/command.h"

namespace sparseserve::tools {
namespace {

// `source` is a file ("tools/model_flags.cc": all its flags) or a file with a selection
// ("tools/model_flags.cc:device,block_tokens": only those).
void PrintFlags(absl::string_view title, absl::string_view source) {
  const std::vector<absl::string_view> parts = absl::StrSplit(source, absl::MaxSplits(':', 1));
  const absl::string_view file = parts[0];
  std::vector<absl::string_view> selected;
  if (parts.size() > 1) selected = absl::StrSplit(parts[1], ',');
  std::vector<absl::CommandLineFlag*> flags;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    if (!absl::StrContains(flag->Filename(), file)) continue;
    if (!selected.empty() &&
        std::find(selected.begin(), selected.end(), flag->Name()) == selected.end()) {
      continue;
    }
    flags.push_back(flag);
  }
  std::sort(flags.begin(), flags.end(), [](auto* a, auto* b) { return a->Name() < b->Name(); });
  std::printf("\nflags from %.*s:\n", static_cast<int>(title.size()), title.data());
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
  for (absl::string_view source : command.flag_files) {
    PrintFlags(source.substr(0, source.find(':')), source);
  }
  PrintFlags("common flags", "tools/common_flags.cc");
  std::printf(
      "\nFlags are written --name=value or --name value; '-' and '_' are interchangeable.\n");
}

}  // namespace sparseserve::tools
