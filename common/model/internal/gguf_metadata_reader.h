// Reads the key/value section of a GGUF file into a GgufMetadata (used by GgufFile).
//
// Private to common/model. Stateless, thread-safe.
#ifndef SPARSESERVE_COMMON_MODEL_INTERNAL_GGUF_METADATA_READER_H_
#define SPARSESERVE_COMMON_MODEL_INTERNAL_GGUF_METADATA_READER_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "common/model/gguf_metadata.h"
#include "common/model/internal/byte_reader.h"

namespace sparseserve::model::internal {

// Arrays may nest this deep (an array of arrays has depth 2); deeper is rejected so a hostile
// file cannot exhaust the stack.
inline constexpr int kMaxGgufArrayDepth = 8;

// Reads `num_kv` (key, type, value) entries starting at the reader's position.
// Returns kInvalidArgument "<source>: <what> at byte <offset>" for truncated or malformed
// entries, unknown value types, counts that cannot fit in the bytes left, nesting deeper than
// kMaxGgufArrayDepth and duplicate keys.
absl::StatusOr<GgufMetadata> ReadGgufMetadata(ByteReader& reader, uint64_t num_kv,
                                              std::string source);

}  // namespace sparseserve::model::internal

#endif  // SPARSESERVE_COMMON_MODEL_INTERNAL_GGUF_METADATA_READER_H_
