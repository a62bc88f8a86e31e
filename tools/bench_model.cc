#include "tools/bench_model.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "common/core/status.h"
#include "common/engine/rank_threads.h"
#include "common/kv/rolling_window.h"
#include "common/model/llama_model.h"
#include "common/model/paged_kv_cache.h"
#include "kernels/backend.h"
#include "kernels/collective.h"
#include "kernels/op_timing_backend.h"
#include "kernels/sampling_plan.h"
#include "tools/bench_roofline.h"

namespace sparseserve::tools {
namespace {

using Clock = std::chrono::steady_clock;
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
constexpr double kCudaDefaultPeakTflops = 989;  // H100/H200 SXM dense bf16 (datasheet)
constexpr uint64_t kWeightsSeed = 1;            // any seed: the weights are noise
constexpr uint64_t kKvSeed = 1000;
constexpr uint64_t kShadowSeed = 11;   // the shadow monitor's draws (issue 11)
constexpr int kDecodeWindowSinks = 4;  // --decode-window's sinks, as a request's default

void Progress(const std::string& line) {
  std::fprintf(stderr, "bench: %s\n", line.c_str());
  std::fflush(stderr);
}

// Seconds since `start`, after the backend's queued work has finished.
absl::StatusOr<double> SecondsSince(kernels::Backend& backend, Clock::time_point start) {
  SS_RETURN_IF_ERROR(backend.Synchronize());
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Copy bandwidth of the backend's memory in 1e9 bytes/s: a copy reads and writes `bytes` each.
absl::StatusOr<double> MeasureCopyBandwidthGbps(kernels::Backend& backend, int64_t bytes) {
  const DType dtype = backend.compute_dtype();
  const int64_t n = bytes / static_cast<int64_t>(DTypeSize(dtype));
  SS_ASSIGN_OR_RETURN(Tensor src, backend.Allocate(dtype, {n}));
  SS_ASSIGN_OR_RETURN(Tensor dst, backend.Allocate(dtype, {n}));
  SS_RETURN_IF_ERROR(backend.Copy(src, dst));  // first touch and any lazy setup, untimed
  SS_RETURN_IF_ERROR(backend.Synchronize());
  constexpr int kReps = 5;
  const Clock::time_point start = Clock::now();
  for (int i = 0; i < kReps; ++i) SS_RETURN_IF_ERROR(backend.Copy(src, dst));
  SS_ASSIGN_OR_RETURN(double seconds, SecondsSince(backend, start));
  return 2.0 * static_cast<double>(src.nbytes()) * kReps / seconds / 1e9;
}

// MemAvailable of /proc/meminfo in bytes, or -1 when unreadable. Bounds the KV cache on the CPU
// backend, whose GetMemoryInfo is unimplemented: a cache past it would be OOM-killed, not fail.
int64_t HostAvailableBytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string line;
  while (std::getline(meminfo, line)) {  // "MemAvailable:   20480000 kB"
    absl::string_view rest(line);
    if (!absl::ConsumePrefix(&rest, "MemAvailable:") || !absl::ConsumeSuffix(&rest, " kB")) {
      continue;
    }
    int64_t kib = 0;
    return absl::SimpleAtoi(rest, &kib) ? kib * 1024 : -1;
  }
  return -1;
}

// One KV cache for all cases: as many blocks as the largest case needs, cut to the memory left
// after the weights with 10% of the device's memory kept free for activations and workspaces
// (on the CPU: 90% of MemAvailable).
struct KvPlan {
  int64_t num_blocks = 0;
  double block_bytes = 0;
  double budget_bytes = -1;  // -1: unbounded (host memory unreadable)
};

absl::StatusOr<KvPlan> PlanKvCache(kernels::Backend& backend, const ModelBenchOptions& o) {
  KvPlan plan;
  // Under tensor parallelism each rank's cache holds its slice of the KV heads.
  SS_ASSIGN_OR_RETURN(const model::ShardDims dims,
                      model::ShardDimsOf(o.config, 0, o.tensor_parallel));
  plan.block_bytes = KvBytesPerToken(o.config, backend.compute_dtype()) *
                     static_cast<double>(o.block_tokens) * dims.kv_heads / o.config.num_kv_heads;
  auto blocks_for = [&](int64_t tokens) { return (tokens + o.block_tokens - 1) / o.block_tokens; };
  int64_t needed = 0;
  const int64_t max_pos = o.config.max_position_embeddings;
  for (int64_t len : o.prefill_lengths) {
    if (len <= max_pos) needed = std::max(needed, blocks_for(len));
  }
  // A decode step adds its rows (the token and any draft) after the context.
  const int64_t step_rows =
      1 + (o.decode_draft_tree.has_value() ? o.decode_draft_tree->size() : o.decode_draft);
  for (int64_t batch : o.decode_batches) {
    for (int64_t context : o.decode_contexts) {
      if (context + step_rows <= max_pos) {
        needed = std::max(needed, batch * blocks_for(context + step_rows));
      }
    }
  }
  if (o.interleave_prompt > 0) {
    needed = std::max(needed, o.interleave_batch * blocks_for(o.interleave_context + 1) +
                                  blocks_for(o.interleave_prompt));
  }
  absl::StatusOr<kernels::Backend::MemoryInfo> mem = backend.GetMemoryInfo();
  if (mem.ok()) {
    plan.budget_bytes = std::max<double>(
        0, static_cast<double>(mem->free_bytes) - 0.1 * static_cast<double>(mem->total_bytes));
  } else if (mem.status().code() == absl::StatusCode::kUnimplemented) {
    const int64_t host = HostAvailableBytes();
    if (host >= 0) plan.budget_bytes = 0.9 * static_cast<double>(host);
  } else {
    return AnnotateStatus(mem.status(), "querying free device memory");
  }
  plan.num_blocks = needed;
  if (plan.budget_bytes >= 0) {
    plan.num_blocks =
        std::min(needed, static_cast<int64_t>(std::floor(plan.budget_bytes / plan.block_bytes)));
  }
  // KV slots (block * block_tokens + offset) are int32.
  plan.num_blocks =
      std::min<int64_t>(plan.num_blocks, std::numeric_limits<int32_t>::max() / o.block_tokens - 1);
  return plan;
}

struct CaseResult {
  std::string label;    // "prefill L=4096", "decode B=8 C=32768"
  std::string skipped;  // why the case did not run or failed; empty when it ran
  std::string note;     // e.g. decode sequences sharing KV blocks
  double tokens_per_s = 0;
  double ms = 0;  // prefill: the whole prompt; decode: one step
  RooflineFloor floor;
  // Decode cases of a shadow-dense comparison (--shadow-dense-rates): their shape and rate.
  int64_t batch = 0, context = 0;
  double shadow_rate = -1;  // -1: not part of a comparison
};

// "14.96 GiB" / "2.10 MiB".
std::string FormatBytes(double bytes) {
  return bytes >= kGiB ? absl::StrFormat("%.2f GiB", bytes / kGiB)
                       : absl::StrFormat("%.2f MiB", bytes / (1024.0 * 1024.0));
}

std::string SkipReason(double needed_bytes, const KvPlan& plan) {
  return absl::StrCat("skipped: needs ", FormatBytes(needed_bytes), " of KV, ",
                      FormatBytes(static_cast<double>(plan.num_blocks) * plan.block_bytes),
                      " free");
}

std::string PrefillLabel(int64_t len) {
  return absl::StrCat("prefill L=", len);
}

std::string DecodeLabel(int64_t batch, int64_t context, double shadow_rate) {
  return absl::StrCat("decode B=", batch, " C=", context,
                      shadow_rate >= 0 ? absl::StrCat(" R=", shadow_rate) : "");
}

// A case whose forward step failed: a row of the table (the other cases still run).
CaseResult FailedCase(std::string label, const absl::Status& status) {
  CaseResult r;
  r.label = std::move(label);
  r.skipped = absl::StrCat("failed: ", status.ToString());
  Progress(absl::StrCat(r.label, ": ", r.skipped));
  return r;
}

// Token ids spread over the vocabulary; their values do not change the work.
int32_t SyntheticToken(int64_t i, int vocab) {
  return static_cast<int32_t>((i * 7919 + 13) % vocab);
}

// --tensor-parallel N: ranks 1 .. N-1 of the model (rank 0 is the bench's own backend, model and
// cache), each made and run on its RankThreads thread.
struct TensorParallelRanks {
  std::unique_ptr<engine::RankThreads> threads;             // always set (one rank: no threads)
  std::vector<std::unique_ptr<kernels::Backend>> backends;  // [0] null: rank 0's is the bench's
  std::vector<std::unique_ptr<kernels::Collective>> collectives;
  std::vector<std::unique_ptr<model::LlamaModel>> models;    // [0] null
  std::vector<std::unique_ptr<model::PagedKvCache>> caches;  // [0] null
  ~TensorParallelRanks() {  // each rank's memory freed on its own thread
    if (threads == nullptr) return;
    threads
        ->Run([&](int r) {
          if (r > 0) caches[r].reset(), models[r].reset(), backends[r].reset();
          return absl::OkStatus();
        })
        .IgnoreError();
  }
};

// The all-reduce a tensor-parallel step runs twice per layer, at the sizes decode and prefill steps
// give it ([rows, hidden] in the compute dtype): `iters` back-to-back calls on every rank, timed
// from rank 0 until every rank's stream is done. Prints the time per call and the bus bandwidth
// as nccl-tests' all_reduce_perf defines it (2 (n - 1) / n x bytes / time), so the two tables
// compare size for size.
absl::Status MeasureAllReduce(const ModelBenchOptions& o, const TensorParallelRanks& ranks,
                              const std::vector<kernels::Backend*>& backends) {
  const int tp = static_cast<int>(backends.size());
  const int64_t hidden = o.config.hidden_size;
  const DType dtype = backends[0]->compute_dtype();
  std::printf("all-reduce (%d ranks, %s [rows, %lld]):\n%10s %12s %12s %12s\n", tp,
              std::string(DTypeName(dtype)).c_str(), static_cast<long long>(hidden), "rows",
              "bytes", "us/call", "busbw GB/s");
  for (int64_t rows : {int64_t{1}, int64_t{8}, int64_t{64}, int64_t{512}, int64_t{8192}}) {
    std::vector<Tensor> x(tp);
    const int iters = rows >= 512 ? 20 : 200;
    double seconds = 0;
    const absl::Status ran = ranks.threads->Run([&](int r) -> absl::Status {
      kernels::Backend& be = *backends[r];
      SS_ASSIGN_OR_RETURN(x[r], be.Allocate(dtype, {rows, hidden}));
      SS_RETURN_IF_ERROR(be.FillUniform(x[r], 7 + r, -1e-3f, 1e-3f));
      for (int i = 0; i < 5; ++i) SS_RETURN_IF_ERROR(ranks.collectives[r]->AllReduceSum(x[r]));
      SS_RETURN_IF_ERROR(be.Synchronize());
      SS_RETURN_IF_ERROR(ranks.collectives[r]->Agree(absl::OkStatus()));  // start together
      const Clock::time_point start = Clock::now();
      for (int i = 0; i < iters; ++i) {
        SS_RETURN_IF_ERROR(ranks.collectives[r]->AllReduceSum(x[r]));
      }
      SS_RETURN_IF_ERROR(be.Synchronize());
      if (r == 0) seconds = std::chrono::duration<double>(Clock::now() - start).count();
      x[r] = Tensor();
      return absl::OkStatus();
    });
    SS_RETURN_IF_ERROR(ran);
    const double bytes = static_cast<double>(rows * hidden) * DTypeSize(dtype);
    const double per_call = seconds / iters;
    std::printf("%10lld %12.0f %12.2f %12.2f\n", static_cast<long long>(rows), bytes,
                per_call * 1e6, 2.0 * (tp - 1) / tp * bytes / per_call / 1e9);
  }
  std::fflush(stdout);
  return absl::OkStatus();
}

class ModelBench {
 public:
  ModelBench(const ModelBenchOptions& o, kernels::OpTimingBackend& backend,
             model::LlamaModel& model, model::PagedKvCache* cache, const TensorParallelRanks& ranks,
             const KvPlan& plan, double bandwidth_gbps, double peak_tflops)
      : o_(o),
        backend_(backend),
        model_(model),
        cache_(cache),
        ranks_(ranks),
        plan_(plan),
        bandwidth_gbps_(bandwidth_gbps),
        peak_tflops_(peak_tflops) {}

