#include "common/model/step_graph_cache.h"

#include <algorithm>
#include <utility>

#include "common/core/logging.h"

namespace sparseserve::model {

StepGraphCache::StepGraphCache(kernels::Backend* backend, int max_rows)
    : backend_(backend), max_rows_(std::max(max_rows, 0)) {}

void StepGraphCache::Reset(int max_rows) {
  max_rows_ = std::max(max_rows, 0);
  slots_.clear();
}

bool StepGraphCache::Eligible(int64_t rows) {
  if (rows <= 0 || rows > max_rows_) return false;
  if (support_ == Support::kUnknown) {
    support_ =
        backend_->CaptureGraph([] { return absl::OkStatus(); }).ok() ? Support::kYes : Support::kNo;
  }
  return support_ == Support::kYes;
}

bool StepGraphCache::Matches(const Slot& slot, const Baked& baked) {
  if (slot.kv_base != baked.kv_base ||
      slot.workspace_generation != baked.plan->workspace->generation ||
      !(slot.layout == baked.plan->layout)) {
    return false;
  }
  if (baked.shadow_plan == nullptr) return true;
  return slot.shadow_workspace_generation == baked.shadow_plan->workspace->generation &&
         slot.shadow_layout == baked.shadow_plan->layout && slot.shadow_count == baked.shadow_count;
}

absl::Status StepGraphCache::Run(const Shape& shape, const Baked& baked,
                                 const std::function<absl::Status()>& run) {
  Slot& slot = slots_[{shape, baked.shadow_plan != nullptr}];
  last_run_was_setup_ = false;
  if (slot.graph != nullptr && !Matches(slot, baked)) slot.graph.reset();
  if (slot.graph != nullptr) {
    absl::Status launched = backend_->LaunchGraph(*slot.graph);
    // kUnimplemented: the backend wants this step op by op (per-op timing is on).
    if (absl::IsUnimplemented(launched)) return run();
    return launched;
  }
  if (!slot.warmed || slot.failed) {
    last_run_was_setup_ = !slot.warmed;
    slot.warmed = true;
    return run();
  }
  last_run_was_setup_ = true;  // captured below
  absl::StatusOr<std::unique_ptr<kernels::StepGraph>> captured = backend_->CaptureGraph(run);
  if (!captured.ok()) {
    if (!absl::IsUnimplemented(captured.status())) {
      SS_LOG_WARNING("steps of {} rows over {} sequences run op by op: graph capture failed: {}",
                     shape.rows, shape.sequences, captured.status().ToString());
      slot.failed = true;
    }
    return run();
  }
  slot.graph = *std::move(captured);
  slot.kv_base = baked.kv_base;
  slot.workspace_generation = baked.plan->workspace->generation;
  slot.layout = baked.plan->layout;
  if (baked.shadow_plan != nullptr) {
    slot.shadow_workspace_generation = baked.shadow_plan->workspace->generation;
    slot.shadow_layout = baked.shadow_plan->layout;
    slot.shadow_count = baked.shadow_count;
  }
  return backend_->LaunchGraph(*slot.graph);
}

}  // namespace sparseserve::model
