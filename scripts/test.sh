#!/usr/bin/env bash
# The second command of the README: the whole test suite, as CI runs it.
#   1. the normal build (gcc, warnings as errors, CUDA sources compiled when nvcc exists),
#      clang-format and clang-tidy (scripts/lint.sh), and every ctest test (unit, golden,
#      integration) in parallel;
#   2. a clang build with ASan + UBSan: the unit tests again, and each libFuzzer target for
#      $SPARSESERVE_FUZZ_SECONDS (default 60) seconds.
# Ends with one line "N passed, N failed".
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
jobs=${SPARSESERVE_JOBS:-$(nproc)}
fuzz_seconds=${SPARSESERVE_FUZZ_SECONDS:-60}
log=$(mktemp -d)
passed=0 failed=0

count_ctest() {  # adds the counts of a ctest log to the totals
  local line total fail
  line=$(grep -E '[0-9]+% tests passed, [0-9]+ tests? failed out of [0-9]+' "$1" | tail -n 1)
  if [ -z "$line" ]; then failed=$((failed + 1)); return; fi
  fail=$(sed -E 's/.* ([0-9]+) tests? failed.*/\1/' <<<"$line")
  total=$(sed -E 's/.*out of ([0-9]+).*/\1/' <<<"$line")
  passed=$((passed + total - fail)); failed=$((failed + fail))
}

bash scripts/deps.sh || exit 1
bash scripts/fetch_model.sh || exit 1

echo "=== build (gcc) ==="
bash scripts/build.sh build || exit 1
echo "=== lint (clang-format, clang-tidy) ==="
bash scripts/lint.sh build | tee "$log/lint.txt"
passed=$((passed + $(grep -c '^ok ' "$log/lint.txt")))
failed=$((failed + $(grep -c '^FAIL ' "$log/lint.txt")))
echo "=== ctest (build) ==="
ctest --test-dir build -j "$jobs" --output-on-failure --timeout 900 2>&1 | tee "$log/ctest.txt"
count_ctest "$log/ctest.txt"

echo "=== build (clang, ASan + UBSan, fuzzers) ==="
# Only what this stage runs: the unit test binaries and the fuzzers.
if SPARSESERVE_BUILD_TARGETS=unit_tests_and_fuzzers bash scripts/build.sh build-asan \
     -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
     -DSPARSESERVE_SANITIZE=ON -DSPARSESERVE_FUZZ=ON -DSPARSESERVE_BUILD_BENCH=OFF \
     -DSPARSESERVE_CUDA=OFF; then
  echo "=== ctest (ASan + UBSan, unit tests) ==="
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --test-dir build-asan -j "$jobs" -L unit --output-on-failure --timeout 900 2>&1 |
    tee "$log/ctest-asan.txt"
  count_ctest "$log/ctest-asan.txt"
  echo "=== fuzzers (${fuzz_seconds}s each) ==="
  if bash scripts/run_fuzzers.sh build-asan "$fuzz_seconds" >"$log/fuzz.txt" 2>&1; then
    fuzz_rc=0
  else
    fuzz_rc=1
  fi
  grep -E '^(ok|FAIL) ' "$log/fuzz.txt"
  passed=$((passed + $(grep -c '^ok ' "$log/fuzz.txt")))
  failed=$((failed + $(grep -c '^FAIL ' "$log/fuzz.txt")))
  [ $fuzz_rc -eq 0 ] || { tail -n 60 "$log/fuzz.txt"; [ "$(grep -c '^FAIL ' "$log/fuzz.txt")" -gt 0 ] || failed=$((failed + 1)); }
else
  echo "FAIL clang sanitizer build"
  failed=$((failed + 1))
fi

rm -rf "$log"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
