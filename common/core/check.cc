#include "common/core/check.h"

#include <cstdio>
#include <cstdlib>

namespace sparseserve::core {

void CheckFailed(const char* file, int line, const char* condition) {
  // Written with stdio rather than the logger: this must work even while logging is broken.
  std::fprintf(stderr, "SS_CHECK failed at %s:%d: %s\n", file, line, condition);
  std::fflush(stderr);
  std::abort();
}

}  // namespace sparseserve::core
