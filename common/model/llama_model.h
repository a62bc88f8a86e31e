// LlamaModel: the forward pass of Llama-family decoders (Llama, Mistral, Qwen2) over a paged KV
// cache, written only in kernels::Backend ops (no device code here).
//
// A forward step takes a batch of sequences, each contributing a chunk of new tokens at known
// positions with its block table; it writes their K/V into the cache and returns logits for the
// rows each sequence asks for. The model owns its weights (in backend memory) and borrows the
// backend. Not thread-safe: one engine thread runs forward steps.
#ifndef SPARSESERVE_COMMON_MODEL_LLAMA_MODEL_H_
#define SPARSESERVE_COMMON_MODEL_LLAMA_MODEL_H_

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <random>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "common/model/model_config.h"
#include "common/model/paged_kv_cache.h"
#include "common/model/step_graph_cache.h"
#include "common/model/tensor_file.h"
#include "common/model/tensor_parallel_shard.h"
#include "common/model/token_logprobs.h"
#include "common/tensor/tensor.h"
#include "kernels/attention_plan.h"
#include "kernels/backend.h"
#include "kernels/sampling_plan.h"

namespace sparseserve::model {

// Which rows of a sequence's chunk a step computes logits for.
enum class LogitRows { kNone, kLast, kAll };

// One sequence's part of a forward step.
struct ForwardSequence {
  std::vector<int32_t> tokens;  // new rows; their K/V go to KV indices start_pos, start_pos + 1...
  int32_t start_pos = 0;        // KV entries already in this sequence's cache
  // int32 [tokens.size()] RoPE positions of the new rows; empty = start_pos + i. Positions may
  // repeat and need not be monotone (draft trees, Lookahead's branches).
  std::vector<int32_t> positions;
  // uint8 [n * n]: row i attends to new row j where mask[i * n + j] = 1 (plus the whole cached
  // prefix); empty = causal. kernels/attention_plan.h states the semantics.
  std::vector<uint8_t> mask;
  // Block ids covering KV indices [0, start_pos + tokens.size()).
  std::vector<int32_t> block_table;
  LogitRows logits = LogitRows::kLast;
  kernels::AttentionPattern pattern;  // dense unless a method says otherwise
  // Row of the model's sequence state (set_sequence_state) that is this sequence's, or -1.
  int32_t state_slot = -1;
};

// One shadowed (sequence, layer) of a forward step (LlamaModel::set_shadow_dense): how far the
// sequence's attention output in that layer, under its own (sparse) pattern, is from dense
// attention over the same rows and KV.
struct ShadowAttentionError {
  int sequence = 0;  // index of the sequence in the step's batch
  int layer = 0;
  kernels::AttentionMethodKind method = kernels::AttentionMethodKind::kDense;  // its pattern's
  // ||sparse - dense|| / ||dense|| over the sequence's rows of the step, all heads (Frobenius
  // norms; Backend::RelativeL2Error): 0 when the method attended to every key the dense
  // reference did.
  float relative_l2 = 0;
};

// A per-layer look at a forward step's attention (LlamaModel::set_attention_probe): called right
// after layer `layer`'s Attention with the step's plan (its batch and workspace, valid during the
// call), the layer's rotated queries q [rows, heads, head_dim], its KV cache kv_layer (already
// holding the step's keys and values) and the attention output out [rows, heads, head_dim], all
// in the backend's memory and compute dtype. It may run backend ops of its own (other plans into
// its own workspaces) but must not write q, kv_layer or out. Its error aborts the step.
using AttentionProbe =
    std::function<absl::Status(int layer, const kernels::AttentionPlan& plan, const Tensor& q,
                               const Tensor& kv_layer, const Tensor& out)>;

// One of TokenSwift's multi-token draft heads (papers/tokenswift.md, "Draft pass"): from the
// residual stream h_{i-1} after the last decoder layer (h_0, before the final norm), head i makes
// h_i = h_{i-1} + proj · RmsNorm(h_{i-1}; norm), and its logits are the model's own
// LMHead(final_norm(h_i)): the draft of the token i + 1 places after the one the model's logits
// predict.
struct DraftHeadWeights {
  Tensor norm;  // [hidden]
  Tensor proj;  // [hidden, hidden]
};

// Kangaroo's early-exit adapter (papers/lookahead.md §2): after the model's first `exit_layer`
// layers (residual stream h), a = h + wo · Attention(RopeQKV(wqkv · RmsNorm(h; input_norm))) over
// the adapter's own KV cache — the paged cache's extra layer num_layers, which every full step
// fills for its rows — and the draft's logits are the model's LMHead(RmsNorm(a; output_norm)).
struct EarlyExitAdapter {
  int exit_layer = 0;
  Tensor input_norm, wqkv, wo, output_norm;  // wqkv: q, k, v stacked, as LayerWeights::wqkv
};

// A draft pass of the self-drafting methods: what it asks of ForwardSample besides each row's
// sampled token, and what comes back.
struct DraftPass {
  // Kangaroo: run the first exit_layer layers and the early-exit adapter instead of the model's
  // last layers (LoadEarlyExitAdapter; the step runs op by op, never as a step graph).
  bool early_exit = false;
  // TokenSwift: the draft heads' best `head_top_k` candidates of every logits row, best first
  // (the sampling row's repetition penalty applied to the logits first: the ids of the pass's own
  // history, not the tree paths the verification rows will also penalise); 0 = none.
  int head_top_k = 0;
  // TokenSwift without a draft pass: the token rows of a verify or plain step whose heads to read
  // instead of every logits row — every row of the sequences that want their next draft (which
  // row samples a sequence's next root is known only after the step). Ranked without a penalty
  // (the next root's penalised ids are not known yet either).
  std::vector<int32_t> head_rows;
  std::vector<int32_t> head_tokens;  // out: [num_draft_heads][rows][head_top_k]
  // out, early exit only: each logits row's largest probability (softmax of its raw logits),
  // which Kangaroo's second exit compares with η.
  std::vector<float> top_probability;
};

struct LayerWeights {
  Tensor attn_norm, wq, wk, wv, wo;
  Tensor bq, bk, bv, bo;  // empty without attention bias; bo only for Llama's attention_bias
  Tensor ffn_norm, w_gate, w_up, w_down;
  // wq, wk, wv stacked [q_dim + 2 kv_dim, hidden] (and bq, bk, bv likewise), and w_gate, w_up
  // stacked [2 ffn, hidden]: one projection instead of three and two (a decode step pays a launch
  // and a ramp per GEMM). The separate tensors are row views of them.
  Tensor wqkv, bqkv, w_gate_up;
};

class LlamaModel {
 public:
  // Loads and validates every tensor from `file` (shapes checked against `config`), converts
  // Q/K rows of adjacent-pair checkpoints to the halves layout, and uploads to `backend`
  // (borrowed; must outlive the model). kNotFound for a missing tensor, kInvalidArgument for a
  // shape mismatch, both naming the tensor.
  // `shard`: a tensor-parallel rank uploads only its slices (tensor_parallel_shard.h); its steps
  // then meet the other ranks' in the shard's collective, so every rank must run the same steps
  // (each on its own thread). kInvalidArgument when the model does not split over shard.size.
  static absl::StatusOr<std::unique_ptr<LlamaModel>> Load(const ModelConfig& config,
                                                          const TensorFile& file,
                                                          WeightNaming naming,
                                                          kernels::Backend* backend,
                                                          const TensorParallelShard& shard = {});
  // A model of `config`'s shape with uniform random weights, allocated in the backend's compute
  // dtype and filled there by Backend::FillUniform: no host staging, so an 8B model never passes
  // through host RAM. The same (config, seed) gives the same weights on every backend, each
  // tensor from its own seed. Norm weights lie in [0.9, 1.1) and projections in ±1/sqrt(in
  // features), so activations stay finite through any depth. For benchmarks and tests: the
  // weights are noise. kInvalidArgument for an invalid config; kResourceExhausted (naming the
  // tensor) when the backend runs out of memory.
  // With a `shard` of more than one rank, each rank draws its slices' shapes from the same tensor
  // seeds: a speed model, not the slices of the one-rank model of that seed.
  static absl::StatusOr<std::unique_ptr<LlamaModel>> CreateRandom(
      const ModelConfig& config, kernels::Backend* backend, uint64_t seed,
      const TensorParallelShard& shard = {});
  LlamaModel(const LlamaModel&) = delete;
  LlamaModel& operator=(const LlamaModel&) = delete;

