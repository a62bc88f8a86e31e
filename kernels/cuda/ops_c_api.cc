// The C interface of ops_c_api.h: wraps raw device pointers as Tensors and calls CudaBackend.
#include "kernels/cuda/ops_c_api.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "kernels/cuda/cuda_backend.h"

// A plan kept across calls: a call with the same batch and shape reuses it, as a forward step
// plans once and runs every layer (timing loops then measure the kernels).
struct ss_cached_plan {
  sparseserve::kernels::AttentionBatch batch;
  sparseserve::kernels::AttentionShape shape;
  sparseserve::kernels::AttentionWorkspace workspace;
  std::optional<sparseserve::kernels::AttentionPlan> plan;
};

struct ss_backend {
  std::unique_ptr<sparseserve::kernels::CudaBackend> impl;
  // One plan per entry point: ss_attention's, ss_tokenselect_attention's (its batch carries the
  // state) and ss_minference_attention's (its index).
  ss_cached_plan dense, tokenselect, minference;
};

namespace {

using sparseserve::Device;
using sparseserve::DType;
using sparseserve::Shape;
using sparseserve::Tensor;

thread_local std::string last_error;

int Report(const absl::Status& status) {
  if (status.ok()) return 0;
  last_error = status.ToString();
  return 1;
}

Tensor Dev(const void* p, DType dtype, Shape shape) {
  return Tensor::Wrap(const_cast<void*>(p), dtype, shape, Device::kCuda, nullptr);
}
Tensor Bf16(const void* p, Shape shape) {
  return Dev(p, DType::kBf16, shape);
}
Tensor I32(const void* p, Shape shape) {
  return Dev(p, DType::kI32, shape);
}

// The host batch of ss_attention / ss_tokenselect_attention: sequences packed in order, each
// with its slice of the concatenated block tables.
sparseserve::kernels::AttentionBatch PackedBatch(int block_tokens, float scale, int num_seqs,
                                                 const int32_t* q_lens, const int32_t* kv_lens,
                                                 const int32_t* block_tables) {
  sparseserve::kernels::AttentionBatch batch;
  batch.block_tokens = block_tokens;
  batch.scale = scale;
  int32_t q_begin = 0;
  int64_t table_at = 0;
  for (int s = 0; s < num_seqs; ++s) {
    sparseserve::kernels::SequenceAttention sa;
    sa.q_begin = q_begin;
    sa.q_len = q_lens[s];
    sa.kv_len = kv_lens[s];
    const int64_t blocks = (int64_t{kv_lens[s]} + block_tokens - 1) / block_tokens;
    sa.block_table.assign(block_tables + table_at, block_tables + table_at + blocks);
    table_at += blocks;
    q_begin += q_lens[s];
    batch.sequences.push_back(std::move(sa));
  }
  return batch;
}

bool SameBatch(const sparseserve::kernels::AttentionBatch& a,
               const sparseserve::kernels::AttentionBatch& b) {
  auto same_seq = [](const auto& x, const auto& y) {
    return x.q_begin == y.q_begin && x.q_len == y.q_len && x.kv_len == y.kv_len &&
           x.block_table == y.block_table && x.pattern == y.pattern && x.state_slot == y.state_slot;
  };
  return a.block_tokens == b.block_tokens && a.scale == b.scale &&
         a.sequence_state.raw_data() == b.sequence_state.raw_data() &&
         a.sequence_state.shape() == b.sequence_state.shape() &&
         std::equal(a.sequences.begin(), a.sequences.end(), b.sequences.begin(), b.sequences.end(),
                    same_seq);
}

bool SameShape(const sparseserve::kernels::AttentionShape& a,
               const sparseserve::kernels::AttentionShape& b) {
  return a.num_heads == b.num_heads && a.num_kv_heads == b.num_kv_heads &&
         a.head_dim == b.head_dim && a.num_rows == b.num_rows && a.num_blocks == b.num_blocks;
}

// The cached plan for `batch`, planned anew when it or the shape changed.
absl::Status EnsurePlan(ss_backend* be, ss_cached_plan& cached,
                        sparseserve::kernels::AttentionBatch batch,
                        const sparseserve::kernels::AttentionShape& shape) {
  if (cached.plan.has_value() && SameShape(cached.shape, shape) && SameBatch(cached.batch, batch)) {
    return absl::OkStatus();
  }
  cached.plan.reset();
  cached.batch = std::move(batch);
  cached.shape = shape;
  absl::StatusOr<sparseserve::kernels::AttentionPlan> plan =
      be->impl->PlanAttention(cached.batch, cached.shape, cached.workspace);
  if (!plan.ok()) return plan.status();
  cached.plan = *plan;
  return absl::OkStatus();
}

int32_t PackedRows(const sparseserve::kernels::AttentionBatch& batch) {
  return batch.sequences.empty() ? 0
                                 : batch.sequences.back().q_begin + batch.sequences.back().q_len;
}

// Copies the first 2 * num_seqs floats of a plan's device counters into `host` (NULL: skipped).
int CopyStats(ss_backend* be, const ss_cached_plan& cached, const Tensor& stats, float* host) {
  if (host == nullptr) return 0;
  const int64_t n = 2 * static_cast<int64_t>(cached.batch.sequences.size());
  Tensor staged = Tensor::Zeros(DType::kF32, {stats.numel()});
  if (int rc = Report(be->impl->CopyToHost(stats, staged)); rc != 0) return rc;
  std::copy(staged.data<float>(), staged.data<float>() + n, host);
  return 0;
}

}  // namespace

