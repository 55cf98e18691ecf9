"""tools/demo-model/make_reference.py - the diffusers reference image for the
demo model's C-engine match test (tests/demo/test_demo.c, diffusers_match).

Why it is built this way: the claim under test is that models/demo is a
standard diffusers folder and that `tessera generate` draws the same picture
from it as diffusers does, so the reference is made by diffusers' own
StableDiffusionPipeline, loaded from the committed folder (fp16 weights read as
float32, as the C engine computes), with the settings `tessera generate` uses
by default: the folder's scheduler (DDIM), 30 steps, cfg 7.5, 128x128, and a
CPU torch.Generator seeded with held-out prompt 0's seed.  Deterministic: one
thread, fixed seed.  Rerun it whenever models/demo is retrained.

Pinned: torch 2.9.1 (CPU), diffusers 0.35.2, transformers 4.57.1
(tools/setup-venv.sh).

Usage: python tools/demo-model/make_reference.py [--out tests/data/demo/diffusers_ref.png]
"""

import argparse
import json
import os

import torch
from diffusers import StableDiffusionPipeline

STEPS = 30   # `tessera generate` defaults
CFG = 7.5


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.normpath(os.path.join(here, "..", ".."))
    ap = argparse.ArgumentParser(description="diffusers reference PNG for the demo model")
    ap.add_argument("--model", default=os.path.join(root, "models", "demo"))
    ap.add_argument("--heldout", default=os.path.join(here, "heldout.json"))
    ap.add_argument("--out", default=os.path.join(root, "tests", "data", "demo",
                                                  "diffusers_ref.png"))
    a = ap.parse_args()
    torch.set_num_threads(1)
    with open(a.heldout) as f:
        item = json.load(f)["prompts"][0]
    pipe = StableDiffusionPipeline.from_pretrained(a.model, torch_dtype=torch.float32)
    pipe.set_progress_bar_config(disable=True)
    g = torch.Generator("cpu").manual_seed(item["seed"])
    img = pipe(item["prompt"], height=128, width=128, num_inference_steps=STEPS,
               guidance_scale=CFG, generator=g).images[0]
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    img.save(a.out)
    print(f"{a.out}: \"{item['prompt']}\" seed {item['seed']}, {STEPS} steps, cfg {CFG}")


if __name__ == "__main__":
    main()