  const ModelConfig& config() const { return config_; }
  // The tensor-parallel rank this model is (size 1: the whole model) and its slices.
  const TensorParallelShard& shard() const { return shard_; }
  const ShardDims& shard_dims() const { return dims_; }
  // Receives the duration of tensor-parallel all-reduces (sparseserve_tp_allreduce_seconds),
  // sampled: every 16th step that runs op by op times each of its all-reduces between device
  // synchronisations (graph replays cannot be timed per collective). Null = off.
  void set_allreduce_observer(std::function<void(double seconds)> observer) {
    allreduce_observer_ = std::move(observer);
  }

  // kInvalidArgument when the model's own sliding window (ModelConfig::sliding_window) rules
  // `pattern` out: such a model runs dense attention only (its window is applied per layer).
  absl::Status CheckPattern(const kernels::AttentionPattern& pattern) const;
  kernels::Backend& backend() const { return *backend_; }

  // Runs one step. Returns host f32 logits [rows, vocab]: for each sequence in order, the rows
  // its `logits` asks for (gathered from every rank on a tensor-parallel one). kInvalidArgument for
  // empty sequences, positions outside [0, max_position_embeddings), token ids outside the
  // vocabulary, block tables too short for the cache or bad masks; kUnimplemented for an attention
  // pattern the backend lacks.
  //
  // `on_layer_kv_written(layer)`, when given, runs right after each layer's K/V are in the cache
  // (before that layer's attention): a prefill worker starts that layer's KV transfer there.
  // Its error aborts the step.
  absl::StatusOr<Tensor> Forward(
      const std::vector<ForwardSequence>& batch, PagedKvCache& cache,
      const std::function<absl::Status(int layer)>& on_layer_kv_written = nullptr);

