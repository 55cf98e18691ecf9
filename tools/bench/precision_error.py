#!/usr/bin/env python3
"""tools/bench/precision_error.py - how far the CPU's opt-in bf16 mode lands from f32.

Why: `--precision bf16` (the cpu-bf16gemm backend: bf16 weights, conv and
linear products in bf16 with f32 sums) trades exactness for speed, so its
error must be measured, not assumed.  For each case this runs `tessera
generate` twice, `--precision f32` and `--precision bf16`, same model,
prompt, seed, size and steps, and compares the 8-bit images: PSNR (dB),
the largest difference of one value (/255) and the share of values that
differ.  A CPU without AVX512_BF16 cannot run the mode (the script says so).

Usage (from the repository root; needs numpy and Pillow, as in .venv):
    python tools/bench/precision_error.py [--bin build/bin/tessera] [--threads 2]
        [--case MODEL:SIZE:STEPS:SEED:PROMPT ...] [--json out/precision.json]
Without --case it runs the built-in list: the demo model at its 128 px
with four prompts, and the tiny SD 1.x / SD 2.x-v / SDXL test models.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
from PIL import Image

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEMO = os.path.join(ROOT, "models", "demo")
TINY = os.path.join(ROOT, "tests", "data", "models")
CASES = [
    (DEMO, 128, 30, 3, "a red circle on a blue background"),
    (DEMO, 128, 30, 11, "a small yellow star in the upper left on a green background"),
    (DEMO, 128, 30, 42, "a large white square near the bottom on a black background"),
    (DEMO, 128, 30, 7, "a purple ring and a small orange cross on a gray background"),
    (os.path.join(TINY, "sd1"), 64, 12, 5, "a photo of a cat"),
    (os.path.join(TINY, "sd2v"), 64, 12, 5, "a photo of a cat"),
    (os.path.join(TINY, "sdxl"), 64, 12, 5, "a photo of a cat"),
]


def generate(args, model, size, steps, seed, prompt, precision, out):
    cmd = [args.bin, "generate", "--model", model, "--prompt", prompt, "--seed", str(seed),
           "--steps", str(steps), "--width", str(size), "--height", str(size),
           "--threads", str(args.threads), "--precision", precision, "--output", out, "--quiet"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)}\n-> exit {r.returncode}: {r.stderr.strip()[-400:]}")
    return np.asarray(Image.open(out).convert("RGB")).astype(np.int32)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin", "tessera"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--case", action="append", help="MODEL:SIZE:STEPS:SEED:PROMPT")
    ap.add_argument("--json", help="write the rows here")
    args = ap.parse_args()
    cases = CASES
    if args.case:
        cases = []
        for c in args.case:
            model, size, steps, seed, prompt = c.split(":", 4)
            cases.append((model, int(size), int(steps), int(seed), prompt))
    rows = []
    print("| model | size | steps | seed | prompt | PSNR dB | max /255 | values differing |")
    print("|---|---:|---:|---:|---|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for model, size, steps, seed, prompt in cases:
            a = generate(args, model, size, steps, seed, prompt, "f32", os.path.join(tmp, "a.png"))
            b = generate(args, model, size, steps, seed, prompt, "bf16", os.path.join(tmp, "b.png"))
            d = np.abs(a - b)
            mse = float((d.astype(np.float64) ** 2).mean())
            psnr = 10 * np.log10(255.0 ** 2 / mse) if mse > 0 else float("inf")
            row = {"model": os.path.relpath(model, ROOT), "size": size, "steps": steps,
                   "seed": seed, "prompt": prompt, "psnr_db": round(psnr, 2),
                   "max": int(d.max()), "differ": round(float((d > 0).mean()), 4)}
            rows.append(row)
            print(f"| {row['model']} | {size} | {steps} | {seed} | {prompt} | {psnr:.1f} | "
                  f"{row['max']} | {row['differ']:.1%} |", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
