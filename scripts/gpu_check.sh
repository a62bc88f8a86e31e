#!/usr/bin/env bash
# gpu_check.sh [STAGE...] — every GPU check and benchmark of the CUDA backend in one run, for a GPU
# machine (see ../shared/tools/README.md): build here, pack with
#   ../shared/tools/devbundle .devbundle build/bin/sparseserve build/bin/cuda_backend_test \
#       build/kernels/libsparseserve_cuda_ops.so
# and run `bash scripts/gpu_check.sh` there with .devbundle and models/ beside the tree.
# Stages (default: all): tests sanitizer golden services kv_transfer (GPU-direct KV, issue 20)
# eval (long-context accuracy) minference
# (MInference's accuracy, issue 12) tokenselect tokenselect_eval tokenselect_bench (issue 13)
# tokenselect_kvh (decode steps with TokenSelect lists per KV head against per layer, issue 10)
# spec (speculative decoding against plain CUDA decoding on stories260K, issue 14: exactness,
# acceptance, tokens/s with the controller and at a fixed draft length) spec_eval (the same on
# the long-context test model's long-generation task, bench/longctx/spec_check.sh) spec_batches
# (TokenSwift against plain at B=1/8/64 on the long-context model and, with random heads, on the
# synthetic 8B: issue 15's "never slower at any batch") spec_verify
# (the synthetic Llama-3-8B's verify-step cost per draft length and batch: `bench model
# --decode-draft K`, K in $SPEC_DRAFTS, and `--decode-draft-tree T`, T in $SPEC_TREES) spec_self (sparse self-speculation's step costs on the
# synthetic Llama-3-8B at long contexts, issue 15: plain decode, the verify step of 4 drafts and
# the TokenSelect draft step, for the projection in bench/RESULTS.md) spec_train (TokenSwift's
# draft heads trained for stories260K and the long-context test model by
# tools/train_spec_adapters.py, into $out/adapters) window (sliding-window models with rolling KV on CUDA,
# bench/window/window_check.sh, issue 17)
# kernels attention sparse_prefill (MInference's sparse variants per layer against cuDNN dense:
# useful FLOP rate and density, bench/cuda/sparse_prefill_bench.py) peer bench baseline
# (this binary against an older one, when packed) graphs (the
# decode cases with CUDA graphs off, for the A/B) shadow (the shadow-dense monitor's cost on
# sliding-window decode: rate 0 against 0.01) profile cublas (decode GEMMs through cuBLASLt
# instead of the skinny kernel) ncu (per-kernel device times of one decode step, from Nsight
# Compute). tokenselect_ncu (TokenSelect's per-layer decode steps at 512K timed by Nsight
# Compute, summed per call: bench/cuda/ncu_ranges.py). tp (issue 19: tensor parallelism, two GPUs
# against one; needs a kind with two GPUs, so not in the default list).
# Logs go to /tmp/gpu_check and, packed as gpu_check.tgz, to $OUT when it is set (the device
# tool returns at most 8 files); a short table is printed last.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
out=/tmp/gpu_check
rm -rf "$out" && mkdir -p "$out"
# shellcheck disable=SC1091
source .devbundle/env.sh
export SPARSESERVE_TEST_DATA_DIR=$root/tests/data SPARSESERVE_MODEL_MIRROR=$root/models
export PYTHONUNBUFFERED=1
# cuDNN for the dense prefill path (kernels/cuda/cudnn_prefill.h) is PyTorch's on the GPU machine
# (the bundle carries none: its engines are hundreds of MiB), with the CUDA runtime its frontend
# opens; the tests then insist that it loads (SPARSESERVE_EXPECT_CUDNN).
site=$(python3 -c 'import site; print(site.getsitepackages()[0])' 2>/dev/null)
for lib in libcudnn.so.9 libcudart.so.13; do
  dir=$(dirname "$(find "$site" -name "$lib" 2>/dev/null | head -1)")
  [ "$dir" != . ] && export LD_LIBRARY_PATH=$dir:$LD_LIBRARY_PATH
