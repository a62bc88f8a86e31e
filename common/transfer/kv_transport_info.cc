#include "common/transfer/kv_transport_info.h"

#include "absl/strings/str_split.h"

namespace sparseserve::transfer {

bool KvTransportInfo::HasTransport(absl::string_view name) const {
  for (absl::string_view t : absl::StrSplit(transports, ',')) {
    if (t == name) return true;
  }
  return false;
}

}  // namespace sparseserve::transfer
