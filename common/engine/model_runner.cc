#include "common/engine/model_runner.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/core/status.h"
#include "kernels/sampling_plan_check.h"

namespace sparseserve::engine {
namespace {

// The KV pool's capacity: the explicit option, else what the device's memory allows after the
// weights (already loaded) and a forward step's activations, else (CPU) four full contexts.
absl::StatusOr<int64_t> KvCacheTokens(const model::ModelConfig& c, kernels::Backend& backend,
                                      const ModelRunnerOptions& options) {
  if (options.kv_cache_tokens > 0) return options.kv_cache_tokens;
  absl::StatusOr<kernels::Backend::MemoryInfo> memory = backend.GetMemoryInfo();
  if (!memory.ok()) return int64_t{4} * c.max_position_embeddings;
  if (options.gpu_memory_fraction <= 0 || options.gpu_memory_fraction > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("gpu_memory_fraction must be in (0, 1], got ", options.gpu_memory_fraction));
  }
  const int64_t elem = static_cast<int64_t>(DTypeSize(backend.compute_dtype()));
  const int64_t kv_token_bytes = int64_t{2} * c.num_layers * c.num_kv_heads * c.head_dim * elem;
  // Activations of one prefill chunk (residual, norm, q, k, v, attention output, gate, up, branch)
  // plus f32 logits for every row, and 256 MiB for library workspaces and fragmentation.
  const int64_t row_bytes =
      elem * (int64_t{4} * c.hidden_size + int64_t{2} * c.num_heads * c.head_dim +
              int64_t{2} * c.num_kv_heads * c.head_dim + int64_t{2} * c.intermediate_size) +
      int64_t{4} * c.vocab_size;
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

}  // namespace

absl::StatusOr<std::unique_ptr<ModelRunner>> ModelRunner::Create(
    const ModelSource& source, kernels::Backend* backend, const ModelRunnerOptions& options) {
  if (options.block_tokens <= 0 || options.block_tokens % 16 != 0 ||
      options.prefill_chunk_tokens <= 0 || options.kv_cache_tokens < 0 ||
      options.step_graph_rows < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bad runner options: block_tokens=", options.block_tokens, " (a multiple of 16), ",
        "prefill_chunk_tokens=", options.prefill_chunk_tokens, ", kv_cache_tokens=",
        options.kv_cache_tokens, ", step_graph_rows=", options.step_graph_rows));
  }
  SS_ASSIGN_OR_RETURN(
      std::unique_ptr<model::LlamaModel> model,
      model::LlamaModel::Load(source.config, *source.weights, source.naming, backend));
  model->set_step_graph_rows(options.step_graph_rows);
  const model::ModelConfig& c = model->config();
  SS_ASSIGN_OR_RETURN(const int64_t tokens, KvCacheTokens(c, *backend, options));
  model::PagedKvCacheShape shape;
  shape.num_layers = c.num_layers;
  shape.num_blocks = static_cast<int>((tokens + options.block_tokens - 1) / options.block_tokens);
  shape.block_tokens = options.block_tokens;
  shape.num_kv_heads = c.num_kv_heads;
  shape.head_dim = c.head_dim;
  SS_ASSIGN_OR_RETURN(std::unique_ptr<model::PagedKvCache> cache,
                      model::PagedKvCache::Create(shape, *backend));
  return std::unique_ptr<ModelRunner>(new ModelRunner(std::move(model), std::move(cache), options));
}

ModelRunner::ModelRunner(std::unique_ptr<model::LlamaModel> model,
                         std::unique_ptr<model::PagedKvCache> cache,
                         const ModelRunnerOptions& options)
    : options_(options),
      model_(std::move(model)),
      cache_(std::move(cache)),
      pool_(cache_->shape().num_blocks) {}

ModelRunner::~ModelRunner() = default;

absl::Status ModelRunner::EnsureBlocks(SequenceKv& seq, int total_tokens) {
  const int needed = (total_tokens + options_.block_tokens - 1) / options_.block_tokens;
  const int missing = needed - static_cast<int>(seq.block_ids.size());
  if (missing <= 0) return absl::OkStatus();
  SS_ASSIGN_OR_RETURN(std::vector<int32_t> ids, pool_.Allocate(missing));
  seq.block_ids.insert(seq.block_ids.end(), ids.begin(), ids.end());
  return absl::OkStatus();
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
    if (options_.enable_prefix_cache) pool_.Register(h, seq.block_ids[b]);
  }
}