  // Prefills tokens [0, len) in --prefill-chunk steps into blocks 0, 1, ...; `len` must fit.
  absl::Status Prefill(int64_t len) {
    model::ForwardSequence seq;
    for (int64_t b = 0; b < BlocksFor(len); ++b) seq.block_table.push_back(static_cast<int32_t>(b));
    for (int64_t begin = 0; begin < len; begin += o_.prefill_chunk) {
      const int64_t end = std::min(len, begin + o_.prefill_chunk);
      seq.tokens.clear();
      for (int64_t i = begin; i < end; ++i) {
        seq.tokens.push_back(SyntheticToken(i, o_.config.vocab_size));
      }
      seq.start_pos = static_cast<int32_t>(begin);
      if (o_.prefill_minference != nullptr) {
        seq.pattern.kind = kernels::AttentionMethodKind::kMInference;
        seq.pattern.minference = o_.prefill_minference;
      }
      SS_RETURN_IF_ERROR(Forward({seq}));
      for (const model::LlamaModel::SparseWork& w : model_.sparse_work()) {
        sparse_computed_ += w.computed_pairs;
        sparse_causal_ += w.causal_pairs;
      }
    }
    return absl::OkStatus();
  }

  absl::StatusOr<CaseResult> RunPrefill(int64_t len) {
    CaseResult r;
    r.label = PrefillLabel(len);
    const DType dtype = backend_.compute_dtype();
    r.floor = FloorOf(PrefillCost(o_.config, dtype, len, o_.prefill_chunk), bandwidth_gbps_,
                      peak_tflops_);
    if (len > o_.config.max_position_embeddings) {
      r.skipped = BeyondContext();
      Progress(absl::StrCat(r.label, ": ", r.skipped));
      return r;
    }
    if (BlocksFor(len) > plan_.num_blocks) {
      r.skipped = SkipReason(static_cast<double>(BlocksFor(len)) * plan_.block_bytes, plan_);
      Progress(absl::StrCat(r.label, ": ", r.skipped));
      return r;
    }
    const int64_t num_steps = (len + o_.prefill_chunk - 1) / o_.prefill_chunk;
    Progress(absl::StrCat(r.label, ": ", num_steps, num_steps == 1 ? " step" : " steps",
                          " of up to ", o_.prefill_chunk, " tokens"));
    SS_RETURN_IF_ERROR(backend_.Synchronize());
    const Clock::time_point start = Clock::now();
    SS_RETURN_IF_ERROR(Prefill(len));
    SS_ASSIGN_OR_RETURN(const double seconds, SecondsSince(backend_, start));
    r.tokens_per_s = static_cast<double>(len) / seconds;
    r.ms = seconds * 1e3;
    if (sparse_causal_ > 0) {
      Progress(absl::StrFormat("%s: MInference computed %.2f%% of the causal attention pairs",
                               r.label, 100.0 * sparse_computed_ / sparse_causal_));
      sparse_computed_ = sparse_causal_ = 0;
    }
    if (o_.op_profile) SS_RETURN_IF_ERROR(ProfileOps(r.label, 1, [&] { return Prefill(len); }));
    return r;
  }

