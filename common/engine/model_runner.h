// ModelRunner: one model instance with its paged KV cache, block pool and prefix cache — the
// unit every worker (offline generate, prefill, decode) drives.
//
// A sequence's KV state is a `SequenceKv` owned by the caller. The runner's unit of work is a
// Step: a mixed batch of sequences, each adding rows — one decode token, a prompt chunk, or k
// speculative rows with explicit positions and a mask — with the rows that need a token sampled
// on the backend (Backend::Sample, the one sampling path). Committed rows register every block
// they fill in the prefix cache; speculative rows stay pending until Commit keeps a subset
// (moving their KV to consecutive slots) and frees the rest, so they never reach the prefix
// cache. Release returns a sequence's blocks. Not thread-safe: one engine thread drives a runner
// (the block pool itself is thread-safe for observers).
#ifndef SPARSESERVE_COMMON_ENGINE_MODEL_RUNNER_H_
#define SPARSESERVE_COMMON_ENGINE_MODEL_RUNNER_H_

#include <algorithm>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/engine/model_source.h"
#include "common/engine/rank_threads.h"
#include "common/engine/request_options.h"
#include "common/engine/sequence_state_table.h"
#include "common/kv/block_hash.h"
#include "common/kv/kv_block_lease.h"
#include "common/kv/kv_block_pool.h"
#include "common/kv/kv_layout.h"
#include "common/model/llama_model.h"
#include "common/model/paged_kv_cache.h"
#include "kernels/backend.h"
#include "kernels/collective.h"
#include "kernels/sampling_plan.h"