absl::StatusOr<Tensor> ModelRunner::Prefill(
    absl::Span<const int32_t> prompt, SequenceKv& seq,
    const std::function<absl::Status(int layer)>& on_layer_done) {
  if (!seq.tokens.empty() || !seq.block_ids.empty()) {
    return absl::FailedPreconditionError("Prefill: sequence already has KV state");
  }
  const int n = static_cast<int>(prompt.size());
  if (n == 0) return absl::InvalidArgumentError("Prefill: empty prompt");
  if (n >= max_context()) {
    return absl::InvalidArgumentError(absl::StrCat("prompt of ", n, " tokens does not fit the ",
                                                   "model's context of ", max_context()));
  }
  const int bt = options_.block_tokens;
  if (options_.enable_prefix_cache) {
    std::vector<kv::BlockHash> hashes = kv::ComputeBlockHashes(prompt, bt);
    // Never reuse the block holding the last prompt token: its logits must be computed.
    hashes.resize(std::min<size_t>(hashes.size(), (n - 1) / bt));
    std::vector<int32_t> hit = pool_.Match(hashes);
    seq.block_ids = hit;
    seq.block_hashes.assign(hashes.begin(), hashes.begin() + hit.size());
    seq.tokens.assign(prompt.begin(), prompt.begin() + hit.size() * bt);
    seq.num_cached_prompt_tokens = static_cast<int>(hit.size()) * bt;
  }
  if (absl::Status s = EnsureBlocks(seq, n); !s.ok()) {
    Release(seq);
    return s;
  }
  Tensor logits;
  while (static_cast<int>(seq.tokens.size()) < n) {
    const int start = static_cast<int>(seq.tokens.size());
    const int len = std::min(options_.prefill_chunk_tokens, n - start);
    model::ForwardSequence fs;
    fs.tokens.assign(prompt.begin() + start, prompt.begin() + start + len);
    fs.start_pos = start;
    fs.block_table = seq.block_ids;
    const bool last_chunk = start + len == n;
    absl::StatusOr<Tensor> out =
        model_->Forward({fs}, *cache_, last_chunk ? on_layer_done : nullptr);
    if (!out.ok()) {
      Release(seq);
      return out.status();
    }
    logits = *std::move(out);
    seq.tokens.insert(seq.tokens.end(), fs.tokens.begin(), fs.tokens.end());
    RegisterFullBlocks(seq);
  }
  return logits;
}

absl::StatusOr<std::vector<model::ForwardSequence>> ModelRunner::PrepareDecode(
    const std::vector<SequenceKv*>& seqs, absl::Span<const int32_t> tokens) {
  if (seqs.empty() || seqs.size() != tokens.size()) {
    return absl::InvalidArgumentError("Decode: one token per sequence required");
  }
  // Allocate every new block first so a shortage leaves all sequences untouched.
  const int bt = options_.block_tokens;
  int new_blocks = 0;
  for (SequenceKv* s : seqs) {
    const int total = static_cast<int>(s->tokens.size()) + 1;
    if (total > max_context()) {
      return absl::InvalidArgumentError(
          absl::StrCat("Decode: position ", total - 1, " is past the context of ", max_context()));
    }
    if (total > static_cast<int>(s->block_ids.size()) * bt) ++new_blocks;
  }
  SS_ASSIGN_OR_RETURN(std::vector<int32_t> fresh, pool_.Allocate(new_blocks));
  std::vector<model::ForwardSequence> batch(seqs.size());
  size_t next_fresh = 0;
  for (size_t i = 0; i < seqs.size(); ++i) {
    SequenceKv& s = *seqs[i];
    if (static_cast<int>(s.tokens.size()) + 1 > static_cast<int>(s.block_ids.size()) * bt) {
      s.block_ids.push_back(fresh[next_fresh++]);
    }
    batch[i].tokens = {tokens[i]};
    batch[i].start_pos = static_cast<int32_t>(s.tokens.size());
    batch[i].block_table = s.block_ids;
  }
  return batch;
}

void ModelRunner::CommitDecode(const std::vector<SequenceKv*>& seqs,
                               absl::Span<const int32_t> tokens) {
  for (size_t i = 0; i < seqs.size(); ++i) {
    seqs[i]->tokens.push_back(tokens[i]);
    RegisterFullBlocks(*seqs[i]);
  }
}

absl::StatusOr<Tensor> ModelRunner::Decode(const std::vector<SequenceKv*>& seqs,
                                           absl::Span<const int32_t> tokens) {
  SS_ASSIGN_OR_RETURN(std::vector<model::ForwardSequence> batch, PrepareDecode(seqs, tokens));
  SS_ASSIGN_OR_RETURN(Tensor logits, model_->Forward(batch, *cache_));
  CommitDecode(seqs, tokens);
  return logits;
}

absl::StatusOr<std::vector<int32_t>> ModelRunner::DecodeSampled(
    const std::vector<SequenceKv*>& seqs, absl::Span<const int32_t> tokens,
    const kernels::SamplingBatch& sampling) {
  // Checked before any block is allocated; the backend checks the rest before sampling.
  SS_RETURN_IF_ERROR(kernels::ValidateSamplingBatch(sampling, static_cast<int64_t>(seqs.size()),
                                                    config().vocab_size));
  SS_ASSIGN_OR_RETURN(std::vector<model::ForwardSequence> batch, PrepareDecode(seqs, tokens));
  SS_ASSIGN_OR_RETURN(std::vector<int32_t> next, model_->ForwardSample(batch, *cache_, sampling));
  CommitDecode(seqs, tokens);
  return next;
}

absl::Status ModelRunner::AdoptPrefilledKv(absl::Span<const int32_t> prompt,
                                           std::vector<int32_t> block_ids, SequenceKv& seq) {
  const int64_t capacity = static_cast<int64_t>(block_ids.size()) * options_.block_tokens;
  if (!seq.tokens.empty() || !seq.block_ids.empty() || prompt.empty() ||
      static_cast<int64_t>(prompt.size()) > capacity ||
      static_cast<int>(prompt.size()) >= max_context()) {
    return absl::InvalidArgumentError(absl::StrCat("AdoptPrefilledKv: ", prompt.size(),
                                                   " tokens do not fit ", block_ids.size(),
                                                   " blocks or the context"));
  }
  seq.tokens.assign(prompt.begin(), prompt.end());
  seq.block_ids = std::move(block_ids);
  RegisterFullBlocks(seq);
  return absl::OkStatus();
}

void ModelRunner::Release(SequenceKv& seq) {
  pool_.Release(seq.block_ids);
  seq = SequenceKv();
}

}  // namespace sparseserve::engine