  // Forward, then Backend::Sample of each logits row under `sampling` (one SamplingRow per logits
  // row): sampling on the backend without copying [rows, vocab] logits to the host. Returns one
  // token id per logits row. Errors of Forward, and kInvalidArgument from Backend::Sample for a
  // plan that does not match the rows.
  // `on_layer_kv_written` as in Forward.
  // `draft`, when given, makes the step a draft pass (DraftPass): draft heads need the model's
  // heads (else none come back) and every row of the step a logits row (kInvalidArgument: the
  // heads start from every row's residual stream); early exit needs the adapter
  // (kFailedPrecondition).
  // `logprobs`, when given, gets every logits row's log probabilities (Backend::TokenLogprobs,
  // logprobs->top_n alternatives each); left empty on a rank other than 0 and when no row has
  // logits.
  absl::StatusOr<std::vector<int32_t>> ForwardSample(
      const std::vector<ForwardSequence>& batch, PagedKvCache& cache,
      const kernels::SamplingBatch& sampling,
      const std::function<absl::Status(int layer)>& on_layer_kv_written = nullptr,
      DraftPass* draft = nullptr, StepLogprobs* logprobs = nullptr);

  // Loads TokenSwift's draft heads from an adapter (tools/train_spec_adapters.py writes it):
  // tensors heads.{j}.norm.weight [hidden] and heads.{j}.proj.weight [hidden, hidden] for j = 0,
  // 1, ... (at least one). kInvalidArgument for a shape that does not fit this model or an
  // adapter without heads, naming the tensor; replaces heads loaded before.
  absl::Status LoadDraftHeads(const TensorFile& file);
  int num_draft_heads() const { return static_cast<int>(draft_heads_.size()); }
  // TokenSwift without a draft pass (SpeculationChoice::tokenswift_draft_pass false): the draft
  // heads' best `top_k` candidates at token rows `rows` of the last forward step (negative rows
  // count from its end: -1 is a prompt chunk's last row), from the residual stream that step left —
  // rows already computed against the full cache, so no pass of their own. `sampling` has one row
  // per entry of `rows` (its repetition penalty is applied first, as for DraftPass::head_top_k).
  // Out: [num_draft_heads][rows.size()][top_k], best first. kFailedPrecondition without heads or
  // when the last step left no residual stream (none ran yet, or it was an early-exit pass);
  // kInvalidArgument for a row outside that step.
  absl::StatusOr<std::vector<int32_t>> DraftHeadsAtLastStep(absl::Span<const int32_t> rows,
                                                            const kernels::SamplingBatch& sampling,
                                                            int top_k);