namespace sparseserve::engine {

struct ModelRunnerOptions {
  int block_tokens = 64;  // KV block size in tokens (ARCHITECTURE.md default 64)
  // KV pool capacity in tokens; 0 = sized from the device's free memory (GPU, see
  // gpu_memory_fraction) or 4 full contexts (CPU).
  int kv_cache_tokens = 0;
  // Share of the GPU's total memory this process may fill (weights + activations + KV pool), as
  // vLLM's --gpu-memory-fraction; the KV pool gets what is left.
  double gpu_memory_fraction = 0.9;
  int prefill_chunk_tokens = 512;  // one prompt's rows per forward step at most (--prefill-chunk)
  // Rows of one forward step at most, all sequences together (--max-step-tokens): an engine step
  // takes every running sequence's decode rows first, then chunks of waiting prompts, so running
  // streams wait at most one step's budget behind a long prompt.
  int max_step_tokens = 2048;
  bool enable_prefix_cache = true;  // reuse full blocks of earlier prompts
  // Per-sequence persistent state on the backend (SequenceStateTable): slots of this many int32
  // words, one per sequence in flight up to max_sequences; 0 = none (no method needs any yet).
  // A sequence takes its slot (zeroed) at its first step and keeps it until Release, whatever
  // its row in later steps; every step's attention batch carries it (SequenceAttention::
  // state_slot) with the table's memory (AttentionBatch::sequence_state).
  int64_t sequence_state_words = 0;
  int max_sequences = 256;
  // TokenSelect decode (issue 13): the state slots also hold a selection of up to this many tokens
  // per layer (tokenselect::StateWords), so requests may choose TokenSelect with k up to it (the
  // server's --tokenselect-k); 0 = TokenSelect refused. Sized before the KV pool, which gets what
  // is left.
  int tokenselect_max_k = 0;
  // ... and one such selection per KV head (TokenSwift's per-KV-head partial KV, the server's
  // --tokenselect-per-kv-head), so requests may also choose per-KV-head selections; false = one
  // list per layer only (a per-KV-head request is then refused, naming the flag).
  bool tokenselect_per_kv_head = false;
  // Decode batches of up to this many sequences run as step graphs (CUDA graphs) where the
  // backend has them; 0 = off. See LlamaModel::set_step_graph_rows.
  int step_graph_rows = model::LlamaModel::kDefaultStepGraphRows;
  // The shadow-dense quality monitor (--shadow-dense-rate, issue 11): the probability in [0, 1]
  // that a step with sparse attention also runs dense attention in every layer for its sparse
  // sequences and reports the relative L2 error of each (LlamaModel::set_shadow_dense,
  // set_shadow_error_observer). 0 = off (default). The draws come from a generator seeded with
  // shadow_dense_seed, so a run is reproducible.
  double shadow_dense_rate = 0;
  uint64_t shadow_dense_seed = 0x5eedda7a;
  // MInference prefill (issue 12): the per-head pattern file (--minference-config, MInference's
  // JSON layout; empty = vertical-slash (1000, 6096) on every head), loaded once by Create, and
  // --minference-index planted (issue 16's seeded index instead of estimation: speed runs on
  // random weights only).
  std::string minference_config;
  bool minference_planted = false;
  // TokenSwift's trained multi-token draft heads (--tokenswift-heads, issue 15): a safetensors
  // adapter from tools/train_spec_adapters.py, loaded once by Create (LlamaModel::LoadDraftHeads);
  // empty = none (TokenSwift then drafts with the model's own logits and the n-gram table only).
  std::string tokenswift_heads;
  // Kangaroo's trained early-exit adapter (--kangaroo-adapter, issue 15): a safetensors file from
  // tools/train_spec_adapters.py --method kangaroo (LlamaModel::LoadEarlyExitAdapter); the KV
  // cache gets one more layer for it, filled by every step. Empty = none (Kangaroo refused).
  std::string kangaroo_adapter;
  // Tensor parallelism (--tensor-parallel, issue 19): the model split over this many devices of
  // the backend's kind — GPUs 0 .. N-1 (the backend given to Create is rank 0's, on GPU 0), or
  // N CPU backends — one rank thread each (RankThreads), joined by kernels::Collective (NCCL on
  // GPUs). 1 = one device. Not yet with TokenSelect, the shadow monitor, TokenSwift's heads or
  // Kangaroo's adapter (clear errors).
  int tensor_parallel = 1;
};

// KV state of one sequence. Owned by the caller; handed to the runner for every step.
struct SequenceKv {
  std::vector<int32_t> tokens;  // tokens whose K/V are in the cache, in order
  // Blocks holding them (pool references owned here). Under rolling KV (a model whose every
  // layer has a sliding window) the leading `released_blocks` entries are kv::kNoBlock: their
  // tokens left the window and the blocks went back to the pool.
  std::vector<int32_t> block_ids;
  int released_blocks = 0;
  int peak_blocks = 0;                      // most blocks it held at once (rolling KV's bound)
  std::vector<kv::BlockHash> block_hashes;  // chained hashes of the full blocks so far
  int num_cached_prompt_tokens = 0;         // prompt tokens served by the prefix cache
  // The speculative rows of its last step, at KV indices tokens.size() ...: Commit keeps some.
  std::vector<int32_t> pending_tokens;
  // The attention work of its MInference chunks so far (LlamaModel::sparse_work): pairs computed
  // and the causal pairs of those chunks; both 0 when its prompt ran dense.
  double sparse_computed_pairs = 0;
  double sparse_causal_pairs = 0;
  // The fraction of dense attention work its prompt's computed chunks did: 1 when dense.
  double prefill_attention_density() const {
    return sparse_causal_pairs > 0 ? sparse_computed_pairs / sparse_causal_pairs : 1.0;
  }
  // The same for its TokenSelect steps (generated tokens), and their selection-cache hits and
  // queries summed over layers (a query: a step and layer with more candidates than k).
  double decode_computed_pairs = 0;
  double decode_causal_pairs = 0;
  double selection_cache_hits = 0;
  double selection_cache_queries = 0;
  double decode_attention_density() const {
    return decode_causal_pairs > 0 ? decode_computed_pairs / decode_causal_pairs : 1.0;
  }
  // Stable identity from BeginPrefill / AdoptPrefilledKv to Release (0 = none yet): what its
  // slot in the runner's SequenceStateTable is keyed by.
  uint64_t id = 0;
};

// One sequence's rows in a ModelRunner step.
struct StepRows {
  SequenceKv* seq = nullptr;       // borrowed
  std::vector<int32_t> tokens;     // new rows, after seq->tokens
  std::vector<int32_t> positions;  // RoPE positions; empty = consecutive after seq->tokens
  std::vector<uint8_t> mask;       // uint8 [n * n]; empty = causal (kernels/attention_plan.h)
  model::LogitRows sample = model::LogitRows::kLast;  // rows that get a sampled token
  bool speculative = false;  // rows stay pending until Commit (and out of the prefix cache)
  // Rows of a draft the model computes token by token (sparse self-speculation): pending like
  // speculative rows, but placed after the sequence's pending rows, which stay (each draft
  // step's row sees the draft rows before it), and left out of the sequence's attention density
  // (its output's attention is the verification step's).
  bool draft = false;
  kernels::AttentionPattern pattern;
  // A chunk of the prompt: its sparse work counts toward the sequence's prefill density, other
  // rows' toward its decode density (SequenceKv).
  bool prompt = false;
};

// Rows of a prompt's next chunk: up to the next multiple of `chunk_tokens` (chunks end at fixed
// positions, so a prompt whose leading blocks came from the prefix cache computes the same chunks
// as one computed whole, and MInference, whose index is built per chunk, the same output), at
// most the `budget` left in the step and what is left of the `total` prompt tokens.
inline int PrefillChunkLength(int done, int total, int chunk_tokens, int budget) {
  return std::min({chunk_tokens - done % chunk_tokens, total - done, budget});
}

class ModelRunner {
 public:
  // Uploads the weights of `source` to `backend` (borrowed; must outlive the runner) and sizes
  // the KV cache. Errors from LlamaModel::Load and PagedKvCache::Create.
  static absl::StatusOr<std::unique_ptr<ModelRunner>> Create(const ModelSource& source,
                                                             kernels::Backend* backend,
                                                             const ModelRunnerOptions& options);
  ~ModelRunner();
  ModelRunner(const ModelRunner&) = delete;
  ModelRunner& operator=(const ModelRunner&) = delete;