  // The decode scheduler's steps while a long prompt is prefilled beside B running sequences:
  // each step holds their B decode rows and the prompt's next chunk of at most
  // max_step_tokens - B rows. Prints the steps' time percentiles (the running sequences'
  // inter-token latency) and the prompt's whole prefill time.
  absl::Status RunInterleave() {
    const int64_t batch = o_.interleave_batch, context = o_.interleave_context;
    const int64_t prompt = o_.interleave_prompt;
    const int64_t per_seq = BlocksFor(context + 1);
    const int64_t chunk = o_.max_step_tokens - batch;
    if (chunk < 1 || context + 1 > o_.config.max_position_embeddings ||
        prompt > o_.config.max_position_embeddings ||
        batch * per_seq + BlocksFor(prompt) > plan_.num_blocks) {
      std::printf("interleave: skipped (budget, context or KV memory too small)\n");
      return absl::OkStatus();
    }
    std::vector<model::ForwardSequence> seqs(batch + 1);
    for (int64_t s = 0; s < batch; ++s) {
      seqs[s].tokens = {SyntheticToken(s, o_.config.vocab_size)};
      seqs[s].start_pos = static_cast<int32_t>(context);
      for (int64_t b = 0; b < per_seq; ++b) {
        seqs[s].block_table.push_back(static_cast<int32_t>(s * per_seq + b));
      }
    }
    model::ForwardSequence& long_seq = seqs[batch];
    long_seq.logits = model::LogitRows::kNone;
    for (int64_t b = 0; b < BlocksFor(prompt); ++b) {
      long_seq.block_table.push_back(static_cast<int32_t>(batch * per_seq + b));
    }
    kernels::SamplingBatch greedy;
    greedy.rows.resize(batch);
    Progress(absl::StrCat("interleave: a ", prompt, "-token prompt in chunks of ", chunk,
                          " beside ", batch, " decoding sequences at context ", context));
    std::vector<double> step_ms;
    SS_RETURN_IF_ERROR(backend_.Synchronize());
    const Clock::time_point start = Clock::now();
    for (int64_t begin = 0; begin < prompt; begin += chunk) {
      const int64_t end = std::min(prompt, begin + chunk);
      long_seq.tokens.clear();
      for (int64_t i = begin; i < end; ++i) {
        long_seq.tokens.push_back(SyntheticToken(i, o_.config.vocab_size));
      }
      long_seq.start_pos = static_cast<int32_t>(begin);
      const Clock::time_point step = Clock::now();
      // ForwardSample returns the sampled ids on the host: the step is complete.
      SS_RETURN_IF_ERROR(ForwardSample(seqs, greedy));
      step_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - step).count());
    }
    const double total_s = std::chrono::duration<double>(Clock::now() - start).count();
    std::sort(step_ms.begin(), step_ms.end());
    auto pct = [&](double p) {
      return step_ms[std::min(step_ms.size() - 1, static_cast<size_t>(p * step_ms.size()))];
    };
    std::printf(
        "interleave: prompt %lld tokens beside B=%lld C=%lld, %zu steps of <= %d rows: "
        "step p50 %.2f ms, p99 %.2f ms, max %.2f ms (running streams' inter-token latency); "
        "prompt prefilled in %.3f s\n",
        static_cast<long long>(prompt), static_cast<long long>(batch),
        static_cast<long long>(context), step_ms.size(), o_.max_step_tokens, pct(0.5), pct(0.99),
        step_ms.back(), total_s);
    return absl::OkStatus();
  }

