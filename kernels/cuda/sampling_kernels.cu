// Sampling on the device: the pipeline of kernels/sampling_plan.h for one logits row per CTA,
// picking the token kernels::SampleRow (the host reference) picks, bit for bit.
//
// Per row: penalised logits (into the scratch row, only when the row has penalised ids), a fused
// argmax (greedy rows and rows without a finite max stop there), weights in place, then the kept
// prefix of the order "weight descending, id ascending" as one 64-bit key bound
// key = weight bits << 32 | (2^32 - 1 - id): kept <=> key >= bound. Top-k and top-p find their
// bound with a radix select over the weight bits (8-bit digits, shared-memory histograms of counts
// or integer masses, zero weights skipped) and then the tie-breaking id with an id-ordered scan;
// min-p's bound is its weight bits. The draw scans the kept masses in id order: per-thread
// contiguous chunks, a block exclusive scan of their integer masses, and one thread walks the
// chunk that holds the threshold. All sums are integers, so their order does not matter.
#include <cstdint>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/sampling_math.h"

namespace sparseserve::kernels::cuda {
namespace {

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;
constexpr int kDigitBits = 8;
constexpr int kBins = 1 << kDigitBits;

struct SampleShared {
  unsigned long long hist[kBins];  // radix histogram: counts or masses per digit
  unsigned long long scan[kWarps];
  float best_value[kWarps];
  int32_t best_idx[kWarps];
  unsigned long long above;  // measure of the bins above the chosen digit
  uint32_t digit;
  int32_t found;  // an id one thread found for the whole block
};

__device__ __forceinline__ unsigned long long Key(uint32_t weight_bits, int32_t id) {
  return (static_cast<unsigned long long>(weight_bits) << 32) |
         (0xFFFFFFFFu - static_cast<uint32_t>(id));
}

// Exclusive prefix sum of `v` over the block in thread order; `*total` gets the block's sum.
// Every thread must call it; it synchronises, and sh.scan is free again when it returns.
__device__ __forceinline__ unsigned long long BlockExclusiveScan(unsigned long long v,
                                                                 SampleShared& sh,
                                                                 unsigned long long* total) {
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  unsigned long long x = v;
  for (int o = 1; o < 32; o <<= 1) {
    const unsigned long long y = __shfl_up_sync(0xffffffffu, x, o);
    if (lane >= o) x += y;
  }
  if (lane == 31) sh.scan[warp] = x;
  __syncthreads();
  if (warp == 0) {
    unsigned long long w = sh.scan[lane];  // kThreads / 32 == 32 warps: every lane has one
    for (int o = 1; o < 32; o <<= 1) {
      const unsigned long long y = __shfl_up_sync(0xffffffffu, w, o);
      if (lane >= o) w += y;
    }
    sh.scan[lane] = w;  // inclusive sums of the warps
  }
  __syncthreads();
  const unsigned long long before = warp > 0 ? sh.scan[warp - 1] : 0;
  *total = sh.scan[kWarps - 1];
  __syncthreads();
  return before + x - v;
}

// The largest value of the row (NaN read as -inf) and its lowest index, to every thread.
__device__ __forceinline__ void BlockArgMax(const float* row, int vocab, SampleShared& sh,
                                            float* max_value, int32_t* max_idx) {
  float v = -INFINITY;
  int32_t idx = INT32_MAX;  // no element yet: loses to any element
  for (int i = threadIdx.x; i < vocab; i += kThreads) {
    const float x = SamplingLogit(row[i]);
    if (x > v || idx == INT32_MAX) v = x, idx = i;  // ascending i: the first of equals stays
  }
  const auto better = [](float v1, int32_t i1, float v2, int32_t i2) {
    return v2 > v1 || (v2 == v1 && i2 < i1);
  };
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, v, o);
    const int32_t oi = __shfl_xor_sync(0xffffffffu, idx, o);
    if (better(v, idx, ov, oi)) v = ov, idx = oi;
  }
  const int lane = threadIdx.x % 32;
  if (lane == 0) {
    sh.best_value[threadIdx.x / 32] = v;
    sh.best_idx[threadIdx.x / 32] = idx;
  }
  __syncthreads();
  v = sh.best_value[lane];
  idx = sh.best_idx[lane];
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, v, o);
    const int32_t oi = __shfl_xor_sync(0xffffffffu, idx, o);
    if (better(v, idx, ov, oi)) v = ov, idx = oi;
  }
  *max_value = v;
  *max_idx = idx;
  __syncthreads();
}

