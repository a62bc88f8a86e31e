#include "decode_svc/kv_staging_area.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace sparseserve::decode {

KvStagingLease::KvStagingLease(KvStagingLease&& other) noexcept
    : area_(std::exchange(other.area_, nullptr)), block_ids_(std::move(other.block_ids_)) {
  other.block_ids_.clear();
}

KvStagingLease& KvStagingLease::operator=(KvStagingLease&& other) noexcept {
  if (this != &other) {
    Reset();
    area_ = std::exchange(other.area_, nullptr);
    block_ids_ = std::move(other.block_ids_);
    other.block_ids_.clear();
  }
  return *this;
}

void KvStagingLease::Reset() {
  if (area_ != nullptr && !block_ids_.empty()) area_->Free(block_ids_);
  area_ = nullptr;
  block_ids_.clear();
}

absl::StatusOr<std::unique_ptr<KvStagingArea>> KvStagingArea::Create(std::vector<Tensor> layers) {
  if (layers.empty()) return absl::InvalidArgumentError("KV staging area: no layers");
  const Tensor& first = layers.front();
  for (const Tensor& t : layers) {
    if (t.device() != Device::kHost || t.empty() || t.ndim() != 4 || !t.is_contiguous() ||
        t.dtype() != first.dtype() || !(t.shape() == first.shape()) || t.dim(0) % 2 != 0 ||
        t.dim(0) == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("KV staging area: layers must be contiguous host tensors [num_blocks * 2, "
                       "block_tokens, kv_heads, head_dim] of one shape and dtype, got ",
                       t.DebugString(), " and ", first.DebugString()));
    }
  }
  const int num_blocks = static_cast<int>(first.dim(0) / 2);
  return std::unique_ptr<KvStagingArea>(new KvStagingArea(std::move(layers), num_blocks));
}

absl::StatusOr<KvStagingLease> KvStagingArea::Allocate(int n) {
  absl::StatusOr<std::vector<int32_t>> ids = allocator_.Allocate(n);
  if (absl::IsResourceExhausted(ids.status())) {
    return absl::ResourceExhaustedError(absl::StrCat("KV staging area: requested ", n,
                                                     " blocks but only ", num_free_blocks(), " of ",
                                                     num_blocks(), " are free"));
  }
  if (!ids.ok()) return ids.status();
  return KvStagingLease(this, *std::move(ids));
}

}  // namespace sparseserve::decode
