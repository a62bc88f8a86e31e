// LlamaModel::Forward — one batched step of the Llama block stack, op by op or as a step graph.
#include "common/model/llama_model.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "common/core/logging.h"
#include "common/core/status.h"

namespace sparseserve::model {
namespace {

// A tensor-parallel step's agreement (kernels::Collective::Agree): every rank reaches it once
// before queuing the step's device work. A rank that fails before that point still agrees, with
// an error, on its way out, so no other rank waits in a collective for it.
class StepAgreement {
 public:
  explicit StepAgreement(const TensorParallelShard& shard) : shard_(shard) {}
  ~StepAgreement() {
    if (!done_ && shard_.size > 1) {
      shard_.collective
          ->Agree(absl::AbortedError(
              absl::StrCat("tensor-parallel rank ", shard_.rank, " failed to prepare the step")))
          .IgnoreError();
    }
  }
  StepAgreement(const StepAgreement&) = delete;
  StepAgreement& operator=(const StepAgreement&) = delete;
  absl::Status Agree() {
    done_ = true;
    return shard_.size > 1 ? shard_.collective->Agree(absl::OkStatus()) : absl::OkStatus();
  }
  // The step's device work after the agreement: on an error no other rank may wait for this one
  // (Collective::Abort), though the group is then unusable.
  absl::Status Launched(absl::Status status) {
    if (!status.ok() && shard_.size > 1 && status.code() != absl::StatusCode::kAborted) {
      shard_.collective->Abort();
    }
    return status;
  }

