#!/usr/bin/env python3
"""References for pipeline/upscale.c and pipeline/hires.c (tests/pipeline/test_hires.c):

- the latent upscalers of A1111's hires fix: torch.nn.functional.interpolate
  with each (mode, antialias) pair A1111 names, on a small random NCHW
  tensor, to larger, fractional and smaller sizes;
- A1111's inpainting "fill" (modules/masking.py: the image pasted through the
  inverted mask as premultiplied RGBa, blurred with Pillow's GaussianBlur at
  radii 256, 64, 16, 4, 2, 0 and alpha-composited), restated here with
  Pillow calls on a computed 40x30 picture and mask.

Written to tests/data/pipeline/hires/: upscale.json (cases), upscale_in.f32
and upscale_<case>.f32 (float32, NHWC, little-endian), fill_image.png,
fill_mask.png, fill_out.png.  A few KB in all.
Run: /work/main/.venv/bin/python tools/reference/make_upscale_refs.py
"""
import json
import os

import numpy as np
import torch
from PIL import Image, ImageFilter, ImageOps

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data", "pipeline", "hires")

MODES = [  # name in the test, torch mode, antialias
    ("nearest", "nearest", False),
    ("nearest_exact", "nearest-exact", False),
    ("bilinear", "bilinear", False),
    ("bilinear_aa", "bilinear", True),
    ("bicubic", "bicubic", False),
    ("bicubic_aa", "bicubic", True),
]
SIZES = [(10, 14), (8, 11), (13, 9), (3, 4)]  # (h, w) from 5 x 7


def write_f32(path, nchw):
    np.ascontiguousarray(nchw.permute(0, 2, 3, 1).numpy().astype("<f4")).tofile(path)


def upscales():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1, 4, 5, 7, generator=g) * 2
    write_f32(os.path.join(OUT, "upscale_in.f32"), x)
    cases = []
    for name, mode, aa in MODES:
        for h, w in SIZES:
            y = torch.nn.functional.interpolate(x, size=(h, w), mode=mode, antialias=aa)
            case = f"{name}_{h}x{w}"
            write_f32(os.path.join(OUT, f"upscale_{case}.f32"), y)
            cases.append({"name": case, "mode": name, "h": h, "w": w})
    with open(os.path.join(OUT, "upscale.json"), "w") as f:
        json.dump({"in": {"c": 4, "h": 5, "w": 7}, "torch": torch.__version__,
                   "cases": cases}, f, indent=1)


def a1111_fill(image, mask):
    """masking.fill, step by step in Pillow's own operations."""
    out = Image.new("RGBA", image.size)
    pasted = Image.new("RGBa", image.size)
    pasted.paste(image.convert("RGBA").convert("RGBa"), mask=ImageOps.invert(mask.convert("L")))
    for radius, times in ((256, 1), (64, 1), (16, 2), (4, 4), (2, 2), (0, 1)):
        layer = pasted.filter(ImageFilter.GaussianBlur(radius)).convert("RGBA")
        for _ in range(times):
            out.alpha_composite(layer)
    return out.convert("RGB")


def fills():
    y, x = np.mgrid[0:30, 0:40]
    rgb = np.stack([(x * 6) % 256, (y * 8) % 256, ((x + y) * 5) % 256], -1).astype(np.uint8)
    m = np.zeros((30, 40), np.uint8)
    m[8:20, 10:26] = 255                       # a hard box
    m[(x - 32) ** 2 + (y - 22) ** 2 < 25] = 180  # a soft disc
    m[0:2, 30:40] = 90                          # a faint edge strip
    image, mask = Image.fromarray(rgb, "RGB"), Image.fromarray(m, "L")
    image.save(os.path.join(OUT, "fill_image.png"))
    mask.save(os.path.join(OUT, "fill_mask.png"))
    a1111_fill(image, mask).save(os.path.join(OUT, "fill_out.png"))


def main():
    os.makedirs(OUT, exist_ok=True)
    upscales()
    fills()


if __name__ == "__main__":
    main()