  // Starts a sequence on `prompt`: takes its leading full blocks from the prefix cache (never the
  // block holding the last prompt token, whose logits must be computed) and returns how many
  // prompt tokens they hold; the rest is computed by Steps, chunk by chunk. kInvalidArgument for
  // an empty prompt or one that fills the context, kFailedPrecondition when `seq` is not empty.
  // A prompt prefilled under `pattern` in chunks of `chunk_tokens`: when its index is built per
  // chunk (MInference, TokenSelect) the reused prefix is cut to whole chunks, so the prompt keeps
  // the chunk boundaries, and the output, of a run without the hit.
  absl::StatusOr<int> BeginPrefill(absl::Span<const int32_t> prompt, SequenceKv& seq,
                                   const kernels::AttentionPattern& pattern = {},
                                   int chunk_tokens = 0);

  // Under tensor parallelism `on_layer_done` runs for every layer after the step's forward pass
  // (the ranks' passes run on their own threads and cannot stop for it), before its rows commit.
  // One forward step over `rows` (several sequences, each at most once): allocates the blocks
  // they need (all or nothing), writes their KV, and returns one token per sampled row, in
  // order, sampled on the backend under `sampling` (one SamplingRow per sampled row; sampling
  // rows are built by sampling::Sampler::NextRow). Non-speculative rows are committed (appended
  // to their sequence, full blocks registered in the prefix cache). `on_layer_done(layer)` as in
  // Prefill. kResourceExhausted when the pool lacks blocks or every state slot is taken;
  // kInvalidArgument for a bad row (empty, past the context, a sequence with uncommitted rows
  // unless these are draft rows) or
  // a sampling plan that does not match the sampled rows; nothing changes on error (except that a
  // sequence keeps a state slot it took, until Release).
  // `draft`, when given, makes the step a draft pass (model::DraftPass: TokenSwift's draft heads,
  // Kangaroo's early exit; LlamaModel::ForwardSample's errors).
  // `logprobs`, when given, gets each sampled row's log probabilities, in the order of the
  // returned tokens (logprobs->top_n alternatives each; the OpenAI API's logprobs).
  absl::StatusOr<std::vector<int32_t>> Step(
      absl::Span<const StepRows> rows, const kernels::SamplingBatch& sampling,
      const std::function<absl::Status(int layer)>& on_layer_done = nullptr,
      model::DraftPass* draft = nullptr, model::StepLogprobs* logprobs = nullptr);

