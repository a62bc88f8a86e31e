// Flags of KV transfer through host staging memory (decode, prefill, and `up`, which forwards
// them): the mode shared by both worker kinds and each side's staging size.
#ifndef SPARSESERVE_TOOLS_KV_STAGING_FLAGS_H_
#define SPARSESERVE_TOOLS_KV_STAGING_FLAGS_H_

#include <cstddef>

#include "absl/status/statusor.h"
#include "common/transfer/kv_staging_mode.h"

namespace sparseserve::tools {

// --kv-staging: kInvalidArgument for anything but auto / on / off.
absl::StatusOr<transfer::KvStagingMode> KvStagingModeFromFlags();
// --kv-staging-mb (decode staging area) in bytes. kInvalidArgument unless > 0.
absl::StatusOr<size_t> DecodeKvStagingBytesFromFlags();
// --prefill-kv-staging-mb (prefill staging ring) in bytes. kInvalidArgument unless > 0.
absl::StatusOr<size_t> PrefillKvStagingBytesFromFlags();

}  // namespace sparseserve::tools

#endif  // SPARSESERVE_TOOLS_KV_STAGING_FLAGS_H_