// Radix select over the nonzero weights in descending order: the weight bits B of the element
// at which the running measure (1 per element, or its mass with kByMass) reaches `target`.
// Returns the measure still needed within the elements of weight B (>= 1): the measure of the
// heavier elements is target minus it.
// REQUIRES: 1 <= target <= the total measure of the nonzero weights.
template <bool kByMass>
__device__ __forceinline__ unsigned long long SelectWeightBits(const float* weights, int vocab,
                                                               unsigned long long target,
                                                               SampleShared& sh,
                                                               uint32_t* bits_out) {
  uint32_t prefix = 0, mask = 0;
  unsigned long long remaining = target;
  for (int shift = 32 - kDigitBits; shift >= 0; shift -= kDigitBits) {
    for (int b = threadIdx.x; b < kBins; b += kThreads) sh.hist[b] = 0;
    __syncthreads();
    for (int i = threadIdx.x; i < vocab; i += kThreads) {
      const float w = weights[i];
      const uint32_t bits = WeightBits(w);
      if (bits == 0 || (bits & mask) != prefix) continue;
      const unsigned long long measure = kByMass ? SamplingMass(w) : 1ull;
      if (measure == 0) continue;
      atomicAdd(&sh.hist[(bits >> shift) & (kBins - 1)], measure);
    }
    __syncthreads();
    if (threadIdx.x < 32) {
      // Lane l holds the 8 bins 255 - 8l down to 248 - 8l: lane order is descending digit order.
      const int lane = threadIdx.x;
      const int top = kBins - 1 - (kBins / 32) * lane;
      unsigned long long local = 0;
      for (int b = top; b > top - kBins / 32; --b) local += sh.hist[b];
      unsigned long long inclusive = local;
      for (int o = 1; o < 32; o <<= 1) {
        const unsigned long long y = __shfl_up_sync(0xffffffffu, inclusive, o);
        if (lane >= o) inclusive += y;
      }
      unsigned long long cum = inclusive - local;
      if (cum < remaining && remaining <= inclusive) {  // exactly one lane
        for (int b = top; b > top - kBins / 32; --b) {
          if (cum + sh.hist[b] >= remaining) {
            sh.digit = static_cast<uint32_t>(b);
            sh.above = cum;
            break;
          }
          cum += sh.hist[b];
        }
      }
    }
    __syncthreads();
    prefix |= sh.digit << shift;
    mask |= static_cast<uint32_t>(kBins - 1) << shift;
    remaining -= sh.above;
    __syncthreads();
  }
  *bits_out = prefix;
  return remaining;
}

// The id of the rank-th (1-based) element, in ascending id order, whose weight bits are `bits`,
// and in *mass_above the total mass of the heavier elements.
// REQUIRES: at least `rank` such elements; rank >= 1.
__device__ __forceinline__ int32_t NthWithBits(const float* weights, int vocab, uint32_t bits,
                                               unsigned long long rank, SampleShared& sh,
                                               unsigned long long* mass_above) {
  const int chunk = (vocab + kThreads - 1) / kThreads;
  const int begin = min(vocab, static_cast<int>(threadIdx.x) * chunk);
  const int end = min(vocab, begin + chunk);
  unsigned long long count = 0, heavier = 0;
  for (int i = begin; i < end; ++i) {
    const float w = weights[i];
    const uint32_t b = WeightBits(w);
    if (b == bits) ++count;
    if (b > bits) heavier += SamplingMass(w);
  }
  unsigned long long total_count = 0;
  const unsigned long long before = BlockExclusiveScan(count, sh, &total_count);
  BlockExclusiveScan(heavier, sh, mass_above);
  if (before < rank && rank <= before + count) {
    unsigned long long seen = before;
    for (int i = begin; i < end; ++i) {
      if (WeightBits(weights[i]) == bits && ++seen == rank) {
        sh.found = i;
        break;
      }
    }
  }
  __syncthreads();
  const int32_t id = sh.found;
  __syncthreads();
  return id;
}

