#!/usr/bin/env bash
# Validates deploy/: yamllint, hadolint, promtool, Kubernetes manifests (kustomize + offline OpenAPI schemas),
# then starts `sparseserve up` and a real Prometheus with the recording/alert rules, sends requests
# and evaluates every PromQL expression of the Grafana dashboard and the rule files.
# Usage: deploy_test.sh SPARSESERVE_BIN MODEL_PATH. Prints `ok <check>` / `FAIL <check>`.
set -uo pipefail
BIN=${1:?usage: deploy_test.sh SPARSESERVE_BIN MODEL}
MODEL=${2:?usage: deploy_test.sh SPARSESERVE_BIN MODEL}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
DEPLOY=$ROOT/deploy
WORK=$(mktemp -d /tmp/deploy_test.XXXXXX)
FAILS=0
UP_PID=""
PROM_PID=""
cleanup() {
  [ -n "$PROM_PID" ] && kill -TERM "$PROM_PID" 2>/dev/null
  [ -n "$UP_PID" ] && kill -TERM "$UP_PID" 2>/dev/null
  for p in $PROM_PID $UP_PID; do
    for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.2; done
    kill -KILL "$p" 2>/dev/null
  done
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
check() {  # check NAME COMMAND...: runs the command, prints ok/FAIL.
  local name=$1; shift
  if "$@" >"$WORK/out.txt" 2>&1; then echo "ok $name"; else
    echo "FAIL $name"; sed 's/^/    /' "$WORK/out.txt"; FAILS=$((FAILS + 1)); fi
}
need() { command -v "$1" >/dev/null || { echo "FAIL missing tool $1 (scripts/deps.sh)"; exit 1; }; }
need yamllint; need promtool; need prometheus; need curl; need python3; need hadolint

# ---- static checks ----
check yamllint yamllint -s -c "$DEPLOY/.yamllint" "$DEPLOY"
check hadolint hadolint --failure-threshold info "$DEPLOY/docker/Dockerfile" \
  "$DEPLOY/docker/Dockerfile.cuda"
check "promtool check config" promtool check config "$DEPLOY/prometheus/prometheus.yml"
check "promtool check rules" promtool check rules "$DEPLOY"/prometheus/rules/*.yml
check "k8s minference_config.json is the test model's search result" cmp \
  "$DEPLOY/k8s/base/minference_config.json" "$ROOT/tests/data/longctx_model/minference_config.json"
check "dashboard structure" python3 "$DEPLOY/tools/promql_check.py" structure \
  "$DEPLOY/grafana/dashboards/sparseserve.json"

# Kubernetes: render each overlay and validate every object against bundled OpenAPI schemas.
KUSTOMIZE=()
if command -v kustomize >/dev/null; then KUSTOMIZE=(kustomize build)
elif command -v kubectl >/dev/null && kubectl kustomize --help >/dev/null 2>&1; then
  KUSTOMIZE=(kubectl kustomize); fi
python3 -c "import kubernetes_validate" 2>/dev/null ||
  python3 -m pip install -q kubernetes-validate >/dev/null 2>&1 ||
  python3 -m pip install -q --break-system-packages kubernetes-validate >/dev/null 2>&1
if [ -d "$DEPLOY/k8s" ]; then
  if [ ${#KUSTOMIZE[@]} -eq 0 ]; then
    echo "FAIL kustomize: neither kustomize nor kubectl kustomize is installed"; FAILS=$((FAILS + 1))
  else
    for overlay in "$DEPLOY"/k8s/overlays/*/; do
      name=$(basename "$overlay")
      check "kustomize render $name" "${KUSTOMIZE[@]}" "$overlay" -o "$WORK/k8s-$name.yaml"
      check "k8s schema $name" python3 "$DEPLOY/tools/k8s_validate.py" "$WORK/k8s-$name.yaml"
    done
  fi
fi

# ---- live checks: sparseserve up + Prometheus ----
"$BIN" up --model "$MODEL" --num-prefill 1 --num-decode 1 --disagg-threshold 3 \
  >"$WORK/up.log" 2>&1 &
UP_PID=$!
for _ in $(seq 600); do
  grep -q '^READY up' "$WORK/up.log" && break
  kill -0 "$UP_PID" 2>/dev/null || break
  sleep 0.2
done
if ! grep -q '^READY up' "$WORK/up.log"; then
  echo "FAIL sparseserve up did not become ready"; sed 's/^/    /' "$WORK/up.log" | tail -20; exit 1
fi
echo "ok sparseserve up"
ROUTER=$(awk '/^READY up/ {print $3}' "$WORK/up.log")
# role=metrics-address lines for the checker and the Prometheus config.
{ awk '/^READY up/ {print "router=" $5}' "$WORK/up.log"
  awk '/^WORKER/ {print $2 "=" $5}' "$WORK/up.log"; } >"$WORK/targets.txt"

PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
mkdir -p "$WORK/prom/rules"
# The deployed rules with a 1s evaluation interval so the test does not wait 15s per round.
for f in "$DEPLOY"/prometheus/rules/*.yml; do
  sed -E 's/^( +interval: ).*/\11s/' "$f" >"$WORK/prom/rules/$(basename "$f")"
done
{ printf 'global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n'
  printf 'rule_files:\n  - rules/*.yml\nscrape_configs:\n  - job_name: sparseserve\n'
  printf '    honor_labels: true\n    static_configs:\n'
  while IFS='=' read -r role addr; do
    printf '      - targets: ["%s"]\n        labels: {role: %s}\n' "$addr" "$role"
  done <"$WORK/targets.txt"; } >"$WORK/prom/prometheus.yml"
check "promtool check test config" promtool check config "$WORK/prom/prometheus.yml"
prometheus --config.file="$WORK/prom/prometheus.yml" --storage.tsdb.path="$WORK/prom/data" \
  --web.listen-address="127.0.0.1:$PORT" >"$WORK/prom.log" 2>&1 &
PROM_PID=$!

for i in 1 2 3 4 5; do
  if ! timeout 60 "$BIN" generate --server "$ROUTER" --prompt "Once upon a time number $i" \
    --max-tokens 8 --temperature 0 >/dev/null 2>>"$WORK/gen.log"; then
    echo "FAIL generate request $i"; tail -5 "$WORK/gen.log"; FAILS=$((FAILS + 1))
  fi
done
echo "ok sent requests"

check "promql live" python3 "$DEPLOY/tools/promql_check.py" live "http://127.0.0.1:$PORT" \
  "$WORK/targets.txt" "$DEPLOY/grafana/dashboards/sparseserve.json" "$DEPLOY"/prometheus/rules/*.yml
cat "$WORK/out.txt" | grep -E '^(ok|FAIL)' | sed 's/^/    /'

if [ "$FAILS" -ne 0 ]; then echo "FAIL deploy: $FAILS check(s) failed"; exit 1; fi
echo "ok deploy"