 private:
  const TensorParallelShard& shard_;
  bool done_ = false;
};

}  // namespace

absl::StatusOr<Tensor> LlamaModel::Forward(
    const std::vector<ForwardSequence>& batch, PagedKvCache& cache,
    const std::function<absl::Status(int layer)>& on_layer_kv_written) {
  SS_ASSIGN_OR_RETURN(const StepViews v, ComputeLogits(batch, cache, on_layer_kv_written));
  if (shard_.rank != 0) return Tensor();  // rank 0 returns the gathered logits
  Tensor host = Tensor::Zeros(DType::kF32, v.logits.shape());
  SS_RETURN_IF_ERROR(backend_->CopyToHost(v.logits, host));
  SS_RETURN_IF_ERROR(ReadStepReports());
  return host;
}

absl::Status LlamaModel::ReadStepReports() {
  SS_RETURN_IF_ERROR(ReadShadowErrors());
  if (sparse_pending_ == 0) return absl::OkStatus();
  const Tensor pairs = sparse_workspace_->sparse_stats.Slice(0, 0, 2 * sparse_pending_);
  const Tensor cache = sparse_workspace_->selection_stats.Slice(0, 0, 2 * sparse_pending_);
  Tensor host_pairs = Tensor::Zeros(DType::kF32, pairs.shape());
  Tensor host_cache = Tensor::Zeros(DType::kF32, cache.shape());
  SS_RETURN_IF_ERROR(backend_->CopyToHost(pairs, host_pairs));
  SS_RETURN_IF_ERROR(backend_->CopyToHost(cache, host_cache));
  sparse_work_.resize(sparse_pending_);
  for (int64_t i = 0; i < sparse_pending_; ++i) {
    sparse_work_[i].computed_pairs = host_pairs.data<float>()[2 * i];
    sparse_work_[i].causal_pairs = host_pairs.data<float>()[2 * i + 1];
    sparse_work_[i].selection_hits = host_cache.data<float>()[2 * i];
    sparse_work_[i].selection_queries = host_cache.data<float>()[2 * i + 1];
  }
  sparse_pending_ = 0;
  return absl::OkStatus();
}

void LlamaModel::NoteSparseWork(const kernels::AttentionBatch& batch,
                                const kernels::AttentionWorkspace& workspace) {
  for (const kernels::SequenceAttention& sa : batch.sequences) {
    if (sa.pattern.kind == kernels::AttentionMethodKind::kMInference ||
        sa.pattern.kind == kernels::AttentionMethodKind::kTokenSelect) {
      sparse_pending_ = static_cast<int64_t>(batch.sequences.size());
      sparse_workspace_ = &workspace;
    }
  }
}

absl::StatusOr<Tensor> LlamaModel::StackRows(std::initializer_list<Tensor*> parts) const {
  kernels::Backend& be = *backend_;
  int64_t rows = 0;
  for (const Tensor* p : parts) rows += p->dim(0);
  Shape shape = parts.begin()[0]->shape();
  shape[0] = rows;
  SS_ASSIGN_OR_RETURN(Tensor stacked, be.Allocate(be.compute_dtype(), shape));
  int64_t at = 0;
  for (Tensor* p : parts) {
    const Tensor rows_of_p = stacked.Slice(0, at, at + p->dim(0));
    SS_RETURN_IF_ERROR(be.Copy(*p, rows_of_p));
    at += p->dim(0);
    *p = rows_of_p;  // the separate tensor is freed once no view holds it
  }
  return stacked;
}

absl::Status LlamaModel::StackProjections() {
  for (LayerWeights& w : layers_) {
    SS_ASSIGN_OR_RETURN(w.wqkv, StackRows({&w.wq, &w.wk, &w.wv}));
    if (!w.bq.empty()) {
      SS_ASSIGN_OR_RETURN(w.bqkv, StackRows({&w.bq, &w.bk, &w.bv}));
    }
    SS_ASSIGN_OR_RETURN(w.w_gate_up, StackRows({&w.w_gate, &w.w_up}));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int32_t>> LlamaModel::ForwardSample(
    const std::vector<ForwardSequence>& batch, PagedKvCache& cache,
    const kernels::SamplingBatch& sampling,
    const std::function<absl::Status(int layer)>& on_layer_kv_written, DraftPass* draft,
    StepLogprobs* logprobs) {
  if (logprobs != nullptr) {
    logprobs->values.clear();
    logprobs->ids.clear();
  }
  const bool early_exit = draft != nullptr && draft->early_exit;
  if (early_exit && !has_early_exit_adapter()) {
    return absl::FailedPreconditionError("an early-exit draft pass needs the Kangaroo adapter");
  }
  SS_ASSIGN_OR_RETURN(const StepViews v,
                      ComputeLogits(batch, cache, on_layer_kv_written, early_exit, draft));
  // No row asked for a token (a prompt's middle chunk), or a tensor-parallel rank other than 0
  // (rank 0 samples the gathered logits once).
  if (v.logits.dim(0) == 0 || shard_.rank != 0) {
    SS_RETURN_IF_ERROR(ReadStepReports());
    return std::vector<int32_t>();
  }
  SS_RETURN_IF_ERROR(backend_->Sample(v.logits, sampling, v.tokens));
  // The heads are queued before the copy that waits for the step: their launches overlap it.
  const bool heads = draft != nullptr && draft->head_top_k > 0 && !draft_heads_.empty();
  if (heads && !heads_in_step_) SS_RETURN_IF_ERROR(LaunchDraftHeads(v, sampling, *draft));
  Tensor host = Tensor::Zeros(DType::kI32, v.tokens.shape());
  SS_RETURN_IF_ERROR(backend_->CopyToHost(v.tokens, host));
  if (logprobs != nullptr) SS_RETURN_IF_ERROR(ReadLogprobs(v, *logprobs));
  if (early_exit) SS_RETURN_IF_ERROR(ReadTopProbabilities(v, *draft));
  if (heads) {
    SS_ASSIGN_OR_RETURN(draft->head_tokens,
                        ReadHeads(draft->head_rows.empty() ? &sampling : nullptr));
  }
  // After the tokens' copy the step is done: a shadowed step's errors cost one small copy more.
  SS_RETURN_IF_ERROR(ReadStepReports());
  return std::vector<int32_t>(host.data<int32_t>(), host.data<int32_t>() + host.numel());
}

absl::Status LlamaModel::CheckPattern(const kernels::AttentionPattern& pattern) const {
  if (tensor_parallel() && pattern.kind == kernels::AttentionMethodKind::kTokenSelect) {
    // Its heads vote together on the tokens to keep; a rank holds only some heads.
    return absl::UnimplementedError(
        "TokenSelect is not built for --tensor-parallel > 1 yet (issue 19)");
  }
  if (config_.sliding_window == 0 || pattern.kind == kernels::AttentionMethodKind::kDense) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("this model has its own ", config_.sliding_window,
                   "-token sliding window, which runs with dense attention only"));
}

void LlamaModel::set_step_graph_rows(int rows) {
  graphs_.Reset(rows);
  graph_step_ = StepBuffers();
}

absl::StatusOr<LlamaModel::StepInputs> LlamaModel::FlattenBatch(
    const std::vector<ForwardSequence>& batch, const PagedKvCache& cache) const {
  const ModelConfig& c = config_;
  const int block_tokens = cache.shape().block_tokens;
  if (batch.empty()) return absl::InvalidArgumentError("Forward: empty batch");
  StepInputs in;
  in.attn.block_tokens = block_tokens;
  in.attn.sequence_state = sequence_state_;
  for (size_t s = 0; s < batch.size(); ++s) {
    const ForwardSequence& seq = batch[s];
    const int32_t n = static_cast<int32_t>(seq.tokens.size());
    const int64_t end = int64_t{seq.start_pos} + n;
    if (n == 0 || seq.start_pos < 0) {
      return absl::InvalidArgumentError(absl::StrCat("Forward: sequence ", s, " has no tokens"));
    }
    if (!seq.positions.empty() && static_cast<int32_t>(seq.positions.size()) != n) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Forward: sequence ", s, " has ", seq.positions.size(), " positions for ", n, " tokens"));
    }
    const int64_t blocks_needed = (end + block_tokens - 1) / block_tokens;
    if (static_cast<int64_t>(seq.block_table.size()) < blocks_needed) {
      return absl::InvalidArgumentError(absl::StrCat("Forward: sequence ", s, " needs ",
                                                     blocks_needed, " KV blocks, has ",
                                                     seq.block_table.size()));
    }
    SS_RETURN_IF_ERROR(
        AnnotateStatus(CheckPattern(seq.pattern), absl::StrCat("Forward: sequence ", s)));
    // Several rows: a verify step, every row sampled; a masked one (a tree, Lookahead's
    // branches) of any size, since masked rows never go to cuDNN (which cannot be captured).
    in.graphable = in.graphable &&
                   (n == 1 || ((n <= kGraphRowsPerSequence || !seq.mask.empty()) &&
                               seq.logits == LogitRows::kAll &&
                               seq.pattern.kind != kernels::AttentionMethodKind::kTokenSelect)) &&
                   seq.pattern.kind != kernels::AttentionMethodKind::kMInference;
    in.max_seq_rows = std::max(in.max_seq_rows, n);
    kernels::SequenceAttention sa;
    sa.q_begin = static_cast<int32_t>(in.ids.size());
    sa.q_len = n;
    sa.kv_len = static_cast<int32_t>(end);
    sa.mask = seq.mask;
    sa.block_table = seq.block_table;
    sa.pattern = seq.pattern;
    sa.state_slot = seq.state_slot;
    in.attn.sequences.push_back(std::move(sa));
    for (int32_t i = 0; i < n; ++i) {
      const int32_t index = seq.start_pos + i;  // KV index of the row
      const int32_t pos = seq.positions.empty() ? index : seq.positions[i];
      if (pos < 0 || pos >= c.max_position_embeddings) {
        return absl::InvalidArgumentError(
            absl::StrCat("Forward: sequence ", s, " reaches position ", pos,
                         " outside the model's context of ", c.max_position_embeddings));
      }
      const int32_t block = seq.block_table[index / block_tokens];
      if (block < 0 || block >= cache.shape().num_blocks) {
        return absl::InvalidArgumentError(absl::StrCat(
            "Forward: block id ", block, " outside the KV cache of ", cache.shape().num_blocks));
      }
      if (seq.tokens[i] < 0 || seq.tokens[i] >= c.vocab_size) {
        return absl::InvalidArgumentError(absl::StrCat(
            "Forward: token id ", seq.tokens[i], " outside the vocabulary of ", c.vocab_size));
      }
      if (seq.logits == LogitRows::kAll || (seq.logits == LogitRows::kLast && i == n - 1)) {
        in.logit_rows.push_back(static_cast<int32_t>(in.ids.size()));
      }
      in.ids.push_back(seq.tokens[i]);
      in.positions.push_back(pos);
      in.slots.push_back(block * block_tokens + index % block_tokens);
    }
  }
  if (c.sliding_window > 0) {
    kernels::AttentionPattern windowed;
    windowed.kind = kernels::AttentionMethodKind::kSlidingWindow;
    windowed.window = c.sliding_window;
    in.mixed_windows = !c.AllLayersWindowed();
    if (in.mixed_windows) in.window_attn = in.attn;
    for (kernels::SequenceAttention& sa : (in.mixed_windows ? in.window_attn : in.attn).sequences) {
      sa.pattern = windowed;
    }
  }
  return in;
}

absl::Status LlamaModel::UploadIndices(const StepInputs& in, const StepBuffers& buffers) {
  Tensor host = Tensor::Zeros(DType::kI32, buffers.indices.shape());
  int32_t* out = host.data<int32_t>();
  const int64_t r = buffers.rows;
  std::copy(in.ids.begin(), in.ids.end(), out);
  std::copy(in.positions.begin(), in.positions.end(), out + r);
  std::copy(in.slots.begin(), in.slots.end(), out + 2 * r);
  std::copy(in.logit_rows.begin(), in.logit_rows.end(), out + 3 * r);
  return backend_->CopyFromHost(host, buffers.indices);
}

absl::StatusOr<LlamaModel::StepViews> LlamaModel::ComputeLogits(
    const std::vector<ForwardSequence>& batch, PagedKvCache& cache,
    const std::function<absl::Status(int layer)>& on_layer_kv_written, bool early_exit,
    const DraftPass* heads) {
  kernels::Backend& be = *backend_;
  StepAgreement agreement(shard_);
  shadow_errors_.clear();
  shadow_pending_.clear();
  sparse_work_.clear();
  sparse_pending_ = 0;
  shadow_pending_errors_ = Tensor();
  last_h_ = Tensor();
  heads_in_step_ = false;
  if (cache.shape().num_layers != kv_layers()) {
    return absl::InvalidArgumentError(absl::StrCat("Forward: the KV cache has ",
                                                   cache.shape().num_layers,
                                                   " layers, this model fills ", kv_layers()));
  }
  SS_ASSIGN_OR_RETURN(StepInputs in, FlattenBatch(batch, cache));
  if (tensor_parallel()) SS_RETURN_IF_ERROR(SliceMInferenceHeads(in.attn));
  PlanShadow(in);
  const int64_t n = static_cast<int64_t>(in.ids.size());
  const int64_t m = static_cast<int64_t>(in.logit_rows.size());
  kernels::AttentionShape shape;
  shape.num_heads = dims_.heads;  // this rank's (all on one rank)
  shape.num_kv_heads = dims_.kv_heads;
  shape.head_dim = config_.head_dim;
  shape.num_rows = n;
  shape.num_blocks = cache.shape().num_blocks;

  // Decode steps take the step graph of their batch size where the backend has graphs; a probe
  // capture of nothing finds out once.
  // Models with windows on some layers only plan twice per step and run op by op.
  last_step_graph_setup_ = false;
  const bool graph = in.graphable && !in.mixed_windows && on_layer_kv_written == nullptr &&
                     attention_probe_ == nullptr && m == n && !early_exit && graphs_.Eligible(n);
  if (graph) {
    if (graph_step_.rows < 0) {
      SS_ASSIGN_OR_RETURN(graph_step_, AllocateStepBuffers(graphs_.max_rows(), graphs_.max_rows()));
    }
    const StepViews v = Views(graph_step_, n, m);
    SS_RETURN_IF_ERROR(UploadIndices(in, graph_step_));
    SS_ASSIGN_OR_RETURN(const kernels::AttentionPlan plan,
                        be.PlanAttention(in.attn, shape, graph_workspace_));
    NoteSparseWork(in.attn, graph_workspace_);
    kernels::AttentionPlan shadow_plan;
    ShadowPass shadow;
    if (in.shadow) {
      SS_ASSIGN_OR_RETURN(shadow_plan,
                          be.PlanAttention(in.shadow_attn, shape, shadow_graph_workspace_));
      SS_ASSIGN_OR_RETURN(shadow, PrepareShadow(in, graph_step_, shadow_plan));
    }
    const ShadowPass* shadowed = in.shadow ? &shadow : nullptr;
    const StepGraphCache::Baked baked{.kv_base = cache.layer(0).raw_data(),
                                      .plan = &plan,
                                      .shadow_plan = in.shadow ? &shadow_plan : nullptr,
                                      .shadow_count = in.shadow ? shadow.count : 0};
    // Draft heads ranked on the device join the graph: a dozen small kernels cost more as
    // launches than as graph nodes.
    heads_in_step_ = heads != nullptr && !heads->head_rows.empty() && heads->head_top_k > 0 &&
                     !draft_heads_.empty() &&
                     HeadsRankOnDevice(nullptr, heads->head_rows.size(), heads->head_top_k);
    if (heads_in_step_) {  // before the graph: it may drop graphs that hold older buffers
      SS_RETURN_IF_ERROR(PrepareHeads(n, heads->head_rows, nullptr, heads->head_top_k));
    }
    const StepGraphCache::Shape step_shape{
        .rows = n,
        .sequences = static_cast<int64_t>(batch.size()),
        .max_seq_rows = in.max_seq_rows,
        .head_rows = heads_in_step_ ? static_cast<int64_t>(heads->head_rows.size()) : 0,
        .head_top_k = heads_in_step_ ? heads->head_top_k : 0};
    time_collectives_ = false;  // a capture or replay cannot stop between collectives
    SS_RETURN_IF_ERROR(agreement.Agree());
    const auto record = [&]() -> absl::Status {
      SS_RETURN_IF_ERROR(RunLayers(v, plan, nullptr, shadowed, cache, nullptr));
      return heads_in_step_ ? RunHeadOps(v.h) : absl::OkStatus();
    };
    SS_RETURN_IF_ERROR(agreement.Launched(graphs_.Run(step_shape, baked, record)));
    last_step_graph_setup_ = graphs_.last_run_was_setup();
    last_h_ = v.h;
    return v;
  }
  if (step_.rows != n || step_.logit_rows != m) {
    step_ = StepBuffers();  // frees the previous shape's buffers first
    SS_ASSIGN_OR_RETURN(step_, AllocateStepBuffers(n, m));
  }
  const StepViews v = Views(step_, n, m);
  SS_RETURN_IF_ERROR(UploadIndices(in, step_));
  SS_ASSIGN_OR_RETURN(const kernels::AttentionPlan plan,
                      be.PlanAttention(in.attn, shape, step_workspace_));
  NoteSparseWork(in.attn, step_workspace_);
  kernels::AttentionPlan shadow_plan;
  ShadowPass shadow;
  if (in.shadow) {
    SS_ASSIGN_OR_RETURN(shadow_plan,
                        be.PlanAttention(in.shadow_attn, shape, shadow_step_workspace_));
    SS_ASSIGN_OR_RETURN(shadow, PrepareShadow(in, step_, shadow_plan));
  }
  kernels::AttentionPlan window_plan;
  if (in.mixed_windows) {
    SS_ASSIGN_OR_RETURN(window_plan,
                        be.PlanAttention(in.window_attn, shape, window_step_workspace_));
  }
  // Counted on every rank (the ranks run the same steps), observed or not: see time_collectives_.
  time_collectives_ = tensor_parallel() && op_by_op_steps_++ % kAllReduceTimingEvery == 0;
  SS_RETURN_IF_ERROR(agreement.Agree());
  SS_RETURN_IF_ERROR(agreement.Launched(RunLayers(
      v, plan, in.mixed_windows ? &window_plan : nullptr, in.shadow ? &shadow : nullptr, cache,
      on_layer_kv_written, attention_probe_ != nullptr ? &attention_probe_ : nullptr, early_exit)));
  if (!early_exit) last_h_ = v.h;  // an early exit's h is a shallow layer's
  return v;
}

absl::Status LlamaModel::RunLayers(
    const StepViews& v, const kernels::AttentionPlan& plan,
    const kernels::AttentionPlan* window_plan, const ShadowPass* shadow, PagedKvCache& cache,
    const std::function<absl::Status(int layer)>& on_layer_kv_written, const AttentionProbe* probe,
    bool early_exit) {
  const ModelConfig& c = config_;
  kernels::Backend& be = *backend_;
  const int64_t n = v.ids.dim(0);
  const int64_t hd = c.head_dim;
  // Activations. `h` is the residual stream; `x` its normalised copy fed to each sub-block.
  const Tensor &h = v.h, &x = v.x, &q = v.q, &attn_out = v.attn_out;
  const Tensor& branch = v.branch;  // sub-block output
  SS_ASSIGN_OR_RETURN(Tensor attn2, attn_out.Reshape({n, dims_.heads * hd}));

  SS_RETURN_IF_ERROR(be.Embedding(embedding_, v.ids, h));
  const int exit_layer = early_exit_.exit_layer;  // 0 = no adapter
  for (int l = 0; l < (early_exit ? exit_layer : c.num_layers); ++l) {
    const LayerWeights& w = layers_[l];
    if (l == 0) {
      SS_RETURN_IF_ERROR(be.RmsNorm(h, w.attn_norm, c.rms_norm_eps, x));
    } else {  // adds the previous layer's FFN output into the residual stream
      SS_RETURN_IF_ERROR(AddRmsNorm(h, branch, /*partial=*/true, w.attn_norm, x));
    }
    // h is the output of layer l - 1: the early-exit adapter's K/V of these rows come from it
    // (branch is free until this layer's attention output).
    if (exit_layer > 0 && l == exit_layer) SS_RETURN_IF_ERROR(WriteAdapterKv(v, branch, cache));
    SS_RETURN_IF_ERROR(be.LinearRopeWriteKv(x, w.wqkv, w.bqkv, v.qkv, v.positions, inv_freq_,
                                            v.slots, q, cache.layer(l)));
    if (on_layer_kv_written) SS_RETURN_IF_ERROR(on_layer_kv_written(l));
    // Sparse methods build this layer's index from its queries and keys (attention_plan.h).
    const kernels::AttentionPlan& layer_plan =
        window_plan != nullptr && c.windowed_layers[l] ? *window_plan : plan;
    SS_RETURN_IF_ERROR(be.BuildAttentionIndex(layer_plan, q, cache.layer(l), l));
    SS_RETURN_IF_ERROR(be.Attention(layer_plan, q, cache.layer(l), l, attn_out));
    if (shadow != nullptr) {  // the dense reference (needs no index) and the comparison
      const int64_t k = shadow->count;
      SS_RETURN_IF_ERROR(be.Attention(*shadow->plan, q, cache.layer(l), l, shadow->out));
      SS_RETURN_IF_ERROR(be.RelativeL2Error(attn_out, shadow->out, shadow->ranges,
                                            shadow->errors.Slice(0, l * k, (l + 1) * k)));
    }
    if (probe != nullptr) SS_RETURN_IF_ERROR((*probe)(l, layer_plan, q, cache.layer(l), attn_out));
    // o_proj is row-parallel: each rank's heads' part, summed in the add and norm after it.
    SS_RETURN_IF_ERROR(be.Linear(attn2, w.wo, w.bo, branch));
    SS_RETURN_IF_ERROR(AddRmsNorm(h, branch, /*partial=*/true, w.ffn_norm, x));
    SS_RETURN_IF_ERROR(be.LinearSiluMul(x, w.w_gate_up, v.gate_up, v.act));
    // down is row-parallel likewise: summed by the next norm (the next layer's, or the last).
    SS_RETURN_IF_ERROR(be.Linear(v.act, w.w_down, Tensor(), branch));
  }
  if (early_exit) {  // Kangaroo's draft: the adapter's attention layer over its own KV
    const EarlyExitAdapter& a = early_exit_;
    const Tensor& kv = cache.layer(c.num_layers);
    SS_RETURN_IF_ERROR(AddRmsNorm(h, branch, /*partial=*/true, a.input_norm, x));
    SS_RETURN_IF_ERROR(
        be.LinearRopeWriteKv(x, a.wqkv, Tensor(), v.qkv, v.positions, inv_freq_, v.slots, q, kv));
    SS_RETURN_IF_ERROR(be.Attention(plan, q, kv, c.num_layers, attn_out));
    SS_RETURN_IF_ERROR(be.Linear(attn2, a.wo, Tensor(), branch));
    // The adapter is whole on every rank: its o_proj's output is complete.
    SS_RETURN_IF_ERROR(AddRmsNorm(h, branch, /*partial=*/false, a.output_norm, x));
  } else {
    SS_RETURN_IF_ERROR(AddRmsNorm(h, branch, /*partial=*/true, final_norm_, x));
    // The adapter layer's K/V were written at layer exit_layer; reported last, in layer order.
    if (exit_layer > 0 && on_layer_kv_written) {
      SS_RETURN_IF_ERROR(on_layer_kv_written(c.num_layers));
    }
  }
  if (v.logit_rows.numel() == 0) return absl::OkStatus();  // no row asked for logits
  SS_RETURN_IF_ERROR(be.GatherRows(x, v.logit_rows, v.last));
  if (!tensor_parallel()) return be.Linear(v.last, lm_head_, Tensor(), v.logits);
  // Vocabulary-parallel LM head: this rank's slice of every logits row, then all of them.
  SS_RETURN_IF_ERROR(be.Linear(v.last, lm_head_, Tensor(), v.logits_local));
  return shard_.collective->AllGatherColumns(v.logits_local, v.gather_scratch, v.logits);
}

absl::Status LlamaModel::SliceMInferenceHeads(kernels::AttentionBatch& batch) {
  for (kernels::SequenceAttention& sa : batch.sequences) {
    if (sa.pattern.kind != kernels::AttentionMethodKind::kMInference ||
        sa.pattern.minference == nullptr) {
      continue;
    }
    const std::shared_ptr<const kernels::MInferenceConfig>& full = sa.pattern.minference;
    if (full->num_heads != config_.num_heads || full->num_layers != config_.num_layers) {
      return absl::InvalidArgumentError(
          absl::StrCat("MInference config of ", full->num_layers, " layers x ", full->num_heads,
                       " heads for a model of ", config_.num_layers, " x ", config_.num_heads));
    }
    auto& [kept, slice] = minference_slices_[full.get()];
    if (kept != full) {  // keeps the full config alive, so its address is not reused
      auto mine = std::make_shared<kernels::MInferenceConfig>(*full);
      mine->num_heads = dims_.heads;
      mine->heads.clear();
      for (int l = 0; l < full->num_layers; ++l) {
        for (int h = 0; h < dims_.heads; ++h)
          mine->heads.push_back(full->at(l, dims_.head_begin + h));
      }
      kept = full;
      slice = std::move(mine);
    }
    sa.pattern.minference = slice;
  }
  return absl::OkStatus();
}

absl::Status LlamaModel::AddRmsNorm(const Tensor& h, const Tensor& branch, bool partial,
                                    const Tensor& weight, const Tensor& x) {
  const float eps = config_.rms_norm_eps;
  if (!partial || !tensor_parallel()) return backend_->AddRmsNorm(h, branch, weight, eps, x);
  if (!time_collectives_) {
    return shard_.collective->AllReduceAddRmsNorm(branch, h, weight, eps, x, *backend_);
  }
  // A sampled step: the sum on its own, timed where an observer listens, then the norm.
  const bool timed = allreduce_observer_ != nullptr;
  if (timed) SS_RETURN_IF_ERROR(backend_->Synchronize());
  const auto start = std::chrono::steady_clock::now();
  SS_RETURN_IF_ERROR(shard_.collective->AllReduceSum(branch));
  if (timed) {
    SS_RETURN_IF_ERROR(backend_->Synchronize());
    allreduce_observer_(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return backend_->AddRmsNorm(h, branch, weight, eps, x);
}

absl::StatusOr<LlamaModel::StepBuffers> LlamaModel::AllocateStepBuffers(int64_t rows,
                                                                        int64_t logit_rows) const {
  const ModelConfig& c = config_;
  kernels::Backend& be = *backend_;
  const DType dt = be.compute_dtype();
  const int64_t n = rows, hidden = c.hidden_size, hd = c.head_dim;
  StepBuffers b;
  SS_ASSIGN_OR_RETURN(b.indices, be.Allocate(DType::kI32, {3 * n + logit_rows}));
  // The residual stream stays in f32 (see Backend::AddRmsNorm); sub-block inputs and outputs
  // are in the compute dtype.
  SS_ASSIGN_OR_RETURN(b.h, be.Allocate(DType::kF32, {n, hidden}));
  SS_ASSIGN_OR_RETURN(b.x, be.Allocate(dt, {n, hidden}));
  // This rank's heads and FFN columns (all of them on one rank).
  const int64_t heads = dims_.heads, kv_heads = dims_.kv_heads;
  SS_ASSIGN_OR_RETURN(b.qkv, be.Allocate(dt, {n, (heads + 2 * kv_heads) * hd}));
  SS_ASSIGN_OR_RETURN(b.q, be.Allocate(dt, {n, heads, hd}));
  SS_ASSIGN_OR_RETURN(b.attn_out, be.Allocate(dt, {n, heads, hd}));
  SS_ASSIGN_OR_RETURN(b.gate_up, be.Allocate(dt, {n, 2 * dims_.ffn}));
  SS_ASSIGN_OR_RETURN(b.act, be.Allocate(dt, {n, dims_.ffn}));
  SS_ASSIGN_OR_RETURN(b.branch, be.Allocate(dt, {n, hidden}));
  SS_ASSIGN_OR_RETURN(b.last, be.Allocate(dt, {logit_rows, hidden}));
  // f32 logits: sampling and greedy argmax must not see bf16 rounding ties.
  SS_ASSIGN_OR_RETURN(b.logits, be.Allocate(DType::kF32, {logit_rows, c.vocab_size}));
  SS_ASSIGN_OR_RETURN(b.tokens, be.Allocate(DType::kI32, {logit_rows}));
  if (tensor_parallel()) {
    SS_ASSIGN_OR_RETURN(b.logits_local, be.Allocate(DType::kF32, {logit_rows, dims_.vocab}));
    SS_ASSIGN_OR_RETURN(b.gather_scratch,
                        be.Allocate(DType::kF32, {shard_.size * logit_rows * dims_.vocab}));
  }
  if (shadow_rate_ > 0) {
    SS_ASSIGN_OR_RETURN(b.shadow_out, be.Allocate(dt, {n, heads, hd}));
    SS_ASSIGN_OR_RETURN(b.shadow_ranges, be.Allocate(DType::kI32, {n, 2}));
    SS_ASSIGN_OR_RETURN(b.shadow_errors, be.Allocate(DType::kF32, {c.num_layers * n}));
  }
  b.rows = rows;
  b.logit_rows = logit_rows;
  return b;
}

LlamaModel::StepViews LlamaModel::Views(const StepBuffers& b, int64_t n, int64_t m) {
  const int64_t r = b.rows;
  StepViews v;
  v.ids = b.indices.Slice(0, 0, n);
  v.positions = b.indices.Slice(0, r, r + n);
  v.slots = b.indices.Slice(0, 2 * r, 2 * r + n);
  v.logit_rows = b.indices.Slice(0, 3 * r, 3 * r + m);
  for (auto [view, buffer] : {std::pair{&v.h, &b.h},
                              {&v.x, &b.x},
                              {&v.qkv, &b.qkv},
                              {&v.q, &b.q},
                              {&v.attn_out, &b.attn_out},
                              {&v.gate_up, &b.gate_up},
                              {&v.act, &b.act},
                              {&v.branch, &b.branch}}) {
    *view = buffer->Slice(0, 0, n);
  }
  v.last = b.last.Slice(0, 0, m);
  v.logits = b.logits.Slice(0, 0, m);
  v.tokens = b.tokens.Slice(0, 0, m);
  if (!b.logits_local.empty() && b.logit_rows > 0) {
    v.logits_local = b.logits_local.Slice(0, 0, m);
    const int64_t per_row = b.gather_scratch.dim(0) / b.logit_rows;  // size * vocab slice
    v.gather_scratch = b.gather_scratch.Slice(0, 0, per_row * m);
  }
  return v;
}

}  // namespace sparseserve::model
