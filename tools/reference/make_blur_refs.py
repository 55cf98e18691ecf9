#!/usr/bin/env python3
"""References for image/blur.c: Pillow's ImageFilter.GaussianBlur on a gray
mask, written to tests/data/image/blur/ (mask.png, blur_<radius>.png) for
tests/image/test_blur.c.

The mask is computed, not drawn: rectangles, a disc, a one-pixel line and a
gradient on a 70x50 canvas (not square, so the horizontal-then-vertical
pass order matters).  Radii: A1111's default 4, small, fractional and one
wider than the mask's short side.  Pillow 13.0.0 (the reference venv);
its BoxBlur has not changed since Pillow 4.3.
Run: /work/main/.venv/bin/python tools/reference/make_blur_refs.py
"""
import os

import numpy as np
from PIL import Image, ImageFilter

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data", "image", "blur")
RADII = ["1", "2.5", "4", "9", "30"]


def main():
    os.makedirs(OUT, exist_ok=True)
    y, x = np.mgrid[0:50, 0:70]
    m = np.zeros((50, 70), np.uint8)
    m[10:30, 5:25] = 255
    m[(x - 50) ** 2 + (y - 20) ** 2 < 11 ** 2] = 255
    m[40, :] = 200
    m[44:50, 30:70] = (x[44:50, 30:70] * 3).astype(np.uint8)
    m[0:3, 0:3] = 255
    img = Image.fromarray(m, "L")
    img.save(os.path.join(OUT, "mask.png"))
    for r in RADII:
        img.filter(ImageFilter.GaussianBlur(float(r))).save(os.path.join(OUT, f"blur_{r}.png"))


if __name__ == "__main__":
    main()
