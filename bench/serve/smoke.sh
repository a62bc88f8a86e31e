#!/usr/bin/env bash
# smoke.sh SPARSESERVE_BIN MODEL OUT_DIR — the serving benchmark (serve_bench.py) on the CPU with
# stories260K, small, as CI's smoke test (ctest serve_bench_smoke): aiperf (PyPI, in a venv of its
# own: its pins differ from the test tooling's) drives `up` colocated (2 decode processes),
# disaggregated (1 prefill + 1 decode) and disaggregated with MInference prefill and prompt-lookup
# speculation, at two Poisson rates with short and long prompts. Checks that every request
# succeeded and every artifact was written; no timing is asserted.
# The venv: $SPARSESERVE_AIPERF_VENV, default OUT_DIR/../aiperf-venv (made once, ~1 GB).
set -euo pipefail
BIN=${1:?usage: smoke.sh SPARSESERVE_BIN MODEL OUT_DIR}
MODEL=${2:?usage: smoke.sh SPARSESERVE_BIN MODEL OUT_DIR}
OUT=${3:?usage: smoke.sh SPARSESERVE_BIN MODEL OUT_DIR}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
venv=${SPARSESERVE_AIPERF_VENV:-$(dirname "$OUT")/aiperf-venv}
if ! "$venv/bin/aiperf" --version >/dev/null 2>&1; then
  echo "smoke: installing aiperf into $venv" >&2
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q "aiperf==0.13.0"
fi
rm -rf "$OUT"
"$venv/bin/python" "$here/serve_bench.py" --bin "$BIN" --model "$MODEL" \
  --tokenizer "$root/tests/data/tiny_llama" --aiperf "$venv/bin/aiperf" \
  --config "colocated-dense=--num-prefill 0 --num-decode 2" \
  --config "disaggregated-dense=--num-prefill 1 --num-decode 1 --disagg-threshold 100" \
  --config "disaggregated-minference-spec=--num-prefill 1 --num-decode 1 --disagg-threshold 100 \
--prefill-attention minference --sparse-prefill-threshold 0 --spec prompt-lookup" \
  --rates 2,4 --requests 10 --warmup 1 --seq-dist "48,16:70;300,16:30" --bucket-tokens 150 \
  --start-timeout 120 --run-timeout 300 --out "$OUT"
"$venv/bin/python" - "$OUT" <<'PY'
import json, os, sys
out = sys.argv[1]
s = json.load(open(os.path.join(out, "summary.json")))
assert len(s["configs"]) == 3, s["configs"].keys()
for name, c in s["configs"].items():
    for rate, run in c["per_rate"].items():
        n = sum(b["requests"] for b in run["buckets"].values())
        errors = sum(b["errors"] for b in run["buckets"].values())
        assert n == 10 and errors == 0, (name, rate, n, errors)
        assert set(run["buckets"]) == {"short", "long"}, (name, rate, run["buckets"].keys())
for f in ("summary.md", "latency_vs_rate.png", "goodput_vs_rate.png"):
    assert os.path.getsize(os.path.join(out, f)) > 0, f
print("ok serve_bench smoke: 3 configs x 2 rates x 10 requests, summary and plots written")
PY
