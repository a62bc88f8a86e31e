#include "common/rpc/finish_label.h"

namespace sparseserve::rpc {

absl::string_view FinishReasonLabel(v1::FinishReason reason) {
  switch (reason) {
    case v1::FINISH_REASON_LENGTH: return "length";
    case v1::FINISH_REASON_STOP: return "stop";
    case v1::FINISH_REASON_CONTEXT: return "context";
    case v1::FINISH_REASON_ABORTED: return "aborted";
    default: return "error";
  }
}

}  // namespace sparseserve::rpc
