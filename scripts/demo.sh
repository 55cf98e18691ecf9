#!/usr/bin/env bash
# scripts/demo.sh - from a fresh Debian 12 machine: install the system
# packages, build, and generate images with Tessera's built-in demo model
# (models/demo: a small text-to-image model the project trains itself,
# tools/demo-model/), show what the engine reads and writes, then start
# the HTTP service (`tessera serve`) on a free port and use it the way a
# client would, with curl: jobs, an event stream, a batch, the images.
#
# When stdin is a terminal the server keeps serving until Ctrl-C (it
# drains and exits); otherwise it is stopped and the script exits 0.
#
# Nothing is downloaded.  Images land in out/demo/.
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/setup.sh
./scripts/build.sh build
T=build/bin/tessera
OUT=out/demo
mkdir -p "$OUT"

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "Text to image with the built-in demo model (models/demo, 128x128, CPU)"
i=0
while IFS= read -r prompt; do
  $T --log-level warn generate --prompt "$prompt" --seed $((100 + i)) --quiet \
     --output "$OUT/demo-$i.png"
  printf '   "%s"\n' "$prompt"
  i=$((i + 1))
done <<'PROMPTS'
a large red circle in the centre on a white background
a small yellow star in the top left corner on a blue background
a green triangle on the right on black
two purple squares on an orange background
PROMPTS

step "Watch an image form: a preview PNG per step (latent size) in $OUT/previews/"
$T --log-level warn generate --prompt "a blue ring at the bottom on a yellow background" \
   --seed 7 --quiet --preview-dir "$OUT/previews" --output "$OUT/forming.png"
ls "$OUT/previews" | head -3; echo "   ..."

step "A batch shares UNet calls; image i uses seed s+i (A1111's convention)"
$T --log-level info generate --prompt "a white cross on a red background" --seed 40 \
   --batch-size 3 --quiet --output "$OUT/batch.png"

step "The PNGs carry A1111 'parameters' metadata"
python3 - "$OUT/demo-0.png" <<'PY' 2>/dev/null || strings "$OUT/demo-0.png" | grep -A3 -m1 parameters
import sys, zlib, struct
data = open(sys.argv[1], "rb").read()[8:]
while data:
    n, kind = struct.unpack(">I4s", data[:8]); body = data[8:8 + n]; data = data[12 + n:]
    if kind == b"tEXt" and body.startswith(b"parameters\0"):
        print(body.split(b"\0", 1)[1].decode("latin-1"))
PY

step "img2img from a JPEG of another size, fitted as A1111 does; JPEG out, parameters in EXIF"
$T --log-level warn generate --prompt "a large green square in the centre on a black background" \
   --seed 8 --width 192 --height 128 --quiet --output "$OUT/wide.jpg"
$T --log-level warn generate --prompt "a large yellow square in the centre on a black background" \
   --seed 9 --init-image "$OUT/wide.jpg" --resize-mode crop-and-resize --strength 0.6 --quiet \
   --output "$OUT/img2img.jpg"

step "Model files: the demo folder, and the same model as one LDM-named file"
$T inspect models/demo
$T convert --to single models/demo "$OUT/demo-model.safetensors" >/dev/null
$T inspect "$OUT/demo-model.safetensors" | head -3
echo "   the single file carries the scheduler and tokenizer: it draws what the folder draws"
$T --log-level warn generate --model "$OUT/demo-model.safetensors" --quiet --seed 100 \
   --prompt "a large red circle in the centre on a white background" \
   --output "$OUT/from-single-file.png"

# ---------------------------------------------------------------- the service
step "The HTTP service: tessera serve on a free port (data in $OUT/serve-data)"
DATA=$OUT/serve-data
LOG=$OUT/serve.log
rm -rf "$DATA"
$T serve --listen 127.0.0.1:0 --data-dir "$DATA" --threads "$(nproc)" >"$LOG" 2>&1 &
SERVER=$!
stop_server() {
  if kill -0 "$SERVER" 2>/dev/null; then
    kill -TERM "$SERVER" 2>/dev/null || true
    wait "$SERVER" 2>/dev/null || true
  fi
}
trap stop_server EXIT
URL=
for _ in $(seq 600); do
  URL=$(grep -o 'listening on http://[^ ]*' "$LOG" | head -1 | sed 's/listening on //') || true
  [ -n "$URL" ] && break
  kill -0 "$SERVER" 2>/dev/null || { cat "$LOG" >&2; echo "demo: tessera serve exited" >&2; exit 1; }
  sleep 0.1
