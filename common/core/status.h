// Error propagation helpers over absl::Status / absl::StatusOr (Abseil ships none).
//
// Every fallible function in sparseserve returns absl::Status or absl::StatusOr<T>. These macros
// are the only sanctioned way to propagate them; add context on the way up with
// `AnnotateStatus`. Thread-safe (stateless).
#ifndef SPARSESERVE_COMMON_CORE_STATUS_H_
#define SPARSESERVE_COMMON_CORE_STATUS_H_

#include <utility>
#include "absl/strings/string_view.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace sparseserve {

// Returns `status` with "`context`: " prepended to its message; OK stays OK.
inline absl::Status AnnotateStatus(const absl::Status& status, absl::string_view context) {
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat(context, ": ", status.message()));
}

}  // namespace sparseserve

#define SS_STATUS_CONCAT_INNER_(a, b) a##b
#define SS_STATUS_CONCAT_(a, b) SS_STATUS_CONCAT_INNER_(a, b)

// Returns from the current function if `expr` (an absl::Status) is not OK.
#define SS_RETURN_IF_ERROR(expr)             \
  do {                                       \
    ::absl::Status ss_status_ = (expr);      \
    if (!ss_status_.ok()) return ss_status_; \
  } while (false)

// `SS_ASSIGN_OR_RETURN(auto x, Foo());` — declares/assigns from a StatusOr or returns its error.
#define SS_ASSIGN_OR_RETURN(lhs, expr) \
  SS_ASSIGN_OR_RETURN_IMPL_(SS_STATUS_CONCAT_(ss_statusor_, __LINE__), lhs, expr)
#define SS_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return std::move(tmp).status();  \
  lhs = std::move(tmp).value()

#endif  // SPARSESERVE_COMMON_CORE_STATUS_H_