  // Loads Kangaroo's early-exit adapter (tools/train_spec_adapters.py --method kangaroo): tensors
  // adapter.input_norm.weight, adapter.{q,k,v,o}_proj.weight (an attention layer of this model's
  // shape) and adapter.output_norm.weight; the adapter drafts from the output of layer
  // `exit_layer` - 1. kInvalidArgument for a shape that does not fit, an exit layer outside
  // [1, num_layers) or a model with its own sliding window. The paged cache must then have
  // kv_layers() layers.
  // `pairs`: the RoPE pair layout the adapter's q/k rows were trained in (its rows are converted
  // to this model's halves layout like the model's own).
  absl::Status LoadEarlyExitAdapter(const TensorFile& file, int exit_layer, RopePairLayout pairs);
  bool has_early_exit_adapter() const { return early_exit_.exit_layer > 0; }
  // Layers of the paged KV cache this model fills: its own, and the adapter's.
  int kv_layers() const { return config_.num_layers + (has_early_exit_adapter() ? 1 : 0); }

  // Decode steps (one new token per sequence, or a few: verify steps — chains of a few rows, or
  // masked trees and Lookahead's branches; dense or sliding-window attention, no per-layer hook)
  // of at most `rows` rows run as step graphs on backends
  // that have them (CUDA graphs): a batch size's first step runs op by op, its second is captured,
  // later ones replay the capture. 0 turns graphs off. Default kDefaultStepGraphRows. Drops the
  // graphs captured so far.
  void set_step_graph_rows(int rows);
  static constexpr int kDefaultStepGraphRows = 128;
  // Whether decode and verify steps replay step graphs here (graphs on, and the backend captures
  // them; probed once).
  bool replays_step_graphs() { return graphs_.Eligible(1); }
  // Rows an unmasked sequence of a graph-able step may add (the CUDA decode kernel's few-row
  // limit: longer chains are prefill chunks, which may run on cuDNN); masked ones any.
  static constexpr int kGraphRowsPerSequence = 8;
  // Whether the last forward step warmed up or captured a step graph (much slower than the
  // replays that follow: speculation's step-cost model skips it).
  bool last_step_was_graph_setup() const { return last_step_graph_setup_; }

  // The per-sequence state every step's attention batch carries (AttentionBatch::sequence_state):
  // i32 [num_slots, slot_words] in the backend's memory, a view kept alive by its owner (the
  // engine's SequenceStateTable), or empty for none. ForwardSequence::state_slot picks a row.
  void set_sequence_state(Tensor memory) { sequence_state_ = std::move(memory); }