done
[ -n "$(find "$site" -name libcudnn.so.9 2>/dev/null | head -1)" ] && export SPARSESERVE_EXPECT_CUDNN=1
stages=${*:-tests sanitizer golden services kv_transfer eval minference tokenselect tokenselect_eval tokenselect_kvh spec spec_batches spec_eval spec_verify spec_self window kernels attention sparse_prefill tokenselect_bench peer bench baseline graphs shadow profile cublas ncu}
summary=()
run() {  # run NAME CMD... — logs to $out/NAME.log, records ok/FAIL
  local name=$1; shift
  echo "=== $name: $*" >&2
  local t0=$SECONDS
  if "$@" >"$out/$name.log" 2>&1; then
    summary+=("ok   $name ($((SECONDS - t0)) s)")
  else
    summary+=("FAIL $name ($((SECONDS - t0)) s) — see $name.log")
    tail -n 40 "$out/$name.log" >&2
  fi
}
has() { [[ " $stages " == *" $1 "* ]]; }

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader >"$out/gpu.txt" 2>&1
has tests && run tests cuda_backend_test
# The prefill kernel itself with dense chunks kept off cuDNN (SPARSESERVE_PREFILL_ATTENTION=kernel),
# and its alternatives (the A/B switches of kernels/cuda/cuda_kernels.h): mma.sync tiles, and
# wgmma with fewer query heads per CTA; and dense decode on the CUDA-core kernel instead of the
# tensor-core one (SPARSESERVE_DECODE_TENSOR_CORES=0), against the CPU reference too.
has tests && run tests_prefill_variants bash -c "
  filter='*AttentionPrefill*:*AttentionMasks*:*AttentionLong*:*MInference*'
  export SPARSESERVE_PREFILL_ATTENTION=kernel
  cuda_backend_test --gtest_filter=\$filter &&
  SPARSESERVE_PREFILL_MMA=sync cuda_backend_test --gtest_filter=\$filter &&
  SPARSESERVE_PREFILL_HEADS_PER_CTA=2 cuda_backend_test --gtest_filter=\$filter &&
  SPARSESERVE_PREFILL_HEADS_PER_CTA=1 cuda_backend_test --gtest_filter=\$filter &&
  SPARSESERVE_PREFILL_WS=0 cuda_backend_test --gtest_filter=\$filter &&
  SPARSESERVE_DECODE_TENSOR_CORES=0 cuda_backend_test \
    --gtest_filter='*AttentionPrefillChunkDecode*:*AttentionLong*:*Shadow*:CudaTokenSelectTest.*'"
has sanitizer && run sanitizer compute-sanitizer --tool memcheck --error-exitcode 1 \
  cuda_backend_test --gtest_filter='*RmsNorm*:*Linear*:*Rope*:*SiluMul*:*FillUniform*:*Stories*:*StepGraph*:*SampleMatches*:*SampleRejects*:*ReadKv*:*FlipsAreRare*:*Shadow*:*RelativeL2Error*:*MInferenceSmall*:*TokenLogprobs*:*AttentionLongContexts*:*PlansPick*:*AttentionFewRowVerifySteps*:*AttentionSplitKv*'
# Issue 16's warp-specialised prefill kernels (TMA, mbarriers) with dense chunks kept off cuDNN:
# the prefill and MInference tests (the `prefill_ws` stage alone, not in the default list, where
# `tests` covers them), and memcheck (with `sanitizer` too).
has prefill_ws && run prefill_ws_tests env SPARSESERVE_PREFILL_ATTENTION=kernel cuda_backend_test \
  --gtest_filter='*AttentionPrefill*:*AttentionLong*:*MInference*:*AttentionSplitKv*:*PlansPick*'
# ... and MInference's long ranges packed and gathered instead of copied as aligned blocks by TMA.
has prefill_ws && run prefill_ws_packed env SPARSESERVE_PREFILL_ATTENTION=kernel \
  SPARSESERVE_PREFILL_WS_ALIGNED=0 cuda_backend_test --gtest_filter='*MInference*'
if has sanitizer || has prefill_ws; then
  run sanitizer_prefill_ws env SPARSESERVE_PREFILL_ATTENTION=kernel \
    compute-sanitizer --tool memcheck --error-exitcode 1 cuda_backend_test \
    --gtest_filter='*AttentionPrefillWarpSpecialized*:*MInferenceSmall*:*AttentionSplitKv*'
