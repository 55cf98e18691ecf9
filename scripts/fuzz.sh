#!/usr/bin/env bash
# scripts/fuzz.sh [SECONDS] - build every libFuzzer target with clang and run
# each for SECONDS (default 60), failing on any finding.
#
# Targets are fuzz/fuzz_*.c (fuzz/CMakeLists.txt builds them into
# build-fuzz/fuzz/).  Each run starts from a temporary copy of its seed
# corpus fuzz/corpus/<name>/ (so the committed corpus never grows); inputs
# that crash, leak or time out are saved under build-fuzz/fuzz-findings/<target>/
# and the script exits 1 listing them.  Reproduce one with
#   build-fuzz/fuzz/fuzz_<name> build-fuzz/fuzz-findings/fuzz_<name>/crash-...
#
# Environment: TESSERA_FUZZ_BUILD (default build-fuzz), TESSERA_JOBS (build
# parallelism), TESSERA_FUZZ_ARGS (extra libFuzzer flags).
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-60}
BUILD=${TESSERA_FUZZ_BUILD:-build-fuzz}
JOBS=${TESSERA_JOBS:-$(nproc)}

if ! [[ "$SECS" =~ ^[0-9]+$ ]] || [ "$SECS" -lt 1 ]; then
  echo "usage: $0 [SECONDS]" >&2
  exit 2
fi
command -v clang >/dev/null || { echo "fuzz: clang not found (scripts/setup.sh installs it)" >&2; exit 2; }

targets=()
for src in fuzz/fuzz_*.c; do
  [ -e "$src" ] || continue
  t=$(basename "$src" .c)
  targets+=("$t")
done
if [ ${#targets[@]} -eq 0 ]; then
  echo "fuzz: no fuzz/fuzz_*.c targets" >&2
  exit 2
fi

cmake -S . -B "$BUILD" -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DTESSERA_FUZZ=ON -DTESSERA_CUDA=OFF -DTESSERA_NATIVE=OFF >/dev/null
ninja -C "$BUILD" -j"$JOBS" "${targets[@]}"

export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

failed=()
work=$(mktemp -d "${TMPDIR:-/tmp}/tsr-fuzz.XXXXXX")
trap 'rm -rf "$work"' EXIT
for t in "${targets[@]}"; do
  name=${t#fuzz_}
  corpus="$work/$t"
  mkdir -p "$corpus"
  if [ -d "fuzz/corpus/$name" ]; then
    cp -R "fuzz/corpus/$name/." "$corpus/"
  fi
  findings="$BUILD/fuzz-findings/$t"
  mkdir -p "$findings"
  log="$BUILD/fuzz-findings/$t.log"
  echo "fuzz: $t for ${SECS}s (seeds: $(ls "$corpus" | wc -l))"
  # shellcheck disable=SC2086
  if "$BUILD/fuzz/$t" -max_total_time="$SECS" -timeout=10 -rss_limit_mb=2048 \
      -print_final_stats=1 -artifact_prefix="$findings/" ${TESSERA_FUZZ_ARGS:-} \
      "$corpus" >"$log" 2>&1; then
    grep -E "^stat::number_of_executed_units|^stat::peak_rss_mb" "$log" | sed "s/^/fuzz: $t /" || true
    echo "fuzz: $t: no findings ($(ls "$corpus" | wc -l) corpus entries at the end)"
  else
    echo "fuzz: $t FAILED; log: $log" >&2
    grep -E "ERROR: |SUMMARY: |runtime error|Test unit written" "$log" | head -20 >&2 || true
    failed+=("$t")
  fi
done

if [ ${#failed[@]} -ne 0 ]; then
  echo "fuzz: findings in: ${failed[*]} (inputs under $BUILD/fuzz-findings/)" >&2
  exit 1
fi
echo "fuzz: all ${#targets[@]} targets clean for ${SECS}s each"
