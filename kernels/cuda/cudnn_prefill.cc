// CudnnPrefill: cuDNN's fused SDPA over the paged KV cache (see cudnn_prefill.h).
#include "kernels/cuda/cudnn_prefill.h"

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <cstring>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/core/logging.h"
#include "common/core/status.h"

#ifdef SPARSESERVE_WITH_CUDNN_FRONTEND
// cuDNN is opened with dlopen: the binary does not depend on it, and where it is missing the
// project's kernel runs instead.
#define NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING
#include <cudnn_frontend.h>
#include <dlfcn.h>

#include <exception>

namespace cudnn_frontend {
void* cudnn_dlhandle = nullptr;  // the frontend's symbol lookups read it (set by LoadCudnn)
}  // namespace cudnn_frontend
#endif

namespace sparseserve::kernels::cuda {

int CudnnPrefillBucket(int length) {
  return static_cast<int>(std::bit_ceil(static_cast<unsigned>(std::max(length, 64))));
}

bool PrefillOnCudnnRequested() {
  static const bool requested = [] {
    const char* env = std::getenv("SPARSESERVE_PREFILL_ATTENTION");
    return env == nullptr || std::strcmp(env, "kernel") != 0;
  }();
  return requested;
}

#ifndef SPARSESERVE_WITH_CUDNN_FRONTEND

struct CudnnPrefill::State {};

CudnnPrefill::CudnnPrefill(std::unique_ptr<State> state) : state_(std::move(state)) {}
CudnnPrefill::~CudnnPrefill() = default;

absl::Status CudnnPrefill::Available() {
  return absl::UnavailableError(
      "built without cudnn-frontend's headers (scripts/deps.sh installs them)");
}
absl::StatusOr<std::unique_ptr<CudnnPrefill>> CudnnPrefill::Create() {
  return Available();
}
absl::StatusOr<int64_t> CudnnPrefill::Prepare(const CudnnPrefillShape&) {
  return Available();
}
absl::Status CudnnPrefill::Run(const CudnnPrefillShape&, const CudnnPrefillArgs&, void*,
                               cudaStream_t) {
  return Available();
}

#else

namespace fe = cudnn_frontend;

namespace {

// Paged K/V with ragged queries and a per-sequence bottom-right causal mask (cuDNN 9.7).
constexpr size_t kMinVersion = 90700;

enum Uid : int64_t { kQ = 1, kK, kV, kO, kSeqQ, kSeqKv, kOffsets, kTableK, kTableV };

absl::Status LoadCudnn() {
  static const absl::Status status = []() -> absl::Status {
    void* handle = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      const char* error = dlerror();
      return absl::UnavailableError(
          absl::StrCat("cannot load libcudnn.so.9: ", error != nullptr ? error : "not found"));
    }
    fe::cudnn_dlhandle = handle;
    try {
      const size_t version = fe::detail::get_backend_version();
      if (version < kMinVersion) {
        return absl::UnavailableError(absl::StrCat("cuDNN ", version, " is older than ",
                                                   kMinVersion, " (paged SDPA with ragged rows)"));
      }
    } catch (const std::exception& e) {
      return absl::UnavailableError(absl::StrCat("cuDNN: ", e.what()));
    }
    return absl::OkStatus();
  }();
  return status;
}

absl::Status FeStatus(fe::error_t error, const char* what) {
  if (error.is_good()) return absl::OkStatus();
  return absl::UnimplementedError(absl::StrCat("cuDNN SDPA ", what, ": ", error.get_message()));
}

// The SDPA graph of one shape: bf16 in and out, f32 softmax, no statistics (inference).
absl::StatusOr<std::shared_ptr<fe::graph::Graph>> BuildGraph(const CudnnPrefillShape& s,
                                                             cudnnHandle_t handle) {
  const int64_t b = s.batch, h = s.heads, hk = s.kv_heads, d = s.head_dim, bt = s.block_tokens;
  const int64_t sq = s.max_q, table = s.table_size();
  auto graph = std::make_shared<fe::graph::Graph>();
  graph->set_io_data_type(fe::DataType_t::BFLOAT16)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  auto int_tensor = [&graph](const char* name, Uid uid, const std::vector<int64_t>& dim,
                             const std::vector<int64_t>& stride) {
    return graph->tensor(fe::graph::Tensor_attributes()
                             .set_name(name)
                             .set_uid(uid)
                             .set_data_type(fe::DataType_t::INT32)
                             .set_dim(dim)
                             .set_stride(stride));
  };
  // Packed rows: sequence i's rows start at element offsets[i]; rows are heads * d apart.
  auto offsets = int_tensor("row_offsets", kOffsets, {b + 1, 1, 1, 1}, {1, 1, 1, 1});
  auto q = graph->tensor(fe::graph::Tensor_attributes()
                             .set_name("q")
                             .set_uid(kQ)
                             .set_dim({b, h, sq, d})
                             .set_stride({sq * h * d, d, h * d, 1})
                             .set_ragged_offset(offsets));
  // The paged containers: block n's keys at kv_layer[2n], its values at kv_layer[2n + 1].
  auto container = [&](const char* name, Uid uid) {
    return graph->tensor(fe::graph::Tensor_attributes()
                             .set_name(name)
                             .set_uid(uid)
                             .set_dim({s.num_blocks, hk, bt, d})
                             .set_stride({2 * bt * hk * d, d, hk * d, 1}));
  };
  auto k = container("k_blocks", kK);
  auto v = container("v_blocks", kV);
  auto seq_q = int_tensor("seq_q", kSeqQ, {b, 1, 1, 1}, {1, 1, 1, 1});
  auto seq_kv = int_tensor("seq_kv", kSeqKv, {b, 1, 1, 1}, {1, 1, 1, 1});
  auto table_k = int_tensor("table_k", kTableK, {b, 1, table, 1}, {table, table, 1, 1});
  auto table_v = int_tensor("table_v", kTableV, {b, 1, table, 1}, {table, table, 1, 1});
  auto options = fe::graph::SDPA_attributes()
                     .set_name("prefill")
                     .set_generate_stats(false)
                     .set_attn_scale(s.scale)
                     .set_causal_mask_bottom_right(true)  // new rows are the last q of kv keys
                     .set_padding_mask(true)
                     .set_seq_len_q(seq_q)
                     .set_seq_len_kv(seq_kv)
                     .set_paged_attention_k_table(table_k)
                     .set_paged_attention_v_table(table_v)
                     .set_paged_attention_max_seq_len_kv(s.max_kv);
  auto [o, stats] = graph->sdpa(q, k, v, options);
  (void)stats;
  o->set_output(true)
      .set_uid(kO)
      .set_dim({b, h, sq, d})
      .set_stride({sq * h * d, d, h * d, 1})
      .set_ragged_offset(offsets);
  SS_RETURN_IF_ERROR(FeStatus(graph->validate(), "validate"));
  SS_RETURN_IF_ERROR(FeStatus(graph->build_operation_graph(handle), "operation graph"));
  SS_RETURN_IF_ERROR(FeStatus(graph->create_execution_plans({fe::HeurMode_t::A}), "plans"));
  SS_RETURN_IF_ERROR(FeStatus(graph->check_support(), "support"));
  SS_RETURN_IF_ERROR(FeStatus(graph->build_plans(), "build"));
  return graph;
}

}  // namespace

