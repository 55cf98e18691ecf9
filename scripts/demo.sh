#!/usr/bin/env bash
# scripts/demo.sh - from a fresh Debian 12 machine: install the system
# packages, build, and run Tessera's main job on what the project ships.
#
# Today that is the model-file and text side of the engine on the tiny
# reference models in tests/data/models: inspect a diffusers folder and the
# same model as a single LDM-named file, convert between the two, tokenize
# and encode prompts with A1111 syntax, and time the CPU ops at SD 1.5
# shapes.  Image generation joins here when the pipeline lands.
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/setup.sh
./scripts/build.sh build
T=build/bin/tessera
OUT=out/demo
mkdir -p "$OUT"

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "What a model is: a diffusers folder and the same model as one LDM-named file"
$T inspect tests/data/models/sdxl
$T inspect tests/data/models/sd2v.safetensors

step "Convert the folder to a single file and back; both describe the same tensors"
$T convert --to single tests/data/models/sd1 "$OUT/sd1.safetensors"
$T convert --to diffusers "$OUT/sd1.safetensors" "$OUT/sd1-roundtrip"
$T inspect --tensors tests/data/models/sd1 | sed 1d > "$OUT/a.txt"
$T inspect --tensors "$OUT/sd1-roundtrip" | sed 1d > "$OUT/b.txt"
if cmp -s "$OUT/a.txt" "$OUT/b.txt"; then echo "round trip: identical tensors ($(wc -l < "$OUT/a.txt") lines)"; else
  echo "round trip differs" >&2; exit 1; fi

step "Tokenize prompts with the real CLIP vocabulary (A1111 syntax, 75-token windows)"
$T tokenize "a photo of a cat" "a (red:1.3) fox in the [snow]" | cut -c1-120

step "Prompt conditioning on the tiny SDXL model (two encoders, pooled projection)"
$T encode --model tests/data/models/sdxl "a (red:1.3) fox in the snow" "first window BREAK second window"

step "CPU op throughput at SD 1.5 UNet shapes (see docs/perf.md for PyTorch side by side)"
$T bench ops --iters 1 --filter "conv 3x3 32x32"

printf '\nDone. Outputs in %s/.  Image generation (tessera generate) arrives with the pipeline.\n' "$OUT"
