#!/usr/bin/env bash
# tools/loadtest/bench.sh - the load figures of docs/perf.md ("Service under
# load"), measured with tessera-loadtest against `tessera serve` on the demo
# model, each scenario on a fresh server (its own data dir, one warm-up job):
#
#   1. closed loop at 1, 4, 16 and 32 concurrent clients (max batch 16)
#   2. step-level continuous batching against static batching
#      (`serve --batching static`), 16 clients, a mix of 4/12/24 steps
#   3. batch 1 (`serve --max-batch 1`) against batch 16, 16 clients
#
# and prints one Markdown table (also written to $OUT/bench.md, with every
# run's JSON and CSV beside it).  Every row names the command that made it.
#
#   tools/loadtest/bench.sh                    # from the repo root, after building
#   SIZE=128 STEPS=20 JOBS_PER_CLIENT=2 tools/loadtest/bench.sh
#
# Environment: BUILD (build dir, default build), MODEL (default models/demo),
# SIZE (image side, default 128: the demo model's own), STEPS (default 20),
# JOBS_PER_CLIENT (jobs per client in a run, default 2, at least 8 jobs),
# THREADS (serve --threads, default all cores), DEVICE (serve --device,
# default cpu; cuda:0 measures a GPU), OUT (default a temp dir),
# SCENARIOS (default "clients batching batch": any subset).  Loopback only;
# every run is bounded (job count + per-job timeout).
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
BIN=$BUILD/bin
MODEL=${MODEL:-models/demo}
SIZE=${SIZE:-128}
STEPS=${STEPS:-20}
JPC=${JOBS_PER_CLIENT:-2}
THREADS=${THREADS:-0}
DEVICE=${DEVICE:-cpu}
SCENARIOS=${SCENARIOS:-"clients batching batch"}
OUT=${OUT:-$(mktemp -d /tmp/tessera-bench-XXXXXX)}
mkdir -p "$OUT"
for b in "$BIN/tessera" "$BIN/tessera-loadtest"; do
  [ -x "$b" ] || { echo "bench.sh: $b is missing: build first (scripts/build.sh $BUILD)" >&2; exit 1; }
done

SERVER_PID=
PORT=
stop_server() {
  if [ -n "$SERVER_PID" ]; then
    kill -TERM "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
    SERVER_PID=
  fi
}
trap stop_server EXIT
trap 'echo "bench.sh: failed at line $LINENO" >&2' ERR

# start_server NAME [serve flags...]: a fresh server on a free port
start_server() {
  local name=$1; shift
  local log="$OUT/$name.server.log"
  : >"$log"
  "$BIN/tessera" serve --model "$MODEL" --listen 127.0.0.1:0 --device "$DEVICE" --threads "$THREADS" \
    --data-dir "$OUT/$name.data" --log-level warn "$@" >"$log" 2>&1 &
  SERVER_PID=$!
  PORT=
  for _ in $(seq 1 600); do
    PORT=$(sed -n 's/.*listening on http:\/\/127\.0\.0\.1:\([0-9]*\).*/\1/p' "$log" | head -1 || true)
    [ -n "$PORT" ] && break
    kill -0 "$SERVER_PID" 2>/dev/null || { cat "$log" >&2; echo "bench.sh: the server died" >&2; exit 1; }
    sleep 0.1
  done
  [ -n "$PORT" ] || { echo "bench.sh: no port from the server" >&2; exit 1; }
  # one warm-up job: the engine's first call plans its workspaces
  "$BIN/tessera-loadtest" --url "http://127.0.0.1:$PORT" --jobs 1 --size "${SIZE}x$SIZE" \
    --steps 2 --no-metrics --quiet --timeout 600 >/dev/null
}

# the server's user + system CPU time in clock ticks (/proc/PID/stat fields 14, 15)
cpu_ticks() { sed 's/^.*) //' "/proc/$1/stat" | awk '{print $12 + $13}'; }

