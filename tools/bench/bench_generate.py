#!/usr/bin/env python3
"""Seconds per denoising step, Tessera vs diffusers, on the same machine.

Runs `tessera generate` and diffusers' StableDiffusionPipeline /
StableDiffusionXLPipeline on the same model folder, size, sampler (Euler),
step count, guidance (7.5, so a step is one UNet call on 2 rows) and thread
count, each in its own process, one after the other, and prints a markdown
table of the median seconds per step (load and VAE decode excluded) and the
load time.

  . .venv/bin/activate
  python tools/bench/bench_generate.py --model out/models/sd15 --size 256 --steps 3
  python tools/bench/bench_generate.py --model out/models/sdxl --size 256 --steps 3

Models: tools/make_fullsize_models.py (random weights, real shapes).
Pinned: torch 2.9.1, diffusers 0.35.2.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

TORCH_SIDE = r'''
import json, sys, time, statistics, torch
from diffusers import StableDiffusionPipeline, StableDiffusionXLPipeline, EulerDiscreteScheduler
a = json.loads(sys.argv[1])
torch.set_num_threads(a["threads"])
t0 = time.perf_counter()
idx = json.load(open(a["model"] + "/model_index.json"))
cls = StableDiffusionXLPipeline if "text_encoder_2" in idx else StableDiffusionPipeline
kw = {} if cls is StableDiffusionXLPipeline else {"safety_checker": None, "requires_safety_checker": False}
pipe = cls.from_pretrained(a["model"], torch_dtype=torch.float32, **kw)
pipe.scheduler = EulerDiscreteScheduler.from_config(pipe.scheduler.config)
pipe.set_progress_bar_config(disable=True)
load = time.perf_counter() - t0
marks = []
def cb(p, i, t, kw):
    marks.append(time.perf_counter())
    return kw
start = time.perf_counter()
with torch.no_grad():
    pipe(a["prompt"], num_inference_steps=a["steps"], width=a["size"], height=a["size"],
         guidance_scale=7.5, generator=torch.Generator("cpu").manual_seed(1),
         callback_on_step_end=cb, output_type="latent")
steps = [b - a_ for a_, b in zip([start] + marks[:-1], marks)]
print(json.dumps({"load": load, "step": statistics.median(steps)}))
'''


def run_tessera(args):
    with tempfile.TemporaryDirectory() as d:
        cmd = [args.bin, "generate", "--model", args.model, "--prompt", args.prompt,
               "--steps", str(args.steps), "--width", str(args.size), "--height", str(args.size),
               "--sampler", "euler", "--cfg-scale", "7.5", "--seed", "1", "--threads",
               str(args.threads), "--quiet", "--output", os.path.join(d, "x.png")]
        out = subprocess.run(cmd, capture_output=True, text=True, check=True)
    m = re.search(r"load ([\d.]+) s, (\d+) UNet calls, median ([\d.]+) s per call", out.stderr)
    if not m:
        sys.exit("could not parse tessera's timing line:\n" + out.stderr)
    return {"load": float(m.group(1)), "step": float(m.group(3))}


def run_torch(args):
    a = {"model": args.model, "prompt": args.prompt, "steps": args.steps, "size": args.size,
         "threads": args.threads}
    out = subprocess.run([sys.executable, "-c", TORCH_SIDE, json.dumps(a)], capture_output=True,
                         text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True)
    p.add_argument("--bin", default="build/bin/tessera")
    p.add_argument("--size", type=int, default=256)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--prompt", default="a lighthouse on a cliff at dusk")
    args = p.parse_args()
    load = os.getloadavg()[0]
    t = run_tessera(args)
    d = run_torch(args)
    name = os.path.basename(os.path.normpath(args.model))
    print(f"{name}, {args.size}x{args.size}, Euler, cfg 7.5 (2 UNet rows per step), "
          f"{args.steps} steps, {args.threads} threads, load average {load:.1f}\n")
    print("| | tessera | diffusers | ratio |")
    print("|---|---:|---:|---:|")
    print(f"| s per step (median) | {t['step']:.2f} | {d['step']:.2f} | {t['step'] / d['step']:.2f} |")
    print(f"| load s | {t['load']:.1f} | {d['load']:.1f} | {t['load'] / d['load']:.2f} |")


if __name__ == "__main__":
    main()
