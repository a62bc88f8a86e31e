// Every op of the CUDA backend against the CPU reference backend on fresh random inputs (odd
// sizes, GQA ratios 1/4/8, head dims 8/16/64/128, block-boundary cases), with NaN-poisoned
// outputs so an unwritten element fails. Run on a GPU machine (scripts/gpu_check.sh).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdlib>
#include <numeric>
#include <tuple>
#include <vector>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cudnn_prefill.h"
#include "kernels/rope_frequencies.h"
#include "kernels/sampling_plan.h"
#include "tests/gpu/cuda_test_util.h"

namespace sparseserve::testing {
namespace {

using CudaBackendTest = CudaTest;

TEST_F(CudaBackendTest, RmsNormAndAddRmsNorm) {
  for (int64_t n : {1, 7, 300}) {
    for (int64_t d : {64, 333, 4096}) {
      Tensor x = RandomHost({n, d}, 2.0f), res = RandomHost({n, d}, 2.0f);
      Tensor w = RandomHost({d});
      Tensor ref = Tensor::Zeros(DType::kF32, {n, d});
      ASSERT_TRUE(cpu_.RmsNorm(x, w, 1e-5f, ref).ok());
      Tensor out = Poisoned(DType::kBf16, {n, d});
      ASSERT_TRUE(gpu_->RmsNorm(ToGpu(x), ToGpu(w), 1e-5f, out).ok());
      EXPECT_LT(RelError(ToHost(out), ref), kBf16Tolerance) << "RmsNorm n=" << n << " d=" << d;

      // The f32 residual stream: RmsNorm of f32 input, AddRmsNorm into an f32 residual.
      ASSERT_TRUE(gpu_->RmsNorm(ToGpu(x, DType::kF32), ToGpu(w), 1e-5f, out).ok());
      EXPECT_LT(RelError(ToHost(out), ref), kBf16Tolerance) << "RmsNorm f32 n=" << n;
      for (DType res_dtype : {DType::kBf16, DType::kF32}) {
        Tensor cpu_res = *res.ToF32();
        Tensor gpu_res = ToGpu(res, res_dtype);
        ASSERT_TRUE(cpu_.AddRmsNorm(cpu_res, x, w, 1e-5f, ref).ok());
        ASSERT_TRUE(gpu_->AddRmsNorm(gpu_res, ToGpu(x), ToGpu(w), 1e-5f, out).ok());
        EXPECT_LT(RelError(ToHost(out), ref), kBf16Tolerance)
            << "AddRmsNorm n=" << n << " d=" << d << " residual " << DTypeName(res_dtype);
        EXPECT_LT(RelError(ToHost(gpu_res), cpu_res), res_dtype == DType::kF32 ? 1e-6 : 1e-2)
            << "residual " << DTypeName(res_dtype);
      }
    }
  }
}

TEST_F(CudaBackendTest, LinearMatchesCpu) {
  struct Case {
    int64_t n, in, out;
    bool bias;
  };
  for (const Case& c :
       {Case{1, 4096, 4096, false}, Case{7, 333, 517, true}, Case{4, 1024, 517, true},
        Case{8, 4096, 1000, false}, Case{300, 1024, 2048, false}, Case{64, 4096, 14336, true},
        // More output pairs than the GPU holds blocks (each block loops), an odd count.
        Case{2, 256, 40001, true}}) {
    Tensor x = RandomHost({c.n, c.in}), w = RandomHost({c.out, c.in}, 0.05f);
    Tensor b = c.bias ? RandomHost({c.out}) : Tensor();
    Tensor ref = Tensor::Zeros(DType::kF32, {c.n, c.out});
    ASSERT_TRUE(cpu_.Linear(x, w, b, ref).ok());
    for (DType out_dtype : {DType::kBf16, DType::kF32}) {
      Tensor out = Poisoned(out_dtype, {c.n, c.out});
      const absl::Status s = gpu_->Linear(ToGpu(x), ToGpu(w), c.bias ? ToGpu(b) : Tensor(), out);
      ASSERT_TRUE(s.ok()) << s;
      const double err = RelError(ToHost(out), ref);
      EXPECT_LT(err, out_dtype == DType::kF32 ? 2e-3 : kBf16Tolerance)
          << "Linear " << c.n << "x" << c.in << "->" << c.out << " " << DTypeName(out_dtype);
    }
  }
}

TEST_F(CudaBackendTest, RopeMatchesCpu) {
  for (int hd : {16, 64, 128}) {
    const int64_t n = 37;
    Tensor q = RandomHost({n, 32, hd}), k = RandomHost({n, 8, hd});
    Tensor pos = Tensor::Zeros(DType::kI32, {n});
    std::uniform_int_distribution<int> p(0, 131071);
    for (int64_t i = 0; i < n; ++i) pos.data<int32_t>()[i] = i < 3 ? static_cast<int>(i) : p(rng_);
    kernels::RopeFrequencyParams params;
    params.head_dim = hd;
    params.theta = 500000.0f;
    const std::vector<float> freq = kernels::RopeInverseFrequencies(params);
    Tensor inv = Tensor::Zeros(DType::kF32, {hd / 2});
    std::copy(freq.begin(), freq.end(), inv.data<float>());
    Tensor gq = ToGpu(q), gk = ToGpu(k);
    ASSERT_TRUE(gpu_->Rope(gq, gk, ToGpu(pos, DType::kI32), ToGpu(inv, DType::kF32)).ok());
    ASSERT_TRUE(cpu_.Rope(q, k, pos, inv).ok());
    EXPECT_LT(RelError(ToHost(gq), q), kBf16Tolerance) << "q hd=" << hd;
    EXPECT_LT(RelError(ToHost(gk), k), kBf16Tolerance) << "k hd=" << hd;
  }
}

// The fused op against the CPU reference (which is Rope then WriteKv on the split columns):
// every query written, every written KV slot equal, untouched slots still zero.
TEST_F(CudaBackendTest, RopeWriteKvMatchesCpu) {
  for (const auto& [heads, kv_heads, hd] : {std::tuple{32, 8, 128}, {28, 4, 128}, {4, 1, 64}}) {
    const int64_t n = 19, block_tokens = 16, num_blocks = 4;
    Tensor qkv = RandomHost({n, (heads + 2 * kv_heads) * hd});
    Tensor pos = Tensor::Zeros(DType::kI32, {n});
    Tensor slots = Tensor::Zeros(DType::kI32, {n});
    std::uniform_int_distribution<int> p(0, 131071);
    for (int64_t i = 0; i < n; ++i) {
      pos.data<int32_t>()[i] = i < 3 ? static_cast<int>(i) : p(rng_);
      slots.data<int32_t>()[i] = static_cast<int32_t>((i * 7) % (num_blocks * block_tokens));
    }
    kernels::RopeFrequencyParams params;
    params.head_dim = hd;
    params.theta = 500000.0f;
    const std::vector<float> freq = kernels::RopeInverseFrequencies(params);
    Tensor inv = Tensor::Zeros(DType::kF32, {hd / 2});
    std::copy(freq.begin(), freq.end(), inv.data<float>());
    Tensor q = Tensor::Zeros(DType::kF32, {n, heads, hd});
    Tensor kv = Tensor::Zeros(DType::kF32, {num_blocks * 2, block_tokens, kv_heads, hd});
    ASSERT_TRUE(cpu_.RopeWriteKv(qkv, pos, inv, slots, q, kv).ok());
    Tensor gq = Poisoned(DType::kBf16, q.shape());
    Tensor gkv = ToGpu(Tensor::Zeros(DType::kF32, kv.shape()));
    ASSERT_TRUE(gpu_->RopeWriteKv(ToGpu(qkv), ToGpu(pos, DType::kI32), ToGpu(inv, DType::kF32),
                                  ToGpu(slots, DType::kI32), gq, gkv)
                    .ok());
    EXPECT_LT(RelError(ToHost(gq), q), kBf16Tolerance) << "q heads=" << heads;
    EXPECT_LT(RelError(ToHost(gkv), kv), kBf16Tolerance) << "kv heads=" << heads;
  }
}

// Decode rows: the QKV projection with RoPE and the KV write in its epilogue gives the bits of
// Linear then RopeWriteKv (queries and every KV slot); head_dim 64 and 128, with and without a
// bias, two heads' pairs per block and one (head_dim / 2 odd).
TEST_F(CudaBackendTest, LinearRopeWriteKvEqualsLinearThenRopeWriteKv) {
  struct Case {
    int64_t n, in, heads, kv_heads, hd;
    bool bias;
  };
  for (const Case& c : {Case{1, 4096, 32, 8, 128, false}, Case{2, 1024, 8, 2, 64, true},
                        Case{2, 512, 4, 2, 18, true}}) {
    const int64_t rows = (c.heads + 2 * c.kv_heads) * c.hd, block_tokens = 16, num_blocks = 4;
    Tensor x = RandomHost({c.n, c.in}), w = RandomHost({rows, c.in}, 0.05f);
    const Tensor gx = ToGpu(x), gw = ToGpu(w), gb = c.bias ? ToGpu(RandomHost({rows})) : Tensor();
    Tensor pos = Tensor::Zeros(DType::kI32, {c.n}), slots = Tensor::Zeros(DType::kI32, {c.n});
    for (int64_t i = 0; i < c.n; ++i) {
      pos.data<int32_t>()[i] = static_cast<int32_t>(1000 + 77 * i);
      slots.data<int32_t>()[i] = static_cast<int32_t>(5 + 17 * i);
    }
    kernels::RopeFrequencyParams params;
    params.head_dim = static_cast<int>(c.hd);
    params.theta = 500000.0f;
    const std::vector<float> freq = kernels::RopeInverseFrequencies(params);
    Tensor inv = Tensor::Zeros(DType::kF32, {c.hd / 2});
    std::copy(freq.begin(), freq.end(), inv.data<float>());
    const Tensor gpos = ToGpu(pos, DType::kI32), gslots = ToGpu(slots, DType::kI32);
    const Tensor ginv = ToGpu(inv, DType::kF32);
    const Shape kv_shape{num_blocks * 2, block_tokens, c.kv_heads, c.hd};
    Tensor q_ref = Poisoned(DType::kBf16, {c.n, c.heads, c.hd});
    Tensor kv_ref = ToGpu(Tensor::Zeros(DType::kF32, kv_shape));
    Tensor qkv = Poisoned(DType::kBf16, {c.n, rows});
    ASSERT_TRUE(gpu_->Linear(gx, gw, gb, qkv).ok());
    ASSERT_TRUE(gpu_->RopeWriteKv(qkv, gpos, ginv, gslots, q_ref, kv_ref).ok());
    Tensor q = Poisoned(DType::kBf16, {c.n, c.heads, c.hd});
    Tensor kv = ToGpu(Tensor::Zeros(DType::kF32, kv_shape));
    const absl::Status s = gpu_->LinearRopeWriteKv(gx, gw, gb, Poisoned(DType::kBf16, {c.n, rows}),
                                                   gpos, ginv, gslots, q, kv);
    ASSERT_TRUE(s.ok()) << s;
    for (const auto& [got, want, what] : {std::tuple{&q, &q_ref, "q"}, {&kv, &kv_ref, "kv"}}) {
      const Tensor a = ToHost(*got), b = ToHost(*want);
      int64_t differ = 0;
      for (int64_t i = 0; i < a.numel(); ++i) {
        differ += !(a.data<float>()[i] == b.data<float>()[i]);  // NaN (unwritten) differs too
      }
      EXPECT_EQ(differ, 0) << what << " n=" << c.n << " hd=" << c.hd << " bias=" << c.bias;
    }
  }
}

// gate and up as the column halves of one fused projection output (strided rows), as the model
// passes them; odd widths take the scalar path.
TEST_F(CudaBackendTest, SiluMulOnColumnRangesMatchesCpu) {
  for (int64_t ffn : {517, 1024}) {
    const int64_t n = 7;
    Tensor gate_up = RandomHost({n, 2 * ffn}, 4.0f);
    Tensor ref = Tensor::Zeros(DType::kF32, {n, ffn});
    ASSERT_TRUE(cpu_.SiluMul(gate_up.Slice(1, 0, ffn), gate_up.Slice(1, ffn, 2 * ffn), ref).ok());
    Tensor g = ToGpu(gate_up);
    Tensor out = Poisoned(DType::kBf16, {n, ffn});
    ASSERT_TRUE(gpu_->SiluMul(g.Slice(1, 0, ffn), g.Slice(1, ffn, 2 * ffn), out).ok());
    EXPECT_LT(RelError(ToHost(out), ref), kBf16Tolerance) << "ffn " << ffn;
  }
}

// The fused gate/up projection + SwiGLU (decode rows) gives the bits of Linear then SiluMul, and
// the CPU reference's values; rows past the fused kernel's reach take the two-op default.
TEST_F(CudaBackendTest, LinearSiluMulEqualsLinearThenSiluMul) {
  struct Case {
    int64_t n, in, ffn;
  };
  for (const Case& c : {Case{1, 4096, 1000}, Case{2, 1024, 20001}, Case{7, 256, 517}}) {
    Tensor x = RandomHost({c.n, c.in}), w = RandomHost({2 * c.ffn, c.in}, 0.05f);
    Tensor ref = Tensor::Zeros(DType::kF32, {c.n, c.ffn});
    Tensor ref_gate_up = Tensor::Zeros(DType::kF32, {c.n, 2 * c.ffn});
    ASSERT_TRUE(cpu_.LinearSiluMul(x, w, ref_gate_up, ref).ok());
    const Tensor gx = ToGpu(x), gw = ToGpu(w);
    Tensor gate_up = Poisoned(DType::kBf16, {c.n, 2 * c.ffn});
    Tensor unfused = Poisoned(DType::kBf16, {c.n, c.ffn});
    ASSERT_TRUE(gpu_->Linear(gx, gw, Tensor(), gate_up).ok());
    ASSERT_TRUE(
        gpu_->SiluMul(gate_up.Slice(1, 0, c.ffn), gate_up.Slice(1, c.ffn, 2 * c.ffn), unfused)
            .ok());
    Tensor fused = Poisoned(DType::kBf16, {c.n, c.ffn});
    const absl::Status s =
        gpu_->LinearSiluMul(gx, gw, Poisoned(DType::kBf16, {c.n, 2 * c.ffn}), fused);
    ASSERT_TRUE(s.ok()) << s;
    const Tensor got = ToHost(fused), want = ToHost(unfused);
    int64_t differ = 0;
    for (int64_t i = 0; i < got.numel(); ++i)
      differ += got.data<float>()[i] != want.data<float>()[i];
    EXPECT_EQ(differ, 0) << "n=" << c.n << " in=" << c.in << " ffn=" << c.ffn;
    EXPECT_LT(RelError(got, ref), kBf16Tolerance) << "n=" << c.n;
  }
  Tensor bad = Poisoned(DType::kBf16, {1, 10});
  EXPECT_EQ(gpu_->LinearSiluMul(ToGpu(RandomHost({1, 64})), ToGpu(RandomHost({30, 64})),
                                Poisoned(DType::kBf16, {1, 20}), bad)
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(CudaBackendTest, SiluMulEmbeddingGatherRows) {
  Tensor gate = RandomHost({13, 517}, 4.0f), up = RandomHost({13, 517}, 2.0f);
  Tensor ref = Tensor::Zeros(DType::kF32, {13, 517});
  ASSERT_TRUE(cpu_.SiluMul(gate, up, ref).ok());
  Tensor out = Poisoned(DType::kBf16, {13, 517});
  ASSERT_TRUE(gpu_->SiluMul(ToGpu(gate), ToGpu(up), out).ok());
  EXPECT_LT(RelError(ToHost(out), ref), kBf16Tolerance);

  for (int64_t hidden : {4096, 333}) {
    Tensor table = RandomHost({1000, hidden});
    Tensor ids = Tensor::Zeros(DType::kI32, {5});
    for (int i = 0; i < 5; ++i) ids.data<int32_t>()[i] = (i * 397 + 11) % 1000;
    Tensor want = Tensor::Zeros(DType::kF32, {5, hidden});
    ASSERT_TRUE(cpu_.Embedding(table, ids, want).ok());
    Tensor got = Poisoned(DType::kBf16, {5, hidden});
    Tensor gtable = ToGpu(table);
    ASSERT_TRUE(gpu_->Embedding(gtable, ToGpu(ids, DType::kI32), got).ok());
    EXPECT_EQ(RelError(ToHost(got), want), 0.0) << "hidden " << hidden;
    Tensor wide = Poisoned(DType::kF32, {5, hidden});  // the f32 residual stream
    ASSERT_TRUE(gpu_->Embedding(gtable, ToGpu(ids, DType::kI32), wide).ok());
    EXPECT_EQ(RelError(ToHost(wide), want), 0.0);
    Tensor rows_out = Poisoned(DType::kBf16, {5, hidden});
    ASSERT_TRUE(gpu_->GatherRows(gtable, ToGpu(ids, DType::kI32), rows_out).ok());
    EXPECT_EQ(RelError(ToHost(rows_out), want), 0.0);
    // Rows of the f32 residual stream (TokenSwift's heads read after a step), bit for bit.
    Tensor stream = RandomHost({7, hidden});
    Tensor picked = Tensor::Zeros(DType::kI32, {3});
    for (int i = 0; i < 3; ++i) picked.data<int32_t>()[i] = 6 - 2 * i;
    Tensor stream_want = Tensor::Zeros(DType::kF32, {3, hidden});
    ASSERT_TRUE(cpu_.GatherRows(stream, picked, stream_want).ok());
    Tensor stream_got = Poisoned(DType::kF32, {3, hidden});
    ASSERT_TRUE(
        gpu_->GatherRows(ToGpu(stream, DType::kF32), ToGpu(picked, DType::kI32), stream_got).ok());
    EXPECT_EQ(RelError(ToHost(stream_got), stream_want), 0.0);
    // An f32 source into bf16 rows is refused.
    EXPECT_FALSE(gpu_->GatherRows(ToGpu(stream, DType::kF32), ToGpu(picked, DType::kI32),
                                  rows_out.Slice(0, 0, 3))
                     .ok());

    ids.data<int32_t>()[2] = 1000;  // out of range: reported at the next synchronisation
    ASSERT_TRUE(gpu_->Embedding(gtable, ToGpu(ids, DType::kI32), got).ok());
    const absl::Status s = gpu_->Synchronize();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_TRUE(gpu_->Synchronize().ok()) << "the error is reported once";
  }
}

TEST_F(CudaBackendTest, GreedySampleMatchesCpuIncludingTies) {
  for (int64_t vocab : {128256, 511, 7}) {
    Tensor logits = RandomHost({9, vocab}, 4.0f);
    // Row 1: a tie between an early and a late column (the lower index wins on both backends).
    logits.data<float>()[vocab + 3] = 100.0f;
    logits.data<float>()[vocab + vocab - 1] = 100.0f;
    kernels::SamplingBatch greedy;
    greedy.rows.resize(9);  // temperature 0
    Tensor want = Tensor::Zeros(DType::kI32, {9});
    ASSERT_TRUE(cpu_.Sample(logits, greedy, want).ok());
    Tensor got_dev = *gpu_->Allocate(DType::kI32, {9});
    ASSERT_TRUE(gpu_->Sample(ToGpu(logits, DType::kF32), greedy, got_dev).ok());
    Tensor got = Tensor::Zeros(DType::kI32, {9});
    ASSERT_TRUE(gpu_->CopyToHost(got_dev, got).ok());
    for (int i = 0; i < 9; ++i) {
      EXPECT_EQ(got.data<int32_t>()[i], want.data<int32_t>()[i])
          << "vocab " << vocab << " row " << i;
    }
    EXPECT_EQ(got.data<int32_t>()[1], 3);
  }
}

TEST_F(CudaBackendTest, FillUniformMatchesCpuAndCopy) {
  Tensor cpu = Tensor::Zeros(DType::kF32, {1000, 33});
  ASSERT_TRUE(cpu_.FillUniform(cpu, 42, -0.5f, 0.5f).ok());
  Tensor gpu = Poisoned(DType::kF32, {1000, 33});
  ASSERT_TRUE(gpu_->FillUniform(gpu, 42, -0.5f, 0.5f).ok());
  EXPECT_LT(RelError(ToHost(gpu), cpu), 1e-6);
  Tensor copy = Poisoned(DType::kF32, {1000, 33});
  ASSERT_TRUE(gpu_->Copy(gpu, copy).ok());
  EXPECT_EQ(RelError(ToHost(copy), cpu), RelError(ToHost(gpu), cpu));
  auto mem = gpu_->GetMemoryInfo();
  ASSERT_TRUE(mem.ok()) << mem.status();
  EXPECT_GT(mem->free_bytes, 0);
  EXPECT_GE(mem->total_bytes, mem->free_bytes);
}

// The KV cache a peer PUTs into GPU to GPU (issue 20): exportable through CUDA IPC, which the
// stream-ordered pool's allocations are not, zero-filled, and counted in used_bytes until freed.
TEST_F(CudaBackendTest, AllocateShareableIsIpcExportableZeroedAndCounted) {
  auto before = gpu_->GetMemoryInfo();
  ASSERT_TRUE(before.ok()) << before.status();
  constexpr int64_t kRows = 4096, kCols = 256;  // 2 MiB of bf16
  {
    absl::StatusOr<Tensor> shared = gpu_->AllocateShareable(DType::kBf16, {kRows, kCols});
    ASSERT_TRUE(shared.ok()) << shared.status();
    cudaIpcMemHandle_t handle;
    EXPECT_EQ(cudaIpcGetMemHandle(&handle, shared->raw_data()), cudaSuccess);
    const Tensor host = ToHost(*shared);
    const float* values = host.data<float>();
    EXPECT_TRUE(std::all_of(values, values + host.numel(), [](float v) { return v == 0.0f; }));
    auto during = gpu_->GetMemoryInfo();
    ASSERT_TRUE(during.ok()) << during.status();
    EXPECT_GE(during->used_bytes - before->used_bytes, kRows * kCols * 2);

    absl::StatusOr<Tensor> pooled = gpu_->Allocate(DType::kBf16, {kRows, kCols});
    ASSERT_TRUE(pooled.ok()) << pooled.status();
    EXPECT_NE(cudaIpcGetMemHandle(&handle, pooled->raw_data()), cudaSuccess);
    cudaGetLastError();  // the expected failure above must not be blamed on a later call
  }
  auto after = gpu_->GetMemoryInfo();
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->used_bytes, before->used_bytes);
}

struct AttnCase {
  int head_dim, heads, kv_heads, block_tokens;
  std::vector<std::pair<int, int>> seqs;  // (q_len, kv_len)
  int window = 0;      // > 0: every sequence uses a sliding window of this many keys
  int sinks = 0;       // with a window: leading keys kept
  bool masks = false;  // chunks get a random tree mask (verification-shaped)
  int min_splits = 1;  // the plan must split the prefill tiles' keys at least this many ways
};

std::string Describe(const AttnCase& c) {
  std::string s = "hd=" + std::to_string(c.head_dim) + " heads=" + std::to_string(c.heads) + "/" +
                  std::to_string(c.kv_heads) + " bt=" + std::to_string(c.block_tokens) + " seqs:";
  for (auto [q, kv] : c.seqs) s += " (" + std::to_string(q) + "," + std::to_string(kv) + ")";
  if (c.window > 0) s += " window=" + std::to_string(c.window) + "+" + std::to_string(c.sinks);
  if (c.masks) s += " masks";
  return s;
}

// Writes random K/V for every position of every sequence through WriteKv (on both backends,
// scattered over shuffled blocks), then compares Attention outputs.
void RunAttentionCase(CudaTest& t, kernels::Backend& cpu, kernels::Backend& gpu, const AttnCase& c,
                      std::mt19937& rng) {
  SCOPED_TRACE(Describe(c));
  const int bt = c.block_tokens;
  int total_blocks = 0, total_kv = 0, total_q = 0;
  for (auto [q, kv] : c.seqs) {
    total_blocks += (kv + bt - 1) / bt;
    total_kv += kv;
    total_q += q;
  }
  const int num_blocks = total_blocks + 3;  // spare blocks nobody uses
  std::vector<int32_t> ids(num_blocks);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);

  kernels::AttentionBatch batch;
  batch.block_tokens = bt;
  std::vector<int32_t> slots;
  int next_block = 0, q_begin = 0;
  for (auto [q, kv] : c.seqs) {
    kernels::SequenceAttention sa;
    sa.q_begin = q_begin;
    sa.q_len = q;
    sa.kv_len = kv;
    for (int b = 0; b < (kv + bt - 1) / bt; ++b) sa.block_table.push_back(ids[next_block++]);
    for (int p = 0; p < kv; ++p) slots.push_back(sa.block_table[p / bt] * bt + p % bt);
    if (c.window > 0) {
      sa.pattern.kind = kernels::AttentionMethodKind::kSlidingWindow;
      sa.pattern.window = c.window;
      sa.pattern.sink_tokens = c.sinks;
    }
    if (c.masks && q > 1) {  // a random tree: row i sees its ancestors and itself
      std::vector<int> parent(q, -1);
      for (int i = 1; i < q; ++i) parent[i] = std::uniform_int_distribution<int>(0, i - 1)(rng);
      sa.mask.assign(static_cast<size_t>(q) * q, 0);
      for (int i = 0; i < q; ++i) {
        for (int a = i; a >= 0; a = parent[a]) sa.mask[i * q + a] = 1;
      }
    }
    batch.sequences.push_back(sa);
    q_begin += q;
  }
  Tensor k = t.RandomHost({total_kv, c.kv_heads, c.head_dim});
  Tensor v = t.RandomHost({total_kv, c.kv_heads, c.head_dim});
  Tensor q = t.RandomHost({total_q, c.heads, c.head_dim}, 2.0f);
  Tensor slot_t = Tensor::Zeros(DType::kI32, {total_kv});
  std::copy(slots.begin(), slots.end(), slot_t.data<int32_t>());
  const Shape kv_shape{int64_t{num_blocks} * 2, bt, c.kv_heads, c.head_dim};

  Tensor cpu_kv = Tensor::Zeros(DType::kF32, kv_shape);
  ASSERT_TRUE(cpu.WriteKv(k, v, slot_t, cpu_kv).ok());
  Tensor gpu_kv = *gpu.Allocate(DType::kBf16, kv_shape);
  const absl::Status w = gpu.WriteKv(t.ToGpu(k), t.ToGpu(v), t.ToGpu(slot_t, DType::kI32), gpu_kv);
  ASSERT_TRUE(w.ok()) << w;
  EXPECT_EQ(CudaTest::RelError(t.ToHost(gpu_kv), cpu_kv), 0.0) << "WriteKv";

  Tensor ref = Tensor::Zeros(DType::kF32, {total_q, c.heads, c.head_dim});
  ASSERT_TRUE(kernels::RunAttention(cpu, batch, q, cpu_kv, ref).ok());
  // Planned once and run twice, as two layers of a step are: the second run gives the same bits
  // (the decode kernels' last chunks merge and leave their counters zero for the next layer).
  const kernels::AttentionShape shape{c.heads, c.kv_heads, c.head_dim, total_q, num_blocks};
  kernels::AttentionWorkspace ws;
  absl::StatusOr<kernels::AttentionPlan> plan = gpu.PlanAttention(batch, shape, ws);
  ASSERT_TRUE(plan.ok()) << plan.status();
  const Tensor q_gpu = t.ToGpu(q);
  Tensor out = t.Poisoned(DType::kBf16, {total_q, c.heads, c.head_dim});
  Tensor again = t.Poisoned(DType::kBf16, {total_q, c.heads, c.head_dim});
  for (const Tensor* o : {&out, &again}) {
    absl::Status s = gpu.BuildAttentionIndex(*plan, q_gpu, gpu_kv, 0);
    if (s.ok()) s = gpu.Attention(*plan, q_gpu, gpu_kv, 0, *o);
    ASSERT_TRUE(s.ok()) << s;
  }
  const Tensor out_host = t.ToHost(out);
  EXPECT_EQ(CudaTest::RelError(t.ToHost(again), out_host), 0.0) << "the plan's second run";
  const auto& l = plan->layout;
  EXPECT_GE(l.prefill_splits, c.min_splits) << "split-KV prefill tiles";
  Tensor meta = Tensor::Zeros(DType::kI32, ws.metadata.shape());
  ASSERT_TRUE(gpu.CopyToHost(ws.metadata, meta).ok());
  const int64_t counters = int64_t{l.num_merges + l.num_tokenselect_rows} * c.kv_heads;
  for (int64_t i = 0; i < counters; ++i) {
    ASSERT_EQ(meta.data<int32_t>()[l.merge_counters + i], 0) << "merge counter " << i;
  }
  const double err = CudaTest::RelError(out_host, ref);
  EXPECT_LT(err, kBf16Tolerance);
  std::printf("attention %-60s rel err %.2e\n", Describe(c).c_str(), err);
}

TEST_F(CudaBackendTest, AttentionPrefillChunkDecodeAndMixedBatches) {
  const std::vector<std::vector<std::pair<int, int>>> shapes = {
      {{1, 1}},
      {{17, 17}},
      {{64, 64}},
      {{65, 65}},
      {{200, 200}},
      {{37, 300}},
      {{1, 63}},
      {{1, 64}},
      {{1, 65}},
      {{1, 1000}},
      {{5, 5}, {1, 130}, {64, 200}, {1, 1}, {128, 128}},
  };
  for (int hd : {8, 16, 64, 128}) {
    for (auto [heads, kv_heads] : {std::pair{8, 8}, std::pair{32, 8}, std::pair{16, 2}}) {
      for (int bt : {16, 64}) {
        for (const auto& seqs : shapes) {
          if (hd <= 16 && seqs.size() > 1 && bt == 64) continue;  // keep the slow kernel brief
          RunAttentionCase(*this, cpu_, *gpu_, AttnCase{hd, heads, kv_heads, bt, seqs}, rng_);
        }
      }
    }
  }
}

TEST_F(CudaBackendTest, AttentionMasksAndSlidingWindows) {
  const std::vector<std::vector<std::pair<int, int>>> shapes = {
      {{1, 300}},   {{1, 5000}}, {{40, 300}},
      {{130, 700}}, {{9, 9}},    {{5, 5}, {1, 130}, {64, 200}, {1, 1}, {33, 3000}, {1, 4000}},
  };
  for (int hd : {16, 64, 128}) {
    for (const auto& seqs : shapes) {
      for (auto [window, sinks] : {std::pair{0, 0}, std::pair{1, 0}, std::pair{100, 4},
                                   std::pair{64, 70}, std::pair{1000, 0}}) {
        for (bool masks : {false, true}) {
          if (window == 0 && !masks) continue;  // dense: the test above
          RunAttentionCase(*this, cpu_, *gpu_, AttnCase{hd, 32, 8, 64, seqs, window, sinks, masks},
                           rng_);
        }
      }
    }
  }
}

// Speculative verify steps: a few rows per sequence go to the split-KV decode kernel while their
// (row, query head) pairs per KV head fit one CTA (rows x group <= 32), and more to the prefill
// kernel (with split-KV tiles over long prefixes, or to the decode kernel in row groups with
// SPARSESERVE_PREFILL_SPLIT_KV=0: TokenSwift's trees of 13 and 41 rows; the 8-row sequences of
// group 7 as two groups of 4), as chains (causal) and trees (masks), with windows and beside
// single-row and prefill sequences in one batch; 40 rows over 300 keys stay on whole tiles.
TEST_F(CudaBackendTest, AttentionFewRowVerifySteps) {
  const std::vector<std::vector<std::pair<int, int>>> shapes = {
      {{2, 3000}},  {{5, 9000}},
      {{8, 700}},   {{4, 4}},
      {{13, 3000}}, {{41, 9000}},
      {{64, 2112}}, {{3, 130}, {1, 2000}, {6, 64}, {40, 300}, {8, 5000}, {27, 4000}},
  };
  for (int hd : {64, 128}) {
    for (auto [heads, kv_heads] : {std::pair{8, 8}, std::pair{32, 8}, std::pair{28, 4}}) {
      for (const auto& seqs : shapes) {
        for (bool masks : {false, true}) {
          RunAttentionCase(*this, cpu_, *gpu_, AttnCase{hd, heads, kv_heads, 64, seqs, 0, 0, masks},
                           rng_);
        }
        RunAttentionCase(*this, cpu_, *gpu_,
                         AttnCase{hd, heads, kv_heads, 16, seqs, 100, 4, /*masks=*/false}, rng_);
      }
    }
  }
}

// The one-launch MoveKvRows equals the default (ReadKv + WriteKv per layer, on the CPU) bit for
// bit: a commit's moves (each row down, a later one writing where an earlier one read), 70 of
// them (two launches of at most 64) over 3 layers; a slot outside the layers is refused.
TEST_F(CudaBackendTest, MoveKvRowsEqualsReadAndWritePerLayer) {
  const Shape shape{2 * 10, 16, 2, 64};
  std::vector<Tensor> cpu_layers, gpu_layers;
  for (int l = 0; l < 3; ++l) {
    Tensor t = Tensor::Zeros(DType::kF32, shape);
    for (int64_t i = 0; i < t.numel(); ++i) {
      t.data<float>()[i] = static_cast<float>((i * 7 + l) % 251);  // exact in bf16
    }
    gpu_layers.push_back(ToGpu(t));
    cpu_layers.push_back(t);
  }
  std::vector<int32_t> src, dst;
  for (int32_t j = 1; j <= 70; ++j) {
    src.push_back(2 * j);
    dst.push_back(j);
  }
  ASSERT_TRUE(cpu_.MoveKvRows(cpu_layers, src, dst).ok());
  const absl::Status moved = gpu_->MoveKvRows(gpu_layers, src, dst);
  ASSERT_TRUE(moved.ok()) << moved;
  for (int l = 0; l < 3; ++l) EXPECT_EQ(RelError(ToHost(gpu_layers[l]), cpu_layers[l]), 0.0) << l;
  EXPECT_EQ(gpu_->MoveKvRows(gpu_layers, {3}, {160}).code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(CudaBackendTest, ReadKvInvertsWriteKv) {
  const Shape kv_shape{16, 16, 2, 64};
  Tensor kv = *gpu_->Allocate(DType::kBf16, kv_shape);
  Tensor k = RandomHost({5, 2, 64}), v = RandomHost({5, 2, 64});
  Tensor slots = Tensor::Zeros(DType::kI32, {5});
  const int32_t picks[5] = {0, 17, 127, 64, 5};
  std::copy(picks, picks + 5, slots.data<int32_t>());
  const Tensor gk = ToGpu(k), gv = ToGpu(v), gs = ToGpu(slots, DType::kI32);
  ASSERT_TRUE(gpu_->WriteKv(gk, gv, gs, kv).ok());
  Tensor rk = Poisoned(DType::kBf16, {5, 2, 64}), rv = Poisoned(DType::kBf16, {5, 2, 64});
  ASSERT_TRUE(gpu_->ReadKv(kv, gs, rk, rv).ok());
  EXPECT_EQ(RelError(ToHost(rk), ToHost(gk)), 0.0);
  EXPECT_EQ(RelError(ToHost(rv), ToHost(gv)), 0.0);
}

TEST_F(CudaBackendTest, AttentionLongContexts) {
  RunAttentionCase(*this, cpu_, *gpu_, AttnCase{128, 32, 8, 64, {{1, 40000}}}, rng_);
  RunAttentionCase(*this, cpu_, *gpu_, AttnCase{128, 28, 4, 64, {{1, 4097}, {1, 9000}}}, rng_);
  RunAttentionCase(*this, cpu_, *gpu_, AttnCase{64, 8, 8, 16, {{1000, 1000}}}, rng_);
  RunAttentionCase(*this, cpu_, *gpu_, AttnCase{128, 32, 8, 64, {{300, 2000}}}, rng_);
  // GQA group 16: the tensor-core decode kernel's full 16-row tile.
  RunAttentionCase(*this, cpu_, *gpu_, AttnCase{128, 32, 2, 64, {{1, 5000}, {1, 70}}}, rng_);
}

// Whether dense prefill chunks run on cuDNN here. gpu_check.sh sets SPARSESERVE_EXPECT_CUDNN=1
// on the GPU machine, where cuDNN must load: a run that silently fell back to the kernel would
// leave the cuDNN path untested.
bool OnCudnn() {
  const absl::Status available = kernels::cuda::CudnnPrefill::Available();
  const char* expect = std::getenv("SPARSESERVE_EXPECT_CUDNN");
  if (expect != nullptr && std::string(expect) == "1") {
    EXPECT_TRUE(available.ok()) << available;
  }
  return available.ok() && kernels::cuda::PrefillOnCudnnRequested();
}

// Which prefill/decode kernel variants a plan picks: plain causal prompt chunks go to cuDNN where
// it loads, else stay on the prefill kernel's plain variant (a rule for multi-row decode sequences
// once sent every chunk to the masked one, ~7% of a 32K prefill); windows and masks pick the masked
// variants, except windows that cover every key.
TEST_F(CudaBackendTest, PlansPickTheMaskedKernelVariantsOnlyWhenNeeded) {
  const kernels::AttentionShape shape{32, 8, 128, 300, 64};
  auto plan_of = [&](int q_len, int kv_len, int window, bool mask) {
    kernels::AttentionBatch batch;
    batch.block_tokens = 64;
    kernels::SequenceAttention sa;
    sa.q_len = q_len;
    sa.kv_len = kv_len;
    for (int b = 0; b < (kv_len + 63) / 64; ++b) sa.block_table.push_back(b);
    if (window > 0) {
      sa.pattern.kind = kernels::AttentionMethodKind::kSlidingWindow;
      sa.pattern.window = window;
    }
    if (mask) {  // a causal chain, given as an explicit mask
      sa.mask.assign(static_cast<size_t>(q_len) * q_len, 0);
      for (int r = 0; r < q_len; ++r) {
        for (int c = 0; c <= r; ++c) sa.mask[static_cast<size_t>(r) * q_len + c] = 1;
      }
    }
    batch.sequences.push_back(sa);
    kernels::AttentionWorkspace ws;
    absl::StatusOr<kernels::AttentionPlan> plan = gpu_->PlanAttention(batch, shape, ws);
    EXPECT_TRUE(plan.ok()) << plan.status();
    return plan.ok() ? plan->layout : kernels::AttentionPlan::Layout{};
  };
  const auto chunk = plan_of(200, 1000, 0, false);
  EXPECT_FALSE(chunk.prefill_masked);
  if (OnCudnn()) {  // the dense chunk runs on cuDNN, in a graph built for 256 rows and 1024 keys
    EXPECT_EQ(chunk.num_prefill_tiles, 0);
    EXPECT_EQ(chunk.cudnn_batch, 1);
    EXPECT_EQ(chunk.cudnn_max_q, 256);
    EXPECT_EQ(chunk.cudnn_max_kv, 1024);
  } else {
    EXPECT_GT(chunk.num_prefill_tiles, 0);
    EXPECT_EQ(chunk.cudnn_batch, 0);
  }
  // A window covering every key is dense attention: the same plan as the plain chunk.
  const auto covering = plan_of(200, 1000, 1000, false);
  EXPECT_FALSE(covering.prefill_masked);
  EXPECT_EQ(covering.cudnn_batch, chunk.cudnn_batch);
  EXPECT_EQ(covering.num_prefill_tiles, chunk.num_prefill_tiles);
  EXPECT_TRUE(plan_of(200, 1000, 999, false).prefill_masked);  // key 0 hidden from the last row
  for (const auto& masked : {plan_of(200, 1000, 256, false), plan_of(40, 1000, 0, true)}) {
    EXPECT_TRUE(masked.prefill_masked);  // windows and masks: the kernel's masked variant
    EXPECT_GT(masked.num_prefill_tiles, 0);
    EXPECT_EQ(masked.cudnn_batch, 0);
  }
  // A causal verify chain of 40 rows over a long prefix: split-KV tiles, not cuDNN's few CTAs
  // (with the split off: the decode kernel's row groups).
  if (kernels::cuda::PrefillSplitKv()) {
    const auto chain = plan_of(40, 2000, 0, false);
    EXPECT_EQ(chain.cudnn_batch, 0);
    EXPECT_EQ(chain.num_prefill_tiles, 1);
    EXPECT_GE(chain.prefill_splits, 2);
  }
  const auto verify = plan_of(4, 1000, 0, false);  // few rows: the decode kernel, masked
  EXPECT_EQ(verify.num_prefill_tiles, 0);
  EXPECT_TRUE(verify.decode_masked);
  EXPECT_FALSE(plan_of(1, 1000, 0, false).decode_masked);
}

// The warp-specialised prefill kernel (kernels/cuda/prefill_ws.cuh) on dense chunks kept off
// cuDNN (gpu_check.sh runs this test again with SPARSESERVE_PREFILL_ATTENTION=kernel): whole tiles
// copied by TMA at every block size that tiles 64 keys (boxes of 16 and 32 rows, half blocks of
// 128), the partial last tile gathered, GQA groups 2, 4 and 8, chunks over cached prefixes whose
// length is no multiple of 64, and several sequences in one batch.
TEST_F(CudaBackendTest, AttentionPrefillWarpSpecialized) {
  if (!kernels::cuda::PrefillOnWarpSpecialized(4, /*masked=*/false)) {
    GTEST_SKIP() << "SPARSESERVE_PREFILL_WS=0 or mma.sync tiles";
  }
  if (OnCudnn()) GTEST_SKIP() << "dense chunks run on cuDNN here";
  const std::vector<std::vector<std::pair<int, int>>> shapes = {
      {{64, 64}},
      {{200, 200}},
      {{37, 300}},
      {{130, 1000}},
      {{5, 5}, {64, 200}, {128, 128}, {70, 4000}},
  };
  for (int hd : {64, 128}) {
    for (auto [heads, kv_heads] : {std::pair{4, 2}, std::pair{32, 8}, std::pair{16, 2}}) {
      for (int bt : {16, 32, 64, 128}) {
        for (const auto& seqs : shapes) {
          RunAttentionCase(*this, cpu_, *gpu_, AttnCase{hd, heads, kv_heads, bt, seqs}, rng_);
        }
      }
    }
  }
}

// Split-KV prefill tiles: chunks of one or two tiles over long prefixes (Lookahead's 119-row
// branches and TokenSwift's 100-row trees at 4K-9K keys, a causal 70-row chunk off cuDNN, a
// windowed one, a batch mixing them with decode rows) have their keys cut into parts whose partial
// states merge into the same output as the CPU reference; the long-context test model's shape
// (head_dim 64, 4 heads over 2 KV heads) and the 8B's (128, 32 over 8).
TEST_F(CudaBackendTest, AttentionSplitKvPrefillTiles) {
  if (!kernels::cuda::PrefillSplitKv()) GTEST_SKIP() << "SPARSESERVE_PREFILL_SPLIT_KV=0";
  const std::vector<std::vector<std::pair<int, int>>> shapes = {
      {{119, 4215}},
      {{100, 9000}},
      {{70, 5000}},
      {{119, 4000}, {1, 3000}, {13, 6000}},
  };
  for (auto [hd, heads, kv_heads] : {std::tuple{64, 4, 2}, std::tuple{128, 32, 8}}) {
    for (const auto& seqs : shapes) {
      for (bool masks : {false, true}) {  // causal chains too: never cuDNN's few CTAs
        RunAttentionCase(*this, cpu_, *gpu_,
                         AttnCase{hd, heads, kv_heads, 64, seqs, 0, 0, masks, /*min_splits=*/2},
                         rng_);
      }
    }
    RunAttentionCase(*this, cpu_, *gpu_,
                     AttnCase{hd, heads, kv_heads, 16, {{64, 3000}}, 1000, 4, true, 2}, rng_);
  }
}

TEST_F(CudaBackendTest, BadInputsAreRejected) {
  Tensor host = Tensor::Zeros(DType::kF32, {4, 8});
  Tensor dev = ToGpu(host);
  Tensor w = ToGpu(Tensor::Zeros(DType::kF32, {8}));
  EXPECT_EQ(gpu_->RmsNorm(host, w, 1e-5f, dev).code(), absl::StatusCode::kInvalidArgument);
  Tensor wrong = ToGpu(Tensor::Zeros(DType::kF32, {4, 9}));
  EXPECT_EQ(gpu_->RmsNorm(dev, w, 1e-5f, wrong).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(gpu_->Linear(dev, wrong, Tensor(), dev).code(), absl::StatusCode::kInvalidArgument);
  kernels::AttentionBatch batch;
  batch.block_tokens = 16;
  kernels::SequenceAttention sa;
  sa.q_len = 1;
  sa.kv_len = 20;
  sa.block_table = {0};  // needs 2 blocks
  batch.sequences.push_back(sa);
  Tensor q = ToGpu(Tensor::Zeros(DType::kF32, {1, 4, 64}));
  Tensor kv = *gpu_->Allocate(DType::kBf16, {8, 16, 2, 64});
  EXPECT_EQ(kernels::RunAttention(*gpu_, batch, q, kv, q).code(),
            absl::StatusCode::kInvalidArgument);
  batch.sequences[0].block_table = {0, 1};
  batch.sequences[0].pattern.kind = kernels::AttentionMethodKind::kTokenSelect;  // no state slot
  EXPECT_EQ(kernels::RunAttention(*gpu_, batch, q, kv, q).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(gpu_->SupportsAttention(batch.sequences[0].pattern, 96).code(),
            absl::StatusCode::kUnimplemented);
  batch.sequences[0].pattern = {};
  batch.sequences[0].mask = {3};  // not 0/1
  EXPECT_EQ(kernels::RunAttention(*gpu_, batch, q, kv, q).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(gpu_->Synchronize().ok());
}

}  // namespace
}  // namespace sparseserve::testing
