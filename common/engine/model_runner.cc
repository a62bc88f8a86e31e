#include "common/engine/model_runner.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <numeric>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/core/mapped_file.h"
#include "common/core/status.h"
#include "common/engine/kv_block_copy.h"
#include "common/engine/minference_config.h"
#include "common/kv/rolling_window.h"
#include "common/model/safetensors_file.h"
#include "kernels/sampling_plan_check.h"

namespace sparseserve::engine {
namespace {

// The KV pool's capacity: the explicit option, else what the device's memory allows after the
// weights (already loaded) and a forward step's activations, else (CPU) four full contexts.
// Under tensor parallelism, each rank's share of it on its own device.
absl::StatusOr<int64_t> KvCacheTokens(const model::LlamaModel& model, kernels::Backend& backend,
                                      const ModelRunnerOptions& options) {
  if (options.kv_cache_tokens > 0) return options.kv_cache_tokens;
  const model::ModelConfig& c = model.config();
  const model::ShardDims& d = model.shard_dims();
  const int kv_layers = model.kv_layers();
  absl::StatusOr<kernels::Backend::MemoryInfo> memory = backend.GetMemoryInfo();
  if (!memory.ok()) return int64_t{4} * c.max_position_embeddings;
  if (options.gpu_memory_fraction <= 0 || options.gpu_memory_fraction > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("gpu_memory_fraction must be in (0, 1], got ", options.gpu_memory_fraction));
  }
  const int64_t elem = static_cast<int64_t>(DTypeSize(backend.compute_dtype()));
  const int64_t kv_token_bytes = int64_t{2} * kv_layers * d.kv_heads * c.head_dim * elem;
  // Activations of one prefill chunk (residual, norm, q, k, v, attention output, gate, up, branch)
  // plus f32 logits for every row (a rank's slice, gathered), and 256 MiB for library workspaces
  // and fragmentation.
  const int64_t row_bytes = elem * (int64_t{4} * c.hidden_size + int64_t{2} * d.heads * c.head_dim +
                                    int64_t{2} * d.kv_heads * c.head_dim + int64_t{2} * d.ffn) +
                            int64_t{4} * (c.vocab_size + int64_t{2} * d.vocab * model.shard().size);
  const int64_t reserve = row_bytes * options.prefill_chunk_tokens + (int64_t{256} << 20);
  // This process's share (so several workers can split one GPU), never more than is free.
  const int64_t used = memory->used_bytes;  // weights and workspaces loaded so far
  const int64_t share =
      static_cast<int64_t>(options.gpu_memory_fraction * static_cast<double>(memory->total_bytes));
  const int64_t budget = std::min(share - used, memory->free_bytes) - reserve;
  const int64_t tokens = budget / kv_token_bytes;
  if (tokens < options.block_tokens) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "no GPU memory left for the KV cache: ", memory->total_bytes >> 20, " MiB total, ",
        memory->free_bytes >> 20, " MiB free, ", used >> 20, " MiB used by this process, ",
        reserve >> 20, " MiB reserved for activations, fraction ", options.gpu_memory_fraction,
        " (raise --gpu-memory-fraction or use a smaller model)"));
  }
  return tokens;
}

// A fingerprint of `size` bytes (FNV-1a, 64 bit; fixed, so equal on every machine), never 0.
uint64_t Fingerprint(const uint8_t* data, size_t size) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (size_t i = 0; i < size; ++i) h = (h ^ data[i]) * 0x100000001b3ULL;
  return h == 0 ? 1 : h;
}

// Kangaroo's adapter (--kangaroo-adapter): the safetensors file's metadata names the layer it
// exits after (exit_layer) and the RoPE pair layout of its q/k rows (rope_pairs: "adjacent" or
// "half", as tools/train_spec_adapters.py trained them; absent = the model checkpoint's own).
// Returns the file's fingerprint (kv::KvLayout::adapter_fingerprint).
absl::StatusOr<uint64_t> LoadKangarooAdapter(const std::string& path, model::LlamaModel& model) {
  const std::string context = absl::StrCat("--kangaroo-adapter ", path);
  SS_ASSIGN_OR_RETURN(std::unique_ptr<core::MappedFile> mapped, core::MappedFile::Open(path));
  const std::shared_ptr<const core::MappedFile> bytes(std::move(mapped));
  SS_ASSIGN_OR_RETURN(
      std::unique_ptr<model::SafetensorsFile> file,
      model::SafetensorsFile::FromBuffer(path, bytes->data(), bytes->size(), bytes));
  const std::map<std::string, std::string>& meta = file->metadata();
  const auto exit = meta.find("exit_layer");
  int exit_layer = 0;
  if (exit == meta.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat(context,
                     ": no exit_layer in its metadata (not a Kangaroo adapter from "
                     "tools/train_spec_adapters.py?)"));
  }
  if (!absl::SimpleAtoi(exit->second, &exit_layer)) {
    return absl::InvalidArgumentError(
        absl::StrCat(context, ": exit_layer '", exit->second, "' is not an integer"));
  }
  model::RopePairLayout pairs = model.config().rope_pair_layout;
  if (const auto it = meta.find("rope_pairs"); it != meta.end()) {
    if (it->second != "adjacent" && it->second != "half") {
      return absl::InvalidArgumentError(
          absl::StrCat(context, ": rope_pairs '", it->second, "' is neither adjacent nor half"));
    }
    pairs = it->second == "adjacent" ? model::RopePairLayout::kAdjacent
                                     : model::RopePairLayout::kHalves;
  }
  SS_RETURN_IF_ERROR(AnnotateStatus(model.LoadEarlyExitAdapter(*file, exit_layer, pairs), context));
  return Fingerprint(bytes->data(), bytes->size());
}

}  // namespace