fi
if has golden; then
  run golden bash -c "sparseserve generate --device cuda --model models/stories260K/stories260K.gguf \
    --prompt 'Once upon a time' --max-tokens 60 --temperature 0 >$out/golden.txt &&
    cmp $out/golden.txt tests/data/golden_once_upon_a_time.txt"
  # MInference forced on at covering budgets (the default VS(1000, 6096) covers a 512 context)
  # must give the golden output too.
  run golden_minference bash -c "sparseserve generate --device cuda \
    --model models/stories260K/stories260K.gguf --prompt 'Once upon a time' --max-tokens 60 \
    --temperature 0 --prefill-attention minference --sparse-prefill-threshold 0 \
    >$out/golden_minference.txt && cmp $out/golden_minference.txt tests/data/golden_once_upon_a_time.txt"
fi
if has services; then
  run services bash scripts/gpu_services_check.sh  # GPU to GPU (issue 20 item 2)
  run services_staged env EXPECT_KV=staged bash scripts/gpu_services_check.sh --kv-staging on
  # Issue 20: either worker killed mid-PUT with KV moving GPU to GPU; the other serves on.
  run services_peer_death bash scripts/gpu_peer_death_check.sh
fi
# Issue 20 item 2: KV PUT GPU to GPU between two processes (cuda_ipc) against ucx_perftest on GPU
# memory with the same transports, the Llama-3-8B layout (32 layers x 256 blocks x 256 KiB), the
# host-memory wire of a staged transfer and the whole staged path (--staged: the device <-> host
# copies included); then the mixed and cross-node cases, each verified
# block by block: host -> GPU, GPU -> host, and GPU -> GPU without cuda_ipc (tcp + cuda_copy, what
# two nodes without RDMA have).
if has kv_transfer; then
  run kv_transfer_gpu bash bench/kv_transfer_vs_perftest.sh cuda_ipc,cuda_copy,tcp,self 2048 3 cuda
  run kv_transfer_host bash bench/kv_transfer_vs_perftest.sh sm,self 2048 3 host
  # What --kv-staging=on does with the same KV: device -> host, host PUT, host -> device.
  run kv_transfer_staged kv_transfer_bench --staged --total_mib 2048 --runs 3
  run kv_transfer_staged_16g kv_transfer_bench --staged --total_mib 16384 --runs 2 --contiguous
  run kv_transfer_gpu_16g kv_transfer_bench --source_memory cuda --target_memory cuda \
    --total_mib 16384 --runs 2 --contiguous
  run kv_transfer_host_to_gpu kv_transfer_bench --source_memory host --target_memory cuda \
    --total_mib 512 --runs 2
  run kv_transfer_gpu_to_host kv_transfer_bench --source_memory cuda --target_memory host \
    --total_mib 512 --runs 2
  run kv_transfer_gpu_tcp kv_transfer_bench --source_memory cuda --target_memory cuda \
    --transports tcp,cuda_copy,self --total_mib 512 --runs 2
  run kv_transfer_proto env UCX_PROTO_INFO=y kv_transfer_bench --source_memory cuda \
    --target_memory cuda --total_mib 256 --runs 1
  # The goal's yardstick: a 128K-token prompt's prefill time (its KV is the 16 GiB above).
  run kv_transfer_prefill_128k sparseserve bench model --synthetic llama3-8b --device cuda \
    --prefill-lengths 131072 --decode-batches ''
fi
# Issue 11: the long-context accuracy table (dense, sliding window, transformers on a sample).
has eval && run eval bash bench/longctx/eval_check.sh "$out"
# Issue 12: MInference's accuracy beside dense at 8K and 16K, density in every cell.
has minference && run minference bash bench/longctx/minference_check.sh "$out"
# MInference's speed on random weights: the planted index (issue 16's) against dense, 32K prefill
# of the synthetic Llama-3-8B, in the same call; and the new kernels under racecheck.
if has minference_speed; then
  for attention in dense minference; do
    run "minference_speed_$attention" sparseserve bench model --synthetic llama3-8b --device cuda \
      --prefill-lengths 32768 --decode-batches '' --warmup 1 --prefill-attention "$attention" \
      --minference-index planted
  done
  # Our kernels only: racecheck flags shared-memory hazards inside cuDNN's own wgmma SDPA kernel
  # (seen 2026-11-26: its mbarrier hand-offs are invisible to the tool), so dense chunks stay on
  # the project's kernel here.
  run minference_racecheck env SPARSESERVE_PREFILL_ATTENTION=kernel compute-sanitizer \
    --tool racecheck --error-exitcode 1 cuda_backend_test --gtest_filter='*MInferenceSmall*'