  // Keeps the pending rows `keep` (ascending indices into seq.pending_tokens) of a speculative
  // step: their KV moves to consecutive slots after the committed tokens (Backend::ReadKv +
  // WriteKv), their tokens are appended, blocks past the new end return to the pool and full
  // blocks are registered. kInvalidArgument for indices out of range or not ascending.
  absl::Status Commit(SequenceKv& seq, absl::Span<const int32_t> keep);
  // Drops every pending row of `seq` (their blocks past the committed tokens return to the
  // pool): after draft steps whose rows a verification step computes again.
  void DiscardPending(SequenceKv& seq);

  // Prefills `prompt` into `seq` (which must be empty) in chunks of prefill_chunk_tokens and
  // samples its first token on the backend (`sampling`: one row). Errors as BeginPrefill and
  // Step; `seq` is released on error.
  absl::StatusOr<int32_t> PrefillSampled(
      absl::Span<const int32_t> prompt, SequenceKv& seq, const kernels::SamplingBatch& sampling,
      const kernels::AttentionPattern& pattern = {},
      const std::function<absl::Status(int layer)>& on_layer_done = nullptr);

  // Computes the prompt's KV into `seq` (which must be empty) and returns host f32 logits
  // [1, vocab] of its last token. Leading full blocks found in the prefix cache are reused; at
  // least the last token is always computed. kInvalidArgument for an empty prompt or one longer
  // than the context; kResourceExhausted when the pool lacks blocks (nothing is held then).
  // `on_layer_done(layer)`, when given, runs once per layer as soon as that layer's K/V for the
  // whole prompt are in the cache (during the last chunk), e.g. to start its KV transfer.
  // `pattern` as PrefillPattern makes it (dense by default).
  absl::StatusOr<Tensor> Prefill(
      absl::Span<const int32_t> prompt, SequenceKv& seq,
      const std::function<absl::Status(int layer)>& on_layer_done = nullptr,
      const kernels::AttentionPattern& pattern = {});

  // Appends one token to each sequence and returns logits [seqs.size(), vocab] for the next
  // position. kResourceExhausted when a new block is needed and none is free (no sequence
  // changes then); kInvalidArgument past the context length.
  absl::StatusOr<Tensor> Decode(const std::vector<SequenceKv*>& seqs,
                                absl::Span<const int32_t> tokens);

  // Decode that also picks each sequence's next token on the backend (Backend::Sample: greedy
  // rows are temperature 0), so only token ids come back, never logits. `sampling` holds one row
  // per sequence, in order (sampling::Sampler::NextRow builds them). Same errors as Decode, and
  // kInvalidArgument when `sampling` does not match the sequences (nothing changes then).
  absl::StatusOr<std::vector<int32_t>> DecodeSampled(const std::vector<SequenceKv*>& seqs,
                                                     absl::Span<const int32_t> tokens,
                                                     const kernels::SamplingBatch& sampling);