  // B sequences of one token each at position C. Each gets its own blocks for its C + 1 tokens
  // where the cache holds them all; otherwise sequences share copies round-robin (the bytes
  // floor still counts every sequence's KV: the kernel reads it once per sequence).
  // `shadow_rate` >= 0: the shadow-dense monitor runs at that rate (its graphs captured before
  // the timed steps) and the note counts the steps it shadowed.
  absl::StatusOr<CaseResult> RunDecode(int64_t batch, int64_t context, double shadow_rate) {
    CaseResult r;
    r.label = DecodeLabel(batch, context, shadow_rate);
    const spec::StepDraft* tree = o_.decode_draft_tree ? &*o_.decode_draft_tree : nullptr;
    const int64_t rows = 1 + (tree != nullptr ? tree->size() : o_.decode_draft);  // per sequence
    if (o_.decode_draft > 0) absl::StrAppend(&r.label, " draft=", o_.decode_draft);
    if (tree != nullptr) {
      absl::StrAppend(&r.label, " ", o_.decode_draft_tree_name, "=", tree->size());
    }
    r.batch = batch;
    r.context = context;
    r.shadow_rate = shadow_rate;
    // --decode-window reads the window and its sinks, not the whole context.
    const int64_t visible = o_.decode_window > 0 ? o_.decode_window + kDecodeWindowSinks : 0;
    r.floor = FloorOf(DecodeStepCost(o_.config, backend_.compute_dtype(), batch, context, visible),
                      bandwidth_gbps_, peak_tflops_);
    if (context + rows > o_.config.max_position_embeddings) {  // the new token sits at position C
      r.skipped = BeyondContext();
      Progress(absl::StrCat(r.label, ": ", r.skipped));
      return r;
    }
    // A rolling-KV model (every layer windowed) holds only the window's blocks per sequence, as
    // the engine's sequences do; the entries before them point at block 0 (never visible).
    const int64_t all_blocks = BlocksFor(context + rows);
    int64_t per_seq = all_blocks;
    if (o_.config.AllLayersWindowed()) {
      per_seq = std::min<int64_t>(
          all_blocks,
          kv::MaxBlocksInWindow(o_.config.sliding_window, static_cast<int>(rows), o_.block_tokens));
      r.note = absl::StrCat("rolling KV: ", per_seq, " of ", all_blocks,
                            " blocks held per sequence (window ", o_.config.sliding_window, ")");
    }
    if (per_seq > plan_.num_blocks) {
      // Even one sequence does not fit (more sequences would share its blocks).
      r.skipped = SkipReason(static_cast<double>(per_seq) * plan_.block_bytes, plan_);
      Progress(absl::StrCat(r.label, ": ", r.skipped));
      return r;
    }
    const int64_t copies = std::min(batch, plan_.num_blocks / per_seq);
    if (copies < batch) {
      absl::StrAppend(&r.note, r.note.empty() ? "" : "; ", "KV shared: ", copies,
                      copies == 1 ? " copy" : " copies", " for ", batch, " sequences");
    }
    std::vector<model::ForwardSequence> seqs(batch);
    if (o_.decode_tokenselect.has_value()) {  // fresh (zeroed) state slots for this case
      const int64_t words = kernels::tokenselect::StateWords(
          o_.config.num_layers, int64_t{o_.config.num_heads} * o_.config.head_dim,
          o_.decode_tokenselect->k,
          kernels::tokenselect::ListsOf(*o_.decode_tokenselect, o_.config.num_kv_heads));
      SS_ASSIGN_OR_RETURN(Tensor state, backend_.Allocate(DType::kI32, {batch, words}));
      model_.set_sequence_state(std::move(state));
    }
    kernels::SamplingBatch greedy;
    greedy.rows.resize(batch * rows);  // default rows: temperature 0, no penalty
    for (int64_t s = 0; s < batch; ++s) {
      seqs[s].tokens = {SyntheticToken(s, o_.config.vocab_size)};
      if (tree != nullptr) {  // the tree's rows at their positions under its mask
        seqs[s].tokens.insert(seqs[s].tokens.end(), tree->tokens.begin(), tree->tokens.end());
        seqs[s].positions = tree->Positions(static_cast<int32_t>(context));
        seqs[s].mask = tree->FullMask();
      } else {
        for (int64_t d = 1; d < rows; ++d) {  // a draft chain: causal, consecutive positions
          seqs[s].tokens.push_back(SyntheticToken(s + d, o_.config.vocab_size));
        }
      }
      if (rows > 1) seqs[s].logits = model::LogitRows::kAll;
      seqs[s].start_pos = static_cast<int32_t>(context);
      if (o_.decode_tokenselect.has_value()) {
        seqs[s].pattern.kind = kernels::AttentionMethodKind::kTokenSelect;
        seqs[s].pattern.tokenselect = *o_.decode_tokenselect;
        seqs[s].state_slot = static_cast<int32_t>(s);
      }
      if (o_.decode_window > 0) {
        seqs[s].pattern.kind = kernels::AttentionMethodKind::kSlidingWindow;
        seqs[s].pattern.window = o_.decode_window;
        seqs[s].pattern.sink_tokens = kDecodeWindowSinks;
      }
      const int64_t first = (s % copies) * per_seq;
      seqs[s].block_table.assign(all_blocks - per_seq, 0);  // released (rolling KV)
      for (int64_t b = 0; b < per_seq; ++b) {
        seqs[s].block_table.push_back(static_cast<int32_t>(first + b));
      }
    }
    Progress(absl::StrCat(r.label, ": ", o_.warmup, " warm-up + ", o_.iters, " timed steps",
                          r.note.empty() ? "" : "; ", r.note));
    // Steps end in a greedy pick on the device (ForwardSample with temperature-0 rows), as a
    // greedy serving step does. Every step rewrites the KV row at position C (shared copies: the
    // same row from several sequences in one step; the values do not matter).
    if (shadow_rate > 0) {
      // Two shadowed steps first (op by op, then the capture), so the timed steps replay the
      // shadow graph as a server's would after its first few shadowed steps.
      model_.set_shadow_dense(1.0, kShadowSeed);
      for (int i = 0; i < 2; ++i) {
        SS_RETURN_IF_ERROR(ForwardSample(seqs, greedy));
      }
    }
    if (shadow_rate >= 0) model_.set_shadow_dense(shadow_rate, kShadowSeed);
    for (int i = 0; i < o_.warmup; ++i) {
      SS_RETURN_IF_ERROR(ForwardSample(seqs, greedy));
    }
    SS_RETURN_IF_ERROR(backend_.Synchronize());
    int shadowed = 0;
    double error_sum = 0;
    int64_t errors = 0;
    const Clock::time_point start = Clock::now();
    for (int i = 0; i < o_.iters; ++i) {
      SS_RETURN_IF_ERROR(ForwardSample(seqs, greedy));
      shadowed += model_.shadow_errors().empty() ? 0 : 1;
      for (const model::ShadowAttentionError& e : model_.shadow_errors())
        error_sum += e.relative_l2;
      errors += static_cast<int64_t>(model_.shadow_errors().size());
    }
    SS_ASSIGN_OR_RETURN(const double seconds, SecondsSince(backend_, start));
    r.tokens_per_s = static_cast<double>(batch * o_.iters) / seconds;
    r.ms = seconds * 1e3 / o_.iters;
    if (shadow_rate >= 0) {
      r.note = absl::StrCat(
          r.note, r.note.empty() ? "" : "; ", "shadowed ", shadowed, " of ", o_.iters, " steps",
          errors > 0 ? absl::StrFormat(", mean error %.4g", error_sum / errors) : "");
      model_.set_shadow_dense(0, kShadowSeed);  // later cases run without the monitor
    }
    if (o_.op_profile) {
      auto steps = [&]() -> absl::Status {
        for (int i = 0; i < o_.iters; ++i) {
          SS_RETURN_IF_ERROR(ForwardSample(seqs, greedy));
        }
        return absl::OkStatus();
      };
      SS_RETURN_IF_ERROR(ProfileOps(r.label, o_.iters, steps));
    }
    return r;
  }