ROWS="$OUT/rows.tsv"
: >"$ROWS"
# run LABEL NAME SERVE_FLAGS -- LOADTEST_FLAGS: one measured run on a fresh server;
# the server's CPU time over the run goes beside the JSON (NAME.cpu)
run() {
  local label=$1 name=$2; shift 2
  local serve=()
  while [ "$1" != "--" ]; do serve+=("$1"); shift; done
  shift
  start_server "$name" "${serve[@]}"
  local cmd=("$BIN/tessera-loadtest" --url "http://127.0.0.1:$PORT" "$@" --timeout 1800 --quiet
             --json "$OUT/$name.json" --csv "$OUT/$name.csv")
  echo "== $label: tessera serve ${serve[*]}; ${cmd[*]}" >&2
  local cpu0 cpu1
  cpu0=$(cpu_ticks "$SERVER_PID")
  "${cmd[@]}" >"$OUT/$name.txt" || { cat "$OUT/$name.txt" >&2; echo "bench.sh: $name had errors" >&2; }
  cpu1=$(cpu_ticks "$SERVER_PID")
  echo "$(( cpu1 - cpu0 )) $(getconf CLK_TCK)" >"$OUT/$name.cpu"
  stop_server
  local shown="$BIN/tessera serve --model $MODEL --device $DEVICE --threads $THREADS ${serve[*]}; $BIN/tessera-loadtest $* --timeout 1800"
  printf '%s\t%s\t%s\n' "$label" "$OUT/$name.json" "$shown" >>"$ROWS"
}

jobs_for() { local n=$(( $1 * JPC )); [ "$n" -lt 8 ] && n=8; echo "$n"; }
ONE=(--size "${SIZE}x$SIZE" --steps "$STEPS" --seed 1)

for s in $SCENARIOS; do
  case $s in
  clients)
    for c in 1 4 16 32; do
      run "closed loop, $c client(s)" "clients-$c" --max-batch 16 -- \
        --clients "$c" --jobs "$(jobs_for "$c")" "${ONE[@]}"
    done ;;
  batching)
    for mode in continuous static; do
      run "16 clients, steps 4/12/24, $mode" "batching-$mode" --max-batch 16 --batching "$mode" -- \
        --clients 16 --jobs "$(jobs_for 16)" --size "${SIZE}x$SIZE" \
        --profile tools/loadtest/profiles/steps-mix.json --seed 1
    done ;;
  batch)
    for b in 1 16; do
      run "16 clients, max batch $b" "batch-$b" --max-batch "$b" -- \
        --clients 16 --jobs "$(jobs_for 16)" "${ONE[@]}"
    done ;;
  *) echo "bench.sh: unknown scenario '$s' (clients, batching, batch)" >&2; exit 2 ;;
  esac
done

python3 - "$ROWS" "$SIZE" "$STEPS" "$MODEL" >"$OUT/bench.md" <<'EOF'
import json, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
print("%s, %sx%s, %s steps unless the profile says otherwise; wall = first submit to last done"
      % (sys.argv[4], sys.argv[2], sys.argv[2], sys.argv[3]))
print()
print("| run | jobs | images/s | done p50 / p95 (s) | first preview p95 (s) | queue wait p95 (s) "
      "| images per UNet call | UNet busy | server CPU s / image | errors |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
cmds = []
for label, path, cmd in rows:
    d = json.load(open(path))
    lat = d["latency_ms"]
    m = d.get("metrics") or {}
    busy = (m.get("delta", {}).get("tessera_unet_call_seconds_sum") or 0) / d["wall_s"] \
        if d.get("wall_s") else 0
    f = lambda v: "-" if v is None else "%.2f" % (v / 1e3)
    try:
        ticks, hz = open(path[:-len(".json")] + ".cpu").read().split()
        cpu = "%.2f" % (int(ticks) / int(hz) / d["images"]) if d["images"] else "-"
    except (OSError, ValueError):
        cpu = "-"
    print("| %s | %d | %.3f | %s / %s | %s | %s | %s | %.0f %% | %s | %d |" % (
        label, d["jobs"], d["images_per_s"] or 0, f(lat["done"]["p50"]), f(lat["done"]["p95"]),
        f(lat["first_preview"]["p95"]), f(lat["queue_wait"]["p95"]),
        "%.2f" % m["images_per_unet_call"] if m.get("images_per_unet_call") else "-",
        100 * busy, cpu, d["errors"]))
    serve, load = cmd.split("; ", 1)
    cmds.append("- %s: `%s` then `%s`" % (label, serve, load))
print()
print("Commands (each on a fresh server after one warm-up job):")
print()
print("\n".join(cmds))
EOF
cat "$OUT/bench.md"
echo "bench.sh: JSON, CSV and server logs in $OUT" >&2
