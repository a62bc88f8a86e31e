// SS_CHECK: abort with a message when an internal invariant is broken.
//
// Only for bugs (broken invariants); never for input, I/O, network, device or memory errors —
// those return absl::Status. Thread-safe.
#ifndef SPARSESERVE_COMMON_CORE_CHECK_H_
#define SPARSESERVE_COMMON_CORE_CHECK_H_

namespace sparseserve::core {
[[noreturn]] void CheckFailed(const char* file, int line, const char* condition);
}  // namespace sparseserve::core

#define SS_CHECK(cond)                                                        \
  do {                                                                        \
    if (!(cond)) ::sparseserve::core::CheckFailed(__FILE__, __LINE__, #cond); \
  } while (false)

#endif  // SPARSESERVE_COMMON_CORE_CHECK_H_