__global__ void __launch_bounds__(kThreads, 1)
    SampleKernel(const __grid_constant__ SampleParams p) {
  __shared__ SampleShared sh;
  const int64_t r = blockIdx.x;
  const SampleRowParams rp = p.rows[r];
  const int vocab = p.vocab;
  const float* in = p.logits + r * vocab;
  float* weights = p.scratch + r * vocab;

  // 1. Penalised logits: copied, then each penalised id recomputed from the input (so an id
  // listed twice is penalised once). Without penalties the input is read directly.
  const float* logits = in;
  if (rp.repetition_penalty != 1.0f && rp.ids_end > rp.ids_begin) {
    for (int i = threadIdx.x; i < vocab; i += kThreads) weights[i] = SamplingLogit(in[i]);
    __syncthreads();
    for (int j = rp.ids_begin + static_cast<int>(threadIdx.x); j < rp.ids_end; j += kThreads) {
      const int32_t id = p.penalized_ids[j];
      if (id < 0 || id >= vocab) continue;  // rejected on the host; never index with it
      weights[id] = PenalizedLogit(SamplingLogit(in[id]), rp.repetition_penalty);
    }
    __syncthreads();
    logits = weights;
  }

  // 2. Argmax: the pick of greedy rows and of rows whose max is +inf or that are all -inf.
  float max_logit = 0;
  int32_t best = 0;
  BlockArgMax(logits, vocab, sh, &max_logit, &best);
  if (rp.greedy || !isfinite(max_logit)) {
    if (threadIdx.x == 0) p.out[r] = best;
    return;
  }

  // 3. Weights in place (each thread rewrites only what it read), and how many are nonzero.
  unsigned long long num_nonzero = 0;
  unsigned long long total_mass = 0;
  {
    unsigned long long nonzero = 0, mass = 0;
    for (int i = threadIdx.x; i < vocab; i += kThreads) {
      const float w = SamplingWeight(SamplingLogit(logits[i]), max_logit, rp.inv_temperature);
      weights[i] = w;
      nonzero += w != 0.0f ? 1 : 0;
      mass += SamplingMass(w);
    }
    BlockExclusiveScan(nonzero, sh, &num_nonzero);
    BlockExclusiveScan(mass, sh, &total_mass);
  }

  // 4. The kept prefix as a key bound (0 keeps everything).
  unsigned long long bound = 0;
  unsigned long long top_k_mass = total_mass;
  if (rp.top_k > 0 && rp.top_k < vocab) {
    const unsigned long long k = static_cast<unsigned long long>(rp.top_k);
    uint32_t bits = 0;  // k beyond the nonzero weights: the cut is among the zeros
    const unsigned long long rank =
        k <= num_nonzero ? SelectWeightBits<false>(weights, vocab, k, sh, &bits) : k - num_nonzero;
    unsigned long long heavier = 0;
    const int32_t id = NthWithBits(weights, vocab, bits, rank, sh, &heavier);
    bound = Key(bits, id);
    top_k_mass = heavier + rank * SamplingMass(__uint_as_float(bits));
  }
  if (rp.top_p < 1.0f) {
    const unsigned long long target = TopPTarget(rp.top_p, top_k_mass);
    uint32_t bits = 0;
    const unsigned long long needed = SelectWeightBits<true>(weights, vocab, target, sh, &bits);
    const unsigned long long unit = SamplingMass(__uint_as_float(bits));  // > 0: it reached target
    unsigned long long heavier = 0;
    const int32_t id = NthWithBits(weights, vocab, bits, (needed + unit - 1) / unit, sh, &heavier);
    bound = max(bound, Key(bits, id));
  }
  if (rp.min_p > 0.0f) {
    bound = max(bound, static_cast<unsigned long long>(WeightBits(rp.min_p)) << 32);
  }

  // 5. The draw: the first kept id, in id order, whose running mass passes the threshold.
  const int chunk = (vocab + kThreads - 1) / kThreads;
  const int begin = min(vocab, static_cast<int>(threadIdx.x) * chunk);
  const int end = min(vocab, begin + chunk);
  unsigned long long mass = 0;
  for (int i = begin; i < end; ++i) {
    const float w = weights[i];
    if (Key(WeightBits(w), i) >= bound) mass += SamplingMass(w);
  }
  unsigned long long kept_mass = 0;
  const unsigned long long before = BlockExclusiveScan(mass, sh, &kept_mass);
  const unsigned long long threshold = DrawThreshold(rp.uniform, kept_mass);
  if (threadIdx.x == 0) p.out[r] = best;  // overwritten below; never leave the row unwritten
  __syncthreads();
  if (before <= threshold && threshold < before + mass) {  // exactly one thread
    unsigned long long running = before;
    for (int i = begin; i < end; ++i) {
      const float w = weights[i];
      if (Key(WeightBits(w), i) < bound) continue;
      running += SamplingMass(w);
      if (running > threshold) {
        p.out[r] = i;
        break;
      }
    }
  }
}

}  // namespace

cudaError_t LaunchSample(const SampleParams& params, cudaStream_t stream) {
  if (params.num_rows == 0) return cudaSuccess;
  SampleKernel<<<static_cast<unsigned>(params.num_rows), kThreads, 0, stream>>>(params);
  return cudaGetLastError();
}

}  // namespace sparseserve::kernels::cuda
