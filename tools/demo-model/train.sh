#!/usr/bin/env bash
# tools/demo-model/train.sh - retrains Tessera's demo model from nothing into
# models/demo (one command, fixed seeds, CPU only).
#
# Why: the demo model is part of the source tree, so anyone must be able to
# rebuild it from the scripts here (fixed seeds; the same CPU and thread count
# give the same weights).  It runs at nice 15 because the machine is shared.
# The default recipe (v2) uses two torch threads: on an idle machine they are
# faster (0.385 s per UNet step, session 12), but with any other job on the 2
# cores two OpenMP threads were measured 5-10x slower per step than one
# (spin-waiting on a busy core), so pass --threads 1 when something else runs.
# Measured end to end: 2964 s = 49.4 minutes on an idle 2-core Intel Xeon,
# max RSS 4.2 GB (docs/demo-model-log.md, "Sessions 14-15"), before the guide
# stage (session 17), which adds 128 s: an estimate of 52 minutes today.
# On a 2-core AVX2-only AMD EPYC the same recipe takes about 116 minutes
# (sessions 21-22: 0.6-0.8 s per UNet step there); half the compute fits
# the hour there but loses the picture (docs/demo-model-log.md, "Session 22"),
# and so does training the main stage's first stretch at 64 px ("Session 23").
# Session 23 made every step 7% cheaper with the same math (fused AdamW,
# foreach EMA, per-word tokenizing): an estimated 108 minutes there.
# Session 25 timed the recipe end to end on a 2-core AMD EPYC Zen 4
# (AVX-512): 4040 s = 67.3 minutes in fp32 (0.417 s per main UNet step);
# session 26, with the UNet stages under bf16 autocast (--bf16 auto: on
# where the CPU has bf16, as that Zen 4 does): 3229 s = 53.8 minutes
# (0.325 s per main step), max RSS 4.2 GB; session 31 (loosen 900): 55.2
# minutes there.  Session 32, a 2-core Intel Xeon (model 207, AMX-BF16,
# bf16): 3808 s = 63.5 minutes (0.38-0.49 s per main step).  Session 36,
# the same Xeon, session 35's recipe: 4275 s = 71.3 minutes, byte for byte
# the committed weights; the VM ran its late stages 54% slower than session
# 32's run did (docs/demo-model-log.md, "Session 36").  Session 37, the
# same Xeon, with --unet-attn-math 1 --stage-seed 1000 (another draw, not
# taken): 3837 s = 63.9 minutes ("Session 37").  Session 38, the same
# Xeon, the committed recipe: 4655 s = 77.6 minutes, byte for byte the
# committed weights (the VM's speed: "Session 38").
# Each UNet stage but the last leaves its model in the work folder
# (out/demo-train/stage-<name>), from which `train.py --phase late
# --init-model` runs the stages after it again.
#
# Usage: tools/demo-model/train.sh [extra train.py args]
set -euo pipefail
cd "$(dirname "$0")/../.."
tools/setup-venv.sh
# shellcheck disable=SC1091
. .venv/bin/activate
python tools/demo-model/dataset.py --heldout tools/demo-model/heldout.json
rm -rf models/demo.new
start=$(date +%s)
nice -n 15 python tools/demo-model/train.py --out models/demo.new "$@"
# Keep the hand-written model card across retrains.
if [ -f models/demo/MODEL_CARD.md ]; then cp models/demo/MODEL_CARD.md models/demo.new/; fi
rm -rf models/demo
mv models/demo.new models/demo
echo "train.sh: models/demo rebuilt in $(( $(date +%s) - start ))s"