 private:
  // One step on every tensor-parallel rank (rank 0: model_ and cache_), or on the one model.
  absl::Status Forward(const std::vector<model::ForwardSequence>& seqs) {
    return ranks_.threads->Run([&](int r) {
      return r == 0 ? model_.Forward(seqs, *cache_).status()
                    : ranks_.models[r]->Forward(seqs, *ranks_.caches[r]).status();
    });
  }
  absl::Status ForwardSample(const std::vector<model::ForwardSequence>& seqs,
                             const kernels::SamplingBatch& sampling) {
    return ranks_.threads->Run([&](int r) {
      return r == 0 ? model_.ForwardSample(seqs, *cache_, sampling).status()
                    : ranks_.models[r]->ForwardSample(seqs, *ranks_.caches[r], sampling).status();
    });
  }

  // Runs `run` again with every op timed on its own and prints the ops' share per step (`steps`
  // forward steps in `run`), largest first.
  absl::Status ProfileOps(const std::string& label, int steps,
                          const std::function<absl::Status()>& run) {
    backend_.Reset();
    backend_.set_enabled(true);
    const absl::Status status = run();
    backend_.set_enabled(false);
    SS_RETURN_IF_ERROR(status);
    std::vector<std::pair<std::string, kernels::OpTimingBackend::OpTotal>> ops(
        backend_.totals().begin(), backend_.totals().end());
    std::sort(ops.begin(), ops.end(),
              [](const auto& a, const auto& b) { return a.second.seconds > b.second.seconds; });
    double total = 0;
    for (const auto& [name, t] : ops) total += t.seconds;
    std::printf("op profile, %s (each op synchronised; ms per step):\n", label.c_str());
    for (const auto& [name, t] : ops) {
      std::printf("  %-28s %9.3f ms %6.1f%%  %lld calls\n", name.c_str(), t.seconds * 1e3 / steps,
                  100.0 * t.seconds / total, static_cast<long long>(t.calls / steps));
    }
    std::fflush(stdout);
    return absl::OkStatus();
  }