struct CudnnPrefill::State {
  cudnnHandle_t handle = nullptr;
  struct Entry {
    CudnnPrefillShape shape;
    absl::Status status;  // not ok: cuDNN has no engine for the shape (kept, not retried)
    std::shared_ptr<fe::graph::Graph> graph;
    int64_t workspace = 0;
  };
  std::vector<Entry> graphs;  // a handful (bucketed shapes): a linear search is enough

  Entry* Find(const CudnnPrefillShape& shape) {
    for (Entry& e : graphs) {
      if (e.shape == shape) return &e;
    }
    return nullptr;
  }
};

absl::Status CudnnPrefill::Available() {
  return LoadCudnn();
}

absl::StatusOr<std::unique_ptr<CudnnPrefill>> CudnnPrefill::Create() {
  SS_RETURN_IF_ERROR(LoadCudnn());
  auto state = std::make_unique<State>();
  try {
    const cudnnStatus_t status = fe::detail::create_handle(&state->handle);
    if (status != CUDNN_STATUS_SUCCESS) {
      return absl::UnavailableError(absl::StrCat("cudnnCreate failed with status ", status));
    }
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("cudnnCreate: ", e.what()));
  }
  return std::unique_ptr<CudnnPrefill>(new CudnnPrefill(std::move(state)));
}