  // Takes over a prompt whose K/V a prefill worker already wrote into the leased `blocks` (of
  // pool(); on success their references move to `seq`, on error the lease returns them).
  // Registers its full blocks in the prefix cache. Under rolling KV, leading entries may be
  // kv::kNoBlock (blocks before the window, never sent). kInvalidArgument when the blocks cannot
  // hold the prompt.
  absl::Status AdoptPrefilledKv(absl::Span<const int32_t> prompt, kv::KvBlockLease blocks,
                                SequenceKv& seq);

  // Returns the sequence's blocks to the pool (cached ones stay matchable) and clears it.
  void Release(SequenceKv& seq);

  // The kernel pattern of a prompt of `prompt_tokens` tokens prefilled under `choice`:
  // AttentionPatternOf, except that MInference runs dense below choice.sparse_prefill_threshold
  // and otherwise with this runner's patterns (options.minference_config). TokenSelect here is
  // its chunked-prefill variant: each chunk selects by its mean query (tokenselect_index.h).
  // kInvalidArgument when the choice names a config file other than the runner's (a request may
  // not make a server read files) or TokenSelect's k exceeds options.tokenselect_max_k;
  // kUnimplemented as Backend::SupportsAttention.
  absl::StatusOr<kernels::AttentionPattern> PrefillPattern(const AttentionChoice& choice,
                                                           int64_t prompt_tokens) const;
  // The kernel pattern of generated tokens under `choice`; errors as SupportsAttention, and
  // kInvalidArgument for TokenSelect with k above options.tokenselect_max_k (its state would not
  // fit the slots).
  absl::StatusOr<kernels::AttentionPattern> DecodePattern(const AttentionChoice& choice) const;

  // Selection-cache hits and queries of every TokenSelect step so far, summed over layers (the
  // sparseserve_tokenselect_selection_cache_* counters follow it).
  struct SelectionCacheCounts {
    double hits = 0;
    double queries = 0;
  };
  SelectionCacheCounts selection_cache_counts() const { return selection_cache_counts_; }