extern "C" {

ss_backend* ss_backend_create(void) {
  absl::StatusOr<sparseserve::kernels::CudaDeviceInfo> info =
      sparseserve::kernels::FindCudaDevice();
  if (!info.ok()) {
    Report(info.status());
    return nullptr;
  }
  auto backend = sparseserve::kernels::CudaBackend::Create(*info, /*use_legacy_stream=*/true);
  if (!backend.ok()) {
    Report(backend.status());
    return nullptr;
  }
  return new ss_backend{std::move(*backend)};
}

void ss_backend_destroy(ss_backend* be) {
  delete be;
}

const char* ss_last_error(void) {
  return last_error.c_str();
}

int ss_synchronize(ss_backend* be) {
  return Report(be->impl->Synchronize());
}

int ss_embedding(ss_backend* be, const void* table_dev, int64_t vocab, int64_t hidden,
                 const int32_t* ids_dev, int64_t n, void* out_dev) {
  return Report(be->impl->Embedding(Bf16(table_dev, {vocab, hidden}), I32(ids_dev, {n}),
                                    Bf16(out_dev, {n, hidden})));
}

int ss_rms_norm(ss_backend* be, const void* x_dev, const void* w_dev, int64_t n, int64_t d,
                float eps, void* out_dev) {
  return Report(
      be->impl->RmsNorm(Bf16(x_dev, {n, d}), Bf16(w_dev, {d}), eps, Bf16(out_dev, {n, d})));
}

int ss_add_rms_norm(ss_backend* be, void* residual_dev, const void* x_dev, const void* w_dev,
                    int64_t n, int64_t d, float eps, void* out_dev) {
  return Report(be->impl->AddRmsNorm(Bf16(residual_dev, {n, d}), Bf16(x_dev, {n, d}),
                                     Bf16(w_dev, {d}), eps, Bf16(out_dev, {n, d})));
}

int ss_linear(ss_backend* be, const void* x_dev, const void* w_dev, const void* bias_dev, int64_t n,
              int64_t in, int64_t out_features, void* out_dev, int out_f32) {
  const Tensor bias = bias_dev != nullptr ? Bf16(bias_dev, {out_features}) : Tensor();
  return Report(
      be->impl->Linear(Bf16(x_dev, {n, in}), Bf16(w_dev, {out_features, in}), bias,
                       Dev(out_dev, out_f32 ? DType::kF32 : DType::kBf16, {n, out_features})));
}

int ss_rope(ss_backend* be, void* q_dev, void* k_dev, int64_t n, int heads, int kv_heads,
            int head_dim, const int32_t* positions_dev, const float* inv_freq_dev) {
  return Report(be->impl->Rope(Bf16(q_dev, {n, heads, head_dim}),
                               Bf16(k_dev, {n, kv_heads, head_dim}), I32(positions_dev, {n}),
                               Dev(inv_freq_dev, DType::kF32, {head_dim / 2})));
}

int ss_silu_mul(ss_backend* be, const void* gate_dev, const void* up_dev, int64_t n, int64_t ffn,
                void* out_dev) {
  return Report(
      be->impl->SiluMul(Bf16(gate_dev, {n, ffn}), Bf16(up_dev, {n, ffn}), Bf16(out_dev, {n, ffn})));
}

int ss_write_kv(ss_backend* be, const void* k_dev, const void* v_dev, const int32_t* slots_dev,
                int64_t n, void* kv_layer_dev, int64_t num_blocks, int block_tokens, int kv_heads,
                int head_dim) {
  return Report(be->impl->WriteKv(
      Bf16(k_dev, {n, kv_heads, head_dim}), Bf16(v_dev, {n, kv_heads, head_dim}),
      I32(slots_dev, {n}), Bf16(kv_layer_dev, {num_blocks * 2, block_tokens, kv_heads, head_dim})));
}

int ss_attention(ss_backend* be, const void* q_dev, const void* kv_layer_dev, int64_t num_blocks,
                 int block_tokens, int heads, int kv_heads, int head_dim, int num_seqs,
                 const int32_t* q_lens, const int32_t* kv_lens, const int32_t* block_tables,
                 float scale, void* out_dev) {
  sparseserve::kernels::AttentionBatch batch =
      PackedBatch(block_tokens, scale, num_seqs, q_lens, kv_lens, block_tables);
  const int32_t rows = PackedRows(batch);
  const sparseserve::kernels::AttentionShape shape{heads, kv_heads, head_dim, rows, num_blocks};
  if (int rc = Report(EnsurePlan(be, be->dense, std::move(batch), shape)); rc != 0) return rc;
  return Report(
      be->impl->Attention(*be->dense.plan, Bf16(q_dev, {rows, heads, head_dim}),
                          Bf16(kv_layer_dev, {num_blocks * 2, block_tokens, kv_heads, head_dim}), 0,
                          Bf16(out_dev, {rows, heads, head_dim})));
}

int ss_tokenselect_attention(ss_backend* be, const void* q_dev, const void* kv_layer_dev,
                             int64_t num_blocks, int block_tokens, int heads, int kv_heads,
                             int head_dim, int num_seqs, const int32_t* q_lens,
                             const int32_t* kv_lens, const int32_t* block_tables, float scale,
                             int k, int initial, int local, float theta, int32_t* state_dev,
                             int64_t slot_words, void* out_dev) {
  sparseserve::kernels::AttentionBatch batch =
      PackedBatch(block_tokens, scale, num_seqs, q_lens, kv_lens, block_tables);
  for (int s = 0; s < num_seqs; ++s) {
    sparseserve::kernels::SequenceAttention& sa = batch.sequences[s];
    sa.pattern.kind = sparseserve::kernels::AttentionMethodKind::kTokenSelect;
    sa.pattern.tokenselect = {k, initial, local, theta};
    sa.state_slot = s;
  }
  batch.sequence_state = I32(state_dev, {num_seqs, slot_words});
  const int32_t rows = PackedRows(batch);
  const sparseserve::kernels::AttentionShape shape{heads, kv_heads, head_dim, rows, num_blocks};
  if (int rc = Report(EnsurePlan(be, be->tokenselect, std::move(batch), shape)); rc != 0) {
    return rc;
  }
  const Tensor q = Bf16(q_dev, {rows, heads, head_dim});
  const Tensor kv = Bf16(kv_layer_dev, {num_blocks * 2, block_tokens, kv_heads, head_dim});
  const sparseserve::kernels::AttentionPlan& plan = *be->tokenselect.plan;
  if (int rc = Report(be->impl->BuildAttentionIndex(plan, q, kv, 0)); rc != 0) return rc;
  return Report(be->impl->Attention(plan, q, kv, 0, Bf16(out_dev, {rows, heads, head_dim})));
}

int ss_tokenselect_stats(ss_backend* be, float* selection_host, float* pairs_host) {
  const ss_cached_plan& cached = be->tokenselect;
  if (!cached.plan.has_value()) {
    return Report(absl::FailedPreconditionError("ss_tokenselect_stats: no TokenSelect plan yet"));
  }
  if (int rc = CopyStats(be, cached, cached.workspace.selection_stats, selection_host); rc != 0) {
    return rc;
  }
  return CopyStats(be, cached, cached.workspace.sparse_stats, pairs_host);
}

int ss_minference_attention(ss_backend* be, const void* q_dev, const void* kv_layer_dev,
                            int64_t num_blocks, int block_tokens, int heads, int kv_heads,
                            int head_dim, int num_seqs, const int32_t* q_lens,
                            const int32_t* kv_lens, const int32_t* block_tables, float scale,
                            int pattern, int v, int s, int planted, int build_index,
                            void* out_dev) {
  using sparseserve::kernels::HeadPatternKind;
  if (pattern < 0 || pattern > static_cast<int>(HeadPatternKind::kDense)) {
    return Report(absl::InvalidArgumentError("ss_minference_attention: pattern must be 0..3"));
  }
  // One config per call shape: a new pointer would make every call plan anew.
  const sparseserve::kernels::HeadPattern head_pattern{static_cast<HeadPatternKind>(pattern), v, s};
  std::shared_ptr<const sparseserve::kernels::MInferenceConfig> config;
  if (be->minference.plan.has_value() && !be->minference.batch.sequences.empty()) {
    const auto& old = be->minference.batch.sequences.front().pattern.minference;
    if (old != nullptr && old->planted == (planted != 0) && old->num_heads == heads &&
        !old->heads.empty() && old->heads.front() == head_pattern) {
      config = old;
    }
  }
  if (config == nullptr) {
    auto made = std::make_shared<sparseserve::kernels::MInferenceConfig>(
        sparseserve::kernels::MInferenceConfig::Uniform(1, heads, head_pattern));
    made->planted = planted != 0;
    config = std::move(made);
  }
  sparseserve::kernels::AttentionBatch batch =
      PackedBatch(block_tokens, scale, num_seqs, q_lens, kv_lens, block_tables);
  for (sparseserve::kernels::SequenceAttention& sa : batch.sequences) {
    sa.pattern.kind = sparseserve::kernels::AttentionMethodKind::kMInference;
    sa.pattern.minference = config;
  }
  const int32_t rows = PackedRows(batch);
  const sparseserve::kernels::AttentionShape shape{heads, kv_heads, head_dim, rows, num_blocks};
  if (int rc = Report(EnsurePlan(be, be->minference, std::move(batch), shape)); rc != 0) {
    return rc;
  }
  const Tensor q = Bf16(q_dev, {rows, heads, head_dim});
  const Tensor kv = Bf16(kv_layer_dev, {num_blocks * 2, block_tokens, kv_heads, head_dim});
  const sparseserve::kernels::AttentionPlan& plan = *be->minference.plan;
  if (build_index != 0) {
    if (int rc = Report(be->impl->BuildAttentionIndex(plan, q, kv, 0)); rc != 0) return rc;
  }
  return Report(be->impl->Attention(plan, q, kv, 0, Bf16(out_dev, {rows, heads, head_dim})));
}

int ss_minference_stats(ss_backend* be, float* pairs_host) {
  const ss_cached_plan& cached = be->minference;
  if (!cached.plan.has_value()) {
    return Report(absl::FailedPreconditionError("ss_minference_stats: no MInference plan yet"));
  }
  return CopyStats(be, cached, cached.workspace.sparse_stats, pairs_host);
}

int ss_minference_planted_lines(int layer, int head, int kv_len, int32_t* columns_host,
                                int32_t* n_columns, int32_t* slashes_host, int32_t* n_slashes) {
  if (kv_len < 1 || layer < 0 || head < 0) {
    return Report(absl::InvalidArgumentError("ss_minference_planted_lines: bad layer/head/kv_len"));
  }
  const sparseserve::kernels::MInferenceConfig config;  // its planted_seed is the product's
  const sparseserve::kernels::HeadPattern vs;           // VS(1000, 6096)
  *n_columns = sparseserve::kernels::MInferenceColumns(vs.v, kv_len);
  *n_slashes = sparseserve::kernels::MInferenceSlashes(vs.s, kv_len);
  for (int32_t i = 0; i < *n_columns; ++i) {
    columns_host[i] = sparseserve::kernels::PlantedColumn(config.planted_seed, layer, head, i,
                                                          *n_columns, kv_len);
  }
  for (int32_t i = 0; i < *n_slashes; ++i) {
    slashes_host[i] =
        sparseserve::kernels::PlantedSlash(config.planted_seed, layer, head, i, *n_slashes, kv_len);
  }
  return 0;
}

}  // extern "C"