CudnnPrefill::CudnnPrefill(std::unique_ptr<State> state) : state_(std::move(state)) {}

CudnnPrefill::~CudnnPrefill() {
  if (state_ == nullptr) return;
  try {  // the frontend's symbol lookups may throw; a destructor must not
    state_->graphs.clear();
    if (state_->handle != nullptr) fe::detail::destroy_handle(state_->handle);
  } catch (const std::exception& e) {
    SS_LOG_WARNING("cuDNN SDPA: releasing the handle failed: {}", e.what());
  }
}

absl::StatusOr<int64_t> CudnnPrefill::Prepare(const CudnnPrefillShape& shape) {
  State::Entry* entry = state_->Find(shape);
  if (entry == nullptr) {
    State::Entry e;
    e.shape = shape;
    try {
      absl::StatusOr<std::shared_ptr<fe::graph::Graph>> graph = BuildGraph(shape, state_->handle);
      e.status = graph.status();
      if (graph.ok()) {
        e.status = FeStatus((*graph)->get_workspace_size(e.workspace), "workspace");
        e.graph = *std::move(graph);
      }
    } catch (const std::exception& ex) {
      e.status = absl::UnimplementedError(absl::StrCat("cuDNN SDPA: ", ex.what()));
    }
    if (!e.status.ok()) {
      SS_LOG_WARNING("{}: batch {} rows {} keys {}: those prefill chunks run the project's kernel",
                     std::string(e.status.message()), shape.batch, shape.max_q, shape.max_kv);
    }
    state_->graphs.push_back(std::move(e));
    entry = &state_->graphs.back();
  }
  SS_RETURN_IF_ERROR(entry->status);
  return entry->workspace;
}

absl::Status CudnnPrefill::Run(const CudnnPrefillShape& shape, const CudnnPrefillArgs& args,
                               void* workspace, cudaStream_t stream) {
  State::Entry* entry = state_->Find(shape);
  if (entry == nullptr || !entry->status.ok()) {
    return absl::FailedPreconditionError("cuDNN SDPA: Run without a prepared graph for the shape");
  }
  const int64_t value_offset =
      int64_t{shape.block_tokens} * shape.kv_heads * shape.head_dim * 2;  // bytes of bf16
  std::unordered_map<int64_t, void*> pack = {
      {kQ, const_cast<void*>(args.q)},
      {kK, const_cast<void*>(args.kv_layer)},
      {kV, static_cast<char*>(const_cast<void*>(args.kv_layer)) + value_offset},
      {kO, args.out},
      {kSeqQ, const_cast<int32_t*>(args.seq_q)},
      {kSeqKv, const_cast<int32_t*>(args.seq_kv)},
      {kOffsets, const_cast<int32_t*>(args.row_offsets)},
      {kTableK, const_cast<int32_t*>(args.tables)},
      {kTableV, const_cast<int32_t*>(args.tables)}};
  try {
    const cudnnStatus_t status = fe::detail::set_stream(state_->handle, stream);
    if (status != CUDNN_STATUS_SUCCESS) {
      return absl::InternalError(absl::StrCat("cudnnSetStream failed with status ", status));
    }
    fe::error_t error = entry->graph->execute(state_->handle, pack, workspace);
    if (!error.is_good()) {
      return absl::InternalError(absl::StrCat("cuDNN SDPA execute: ", error.get_message()));
    }
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("cuDNN SDPA execute: ", e.what()));
  }
  return absl::OkStatus();
}

#endif  // SPARSESERVE_WITH_CUDNN_FRONTEND

}  // namespace sparseserve::kernels::cuda
