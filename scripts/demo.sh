#!/usr/bin/env bash
# scripts/demo.sh - from a fresh Debian 12 machine: install the system
# packages, build, and generate images with Tessera's built-in demo model
# (models/demo: a small text-to-image model the project trains itself,
# tools/demo-model/), then show what the engine reads and writes.
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

printf '\nDone. Images: %s/demo-*.png, %s/batch-*.png, %s/img2img.jpg, previews in %s/previews/.\n' \
  "$OUT" "$OUT" "$OUT" "$OUT"
echo "Real checkpoints: see README.md (\"Using real checkpoints\")."