fi
# Issue 13: TokenSelect's CUDA tests under the sanitizers (stories260K's head_dim 8 has no CUDA
# TokenSelect kernel, so its golden run is the covering config of tokenselect_check.sh), its
# accuracy beside dense at 8K and 16K (density and hit rate in every cell), and its per-layer
# attention against SDPA/cuDNN (bench/cuda/tokenselect_bench.py).
if has tokenselect; then
  run tokenselect_tests cuda_backend_test --gtest_filter='CudaTokenSelectTest.*'
  run tokenselect_racecheck compute-sanitizer --tool racecheck --error-exitcode 1 \
    cuda_backend_test --gtest_filter='*TokenSelectSmall*'
  run tokenselect_memcheck compute-sanitizer --tool memcheck --error-exitcode 1 \
    cuda_backend_test --gtest_filter='*TokenSelectSmall*:*TokenSelect*Replay*'
fi
has tokenselect_eval && run tokenselect_eval bash bench/longctx/tokenselect_check.sh "$out"
# Issue 10's lists per KV head: the synthetic Llama-3-8B's decode step with one TokenSelect
# selection per layer and one per KV head (8 lists), re-selecting every step and reusing, beside
# dense, in the same call.
if has tokenselect_kvh; then
  kvh_cases=(--synthetic llama3-8b --device cuda --prefill-lengths "" --iters 10
    --decode-batches "${TOKENSELECT_KVH_BATCHES:-1,4}"
    --decode-contexts "${TOKENSELECT_KVH_CONTEXTS:-32768,131000}")
  run tokenselect_kvh_dense sparseserve bench model "${kvh_cases[@]}"
  for per in "" --tokenselect-per-kv-head; do
    for reselect in "" --tokenselect-reselect; do
      run "tokenselect_kvh${per:+_per_head}${reselect:+_reselect}" sparseserve bench model \
        "${kvh_cases[@]}" --decode-attention tokenselect --tokenselect-k 2048 $per $reselect
    done
  done
fi
lib=.devbundle/lib/libsparseserve_cuda_ops.so
# Speculative decoding (issue 14): `bench spec` on the CUDA backend — every mode's greedy output
# against plain CUDA greedy (the table's last column), acceptance, steps compression and tokens/s
# under the controller and at a fixed draft length (the verify steps' cost per draft and batch);
# each mode $SPEC_REPEATS times (default 3) beside its own plain run, the median ratio reported.
# sparse-self drafts with a 64-token window + 4 sinks here: CUDA's TokenSelect needs head_dim 64
# or 128 (stories260K's is 8).
# tokenswift drafts with the same window and stories260K's trained heads, kangaroo with its trained
# early-exit adapter (tests/data/spec_adapters).
if has spec; then
  adapters=tests/data/spec_adapters
  for controller in true false; do
    run "spec_controller_$controller" sparseserve bench spec --device cuda \
      --model models/stories260K/stories260K.gguf --kv-cache-tokens 200000 \
      --spec-batches "${SPEC_BATCHES:-1,8,64}" --spec-tokens "${SPEC_TOKENS:-400}" \
      --spec-repeats "${SPEC_REPEATS:-3}" \
      --spec-controller=$controller --sparse-self-attention sliding-window \
      --sparse-self-window 64 --sparse-self-sinks 4 \
      --spec-modes prompt-lookup,lookahead,sparse-self,tokenswift,kangaroo,oracle:0,oracle:0.3,oracle:0.7 \
      --tokenswift-heads $adapters/s260k_tokenswift.safetensors \
      --kangaroo-adapter $adapters/s260k_kangaroo.safetensors ${SPEC_FLAGS:-}
  done