  // The shadow-dense quality monitor (issue 11). Each forward step holding a sequence with a
  // sparse pattern (anything but kDense) is shadowed with probability `rate` in [0, 1], drawn on
  // the host before the step is launched from a generator seeded with `seed`. A shadowed step
  // also runs, in every layer, dense attention for its sparse sequences into a scratch output and
  // Backend::RelativeL2Error of the two into a device buffer, read back with the step's result
  // (shadow_errors()). The unit drawn is the step, not the layer: every (sequence, layer) call is
  // still shadowed with probability `rate`, but steps that are not shadowed replay their plain
  // step graph untouched, and shadowed decode steps replay a second graph of their batch size
  // (keyed by the shadow flag) instead of running op by op. Dense sequences are never shadowed.
  // 0 (the default) turns it off and allocates nothing. Turning it on or off drops the graphs and
  // step buffers; changing a nonzero rate keeps them (the shadow graphs stay captured).
  void set_shadow_dense(double rate, uint64_t seed);
  // The errors of the last forward step, layer-major then sequence order (num_layers × shadowed
  // sequences entries); empty when that step was not shadowed.
  const std::vector<ShadowAttentionError>& shadow_errors() const { return shadow_errors_; }

  // Calls `probe` after every layer's attention in every step (null = off, the default, at no
  // cost). Offline analysis only (`sparseserve search-patterns` compares sparse patterns with the
  // step's dense output there): steps run op by op while a probe is set, never as step graphs,
  // whose replays could not call back to the host.
  void set_attention_probe(AttentionProbe probe) { attention_probe_ = std::move(probe); }

  // The attention work of the last forward step's sequences with a data-dependent sparse method
  // (MInference, TokenSelect): the (row, key) pairs computed and the causal pairs of their rows,
  // summed over layers and query heads, and TokenSelect's selection-cache hits and queries summed
  // over layers; zeros for other sequences, and empty when the step had none.
  // sparseserve_sparse_attention_density, the selection-cache counters and the evaluation's
  // density column come from it.
  struct SparseWork {
    double computed_pairs = 0;
    double causal_pairs = 0;
    double selection_hits = 0;
    double selection_queries = 0;
  };
  const std::vector<SparseWork>& sparse_work() const { return sparse_work_; }

 private:
  LlamaModel(ModelConfig config, kernels::Backend* backend, const TensorParallelShard& shard,
             const ShardDims& dims)
      : config_(std::move(config)),
        backend_(backend),
        shard_(shard),
        dims_(dims),
        graphs_(backend, kDefaultStepGraphRows) {}
  // The model's constructor for `shard` (kInvalidArgument as ShardDimsOf, or a shard of several
  // ranks without a collective).
  static absl::StatusOr<std::unique_ptr<LlamaModel>> New(const ModelConfig& config,
                                                         kernels::Backend* backend,
                                                         const TensorParallelShard& shard);
  bool tensor_parallel() const { return shard_.size > 1; }
  // Tensor parallel: MInference's per-head patterns are the model's, and this rank runs heads
  // [head_begin, head_begin + heads), so its sequences get their slice of the config (built once
  // per config). kInvalidArgument for a config of another model's shape.
  absl::Status SliceMInferenceHeads(kernels::AttentionBatch& batch);
  // h += branch; x = RMSNorm(h) * weight — the residual add after a sub-block. With `partial`
  // (branch is a row-parallel projection's output: each rank's part) the sum over the ranks comes
  // first, fused with the add and norm (Collective::AllReduceAddRmsNorm), or as a separate timed
  // all-reduce when the step samples collectives (set_allreduce_observer).
  absl::Status AddRmsNorm(const Tensor& h, const Tensor& branch, bool partial, const Tensor& weight,
                          const Tensor& x);
  // Sets inv_freq_ from the config's rope_theta and rope_scaling (computed on the host, uploaded);
  // shared by Load and CreateRandom so both rotate identically.
  absl::Status UploadInverseFrequencies();
  // Stacks each layer's wq, wk, wv (and their biases) into wqkv (bqkv) and w_gate, w_up into
  // w_gate_up; the separate tensors become views of them. Run by Load and CreateRandom once the
  // weights are in.
  absl::Status StackProjections();
  // One new tensor of `parts` stacked along dim 0 (same trailing shape); each part becomes a view
  // of its rows.
  absl::StatusOr<Tensor> StackRows(std::initializer_list<Tensor*> parts) const;