absl::StatusOr<std::unique_ptr<ModelRunner>> ModelRunner::Create(
    const ModelSource& source, kernels::Backend* backend, const ModelRunnerOptions& options) {
  if (options.block_tokens <= 0 || options.block_tokens % 16 != 0 ||
      options.prefill_chunk_tokens <= 0 || options.max_step_tokens <= 0 ||
      options.kv_cache_tokens < 0 || options.step_graph_rows < 0 ||
      !(options.shadow_dense_rate >= 0 && options.shadow_dense_rate <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad runner options: block_tokens=", options.block_tokens,
                     " (a multiple of 16), ", "prefill_chunk_tokens=", options.prefill_chunk_tokens,
                     ", max_step_tokens=", options.max_step_tokens, ", kv_cache_tokens=",
                     options.kv_cache_tokens, ", step_graph_rows=", options.step_graph_rows,
                     ", shadow_dense_rate=", options.shadow_dense_rate, " (in [0, 1])"));
  }
  const int tp = options.tensor_parallel;
  if (tp < 1) {
    return absl::InvalidArgumentError(absl::StrCat("--tensor-parallel must be >= 1, got ", tp));
  }
  if (tp > 1) {
    const char* refused = options.shadow_dense_rate > 0       ? "--shadow-dense-rate"
                          : !options.tokenswift_heads.empty() ? "--tokenswift-heads"
                          : !options.kangaroo_adapter.empty() ? "--kangaroo-adapter"
                          : options.sequence_state_words > 0  ? "sequence state"
                                                              : nullptr;
    if (refused != nullptr) {
      return absl::UnimplementedError(
          absl::StrCat(refused, " is not built for --tensor-parallel > 1 yet (issue 19)"));
    }
  }
  // Every rank's backend, model and cache is made on its own thread (its GPU current there), the
  // ranks in parallel; rank 0's on the caller with the backend given.
  auto threads = std::make_unique<RankThreads>(tp);
  std::vector<Rank> ranks(tp);
  std::vector<kernels::Backend*> backends(tp, backend);
  const absl::Status made_backends = threads->Run([&](int r) -> absl::Status {
    if (r == 0) return absl::OkStatus();
    SS_ASSIGN_OR_RETURN(ranks[r].backend, kernels::CreateBackend(backend->device(), r));
    backends[r] = ranks[r].backend.get();
    return ranks[r].backend->BindThread();
  });
  SS_RETURN_IF_ERROR(made_backends);
  std::vector<std::unique_ptr<kernels::Collective>> collectives;
  if (tp > 1) {
    SS_ASSIGN_OR_RETURN(collectives, kernels::CreateCollectives(backends));
  }
  const absl::Status loaded = threads->Run([&](int r) -> absl::Status {
    model::TensorParallelShard shard;
    shard.rank = r;
    shard.size = tp;
    shard.collective = tp > 1 ? collectives[r].get() : nullptr;
    if (source.synthetic) {  // random weights of the preset's shape: speed only
      SS_ASSIGN_OR_RETURN(ranks[r].model, model::LlamaModel::CreateRandom(
                                              source.config, backends[r], /*seed=*/1, shard));
    } else if (source.weights == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(source.path, ": opened without its weights (open_weights = false)"));
    } else {
      SS_ASSIGN_OR_RETURN(ranks[r].model,
                          model::LlamaModel::Load(source.config, *source.weights, source.naming,
                                                  backends[r], shard));
    }
    ranks[r].model->set_step_graph_rows(options.step_graph_rows);
    ranks[r].model->set_shadow_dense(options.shadow_dense_rate, options.shadow_dense_seed);
    return absl::OkStatus();
  });
  SS_RETURN_IF_ERROR(loaded);
  std::unique_ptr<model::LlamaModel>& model = ranks[0].model;
  if (!options.tokenswift_heads.empty()) {
    SS_ASSIGN_OR_RETURN(std::unique_ptr<model::SafetensorsFile> heads,
                        model::SafetensorsFile::Open(options.tokenswift_heads));
    SS_RETURN_IF_ERROR(
        AnnotateStatus(model->LoadDraftHeads(*heads),
                       absl::StrCat("--tokenswift-heads ", options.tokenswift_heads)));
  }
  uint64_t adapter_fingerprint = 0;
  if (!options.kangaroo_adapter.empty()) {
    SS_ASSIGN_OR_RETURN(adapter_fingerprint, LoadKangarooAdapter(options.kangaroo_adapter, *model));
  }
  const model::ModelConfig& c = model->config();
  // The state slots first: the KV pool gets the memory left after them. TokenSelect's are not
  // made under tensor parallelism, which refuses it (LlamaModel::CheckPattern).
  int64_t state_words = options.sequence_state_words;
  if (options.tokenselect_max_k > 0 && tp == 1) {
    state_words = std::max(
        state_words, kernels::tokenselect::StateWords(
                         c.num_layers, int64_t{c.num_heads} * c.head_dim, options.tokenselect_max_k,
                         options.tokenselect_per_kv_head ? c.num_kv_heads : 1));
  }
  std::unique_ptr<SequenceStateTable> state;
  if (state_words > 0) {
    SS_ASSIGN_OR_RETURN(state,
                        SequenceStateTable::Create(*backend, options.max_sequences, state_words));
  }
  // Every rank's pool holds the same blocks (one block table per sequence): the smallest share.
  std::vector<int64_t> rank_tokens(tp);
  const absl::Status sized = threads->Run([&](int r) -> absl::Status {
    SS_ASSIGN_OR_RETURN(rank_tokens[r], KvCacheTokens(*ranks[r].model, *backends[r], options));
    return absl::OkStatus();
  });
  SS_RETURN_IF_ERROR(sized);
  const int64_t tokens = *std::min_element(rank_tokens.begin(), rank_tokens.end());
  const absl::Status made_caches = threads->Run([&](int r) -> absl::Status {
    model::PagedKvCacheShape shape;
    shape.num_layers = ranks[r].model->kv_layers();
    shape.num_blocks = static_cast<int>((tokens + options.block_tokens - 1) / options.block_tokens);
    shape.block_tokens = options.block_tokens;
    shape.num_kv_heads = ranks[r].model->shard_dims().kv_heads;
    shape.head_dim = c.head_dim;
    SS_ASSIGN_OR_RETURN(ranks[r].cache, model::PagedKvCache::Create(shape, *backends[r]));
    return absl::OkStatus();
  });
  SS_RETURN_IF_ERROR(made_caches);
  SS_ASSIGN_OR_RETURN(std::shared_ptr<const kernels::MInferenceConfig> minference,
                      MInferencePatternsFor(options.minference_config, options.minference_planted,
                                            c.num_layers, c.num_heads));
  std::unique_ptr<ModelRunner> runner(
      new ModelRunner(std::move(ranks[0].model), std::move(ranks[0].cache), options));
  runner->rank_threads_ = std::move(threads);
  runner->collectives_ = std::move(collectives);
  for (int r = 1; r < tp; ++r) runner->ranks_.push_back(std::move(ranks[r]));
  runner->minference_ = std::move(minference);
  runner->adapter_fingerprint_ = adapter_fingerprint;
  if (state != nullptr) {
    runner->state_ = std::move(state);
    runner->model_->set_sequence_state(runner->state_->memory());
  }
  return runner;
}