  const model::ModelConfig& config() const { return model_->config(); }
  // Ranks the model is split over (options.tensor_parallel).
  int tensor_parallel() const { return rank_threads_->ranks(); }
  // Receives each sampled tensor-parallel all-reduce's duration (LlamaModel::
  // set_allreduce_observer on rank 0; sparseserve_tp_allreduce_seconds). Null = off.
  void set_allreduce_observer(std::function<void(double seconds)> observer) {
    model_->set_allreduce_observer(std::move(observer));
  }
  // TokenSwift's draft heads loaded (options.tokenswift_heads), 0 without.
  int num_draft_heads() const { return model_->num_draft_heads(); }
  // The draft heads' candidates at token rows of the last Step (indices into its rows, in the
  // order of its StepRows' tokens): LlamaModel::DraftHeadsAtLastStep, for TokenSwift without a
  // draft pass. Call it before any other step.
  absl::StatusOr<std::vector<int32_t>> DraftHeadsAtLastStep(absl::Span<const int32_t> rows,
                                                            const kernels::SamplingBatch& sampling,
                                                            int top_k) {
    return model_->DraftHeadsAtLastStep(rows, sampling, top_k);
  }
  // Whether Kangaroo's early-exit adapter is loaded (options.kangaroo_adapter).
  bool has_early_exit_adapter() const { return model_->has_early_exit_adapter(); }
  // Whether the last Step warmed up or captured a step graph (LlamaModel): its time says little
  // about the steps after it, so speculation's cost model leaves it out.
  bool last_step_was_graph_setup() const { return model_->last_step_was_graph_setup(); }
  // Whether steps replay graphs per shape (LlamaModel::replays_step_graphs): speculation then
  // picks one draft depth per step (spec::ChooseDraftDepths' `uniform`).
  bool replays_step_graphs() const { return model_->replays_step_graphs(); }
  int max_context() const { return model_->config().max_position_embeddings; }
  // The window of a rolling-KV model (every layer windowed: blocks that left it return to the
  // pool as a sequence goes on), else 0.
  int rolling_window() const { return rolling_window_; }
  // The most blocks a sequence holds while its KV grows to `tokens` entries in steps of up to
  // `step_tokens` rows: all of them, or under rolling KV the window and one step's rows.
  int BlocksToHold(int tokens, int step_tokens) const;
  const kv::KvBlockPool& pool() const { return pool_; }
  kv::KvBlockPool& mutable_pool() { return pool_; }
  // The KV memory, e.g. for registering it with a transport. Written only by forward steps.
  // Rank 0's under tensor parallelism (its KV heads only).
  const model::PagedKvCache& cache() const { return *cache_; }
  // The cache's shape with all of the model's KV heads: the layout KV blocks have between
  // workers (kv::KvLayout), whatever either side's tensor parallelism. cache().shape() when one
  // rank holds the model.
  model::PagedKvCacheShape WholeHeadsKvShape() const;
  // Bytes of one (layer, block) in that layout: kv::KvLayout::bytes_per_block_per_layer.
  int64_t WholeHeadsBlockBytes() const;
  // The layout KV blocks have between workers: the whole-heads shape, the cache's layers (with a
  // Kangaroo adapter's), this worker's tensor parallelism and the adapter file's fingerprint.
  kv::KvLayout kv_layout() const;
  // Copies blocks `blocks` of layer `layer` into blocks `host_blocks` of `host_layer` (host
  // memory, [n * 2, block_tokens, num_kv_heads, head_dim]: the whole-heads layout), gathering
  // every tensor-parallel rank's slice of the heads; engine::CopyKvBlocksToHost on one rank.
  // Errors as that. Engine thread only, outside a step (it runs on every rank).
  absl::Status CopyKvToHost(int layer, absl::Span<const int32_t> blocks, const Tensor& host_layer,
                            absl::Span<const int32_t> host_blocks);
  // The reverse: scatters whole-heads host blocks into every rank's slice of blocks `blocks`.
  absl::Status CopyKvFromHost(int layer, const Tensor& host_layer,
                              absl::Span<const int32_t> host_blocks,
                              absl::Span<const int32_t> blocks);
  // The per-sequence state slots, or null when sequence_state_words is 0.
  SequenceStateTable* sequence_state() { return state_.get(); }
  kernels::Backend& backend() const { return model_->backend(); }
  int block_tokens() const { return options_.block_tokens; }

  // Receives the shadow monitor's errors (options.shadow_dense_rate) of each step that measured
  // some, on the engine thread right after the step, before it returns: one call per step with
  // every (sequence, layer) of it (sequence = index into that step's rows; a prefill's chunks are
  // steps of one sequence). Services put them into the sparseserve_sparse_attention_error
  // histogram. Null (the default) drops them. Must not call back into the runner.
  using ShadowErrorObserver =
      std::function<void(absl::Span<const model::ShadowAttentionError> errors)>;
  void set_shadow_error_observer(ShadowErrorObserver observer) {
    shadow_observer_ = std::move(observer);
  }

  // LlamaModel::set_attention_probe on this runner's model: `probe` sees every layer's attention
  // of every later step (they run op by op while it is set); null turns it off. Offline analysis
  // only (`sparseserve search-patterns`).
  void set_attention_probe(model::AttentionProbe probe) {
    model_->set_attention_probe(std::move(probe));
  }