  // How often op-by-op steps time their all-reduces (set_allreduce_observer).
  static constexpr int64_t kAllReduceTimingEvery = 16;
  // A step's batch flattened on the host: what its index tensors and attention plan hold.
  struct StepInputs {
    std::vector<int32_t> ids, positions, slots, logit_rows;
    kernels::AttentionBatch attn;
    // Graph-able (StepGraphCache): every row sampled and every sequence adding one token, or a
    // few unmasked ones (a speculative chain's verify step: at most kGraphRowsPerSequence), or
    // masked ones (a verify tree, Lookahead's branches), not TokenSelect or MInference;
    // `max_seq_rows` is the most any sequence adds.
    bool graphable = true;
    int max_seq_rows = 0;
    // A model with windows on some layers only (Qwen2's max_window_layers): those layers'
    // attention batch, each sequence under the model's window (attn serves the other layers).
    bool mixed_windows = false;
    kernels::AttentionBatch window_attn;
    // A shadowed step's dense reference: its sparse sequences with the kDense pattern, their
    // rows as int32 (first row, count) pairs, and the record of each (layer filled later).
    bool shadow = false;
    kernels::AttentionBatch shadow_attn;
    std::vector<int32_t> shadow_ranges;
    std::vector<ShadowAttentionError> shadow_records;
  };
  absl::StatusOr<StepInputs> FlattenBatch(const std::vector<ForwardSequence>& batch,
                                          const PagedKvCache& cache) const;

  // The buffers of forward steps of up to `rows` token rows and `logit_rows` logits rows. Kept
  // across steps: allocations and their zero-fills cost launches that a decode step notices,
  // and a step graph keeps reading the buffers it was captured with.
  struct StepBuffers {
    int64_t rows = -1, logit_rows = -1;
    // i32 [3 * rows + logit_rows]: token ids, positions, KV slots (`rows` each), logit rows.
    Tensor indices;
    Tensor h, x, qkv, q, attn_out, gate_up, act, branch, last, logits;
    Tensor tokens;  // i32 [logit_rows] the sampled token ids (ForwardSample)
    // Tensor parallel only: this rank's vocabulary slice of the logits (f32 [logit_rows,
    // ShardDims::vocab]) and the gather's scratch (f32 [size * logit_rows * vocab]).
    Tensor logits_local, gather_scratch;
    // Only with the shadow monitor on: the dense reference's attention output (compute dtype
    // [rows, heads, head_dim]), the shadowed sequences' rows (i32 [rows, 2]) and the errors
    // (f32 [num_layers * rows], layer-major).
    Tensor shadow_out, shadow_ranges, shadow_errors;
  };
  // A step's first n rows and m logits rows of some StepBuffers.
  struct StepViews {
    Tensor ids, positions, slots, logit_rows;
    Tensor h, x, qkv, q, attn_out, gate_up, act, branch, last, logits, tokens;
    Tensor logits_local, gather_scratch;  // tensor parallel only
  };
  // What RunLayers adds to each layer of a shadowed step: the dense plan run into `out`, then
  // RelativeL2Error of attn_out against it for `count` row ranges into `errors` [layer * count..].
  struct ShadowPass {
    const kernels::AttentionPlan* plan = nullptr;
    Tensor out, ranges, errors;
    int64_t count = 0;
  };
  absl::StatusOr<StepBuffers> AllocateStepBuffers(int64_t rows, int64_t logit_rows) const;
  static StepViews Views(const StepBuffers& buffers, int64_t n, int64_t m);
  // Writes the step's index arrays into `buffers.indices` (one upload).
  absl::Status UploadIndices(const StepInputs& in, const StepBuffers& buffers);