absl::StatusOr<Tensor> ModelRunner::ForwardOnEveryRank(
    const std::vector<model::ForwardSequence>& batch,
    const std::function<absl::Status(int layer)>& on_layer_done) {
  Tensor logits;  // rank 0's: the gathered logits
  const bool deferred = tensor_parallel() > 1 && on_layer_done != nullptr;  // as in Step
  const absl::Status forwarded = OnEveryRank([&](model::LlamaModel& m, model::PagedKvCache& cache) {
    const bool first = &m == model_.get();
    SS_ASSIGN_OR_RETURN(Tensor out,
                        m.Forward(batch, cache, first && !deferred ? on_layer_done : nullptr));
    if (first) logits = std::move(out);
    return absl::OkStatus();
  });
  SS_RETURN_IF_ERROR(forwarded);
  if (deferred) SS_RETURN_IF_ERROR(RunLayerHooks(on_layer_done));
  return logits;
}

absl::Status ModelRunner::RunLayerHooks(const std::function<absl::Status(int layer)>& hook) {
  for (int l = 0; l < cache_->shape().num_layers; ++l) SS_RETURN_IF_ERROR(hook(l));
  return absl::OkStatus();
}

model::PagedKvCacheShape ModelRunner::WholeHeadsKvShape() const {
  model::PagedKvCacheShape shape = cache_->shape();
  shape.num_kv_heads = config().num_kv_heads;
  return shape;
}

int64_t ModelRunner::WholeHeadsBlockBytes() const {
  return kv_layout().bytes_per_block_per_layer();
}

kv::KvLayout ModelRunner::kv_layout() const {
  const model::PagedKvCacheShape s = WholeHeadsKvShape();
  kv::KvLayout layout;
  layout.dtype = cache_->dtype();
  layout.block_tokens = s.block_tokens;
  layout.num_layers = s.num_layers;
  layout.num_kv_heads = s.num_kv_heads;
  layout.head_dim = s.head_dim;
  layout.tensor_parallel = tensor_parallel();
  layout.adapter_fingerprint = adapter_fingerprint_;
  return layout;
}