fi
# Issue 15: TokenSwift's draft heads trained by self-distillation (tools/train_spec_adapters.py)
# for stories260K and the long-context test model; the adapters land in $out/adapters.
if has spec_train; then
  mkdir -p "$out/adapters"
  run spec_train_stories python3 tools/train_spec_adapters.py --method tokenswift \
    --model models/stories260K/stories260K.bin \
    --out "$out/adapters/s260k_tokenswift.safetensors" ${SPEC_TRAIN_STORIES_FLAGS:-}
  run spec_train_longctx python3 tools/train_spec_adapters.py --method tokenswift \
    --model tests/data/longctx_model \
    --out "$out/adapters/longctx_model_tokenswift.safetensors" ${SPEC_TRAIN_LONGCTX_FLAGS:-}
fi
# Issue 15's "never slower at any batch": TokenSwift with the long-context model's trained heads,
# no draft pass, chained 4-grams, against plain decoding at B=1/8/64 ($SPEC_BATCH_TOKENS tokens,
# default 3000, 5 runs each), and on the synthetic 8B with random heads made here
# (bench/cuda/random_tokenswift_heads.py: speed only). Each run's stderr line says where the time
# beyond plain steps went (host phases, head-read, drafted and graph set-up steps).
if has spec_batches; then
  chain=(--tokenswift-draft-pass=false --tokenswift-tree 1,2,2,2 --tokenswift-ngram-k 2
    --tokenswift-ngram-chain 3)
  run spec_batches_longctx sparseserve bench spec --device cuda --model tests/data/longctx_model \
    --kv-cache-tokens 400000 --spec-tokens "${SPEC_BATCH_TOKENS:-3000}" --spec-repeats 5 \
    --spec-batches 1,8,64 --spec-modes tokenswift "${chain[@]}" \
    --tokenswift-heads tests/data/spec_adapters/longctx_model_tokenswift.safetensors
  run spec_batches_heads_8b python3 bench/cuda/random_tokenswift_heads.py "$out/heads_8b.safetensors" \
    --hidden 4096
  run spec_batches_8b sparseserve bench spec --device cuda --model synthetic:llama3-8b \
    --kv-cache-tokens 40000 --spec-tokens 512 --spec-repeats 3 --spec-batches 1,8,64 \
    --spec-modes tokenswift "${chain[@]}" --tokenswift-heads "$out/heads_8b.safetensors"
  rm -f "$out/heads_8b.safetensors"  # 96 MiB: not for the packed logs
fi
has spec_eval && run spec_eval bash bench/longctx/spec_check.sh "$out"
has window && run window bash bench/window/window_check.sh "$out"
if has spec_verify; then
  for draft in ${SPEC_DRAFTS:-0 1 3 7}; do
    run "spec_verify_$draft" sparseserve bench model --synthetic llama3-8b --device cuda \
      --prefill-lengths "" --decode-batches 1,8,64 --decode-contexts 1024,32768 --iters 10 \
      --decode-draft "$draft"
  done
  # The widest trees (Lookahead's window and guesses, TokenSwift's tree and 4-grams): the 8B
  # projection of issues 14 and 15 (bench/RESULTS.md, session 25).
  for tree in ${SPEC_TREES:-lookahead tokenswift}; do
    run "spec_verify_tree_$tree" sparseserve bench model --synthetic llama3-8b --device cuda \
      --prefill-lengths "" --decode-batches 1,4 --decode-contexts 1024,32768 --iters 10 \
      --decode-draft-tree "$tree"
  done
fi
if has spec_self; then
  self_cases=(--synthetic llama3-8b --device cuda --prefill-lengths "" --iters 10
    --decode-batches "${SPEC_SELF_BATCHES:-1,8}" --decode-contexts "${SPEC_SELF_CONTEXTS:-32768,131072}")
  run spec_self_plain sparseserve bench model "${self_cases[@]}"
  run spec_self_verify4 sparseserve bench model "${self_cases[@]}" --decode-draft 4
  run spec_self_draft sparseserve bench model "${self_cases[@]}" --decode-attention tokenselect \
    --tokenselect-k 768 --tokenselect-initial 16 --tokenselect-local 256
  run spec_self_draft_fresh sparseserve bench model "${self_cases[@]}" \
    --decode-attention tokenselect --tokenselect-k 768 --tokenselect-initial 16 \
    --tokenselect-local 256 --tokenselect-reselect
fi
has tokenselect_bench && run tokenselect_bench python3 bench/cuda/tokenselect_bench.py \
  --lib "$lib" --out "$out/tokenselect_bench.json" ${TOKENSELECT_BENCH_FLAGS:-}