  // Draws whether the step of `in` is shadowed and, when it is, fills its shadow fields.
  void PlanShadow(StepInputs& in);
  // Uploads a shadowed step's row ranges into `buffers` and returns the pass over its views.
  absl::StatusOr<ShadowPass> PrepareShadow(const StepInputs& in, const StepBuffers& buffers,
                                           const kernels::AttentionPlan& plan);
  // Copies the errors of the step just run (if shadowed) to shadow_errors_. Waits for the step.
  absl::Status ReadShadowErrors();
  // ReadShadowErrors, then the sparse work of the step just run (sparse_work()). Waits for it.
  absl::Status ReadStepReports();
  // Marks the step planned from `batch` into `workspace` as one whose sparse work to read when
  // `batch` has a data-dependent sparse method.
  void NoteSparseWork(const kernels::AttentionBatch& batch,
                      const kernels::AttentionWorkspace& workspace);

  // Backend::TokenLogprobs of the step's logits at its sampled tokens, into `out` (host).
  absl::Status ReadLogprobs(const StepViews& v, StepLogprobs& out);
  // Queues the draft heads at the rows `draft` asks for of step `v` (its head_rows, or every row
  // of a draft pass, each a logits row penalised by its row of `sampling`), op by op.
  absl::Status LaunchDraftHeads(const StepViews& v, const kernels::SamplingBatch& sampling,
                                const DraftPass& draft);
  // The draft heads in three parts, so that a step graph can hold the device ops. PrepareHeads
  // (host side: buffers, the rows' upload) readies them for rows `rows` of a step of `step_rows`
  // rows; RunHeadOps(h) queues them on its residual stream (f32 [step_rows, hidden]), with their
  // top k on the device too when HeadsRankOnDevice (Backend::TokenLogprobs: a few ids a row come
  // back); ReadHeads waits for them and returns [heads][rows][top_k], ranking on the host what
  // the device did not (the repetition penalties of `penalties`, null = none).
  bool HeadsRankOnDevice(const kernels::SamplingBatch* penalties, size_t rows, int top_k) const;
  absl::Status PrepareHeads(int64_t step_rows, absl::Span<const int32_t> rows,
                            const kernels::SamplingBatch* penalties, int top_k);
  absl::Status RunHeadOps(const Tensor& h);
  absl::StatusOr<std::vector<int32_t>> ReadHeads(const kernels::SamplingBatch* penalties);
  // Fills draft.top_probability from the logits of step `v` (copied to the host).
  absl::Status ReadTopProbabilities(const StepViews& v, DraftPass& draft);
  // The early-exit adapter's K/V of the rows of `v` from the residual stream h (the output of
  // layer exit_layer - 1) into the cache's adapter layer; `scratch` [rows, hidden] in the compute
  // dtype is overwritten, and so are v.qkv and v.q.
  absl::Status WriteAdapterKv(const StepViews& v, const Tensor& scratch, PagedKvCache& cache);

  // One step up to the logits; returns the views holding them.
  // `early_exit`: the draft pass of DraftPass::early_exit.
  // `heads`: a step's draft heads at DraftPass::head_rows, which a graph step records with its
  // own ops when their top k ranks on the device (heads_in_step_ says whether it did).
  absl::StatusOr<StepViews> ComputeLogits(
      const std::vector<ForwardSequence>& batch, PagedKvCache& cache,
      const std::function<absl::Status(int layer)>& on_layer_kv_written, bool early_exit = false,
      const DraftPass* heads = nullptr);
  // The step's device ops, embedding to logits: what a step graph records.
  // `probe` (attention_probe_ on op-by-op steps, null under graphs) runs after each Attention.
  // `window_plan`, when not null, serves the model's windowed layers (StepInputs::window_attn).
  absl::Status RunLayers(const StepViews& v, const kernels::AttentionPlan& plan,
                         const kernels::AttentionPlan* window_plan, const ShadowPass* shadow,
                         PagedKvCache& cache,
                         const std::function<absl::Status(int layer)>& on_layer_kv_written,
                         const AttentionProbe* probe = nullptr, bool early_exit = false);