done
[ -n "$URL" ] || { cat "$LOG" >&2; echo "demo: tessera serve did not start" >&2; exit 1; }
grep 'listening on' "$LOG"
printf '   GET /readyz: %s\n' "$(curl -s "$URL/readyz")"

json_id() { grep -o '"id":"[jb]_[0-9a-f]*"' | head -1 | cut -d'"' -f4; }
# wait until a job is final; print its state
wait_job() {
  local state=""
  for _ in $(seq 1200); do
    state=$(curl -s "$URL/v1/jobs/$1" | grep -o '"state":"[a-z]*"' | head -1 | cut -d'"' -f4)
    case "$state" in done|failed|cancelled) echo "$state"; return;; esac
    sleep 0.1
  done
  echo "$state"
}

step "Jobs: POST /v1/jobs, one per prompt (every image of every job shares UNet calls)"
ids=()
i=0
while IFS= read -r prompt; do
  body=$(printf '{"prompt": "%s", "seed": %d}' "$prompt" $((200 + i)))
  id=$(curl -s -X POST "$URL/v1/jobs" -H 'Content-Type: application/json' -d "$body" | json_id)
  [ -n "$id" ] || { echo "demo: the server refused a job" >&2; exit 1; }
  ids+=("$id")
  printf '   %s  "%s"\n' "$id" "$prompt"
  i=$((i + 1))
done <<'PROMPTS'
a large red circle in the centre on a white background
a small yellow star in the top left corner on a blue background
a green triangle on the right on black
two purple squares on an orange background
PROMPTS

step "Follow a job's events: GET /v1/jobs/${ids[3]}/events (Server-Sent Events)"
curl -s -N "$URL/v1/jobs/${ids[3]}/events" | awk '
  /^event:/ { name = $2 }
  /^data:/  { if (name == "step") steps++; else { if (steps) print "   step x" steps; steps = 0; print "   " name " " substr($0, 7) } }'

step "A batch: POST /v1/batches (defaults overlaid by each job)"
batch=$(curl -s -X POST "$URL/v1/batches" -H 'Content-Type: application/json' -d '{
  "defaults": {"prompt": "a white cross on a red background", "steps": 30},
  "jobs": [{"seed": 40}, {"seed": 41}, {"prompt": "a blue ring at the bottom on a yellow background", "seed": 7}]
}' | json_id)
printf '   %s\n' "$batch"
curl -s -N "$URL/v1/batches/$batch/events" | grep -E '^data: \{"job"|^data: \{"counts"' |
  sed 's/^data: /   /'
bjobs=$(curl -s "$URL/v1/batches/$batch" | grep -o '"id":"j_[0-9a-f]*"' | cut -d'"' -f4)

step "Images: GET /v1/jobs/{id}/images/{i}.png (PNG with A1111 parameters, cached by ETag)"
n=0
for id in "${ids[@]}" $bjobs; do
  state=$(wait_job "$id")
  if [ "$state" != done ]; then
    echo "demo: job $id ended $state" >&2
    exit 1
  fi
  curl -s -o "$OUT/serve-$n.png" "$URL/v1/jobs/$id/images/0.png"
  printf '   %s -> %s/serve-%d.png\n' "$id" "$OUT" "$n"
  n=$((n + 1))
done
curl -s "$URL/metrics" | grep -E '^tessera_(images_total|unet_calls_total|unet_call_images_(sum|count)) '

printf '\nDone. Images: %s/demo-*.png, %s/batch-*.png, %s/img2img.jpg, %s/serve-*.png; previews in %s/previews/.\n' \
  "$OUT" "$OUT" "$OUT" "$OUT" "$OUT"
echo "Real checkpoints: see README.md (\"Using real checkpoints\"); the HTTP API: README.md (\"The HTTP service\")."
if [ -t 0 ]; then
  printf '\nServing at %s (log: %s). Ctrl-C stops it.\n' "$URL" "$LOG"
  trap 'printf "\nstopping (the server drains)...\n"' INT
  while kill -0 "$SERVER" 2>/dev/null; do
    wait "$SERVER" 2>/dev/null || true
  done
  trap - EXIT
else
  printf '\nServer %s stopped (stdin is not a terminal).\n' "$URL"
fi