# The same steps' device time per call from Nsight Compute (issue 13's cache-hit goal at 512K: the
# Python-launched calls above are launch-bound; in the engine a step replays from a graph): one
# process per NVTX range, three calls each, summed by bench/cuda/ncu_ranges.py.
if has tokenselect_ncu; then
  ts_ncu() {  # ts_ncu NAME RANGE [VAR=VALUE...] — one NVTX range of the bench under ncu
    local name=$1 range=$2; shift 2
    run "$name" env "$@" ncu --nvtx --nvtx-include "$range/" --clock-control none \
      --metrics gpu__time_duration.sum --csv python3 bench/cuda/tokenselect_bench.py --lib "$lib" \
      --ncu --decode-lengths "${TOKENSELECT_NCU_LENGTH:-524288}" --decode-batches 1 \
      --prefill-lengths ''
  }
  for range in cudnn ts_hit ts_reselect; do ts_ncu "tokenselect_ncu_$range" "$range"; done
  run tokenselect_ncu python3 bench/cuda/ncu_ranges.py "$out"/tokenselect_ncu_*.log
  # The token-list attention's split (SPARSESERVE_TOKENSELECT_CTAS_PER_SM, default 2) on the hit.
  for ctas in ${TOKENSELECT_NCU_CTAS:-}; do
    ts_ncu "tokenselect_ncu_ctas${ctas}_ts_hit" ts_hit SPARSESERVE_TOKENSELECT_CTAS_PER_SM="$ctas"
    run "tokenselect_ncu_ctas$ctas" python3 bench/cuda/ncu_ranges.py \
      "$out/tokenselect_ncu_ctas${ctas}_ts_hit.log"
  done
fi
has kernels && [ -f bench/cuda/kernel_check.py ] &&
  run kernels python3 bench/cuda/kernel_check.py --lib "$lib" --out "$out/kernel_check.json"
has attention && [ -f bench/cuda/attention_bench.py ] &&
  run attention python3 bench/cuda/attention_bench.py --lib "$lib" --out "$out/attention.json"
# Decode attention on the CUDA-core kernel beside the tensor-core one (issue 16 item 2).
has attention && [ -f bench/cuda/attention_bench.py ] &&
  run attention_decode_cuda_cores env SPARSESERVE_DECODE_TENSOR_CORES=0 python3 \
    bench/cuda/attention_bench.py --lib "$lib" --prefill-lengths '' --out "$out/attention_dc.json"
# Our prefill kernel beside cuDNN's (the default dense path, issue 16), same call.
has attention && [ -f bench/cuda/attention_bench.py ] &&
  run attention_kernel env SPARSESERVE_PREFILL_ATTENTION=kernel python3 \
    bench/cuda/attention_bench.py --lib "$lib" --decode-lengths '' --out "$out/attention_kernel.json"
# The wgmma prefill kernel against its mma.sync alternative, same call (bench/RESULTS.md).
# Issue 16: the warp-specialised prefill kernel against the one before it (dense, our kernel).
has attention && [ -f bench/cuda/attention_bench.py ] &&
  run attention_kernel_nows env SPARSESERVE_PREFILL_ATTENTION=kernel SPARSESERVE_PREFILL_WS=0 \
    python3 bench/cuda/attention_bench.py --lib "$lib" --decode-lengths '' \
    --out "$out/attention_kernel_nows.json"
# Issue 16: MInference's sparse variants per layer against cuDNN dense (useful FLOP rate, density),
# warp-specialised and not.
if has sparse_prefill; then
  run sparse_prefill python3 bench/cuda/sparse_prefill_bench.py --lib "$lib" \
    --out "$out/sparse_prefill.json"
  run sparse_prefill_nows env SPARSESERVE_PREFILL_WS=0 python3 bench/cuda/sparse_prefill_bench.py \
    --lib "$lib" --out "$out/sparse_prefill_nows.json"
  run sparse_prefill_packed env SPARSESERVE_PREFILL_WS_ALIGNED=0 python3 \
    bench/cuda/sparse_prefill_bench.py --lib "$lib" --out "$out/sparse_prefill_packed.json"
