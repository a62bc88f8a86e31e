// StepGraphCache: the step-graph policy of a model's decode steps, and the graphs themselves.
//
// Which steps: a step of 1..max_rows() rows that the caller found graph-able (one token per
// sequence, or a few unmasked ones each — speculative verify steps — every row sampled, no
// per-layer hook, no probe), on a backend that can capture graphs (CUDA; probed once with an empty
// capture). Per (rows, sequences, most rows of a sequence, shadowed) slot — so decode and verify
// steps of one row count keep graphs of their own — the first step runs op by op (what ops
// create lazily — GEMM plans, workspaces — must exist before a capture, which may not allocate),
// the second is captured, later ones replay it. A capture bakes in the KV cache's memory, the
// attention workspace's buffers and the plan's offsets into them (and the shadow plan's): a step
// that differs in any of them captures again. A failed capture keeps its size op by op; a
// backend that asks for op-by-op runs (kUnimplemented, per-op timing) gets them.
//
// Not thread-safe: owned by one LlamaModel, driven by its engine thread.
#ifndef SPARSESERVE_COMMON_MODEL_STEP_GRAPH_CACHE_H_
#define SPARSESERVE_COMMON_MODEL_STEP_GRAPH_CACHE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "kernels/attention_plan.h"
#include "kernels/backend.h"

namespace sparseserve::model {

class StepGraphCache {
 public:
  // What a capture baked in; a step whose Baked differs captures again.
  struct Baked {
    const void* kv_base = nullptr;
    const kernels::AttentionPlan* plan = nullptr;
    const kernels::AttentionPlan* shadow_plan = nullptr;  // null: not a shadowed step
    int64_t shadow_count = 0;
  };

  // A step's shape: which slot it takes.
  struct Shape {
    int64_t rows = 0;
    int64_t sequences = 0;
    int max_seq_rows = 0;
    // TokenSwift's draft heads recorded after the layers (LlamaModel::RunHeadOps): their rows and
    // top k; 0 = none.
    int64_t head_rows = 0;
    int head_top_k = 0;
    bool operator==(const Shape&) const = default;
    template <typename H>
    friend H AbslHashValue(H h, const Shape& s) {
      return H::combine(std::move(h), s.rows, s.sequences, s.max_seq_rows, s.head_rows,
                        s.head_top_k);
    }
  };

  // `backend` is borrowed. `max_rows` 0 = graphs off.
  StepGraphCache(kernels::Backend* backend, int max_rows);

  int max_rows() const { return max_rows_; }
  // Drops every graph (and sets the largest batch size that may use one; 0 = off).
  void Reset(int max_rows);
  void Clear() { Reset(max_rows_); }

  // True when a graph-able step of `rows` rows should go through Run: within max_rows() on a
  // backend that has graphs.
  bool Eligible(int64_t rows);

  // Runs one step of `shape` whose device ops `run` records: replays its graph, or runs `run` op
  // by op (first use, failed capture, backend's request), or captures `run` and launches the
  // capture. Errors from `run` and the backend.
  absl::Status Run(const Shape& shape, const Baked& baked,
                   const std::function<absl::Status()>& run);
  // Whether the last Run warmed its slot up or captured it: a step much slower than its replays,
  // which a cost model should not learn from.
  bool last_run_was_setup() const { return last_run_was_setup_; }

 private:
  struct Slot {
    std::unique_ptr<kernels::StepGraph> graph;
    const void* kv_base = nullptr;
    uint64_t workspace_generation = 0;
    kernels::AttentionPlan::Layout layout;
    uint64_t shadow_workspace_generation = 0;
    kernels::AttentionPlan::Layout shadow_layout;
    int64_t shadow_count = 0;
    bool warmed = false;  // one step of this size ran op by op
    bool failed = false;  // capture failed: this size stays op by op
  };
  enum class Support { kUnknown, kYes, kNo };

  static bool Matches(const Slot& slot, const Baked& baked);

  kernels::Backend* backend_;
  int max_rows_;
  Support support_ = Support::kUnknown;
  bool last_run_was_setup_ = false;
  absl::flat_hash_map<std::pair<Shape, bool>, Slot> slots_;  // by (shape, shadowed)
};

}  // namespace sparseserve::model

#endif  // SPARSESERVE_COMMON_MODEL_STEP_GRAPH_CACHE_H_