  ModelConfig config_;
  kernels::Backend* backend_;  // borrowed
  TensorParallelShard shard_;
  ShardDims dims_;  // the whole model on one rank
  std::function<void(double seconds)> allreduce_observer_;
  int64_t op_by_op_steps_ = 0;  // steps run op by op so far (the all-reduce timing's sampling)
  // The step in flight runs its sums apart from the norms after them (timed where an observer
  // listens) — on every rank alike, so a fused sum never meets a separate one.
  bool time_collectives_ = false;
  // SliceMInferenceHeads' slices: per full config (kept alive here), this rank's heads.
  absl::flat_hash_map<const kernels::MInferenceConfig*,
                      std::pair<std::shared_ptr<const kernels::MInferenceConfig>,
                                std::shared_ptr<const kernels::MInferenceConfig>>>
      minference_slices_;
  StepBuffers step_;        // steps that run op by op, sized to the last such step
  StepBuffers graph_step_;  // decode steps under graphs: graphs_.max_rows() rows, views per size
  // Where each step's attention plan lives: op-by-op steps plan into one, graph steps into the
  // other, so a prefill chunk that grows its workspace does not invalidate the graphs.
  kernels::AttentionWorkspace step_workspace_, graph_workspace_;
  kernels::AttentionWorkspace window_step_workspace_;  // StepInputs::window_attn's plan
  // The shadow monitor (set_shadow_dense): its dense plans' workspaces (as above), the draw, and
  // the step in flight's records and device errors until ReadShadowErrors.
  kernels::AttentionWorkspace shadow_step_workspace_, shadow_graph_workspace_;
  double shadow_rate_ = 0;
  std::mt19937_64 shadow_rng_;
  std::vector<ShadowAttentionError> shadow_pending_;
  Tensor shadow_pending_errors_;  // f32 [num_layers * shadowed sequences] view
  std::vector<ShadowAttentionError> shadow_errors_;
  // Sequences of the step in flight whose sparse work is read back after it (0 = none).
  int64_t sparse_pending_ = 0;
  const kernels::AttentionWorkspace* sparse_workspace_ = nullptr;  // where sparse_pending_ lives
  std::vector<SparseWork> sparse_work_;
  AttentionProbe attention_probe_;  // set_attention_probe; null = off
  bool last_step_graph_setup_ = false;
  StepGraphCache graphs_;  // which decode steps replay graphs, and the graphs
  Tensor embedding_;       // [vocab, hidden]
  Tensor final_norm_;      // [hidden]
  Tensor lm_head_;         // [vocab, hidden] (the embedding when tied)
  Tensor inv_freq_;        // f32 [head_dim / 2]
  Tensor sequence_state_;  // i32 [num_slots, slot_words] or empty (set_sequence_state)
  std::vector<LayerWeights> layers_;
  std::vector<DraftHeadWeights> draft_heads_;  // LoadDraftHeads; empty = none
  // HeadCandidates' buffers, kept across calls (sized to the most rows asked for so far): the
  // gathered rows' indices and residual stream, every head's normalised rows ([heads * rows,
  // hidden]), the projection's output, and the heads' logits (f32 [heads * rows, vocab]).
  // `none` (zeros), `values` and `ids` are TokenLogprobs' operands; the pending fields describe
  // what LaunchHeads queued for ReadHeads.
  struct HeadBuffers {
    int64_t rows = 0;
    Tensor index, h, x, branch, logits, none, values, ids;
    int64_t pending_rows = 0;
    int64_t pending_top_k = 0;
    bool on_device = false;
  };
  HeadBuffers head_buffers_;
  // The residual stream the last forward step left (its h view; empty after an early-exit pass):
  // what DraftHeadsAtLastStep reads.
  Tensor last_h_;
  bool heads_in_step_ = false;   // the last step's graph ran its draft heads (ComputeLogits)
  EarlyExitAdapter early_exit_;  // LoadEarlyExitAdapter; exit_layer 0 = none
};

}  // namespace sparseserve::model

#endif  // SPARSESERVE_COMMON_MODEL_LLAMA_MODEL_H_