 private:
  // kInvalidArgument when `pattern` is TokenSelect with k above options.tokenselect_max_k.
  absl::Status CheckTokenSelectCapacity(const kernels::AttentionPattern& pattern) const;
  ModelRunner(std::unique_ptr<model::LlamaModel> model, std::unique_ptr<model::PagedKvCache> cache,
              const ModelRunnerOptions& options);
  // A step's halves: checks, block allocation (all or nothing) and the forward batch; then, once
  // the forward pass succeeded, recording the rows (FinishStep) or, if it failed, giving the new
  // blocks back (UndoStep).
  absl::StatusOr<std::vector<model::ForwardSequence>> PrepareStep(absl::Span<const StepRows> rows);
  void FinishStep(absl::Span<const StepRows> rows);
  void UndoStep(absl::Span<const StepRows> rows);
  static std::vector<StepRows> DecodeRows(const std::vector<SequenceKv*>& seqs,
                                          absl::Span<const int32_t> tokens);
  // BeginPrefill, then `run_chunk` for each chunk of the rest of the prompt (at most
  // prefill_chunk_tokens and max_step_tokens rows) until the prompt is in the cache. `seq` is
  // released on error.
  absl::Status PrefillChunks(
      absl::Span<const int32_t> prompt, SequenceKv& seq, const kernels::AttentionPattern& pattern,
      const std::function<absl::Status(const StepRows& rows, bool last_chunk)>& run_chunk);
  // Adds the last forward step's sparse work to its rows' sequences.
  void AddSparseWork(absl::Span<const StepRows> rows);
  // Hands the last forward step's shadow errors to the observer, if both exist.
  void ReportShadowErrors();
  // Hashes and registers the blocks of `seq` that became full.
  void RegisterFullBlocks(SequenceKv& seq);
  // Returns the blocks of `seq` past what its committed and pending rows need.
  void TrimBlocks(SequenceKv& seq);
  // Rolling KV: returns the blocks no query of `seq` can see any more to the pool.
  void ReleaseOutOfWindowBlocks(SequenceKv& seq);

  // Forward on every rank (OnEveryRank); returns rank 0's host logits. `on_layer_done` runs on
  // rank 0 only.
  absl::StatusOr<Tensor> ForwardOnEveryRank(
      const std::vector<model::ForwardSequence>& batch,
      const std::function<absl::Status(int layer)>& on_layer_done);
  // Calls `hook` for every layer of the cache in order (a tensor-parallel step's deferred
  // on_layer_done).
  absl::Status RunLayerHooks(const std::function<absl::Status(int layer)>& hook);
  // Runs fn on every tensor-parallel rank's model and cache at once (RankThreads::Run), or on
  // the one model.
  absl::Status OnEveryRank(
      const std::function<absl::Status(model::LlamaModel& model, model::PagedKvCache& cache)>& fn);

  ModelRunnerOptions options_;
  // Tensor parallelism: ranks 1 .. N-1 (rank 0 is model_ and cache_ on the caller's backend),
  // each torn down on its own thread by the destructor; the threads (one rank: none) outlive them.
  struct Rank {
    std::unique_ptr<kernels::Backend> backend;
    std::unique_ptr<model::LlamaModel> model;
    std::unique_ptr<model::PagedKvCache> cache;
  };
  std::unique_ptr<RankThreads> rank_threads_;
  std::vector<std::unique_ptr<kernels::Collective>> collectives_;
  std::vector<Rank> ranks_;
  std::unique_ptr<model::LlamaModel> model_;
  std::unique_ptr<model::PagedKvCache> cache_;
  kv::KvBlockPool pool_;
  int rolling_window_ = 0;            // see rolling_window()
  uint64_t adapter_fingerprint_ = 0;  // of options.kangaroo_adapter's file (kv_layout())
  std::unique_ptr<SequenceStateTable> state_;
  std::shared_ptr<const kernels::MInferenceConfig> minference_;  // options.minference_config's
  uint64_t next_sequence_id_ = 1;
  SelectionCacheCounts selection_cache_counts_;
  ShadowErrorObserver shadow_observer_;
};

}  // namespace sparseserve::engine

#endif  // SPARSESERVE_COMMON_ENGINE_MODEL_RUNNER_H_