namespace {

// Host scratch for one rank's slice of `n` blocks: [n * 2, block_tokens, its heads, head_dim].
Tensor RankSliceOnHost(const model::PagedKvCache& cache, int64_t n) {
  const model::PagedKvCacheShape& s = cache.shape();
  return Tensor::Zeros(cache.dtype(), {n * 2, s.block_tokens, s.num_kv_heads, s.head_dim});
}

// Copies heads between a rank's slice (`slice`, [n * 2, bt, h, hd]) and blocks of a whole-heads
// host layer ([*, bt, H, hd]) at head offset `head_begin`: to_whole picks the direction.
void CopyHeads(const Tensor& slice, const Tensor& whole, absl::Span<const int32_t> whole_blocks,
               int head_begin, bool to_whole) {
  const int64_t bt = slice.dim(1), h = slice.dim(2), hd = slice.dim(3), all = whole.dim(2);
  const size_t elem = DTypeSize(slice.dtype()), run = static_cast<size_t>(h * hd) * elem;
  auto* s = static_cast<char*>(slice.raw_data());
  auto* w = static_cast<char*>(whole.raw_data());
  for (size_t i = 0; i < whole_blocks.size(); ++i) {
    for (int64_t kv = 0; kv < 2; ++kv) {
      for (int64_t t = 0; t < bt; ++t) {
        char* a = s + (((static_cast<int64_t>(i) * 2 + kv) * bt + t) * h * hd) * elem;
        char* b = w + (((int64_t{whole_blocks[i]} * 2 + kv) * bt + t) * all + head_begin) * hd *
                          static_cast<int64_t>(elem);
        if (to_whole) {
          std::memcpy(b, a, run);
        } else {
          std::memcpy(a, b, run);
        }
      }
    }
  }
}

absl::Status CheckWholeHeads(const Tensor& host_layer, const model::PagedKvCacheShape& whole,
                             absl::Span<const int32_t> host_blocks,
                             absl::Span<const int32_t> blocks) {
  if (host_layer.device() != Device::kHost || !host_layer.is_contiguous() ||
      host_layer.ndim() != 4 || host_layer.dim(1) != whole.block_tokens ||
      host_layer.dim(2) != whole.num_kv_heads || host_layer.dim(3) != whole.head_dim ||
      host_blocks.size() != blocks.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "KV copy: host layer ", host_layer.DebugString(), " is not the whole-heads layout of ",
        whole.num_kv_heads, " heads, or ", host_blocks.size(), " host blocks for ", blocks.size()));
  }
  for (int32_t b : host_blocks) {
    if (b < 0 || 2 * int64_t{b} + 1 >= host_layer.dim(0)) {
      return absl::InvalidArgumentError(absl::StrCat("KV copy: host block ", b, " out of range"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ModelRunner::CopyKvToHost(int layer, absl::Span<const int32_t> blocks,
                                       const Tensor& host_layer,
                                       absl::Span<const int32_t> host_blocks) {
  if (tensor_parallel() == 1) {
    return CopyKvBlocksToHost(backend(), cache_->layer(layer), blocks, host_layer, host_blocks);
  }
  SS_RETURN_IF_ERROR(CheckWholeHeads(host_layer, WholeHeadsKvShape(), host_blocks, blocks));
  std::vector<int32_t> slots(blocks.size());
  std::iota(slots.begin(), slots.end(), 0);
  // Replicated KV heads (more ranks than KV heads) are written once, by the first rank holding
  // each; the ranks' writes go to disjoint heads of the host blocks.
  return OnEveryRank([&](model::LlamaModel& m, model::PagedKvCache& cache) -> absl::Status {
    const model::ShardDims& d = m.shard_dims();
    if (d.kv_heads * m.shard().size > config().num_kv_heads &&
        d.head_begin % (config().num_heads / config().num_kv_heads) != 0) {
      return absl::OkStatus();  // not the first rank of its KV head
    }
    const Tensor slice = RankSliceOnHost(cache, static_cast<int64_t>(blocks.size()));
    SS_RETURN_IF_ERROR(CopyKvBlocksToHost(m.backend(), cache.layer(layer), blocks, slice, slots));
    CopyHeads(slice, host_layer, host_blocks, d.kv_head_begin, /*to_whole=*/true);
    return absl::OkStatus();
  });
}

absl::Status ModelRunner::CopyKvFromHost(int layer, const Tensor& host_layer,
                                         absl::Span<const int32_t> host_blocks,
                                         absl::Span<const int32_t> blocks) {
  if (tensor_parallel() == 1) {
    return CopyKvBlocksFromHost(backend(), host_layer, host_blocks, cache_->layer(layer), blocks);
  }
  SS_RETURN_IF_ERROR(CheckWholeHeads(host_layer, WholeHeadsKvShape(), host_blocks, blocks));
  std::vector<int32_t> slots(blocks.size());
  std::iota(slots.begin(), slots.end(), 0);
  return OnEveryRank([&](model::LlamaModel& m, model::PagedKvCache& cache) -> absl::Status {
    const Tensor slice = RankSliceOnHost(cache, static_cast<int64_t>(blocks.size()));
    CopyHeads(slice, host_layer, host_blocks, m.shard_dims().kv_head_begin,
              /*to_whole=*/false);
    SS_RETURN_IF_ERROR(CopyKvBlocksFromHost(m.backend(), slice, slots, cache.layer(layer), blocks));
    // The slice is freed on return: the backend must have taken its bytes (a GPU copy
    // from pageable memory has once CopyFromHost returns).
    return absl::OkStatus();
  });
}

absl::Status ModelRunner::OnEveryRank(
    const std::function<absl::Status(model::LlamaModel& model, model::PagedKvCache& cache)>& fn) {
  return rank_threads_->Run([&](int r) {
    return r == 0 ? fn(*model_, *cache_) : fn(*ranks_[r - 1].model, *ranks_[r - 1].cache);
  });
}

absl::StatusOr<kernels::AttentionPattern> ModelRunner::PrefillPattern(const AttentionChoice& choice,
                                                                      int64_t prompt_tokens) const {
  kernels::AttentionPattern pattern = AttentionPatternOf(choice);
  if (choice.method == AttentionMethod::kMInference) {
    if (!choice.minference_config.empty() &&
        choice.minference_config != options_.minference_config) {
      return absl::InvalidArgumentError(absl::StrCat(
          "minference config '", choice.minference_config, "' is not this server's ('",
          options_.minference_config, "'); a request may only name the server's config"));
    }
    if (prompt_tokens < choice.sparse_prefill_threshold) {
      pattern = kernels::AttentionPattern();  // short prompts gain nothing (§4, pitfalls)
    } else {
      pattern.minference = minference_;
    }
  }
  SS_RETURN_IF_ERROR(
      AnnotateStatus(model_->CheckPattern(pattern),
                     absl::StrCat("prefill attention ", AttentionMethodKindName(pattern.kind))));
  SS_RETURN_IF_ERROR(CheckTokenSelectCapacity(pattern));
  SS_RETURN_IF_ERROR(backend().SupportsAttention(pattern, config().head_dim));
  return pattern;
}

absl::StatusOr<kernels::AttentionPattern> ModelRunner::DecodePattern(
    const AttentionChoice& choice) const {
  const kernels::AttentionPattern pattern = AttentionPatternOf(choice);
  SS_RETURN_IF_ERROR(
      AnnotateStatus(model_->CheckPattern(pattern),
                     absl::StrCat("decode attention ", AttentionMethodKindName(pattern.kind))));
  SS_RETURN_IF_ERROR(CheckTokenSelectCapacity(pattern));
  SS_RETURN_IF_ERROR(backend().SupportsAttention(pattern, config().head_dim));
  return pattern;
}

absl::Status ModelRunner::CheckTokenSelectCapacity(const kernels::AttentionPattern& pattern) const {
  if (pattern.kind != kernels::AttentionMethodKind::kTokenSelect) return absl::OkStatus();
  if (pattern.tokenselect.per_kv_head && !options_.tokenselect_per_kv_head &&
      config().num_kv_heads > 1) {
    return absl::InvalidArgumentError(
        "tokenselect per KV head needs a server started with --tokenselect-per-kv-head (its "
        "selection state holds one list per layer)");
  }
  if (pattern.tokenselect.k <= options_.tokenselect_max_k) return absl::OkStatus();
  return absl::InvalidArgumentError(
      options_.tokenselect_max_k == 0
          ? std::string("tokenselect is off on this server (its --tokenselect-k capacity is 0)")
          : absl::StrCat("tokenselect k = ", pattern.tokenselect.k,
                         " exceeds this server's --tokenselect-k of ", options_.tokenselect_max_k));
}

ModelRunner::ModelRunner(std::unique_ptr<model::LlamaModel> model,
                         std::unique_ptr<model::PagedKvCache> cache,
                         const ModelRunnerOptions& options)
    : options_(options),
      model_(std::move(model)),
      cache_(std::move(cache)),
      pool_(cache_->shape().num_blocks),
      rolling_window_(model_->config().AllLayersWindowed() ? model_->config().sliding_window : 0) {}

int ModelRunner::BlocksToHold(int tokens, int step_tokens) const {
  const int bt = options_.block_tokens;
  const int all = (tokens + bt - 1) / bt;
  if (rolling_window_ == 0) return all;
  return std::min(all, kv::MaxBlocksInWindow(rolling_window_, step_tokens, bt));
}

void ModelRunner::ReleaseOutOfWindowBlocks(SequenceKv& seq) {
  if (rolling_window_ == 0) return;
  const int dead = std::min(kv::BlocksBeforeWindow(static_cast<int64_t>(seq.tokens.size()),
                                                   rolling_window_, options_.block_tokens),
                            static_cast<int>(seq.block_ids.size()));
  if (dead <= seq.released_blocks) return;
  const absl::Span<int32_t> gone =
      absl::MakeSpan(seq.block_ids).subspan(seq.released_blocks, dead - seq.released_blocks);
  pool_.Release(gone);
  std::fill(gone.begin(), gone.end(), kv::kNoBlock);
  seq.released_blocks = dead;
}

ModelRunner::~ModelRunner() {
  // Each rank's memory is freed on its own thread (its GPU current there), before the
  // collectives and threads go.
  if (rank_threads_ != nullptr) {
    rank_threads_
        ->Run([&](int r) {
          if (r > 0) ranks_[r - 1] = Rank();
          return absl::OkStatus();
        })
        .IgnoreError();
  }
}

void ModelRunner::ReportShadowErrors() {
  if (shadow_observer_ != nullptr && !model_->shadow_errors().empty()) {
    shadow_observer_(model_->shadow_errors());
  }
}

void ModelRunner::RegisterFullBlocks(SequenceKv& seq) {
  const int bt = options_.block_tokens;
  const size_t full = seq.tokens.size() / bt;
  while (seq.block_hashes.size() < full) {
    const size_t b = seq.block_hashes.size();
    const kv::BlockHash parent = b == 0 ? kv::BlockHash{0} : seq.block_hashes[b - 1];
    const kv::BlockHash h = kv::ChainHash(parent, seq.tokens.data() + b * bt, bt);
    seq.block_hashes.push_back(h);
    // Another sequence may already have registered the same content; then this block simply
    // stays uncached, which is harmless.
    if (options_.enable_prefix_cache && seq.block_ids[b] != kv::kNoBlock) {
      pool_.Register(h, seq.block_ids[b]);
    }
  }
}

void ModelRunner::TrimBlocks(SequenceKv& seq) {
  const int bt = options_.block_tokens;
  const size_t rows = seq.tokens.size() + seq.pending_tokens.size();
  const size_t needed = (rows + bt - 1) / bt;
  if (seq.block_ids.size() <= needed) return;
  pool_.Release(absl::MakeConstSpan(seq.block_ids).subspan(needed));
  seq.block_ids.resize(needed);
}

absl::StatusOr<int> ModelRunner::BeginPrefill(absl::Span<const int32_t> prompt, SequenceKv& seq,
                                              const kernels::AttentionPattern& pattern,
                                              int chunk_tokens) {
  if (!seq.tokens.empty() || !seq.block_ids.empty() || !seq.pending_tokens.empty()) {
    return absl::FailedPreconditionError("Prefill: sequence already has KV state");
  }
  const int n = static_cast<int>(prompt.size());
  if (n == 0) return absl::InvalidArgumentError("Prefill: empty prompt");
  if (n >= max_context()) {
    return absl::InvalidArgumentError(absl::StrCat("prompt of ", n, " tokens does not fit the ",
                                                   "model's context of ", max_context()));
  }
  for (int32_t t : prompt) {
    if (t < 0 || t >= config().vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Prefill: token id ", t, " outside the vocabulary of ", config().vocab_size));
    }
  }
  seq.id = next_sequence_id_++;
  if (!options_.enable_prefix_cache) return 0;
  const int bt = options_.block_tokens;
  std::vector<kv::BlockHash> hashes = kv::ComputeBlockHashes(prompt, bt);
  // Never reuse the block holding the last prompt token: its logits must be computed.
  hashes.resize(std::min<size_t>(hashes.size(), (n - 1) / bt));
  std::vector<int32_t> hit = pool_.Match(hashes);
  if ((pattern.kind == kernels::AttentionMethodKind::kMInference ||
       pattern.kind == kernels::AttentionMethodKind::kTokenSelect) &&
      chunk_tokens > 0) {
    size_t keep = hit.size();
    while (keep > 0 && (keep * bt) % chunk_tokens != 0) --keep;
    pool_.Release(absl::MakeConstSpan(hit).subspan(keep));
    hit.resize(keep);
  }
  seq.block_ids = hit;
  seq.block_hashes.assign(hashes.begin(), hashes.begin() + hit.size());
  seq.tokens.assign(prompt.begin(), prompt.begin() + hit.size() * bt);
  seq.num_cached_prompt_tokens = static_cast<int>(hit.size()) * bt;
  ReleaseOutOfWindowBlocks(seq);
  return seq.num_cached_prompt_tokens;
}

absl::StatusOr<std::vector<model::ForwardSequence>> ModelRunner::PrepareStep(
    absl::Span<const StepRows> rows) {
  if (rows.empty()) return absl::InvalidArgumentError("Step: no rows");
  const int bt = options_.block_tokens;
  int new_blocks = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    const StepRows& r = rows[i];
    if (r.seq == nullptr || r.tokens.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("Step: entry ", i, " has no rows"));
    }
    for (size_t j = 0; j < i; ++j) {
      if (rows[j].seq == r.seq) {
        return absl::InvalidArgumentError("Step: a sequence appears twice in one step");
      }
    }
    if (!r.seq->pending_tokens.empty() && !r.draft) {
      return absl::InvalidArgumentError(
          "Step: the sequence has speculative rows that were not committed");
    }
    const int64_t total =
        static_cast<int64_t>(r.seq->tokens.size() + r.seq->pending_tokens.size() + r.tokens.size());
    if (total > max_context()) {
      return absl::InvalidArgumentError(
          absl::StrCat("Step: KV index ", total - 1, " is past the context of ", max_context()));
    }
    const int64_t needed = (total + bt - 1) / bt;
    new_blocks += static_cast<int>(
        std::max<int64_t>(0, needed - static_cast<int64_t>(r.seq->block_ids.size())));
  }
  // Each sequence's state slot, keyed by its id: the same slot whatever its row in this step,
  // taken (and zeroed) here on the host, before any forward pass or graph capture. A slot taken
  // for a step that then fails stays with its sequence until Release.
  std::vector<int32_t> state_slots(rows.size(), -1);
  if (state_ != nullptr) {
    for (size_t i = 0; i < rows.size(); ++i) {
      SequenceKv& s = *rows[i].seq;
      if (s.id == 0) s.id = next_sequence_id_++;
      SS_ASSIGN_OR_RETURN(state_slots[i], state_->Acquire(s.id));
    }
  }
  // Every new block first, so a shortage leaves all sequences untouched.
  SS_ASSIGN_OR_RETURN(std::vector<int32_t> fresh, pool_.Allocate(new_blocks));
  std::vector<model::ForwardSequence> batch(rows.size());
  size_t next_fresh = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    const StepRows& r = rows[i];
    SequenceKv& s = *r.seq;
    const size_t start = s.tokens.size() + s.pending_tokens.size();
    const size_t total = start + r.tokens.size();
    while (s.block_ids.size() * bt < total) s.block_ids.push_back(fresh[next_fresh++]);
    s.peak_blocks =
        std::max(s.peak_blocks, static_cast<int>(s.block_ids.size()) - s.released_blocks);
    model::ForwardSequence& f = batch[i];
    f.tokens = r.tokens;
    f.start_pos = static_cast<int32_t>(start);
    f.positions = r.positions;
    f.mask = r.mask;
    f.block_table = s.block_ids;
    // Released blocks are outside every window, so no key of theirs is visible; kernels that
    // load whole tiles may still touch their rows: block 0 is valid (zero-filled or another
    // sequence's) memory whose values the window discards.
    std::fill(f.block_table.begin(), f.block_table.begin() + s.released_blocks, 0);
    f.logits = r.sample;
    f.pattern = r.pattern;
    f.state_slot = state_slots[i];
  }
  return batch;
}

void ModelRunner::FinishStep(absl::Span<const StepRows> rows) {
  for (const StepRows& r : rows) {
    if (r.speculative || r.draft) {
      if (!r.draft) r.seq->pending_tokens.clear();
      r.seq->pending_tokens.insert(r.seq->pending_tokens.end(), r.tokens.begin(), r.tokens.end());
    } else {
      r.seq->tokens.insert(r.seq->tokens.end(), r.tokens.begin(), r.tokens.end());
      RegisterFullBlocks(*r.seq);
      ReleaseOutOfWindowBlocks(*r.seq);
    }
  }
}

void ModelRunner::UndoStep(absl::Span<const StepRows> rows) {
  for (const StepRows& r : rows) TrimBlocks(*r.seq);
}

std::vector<StepRows> ModelRunner::DecodeRows(const std::vector<SequenceKv*>& seqs,
                                              absl::Span<const int32_t> tokens) {
  std::vector<StepRows> rows(seqs.size());
  for (size_t i = 0; i < seqs.size(); ++i) {
    rows[i].seq = seqs[i];
    rows[i].tokens = {tokens[i]};
  }
  return rows;
}

absl::StatusOr<std::vector<int32_t>> ModelRunner::Step(
    absl::Span<const StepRows> rows, const kernels::SamplingBatch& sampling,
    const std::function<absl::Status(int layer)>& on_layer_done, model::DraftPass* draft,
    model::StepLogprobs* logprobs) {
  int64_t sampled = 0;
  for (const StepRows& r : rows) {
    sampled += r.sample == model::LogitRows::kAll    ? static_cast<int64_t>(r.tokens.size())
               : r.sample == model::LogitRows::kLast ? 1
                                                     : 0;
  }
  // Checked before any block is allocated; the backend checks the rest before sampling.
  SS_RETURN_IF_ERROR(kernels::ValidateSamplingBatch(sampling, sampled, config().vocab_size));
  for (const StepRows& r : rows) {
    SS_RETURN_IF_ERROR(backend().SupportsAttention(r.pattern, config().head_dim));
  }
  SS_ASSIGN_OR_RETURN(std::vector<model::ForwardSequence> batch, PrepareStep(rows));
  // Rank 0 samples; the other ranks run the same step for their slices. Under tensor
  // parallelism the per-layer hook runs after the step (it may use every rank: CopyKvToHost).
  const bool deferred = tensor_parallel() > 1 && on_layer_done != nullptr;
  absl::StatusOr<std::vector<int32_t>> next;
  absl::Status ran = OnEveryRank([&](model::LlamaModel& m, model::PagedKvCache& cache) {
    const bool rank0 = &m == model_.get();
    absl::StatusOr<std::vector<int32_t>> out =
        m.ForwardSample(batch, cache, sampling, rank0 && !deferred ? on_layer_done : nullptr, draft,
                        rank0 ? logprobs : nullptr);
    if (rank0) next = out;
    return out.status();
  });
  if (ran.ok() && deferred) ran = RunLayerHooks(on_layer_done);
  if (!ran.ok()) {
    UndoStep(rows);
    return ran;
  }
  FinishStep(rows);
  AddSparseWork(rows);
  ReportShadowErrors();
  return next;
}

void ModelRunner::AddSparseWork(absl::Span<const StepRows> rows) {
  const std::vector<model::LlamaModel::SparseWork>& work = model_->sparse_work();
  for (size_t i = 0; i < work.size() && i < rows.size(); ++i) {
    SequenceKv& seq = *rows[i].seq;
    if (rows[i].prompt) {
      seq.sparse_computed_pairs += work[i].computed_pairs;
      seq.sparse_causal_pairs += work[i].causal_pairs;
    } else if (!rows[i].draft) {  // a draft's attention is not the output's
      seq.decode_computed_pairs += work[i].computed_pairs;
      seq.decode_causal_pairs += work[i].causal_pairs;
    }
    seq.selection_cache_hits += work[i].selection_hits;
    seq.selection_cache_queries += work[i].selection_queries;
    selection_cache_counts_.hits += work[i].selection_hits;
    selection_cache_counts_.queries += work[i].selection_queries;
  }
}

absl::Status ModelRunner::Commit(SequenceKv& seq, absl::Span<const int32_t> keep) {
  const int n = static_cast<int>(seq.pending_tokens.size());
  for (size_t j = 0; j < keep.size(); ++j) {
    if (keep[j] < 0 || keep[j] >= n || (j > 0 && keep[j] <= keep[j - 1])) {
      return absl::InvalidArgumentError(
          absl::StrCat("Commit: kept rows must be ascending indices below ", n, ", got ", keep[j]));
    }
  }
  const int bt = options_.block_tokens;
  const int base = static_cast<int>(seq.tokens.size());
  auto slot_of = [&](int index) { return seq.block_ids[index / bt] * bt + index % bt; };
  std::vector<int32_t> src, dst;
  for (size_t j = 0; j < keep.size(); ++j) {
    if (keep[j] != static_cast<int32_t>(j)) {
      src.push_back(slot_of(base + keep[j]));
      dst.push_back(slot_of(base + static_cast<int>(j)));
    }
  }
  if (!src.empty()) {
    // Kept rows move down in order, so no move reads a slot an earlier one wrote
    // (MoveKvRows' REQUIRES). Each tensor-parallel rank moves its own KV heads, in every layer
    // (the adapter's too) at once.
    const absl::Status moved = OnEveryRank([&](model::LlamaModel& m, model::PagedKvCache& cache) {
      return m.backend().MoveKvRows(cache.layers(), src, dst);
    });
    SS_RETURN_IF_ERROR(moved);
  }
  for (int32_t j : keep) seq.tokens.push_back(seq.pending_tokens[j]);
  seq.pending_tokens.clear();
  TrimBlocks(seq);
  RegisterFullBlocks(seq);
  ReleaseOutOfWindowBlocks(seq);
  return absl::OkStatus();
}

void ModelRunner::DiscardPending(SequenceKv& seq) {
  seq.pending_tokens.clear();
  TrimBlocks(seq);
}

absl::Status ModelRunner::PrefillChunks(
    absl::Span<const int32_t> prompt, SequenceKv& seq, const kernels::AttentionPattern& pattern,
    const std::function<absl::Status(const StepRows& rows, bool last_chunk)>& run_chunk) {
  SS_RETURN_IF_ERROR(BeginPrefill(prompt, seq, pattern, options_.prefill_chunk_tokens).status());
  const int n = static_cast<int>(prompt.size());
  while (static_cast<int>(seq.tokens.size()) < n) {
    const int start = static_cast<int>(seq.tokens.size());
    const int len =
        PrefillChunkLength(start, n, options_.prefill_chunk_tokens, options_.max_step_tokens);
    StepRows rows;
    rows.seq = &seq;
    rows.tokens.assign(prompt.begin() + start, prompt.begin() + start + len);
    rows.pattern = pattern;
    rows.prompt = true;
    if (absl::Status s = run_chunk(rows, start + len == n); !s.ok()) {
      Release(seq);
      return s;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<int32_t> ModelRunner::PrefillSampled(
    absl::Span<const int32_t> prompt, SequenceKv& seq, const kernels::SamplingBatch& sampling,
    const kernels::AttentionPattern& pattern,
    const std::function<absl::Status(int layer)>& on_layer_done) {
  int32_t first = -1;
  SS_RETURN_IF_ERROR(
      PrefillChunks(prompt, seq, pattern, [&](const StepRows& chunk, bool last_chunk) {
        StepRows rows = chunk;
        rows.sample = last_chunk ? model::LogitRows::kLast : model::LogitRows::kNone;
        SS_ASSIGN_OR_RETURN(
            std::vector<int32_t> out,
            Step(absl::MakeConstSpan(&rows, 1), last_chunk ? sampling : kernels::SamplingBatch(),
                 last_chunk ? on_layer_done : nullptr));
        if (last_chunk) first = out.front();
        return absl::OkStatus();
      }));
  return first;
}

absl::StatusOr<Tensor> ModelRunner::Prefill(
    absl::Span<const int32_t> prompt, SequenceKv& seq,
    const std::function<absl::Status(int layer)>& on_layer_done,
    const kernels::AttentionPattern& pattern) {
  Tensor logits;
  SS_RETURN_IF_ERROR(PrefillChunks(
      prompt, seq, pattern, [&](const StepRows& rows, bool last_chunk) -> absl::Status {
        const absl::Span<const StepRows> one = absl::MakeConstSpan(&rows, 1);
        SS_ASSIGN_OR_RETURN(std::vector<model::ForwardSequence> batch, PrepareStep(one));
        SS_ASSIGN_OR_RETURN(logits,
                            ForwardOnEveryRank(batch, last_chunk ? on_layer_done : nullptr));
        FinishStep(one);
        AddSparseWork(one);
        ReportShadowErrors();
        return absl::OkStatus();
      }));
  return logits;
}

absl::StatusOr<Tensor> ModelRunner::Decode(const std::vector<SequenceKv*>& seqs,
                                           absl::Span<const int32_t> tokens) {
  if (seqs.empty() || seqs.size() != tokens.size()) {
    return absl::InvalidArgumentError("Decode: one token per sequence required");
  }
  const std::vector<StepRows> rows = DecodeRows(seqs, tokens);
  SS_ASSIGN_OR_RETURN(std::vector<model::ForwardSequence> batch, PrepareStep(rows));
  absl::StatusOr<Tensor> logits = ForwardOnEveryRank(batch, nullptr);
  if (!logits.ok()) {
    UndoStep(rows);
    return logits.status();
  }
  FinishStep(rows);
  ReportShadowErrors();
  return logits;
}

absl::StatusOr<std::vector<int32_t>> ModelRunner::DecodeSampled(
    const std::vector<SequenceKv*>& seqs, absl::Span<const int32_t> tokens,
    const kernels::SamplingBatch& sampling) {
  if (seqs.empty() || seqs.size() != tokens.size()) {
    return absl::InvalidArgumentError("Decode: one token per sequence required");
  }
  return Step(DecodeRows(seqs, tokens), sampling);
}

absl::Status ModelRunner::AdoptPrefilledKv(absl::Span<const int32_t> prompt,
                                           kv::KvBlockLease blocks, SequenceKv& seq) {
  const int64_t capacity = static_cast<int64_t>(blocks.block_ids().size()) * options_.block_tokens;
  if (!seq.tokens.empty() || !seq.block_ids.empty() || prompt.empty() ||
      static_cast<int64_t>(prompt.size()) > capacity ||
      static_cast<int>(prompt.size()) >= max_context()) {
    return absl::InvalidArgumentError(absl::StrCat("AdoptPrefilledKv: ", prompt.size(),
                                                   " tokens do not fit ", blocks.block_ids().size(),
                                                   " blocks or the context"));
  }
  seq.tokens.assign(prompt.begin(), prompt.end());
  seq.block_ids = blocks.Take();
  // Under rolling KV the blocks before the window may come as kv::kNoBlock (never sent).
  while (seq.released_blocks < static_cast<int>(seq.block_ids.size()) &&
         seq.block_ids[seq.released_blocks] == kv::kNoBlock) {
    ++seq.released_blocks;
  }
  seq.id = next_sequence_id_++;
  RegisterFullBlocks(seq);
  ReleaseOutOfWindowBlocks(seq);
  seq.peak_blocks = static_cast<int>(seq.block_ids.size()) - seq.released_blocks;
  return absl::OkStatus();
}

void ModelRunner::Release(SequenceKv& seq) {
  if (state_ != nullptr) state_->Release(seq.id);
  pool_.Release(seq.block_ids);
  seq = SequenceKv();
}

}  // namespace sparseserve::engine