  // A case longer than the preset's context is skipped, not an error: the default lists run
  // up to 128K, beyond the `tiny` preset.
  std::string BeyondContext() const {
    return absl::StrCat("skipped: beyond ", o_.preset, "'s context of ",
                        o_.config.max_position_embeddings, " tokens");
  }

  int64_t BlocksFor(int64_t tokens) const {
    return (tokens + o_.block_tokens - 1) / o_.block_tokens;
  }

  const ModelBenchOptions& o_;
  kernels::OpTimingBackend& backend_;
  model::LlamaModel& model_;
  model::PagedKvCache* cache_;  // null when no case fits
  const TensorParallelRanks& ranks_;
  const KvPlan& plan_;
  const double bandwidth_gbps_;
  const double peak_tflops_;
  double sparse_computed_ = 0, sparse_causal_ = 0;  // MInference prefill work since reported
};

// "8.03 B" / "0.55 M" parameters.
std::string FormatCount(double n) {
  return n >= 1e9 ? absl::StrFormat("%.2f B", n / 1e9) : absl::StrFormat("%.2f M", n / 1e6);
}

void PrintTable(const std::vector<CaseResult>& results) {
  std::printf(
      "\nms: the whole prompt for prefill, one step for decode; the floors likewise. "
      "%% roofline = floor ms / ms.\n");
  std::printf("\n%-22s %12s %11s %11s %11s %11s %8s  %s\n", "case", "tokens/s", "ms", "bytes ms",
              "flops ms", "floor ms", "bound", "% roofline");
  for (const CaseResult& r : results) {
    if (!r.skipped.empty()) {
      std::printf("%-22s %s\n", r.label.c_str(), r.skipped.c_str());
      continue;
    }
    const std::string flops_ms =
        r.floor.flops_s > 0 ? absl::StrFormat("%.3f", r.floor.flops_s * 1e3) : "-";
    std::printf("%-22s %12.1f %11.3f %11.3f %11s %11.3f %8s  %9.1f%%%s%s\n", r.label.c_str(),
                r.tokens_per_s, r.ms, r.floor.bytes_s * 1e3, flops_ms.c_str(),
                r.floor.floor_s * 1e3, r.floor.bound, 100.0 * r.floor.floor_s * 1e3 / r.ms,
                r.note.empty() ? "" : "  ", r.note.c_str());
  }
  std::fflush(stdout);
}