fi
has attention && [ -f bench/cuda/attention_bench.py ] &&
  run attention_mma_sync env SPARSESERVE_PREFILL_ATTENTION=kernel SPARSESERVE_PREFILL_MMA=sync python3 bench/cuda/attention_bench.py \
    --lib "$lib" --prefill-lengths 8192,32768 --decode-lengths '' --out "$out/attention_sync.json"
has peer && [ -f bench/cuda/transformers_peer.py ] &&
  run peer python3 bench/cuda/transformers_peer.py --out "$out/transformers.json"
has bench && run bench sparseserve bench model --synthetic llama3-8b --device cuda
# The engine reshape's A/B (issue 10): decode steps B=1 and B=8 at C=1K with this binary and the
# baseline (.devbundle-baseline, packed by gpu_pack.sh from $SPARSESERVE_BASELINE_BIN), twice
# each, alternating; and the running streams' inter-token latency while a 32K prompt is
# prefilled locally: interleaved steps here, the whole prefill between two steps in the baseline
# (its `prefill L=32768` row).
if has baseline && [ -d .devbundle-baseline ]; then
  ab_args=(bench model --synthetic llama3-8b --device cuda --prefill-lengths 32768
           --decode-batches 1,8 --decode-contexts 1024 --iters 50)
  for round in 1 2; do
    run "baseline_old_$round" bash -c "source .devbundle-baseline/env.sh && sparseserve ${ab_args[*]}"
    run "baseline_new_$round" sparseserve "${ab_args[@]}" --interleave-prompt 32768 \
      --interleave-batch 8 --interleave-context 1024
  done
  # The attention kernels of both builds through their C APIs, one after the other.
  if [ -f .devbundle-baseline/lib/libsparseserve_cuda_ops.so ]; then
    run baseline_attention_old python3 bench/cuda/attention_bench.py \
      --lib .devbundle-baseline/lib/libsparseserve_cuda_ops.so --out "$out/attention_old.json"
    run baseline_attention_new python3 bench/cuda/attention_bench.py --lib "$lib" \
      --out "$out/attention_new.json"
  fi
fi
# Issue 19 (a kind with two or more GPUs): TP 2 against one GPU — the GPU tests (stories260K's
# greedy tokens, the tiny models' logits, the collective's sums), the golden continuation through
# `generate`, NCCL's all-reduce (nccl-tests' all_reduce_perf as the peer, when packed, at the sizes
# `bench model` measures), and the synthetic Llama-3-8B's decode steps and 32K prefill at TP 1 and
# 2. Small sums take the one-shot peer all-reduce fused with the add and norm after them
# (kernels/cuda/peer_allreduce.h); the _nccl runs turn it off (SPARSESERVE_TP_PEER_ALLREDUCE=0)
# for the A/B, and the llama3-8b-tp2-rank runs time one rank's share alone (no collectives).
if has tp; then
  run tp_tests timeout 300 env CUDA_MODULE_LOADING=EAGER cuda_backend_test \
    --gtest_filter='CudaTensorParallel*'
  run tp_tests_nccl timeout 300 env CUDA_MODULE_LOADING=EAGER SPARSESERVE_TP_PEER_ALLREDUCE=0 \
    cuda_backend_test --gtest_filter='CudaTensorParallel*'
  run tp_golden bash -c "sparseserve generate --device cuda --tensor-parallel 2 \
    --model models/stories260K/stories260K.gguf --prompt 'Once upon a time' --max-tokens 60 \
    --temperature 0 >$out/tp_golden.txt && cmp $out/tp_golden.txt tests/data/golden_once_upon_a_time.txt"
  # MInference at covering budgets under TP 2 (each GPU its heads' patterns): golden too.
  run tp_golden_minference bash -c "sparseserve generate --device cuda --tensor-parallel 2 \
    --model models/stories260K/stories260K.gguf --prompt 'Once upon a time' --max-tokens 60 \
    --temperature 0 --prefill-attention minference --sparse-prefill-threshold 0 \
    >$out/tp_golden_minference.txt && cmp $out/tp_golden_minference.txt tests/data/golden_once_upon_a_time.txt"
  # KV across degrees on the GPUs: prefill TP 2 into decode TP 1, and the reverse.
  # (`up` stages every worker's KV when one has more than one GPU.)
  run tp_services_prefill2 env EXPECT_KV=staged bash scripts/gpu_services_check.sh \
    --prefill-tensor-parallel 2
  run tp_services_decode2 env EXPECT_KV=staged bash scripts/gpu_services_check.sh \
    --tensor-parallel 2 --prefill-tensor-parallel 1
  command -v all_reduce_perf >/dev/null &&
    run tp_nccl_tests all_reduce_perf -b 8192 -e 64M -f 8 -g 2 -d bfloat16 -n 200 -w 5
  tp_args=(bench model --device cuda --prefill-lengths 32768 --decode-batches 1,8
           --decode-contexts 1024,32768 --iters 100)
  run tp_bench_1 timeout 150 sparseserve "${tp_args[@]}" --synthetic llama3-8b
  run tp_bench_2 timeout 150 sparseserve "${tp_args[@]}" --synthetic llama3-8b --tensor-parallel 2
  run tp_bench_2_nccl env SPARSESERVE_TP_PEER_ALLREDUCE=0 timeout 150 sparseserve "${tp_args[@]}" \
    --synthetic llama3-8b --tensor-parallel 2
  run tp_bench_rank timeout 150 sparseserve "${tp_args[@]}" --synthetic llama3-8b-tp2-rank
  # The prompt in one 32K chunk (the default chunk is 8192) at TP 1 and 2.
  run tp_bench_chunk32k bash -c "sparseserve bench model --device cuda --synthetic llama3-8b \
    --prefill-lengths 32768 --decode-contexts '' --prefill-chunk 32768 &&
    sparseserve bench model --device cuda --synthetic llama3-8b --prefill-lengths 32768 \
    --decode-contexts '' --prefill-chunk 32768 --tensor-parallel 2"
