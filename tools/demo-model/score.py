"""tools/demo-model/score.py - scores demo-model images for the held-out prompts.

Why it is built this way: the demo model's quality bar must be checked by a
script, against any engine (diffusers now, `tessera generate` later), so the
scorer only reads PNG files.  Image i (NNN.png, 000-based, in heldout.json
order) is scored against held-out prompt i by colour and position:

  * every pixel is classified to its nearest palette colour (dataset.COLOURS);
  * the named region is the inner box of the named 3x3 grid cell (a square of
    side 2*CORE/128 of the image around the cell centre, which a large circle
    or square always covers): the named colour must cover at least
    FG_MIN of it;
  * the rest is every pixel farther than REST/128 of the image (Chebyshev) from
    the cell centre: the background colour must cover at least BG_MIN of it.

It prints PASS/FAIL per prompt and the pass rate, and exits 0.  With
--generate it first renders the images with diffusers' StableDiffusionPipeline
(CPU generator seeded per prompt, as the C engine will be) so the pass rates at
two guidance scales can be compared.

Pinned: torch 2.9.1, diffusers 0.35.2, numpy 2.3.4, Pillow (tools/setup-venv.sh).

Usage:
  python tools/demo-model/score.py --images DIR                 # score NNN.png files
  python tools/demo-model/score.py --generate DIR --model models/demo --cfg 7.5 --steps 20
  python tools/demo-model/score.py --tessera build/bin/tessera --tessera-out DIR [--tessera-cfg 1]
"""

import argparse
import json
import os
import sys

import numpy as np
from PIL import Image

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dataset  # noqa: E402

CORE = 12.0   # half side of the named-region box, in 128-pixel units
REST = 28.0   # pixels farther than this from the cell centre form "the rest"
FG_MIN = 0.5
BG_MIN = 0.6

NAMES = list(dataset.COLOURS)
PALETTE = np.array([dataset.COLOURS[n] for n in NAMES], dtype=np.float32)


def classify(img):
    """HxWx3 uint8 -> HxW index into NAMES (nearest palette colour)."""
    px = img.reshape(-1, 3).astype(np.float32)
    d = ((px[:, None, :] - PALETTE[None, :, :]) ** 2).sum(-1)
    return d.argmin(1).reshape(img.shape[:2])


def score_image(img, item):
    """Returns (passed, fg_fraction, bg_fraction) for one image and prompt."""
    h, w = img.shape[:2]
    lab = classify(img)
    s = w / float(dataset.SIZE)
    cx, cy = dataset.region_centre(item["region"])
    ys, xs = np.mgrid[0:h, 0:w]
    xs = (xs + 0.5) / s
    ys = (ys + 0.5) / (h / float(dataset.SIZE))
    dist = np.maximum(np.abs(xs - cx), np.abs(ys - cy))
    core = dist <= CORE
    rest = dist > REST
    fg = float((lab[core] == NAMES.index(item["colour"])).mean())
    bg = float((lab[rest] == NAMES.index(item["background"])).mean())
    return fg >= FG_MIN and bg >= BG_MIN, fg, bg


def score_dir(d, items):
    passed = 0
    for i, it in enumerate(items):
        path = os.path.join(d, f"{i:03d}.png")
        if not os.path.exists(path):
            print(f"FAIL {i:03d} missing {path}")
            continue
        img = np.asarray(Image.open(path).convert("RGB"))
        ok, fg, bg = score_image(img, it)
        passed += ok
        print(f"{'PASS' if ok else 'FAIL'} {i:03d} fg {fg:.2f} bg {bg:.2f}  {it['prompt']}")
    rate = passed / len(items)
    print(f"pass rate: {passed}/{len(items)} = {rate:.3f}")
    return rate


def generate(a, items):
    import torch
    from diffusers import StableDiffusionPipeline
    torch.set_num_threads(a.threads)
    pipe = StableDiffusionPipeline.from_pretrained(a.model, torch_dtype=torch.float32)
    pipe.set_progress_bar_config(disable=True)
    os.makedirs(a.generate, exist_ok=True)
    for i, it in enumerate(items):
        g = torch.Generator("cpu").manual_seed(it["seed"])
        img = pipe(it["prompt"], height=dataset.SIZE, width=dataset.SIZE,
                   num_inference_steps=a.steps, guidance_scale=a.cfg, generator=g).images[0]
        img.save(os.path.join(a.generate, f"{i:03d}.png"))


def generate_tessera(a, items):
    """Renders with the C engine: `tessera generate` per prompt, seeded per
    prompt; --steps/--cfg are passed only when given (else tessera's defaults)."""
    import subprocess
    os.makedirs(a.tessera_out, exist_ok=True)
    for i, it in enumerate(items):
        cmd = [a.tessera, "--log-level", "warn", "generate", "--model", a.model,
               "--prompt", it["prompt"], "--seed", str(it["seed"]), "--width", str(dataset.SIZE),
               "--height", str(dataset.SIZE), "--quiet", "--threads", str(a.threads),
               "--output", os.path.join(a.tessera_out, f"{i:03d}.png")]
        if a.tessera_steps:
            cmd += ["--steps", str(a.tessera_steps)]
        if a.tessera_cfg is not None:
            cmd += ["--cfg-scale", str(a.tessera_cfg)]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description="score demo-model images for held-out prompts")
    ap.add_argument("--heldout", default=os.path.join(here, "heldout.json"))
    ap.add_argument("--images", help="folder of NNN.png to score")
    ap.add_argument("--generate", help="render with diffusers into this folder, then score it")
    ap.add_argument("--model", default="models/demo")
    ap.add_argument("--cfg", type=float, default=7.5)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--limit", type=int, default=0, help="only the first N prompts (testing)")
    ap.add_argument("--tessera", help="path of the tessera binary: render with the C engine")
    ap.add_argument("--tessera-out", help="with --tessera: render into this folder, then score")
    ap.add_argument("--tessera-steps", type=int, default=0, help="default: tessera's own")
    ap.add_argument("--tessera-cfg", type=float, default=None, help="default: tessera's own")
    a = ap.parse_args()
    with open(a.heldout) as f:
        items = json.load(f)["prompts"]
    if a.limit > 0:
        items = items[:a.limit]
    if a.tessera and a.tessera_out:
        generate_tessera(a, items)
        score_dir(a.tessera_out, items)
    elif a.generate:
        generate(a, items)
        score_dir(a.generate, items)
    elif a.images:
        score_dir(a.images, items)
    else:
        ap.error("give --images DIR or --generate DIR")


if __name__ == "__main__":
    main()