// For --shadow-dense-rates: each decode case's throughput at a rate > 0 against the same case at
// rate 0, "shadow-dense overhead, decode B=8 C=32768: R=0.01 costs 0.84% of decode throughput".
void PrintShadowOverhead(const std::vector<CaseResult>& results) {
  bool header = false;
  for (const CaseResult& base : results) {
    if (base.shadow_rate != 0 || !base.skipped.empty()) continue;
    for (const CaseResult& r : results) {
      if (r.shadow_rate <= 0 || !r.skipped.empty() || r.batch != base.batch ||
          r.context != base.context) {
        continue;
      }
      if (!header) {
        std::printf("\nshadow-dense monitor (decode throughput lost against rate 0):\n");
        header = true;
      }
      std::printf("  decode B=%lld C=%lld: R=%g costs %.2f%% (%.1f -> %.1f tokens/s; %s)\n",
                  static_cast<long long>(r.batch), static_cast<long long>(r.context), r.shadow_rate,
                  100.0 * (1.0 - r.tokens_per_s / base.tokens_per_s), base.tokens_per_s,
                  r.tokens_per_s, r.note.c_str());
    }
  }
  std::fflush(stdout);
}

}  // namespace

absl::Status RunModelBench(const ModelBenchOptions& o) {
  const char* device_name = o.device == Device::kCuda ? "cuda" : "cpu";
  absl::StatusOr<std::unique_ptr<kernels::Backend>> created = kernels::CreateBackend(o.device);
  if (!created.ok()) {
    return AnnotateStatus(created.status(), absl::StrCat("creating the ", device_name, " backend"));
  }
  // The model runs on the timing decorator: a pass-through until --op-profile switches it on.
  kernels::OpTimingBackend backend(created->get());
  const DType dtype = backend.compute_dtype();

  // Before the model, while the device is empty: the copy needs two large buffers.
  double bandwidth_gbps = o.peak_bandwidth_gbps;
  std::string bandwidth_source = "--peak-bandwidth-gbps";
  if (bandwidth_gbps == 0) {
    const int64_t bytes = o.device == Device::kCuda ? int64_t{2} << 30 : int64_t{256} << 20;
    Progress(absl::StrCat("measuring copy bandwidth (", bytes >> 20, " MiB buffers)"));
    absl::StatusOr<double> measured = MeasureCopyBandwidthGbps(backend, bytes);
    if (!measured.ok()) {
      return AnnotateStatus(measured.status(),
                            "measuring copy bandwidth (--peak-bandwidth-gbps skips it)");
    }
    bandwidth_gbps = *measured;
    bandwidth_source = absl::StrCat("measured: copies of ", bytes >> 20, " MiB");
  }
  double peak_tflops = o.peak_tflops;
  std::string peak_source = "--peak-tflops";
  if (peak_tflops == 0 && o.device == Device::kCuda) {
    peak_tflops = kCudaDefaultPeakTflops;
    peak_source = "H100/H200 bf16 datasheet default";
  }

  const int tp = o.tensor_parallel;
  Progress(absl::StrCat("creating random ", o.preset, " weights on ", device_name,
                        tp > 1 ? absl::StrCat(", split over ", tp, " ranks") : ""));
  Clock::time_point start = Clock::now();
  TensorParallelRanks ranks;
  ranks.threads = std::make_unique<engine::RankThreads>(tp);
  ranks.backends.resize(tp);
  ranks.models.resize(tp);
  ranks.caches.resize(tp);
  std::vector<kernels::Backend*> rank_backends(tp, &backend);
  const absl::Status made_backends = ranks.threads->Run([&](int r) -> absl::Status {
    if (r == 0) return absl::OkStatus();
    SS_ASSIGN_OR_RETURN(ranks.backends[r], kernels::CreateBackend(o.device, r));
    rank_backends[r] = ranks.backends[r].get();
    return ranks.backends[r]->BindThread();
  });
  SS_RETURN_IF_ERROR(made_backends);
  if (tp > 1) {
    std::vector<kernels::Backend*> inner = rank_backends;
    inner[0] = created->get();  // NCCL wants the CUDA backend itself, not the timing decorator
    SS_ASSIGN_OR_RETURN(ranks.collectives, kernels::CreateCollectives(inner));
  }
  std::unique_ptr<model::LlamaModel> model;
  const absl::Status made_models = ranks.threads->Run([&](int r) -> absl::Status {
    model::TensorParallelShard shard;
    shard.rank = r;
    shard.size = tp;
    shard.collective = tp > 1 ? ranks.collectives[r].get() : nullptr;
    SS_ASSIGN_OR_RETURN(
        std::unique_ptr<model::LlamaModel> m,
        model::LlamaModel::CreateRandom(o.config, rank_backends[r], kWeightsSeed, shard));
    m->set_step_graph_rows(o.step_graph_rows);
    (r == 0 ? model : ranks.models[r]) = std::move(m);
    return absl::OkStatus();
  });
  SS_RETURN_IF_ERROR(made_models);
  SS_ASSIGN_OR_RETURN(const double create_s, SecondsSince(backend, start));

  SS_ASSIGN_OR_RETURN(const KvPlan plan, PlanKvCache(backend, o));
  std::unique_ptr<model::PagedKvCache> cache;
  if (plan.num_blocks > 0) {
    const absl::Status made_caches = ranks.threads->Run([&](int r) -> absl::Status {
      model::PagedKvCacheShape shape;
      shape.num_layers = o.config.num_layers;
      shape.num_blocks = static_cast<int>(plan.num_blocks);
      shape.block_tokens = o.block_tokens;
      shape.num_kv_heads = model->shard_dims().kv_heads;
      shape.head_dim = o.config.head_dim;
      SS_ASSIGN_OR_RETURN(std::unique_ptr<model::PagedKvCache> c,
                          model::PagedKvCache::Create(shape, *rank_backends[r]));
      (r == 0 ? cache : ranks.caches[r]) = std::move(c);
      return absl::OkStatus();
    });
    SS_RETURN_IF_ERROR(made_caches);
  }

  std::printf("sparseserve bench model: %s on %s\n", o.preset.c_str(), device_name);
  if (o.step_graph_rows > 0) {
    std::printf(
        "decode batches of up to %d sequences replay step graphs where the backend has "
        "them (--cuda-graph-batch)\n",
        o.step_graph_rows);
  } else {
    std::printf("step graphs off: every decode step launches its ops one by one\n");
  }
  std::printf("model: %s params, %s of %s weights read per step (made in %.1f s)\n",
              FormatCount(static_cast<double>(model::NumModelParams(o.config))).c_str(),
              FormatBytes(StepWeightBytes(o.config, dtype)).c_str(),
              std::string(DTypeName(dtype)).c_str(), create_s);
  std::printf("KV cache: %lld blocks x %d tokens = %s\n", static_cast<long long>(plan.num_blocks),
              o.block_tokens,
              FormatBytes(static_cast<double>(plan.num_blocks) * plan.block_bytes).c_str());
  std::printf("bandwidth: %.1f GB/s (%s); peak: %s\n", bandwidth_gbps, bandwidth_source.c_str(),
              peak_tflops > 0
                  ? absl::StrFormat("%.1f TFLOP/s (%s)", peak_tflops, peak_source).c_str()
                  : "unknown (no arithmetic floor; pass --peak-tflops)");
  std::fflush(stdout);

  if (tp > 1) {
    std::printf("tensor parallel: %d ranks (%s), each %d of %d heads, %d of %d KV heads\n", tp,
                o.device == Device::kCuda ? "GPUs 0 .. N-1, NCCL" : "CPU threads",
                model->shard_dims().heads, o.config.num_heads, model->shard_dims().kv_heads,
                o.config.num_kv_heads);
  }
  if (tp > 1) {
    std::vector<kernels::Backend*> inner = rank_backends;
    inner[0] = created->get();
    SS_RETURN_IF_ERROR(MeasureAllReduce(o, ranks, inner));
  }
  ModelBench bench(o, backend, *model, cache.get(), ranks, plan, bandwidth_gbps, peak_tflops);
  std::vector<CaseResult> results;
  if (o.warmup > 0 && !o.prefill_lengths.empty() && cache != nullptr) {
    const int64_t len = std::min<int64_t>(
        {o.prefill_chunk, o.prefill_lengths.front(), o.config.max_position_embeddings});
    if ((len + o.block_tokens - 1) / o.block_tokens <= plan.num_blocks) {
      Progress(absl::StrCat("warm-up prefill of ", len, " tokens"));
      SS_RETURN_IF_ERROR(AnnotateStatus(bench.Prefill(len), "warm-up prefill"));
    }
  }
  // A failed case (say, out of memory for its activations) costs its row, not the whole run.
  int num_failed = 0;
  absl::Status first_failure;
  for (int64_t len : o.prefill_lengths) {
    absl::StatusOr<CaseResult> r = bench.RunPrefill(len);
    if (!r.ok() && num_failed++ == 0) first_failure = r.status();
    results.push_back(r.ok() ? *std::move(r) : FailedCase(PrefillLabel(len), r.status()));
  }
  if (cache != nullptr && !o.decode_contexts.empty()) {
    Progress("filling the KV cache with uniform values in [-0.5, 0.5)");
    const absl::Status filled = ranks.threads->Run([&](int r) -> absl::Status {
      model::PagedKvCache& c = r == 0 ? *cache : *ranks.caches[r];
      for (int l = 0; l < o.config.num_layers; ++l) {
        SS_RETURN_IF_ERROR(rank_backends[r]->FillUniform(c.layer(l), kKvSeed + l, -0.5f, 0.5f));
      }
      return absl::OkStatus();
    });
    SS_RETURN_IF_ERROR(filled);
  }
  if (o.decode_window > 0) {
    std::printf("decode attention: sliding window of %d keys, %d sinks (--decode-window)\n",
                o.decode_window, kDecodeWindowSinks);
  }
  // Without --shadow-dense-rates each decode case runs once, the monitor off (rate -1).
  const std::vector<double> rates =
      o.shadow_dense_rates.empty() ? std::vector<double>{-1} : o.shadow_dense_rates;
  for (int64_t batch : o.decode_batches) {
    for (int64_t context : o.decode_contexts) {
      for (double rate : rates) {
        absl::StatusOr<CaseResult> r = bench.RunDecode(batch, context, rate);
        if (!r.ok() && num_failed++ == 0) first_failure = r.status();
        results.push_back(r.ok() ? *std::move(r)
                                 : FailedCase(DecodeLabel(batch, context, rate), r.status()));
      }
    }
  }
  PrintTable(results);
  PrintShadowOverhead(results);
  if (o.interleave_prompt > 0 && cache != nullptr) {
    if (absl::Status st = bench.RunInterleave(); !st.ok() && num_failed++ == 0) {
      first_failure = st;
    }
  }
  if (num_failed > 0) {
    return AnnotateStatus(first_failure, absl::StrCat(num_failed, " of ", results.size(),
                                                      " cases failed (see the table); first"));
  }
  return absl::OkStatus();
}

}  // namespace sparseserve::tools