fi
has graphs && run graphs sparseserve bench model --synthetic llama3-8b --device cuda \
  --prefill-lengths '' --cuda-graph-batch 0
# Issue 11: the shadow-dense monitor at R = 0.01 must cost <= 2% of decode throughput. Each case
# runs at rate 0 and 0.01 (the same sliding window); ~20 of 2000 steps are shadowed.
has shadow && run shadow sparseserve bench model --synthetic llama3-8b --device cuda \
  --prefill-lengths '' --decode-batches 1,8 --decode-contexts 4096,32768 --decode-window 1024 \
  --shadow-dense-rates 0,0.01 --iters 2000
has profile && run profile sparseserve bench model --synthetic llama3-8b --device cuda \
  --prefill-lengths 8192 --decode-batches 1,8 --decode-contexts 1024,32768 --iters 3 --op-profile
has cublas && run cublas env SPARSESERVE_CUDA_SKINNY_GEMM=0 sparseserve bench model \
  --synthetic llama3-8b --device cuda --prefill-lengths '' --decode-batches 1,8 \
  --decode-contexts 1024
# One decode step (B=1, C=1024) kernel by kernel: device time without launch gaps.
has ncu && run ncu ncu --kernel-name regex:'Skinny|Attention|Merge|RmsNorm|Rope|WriteKv|SiluMul|Gather|gemm|Gemm' \
  --launch-skip 40 --launch-count 460 --section SpeedOfLight --csv --metrics gpu__time_duration.sum \
  sparseserve bench model --synthetic llama3-8b --device cuda --prefill-lengths '' \
  --decode-batches 1 --decode-contexts 1024 --warmup 1 --iters 1 --cuda-graph-batch 0

echo "--- $(cat "$out/gpu.txt")"
for f in tokenselect_ncu tokenselect_ncu_ctas1 tokenselect_ncu_ctas2 tokenselect_ncu_ctas8 tp_services_prefill2 tp_services_decode2 tp_nccl_tests tp_bench_1 tp_bench_2 tp_bench_2_nccl tp_bench_rank tp_bench_chunk32k services eval attention peer bench graphs shadow profile cublas baseline_old_1 baseline_new_1 baseline_old_2 baseline_new_2 baseline_attention_old baseline_attention_new; do [ -f "$out/$f.log" ] && { echo "--- $f"; tail -n "$([ $f = eval ] && echo 80 || echo 25)" "$out/$f.log"; }; done
printf '%s\n' "${summary[@]}" | tee "$out/summary.txt"
[ -n "${OUT:-}" ] && tar -C "$out" -czf "$OUT/gpu_check.tgz" .
