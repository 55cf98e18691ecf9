#!/usr/bin/env python3
"""References for image/resize.c: Pillow's Image.resize(LANCZOS) and the
three img2img resize modes of AUTOMATIC1111's webui, written as PNGs to
tests/data/image/resize/ with a manifest the C test reads
(tests/image/test_resize.c).

Why Pillow itself: A1111 prepares init images and masks with
modules/images.py resize_image(), which (with the default img2img upscaler
"None") is nothing but Pillow's LANCZOS resize plus pasting; the pixels
Tessera must reproduce are Pillow's.  `a1111_resize` below restates that
function's documented behaviour (just resize; crop and resize: scale to cover,
centre, crop; resize and fill: scale to fit, centre, fill each border with a
resize of a zero-size box at the image edge) on top of Pillow's resize.

The sources are computed, not drawn from a global RNG: an RGB pattern with
edges, gradients and noise from a fixed numpy Generator, and a gray mask.
Sizes cover up- and downscaling in each direction, a box, odd sizes, and
aspect ratios wider and taller than the target.

Pinned: Pillow 9.5.0, the version AUTOMATIC1111's webui pins
(requirements_versions.txt), and numpy.  Pillow 13 changed the pass order
(python-pillow/Pillow#9549: when the height shrinks much more than the
width, the vertical pass runs first), which moves some pixels by a few
levels; Pillow 7.0-12.x resample exactly as 9.5.0 does.  The script refuses
other versions.  Run it in a venv with that Pillow:
    python3 -m venv /tmp/pil95 && /tmp/pil95/bin/pip install pillow==9.5.0 numpy
    /tmp/pil95/bin/python tools/reference/make_resize_refs.py
"""
import json
import os

import numpy as np
from PIL import Image

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data", "image", "resize")
LANCZOS = Image.Resampling.LANCZOS


def a1111_resize(mode, im, width, height):
    """modes: 0 just resize, 1 crop and resize, 2 resize and fill."""
    if mode == 0:
        return im.resize((width, height), resample=LANCZOS)
    ratio = width / height
    src_ratio = im.width / im.height
    if mode == 1:
        src_w = width if ratio > src_ratio else im.width * height // im.height
        src_h = height if ratio <= src_ratio else im.height * width // im.width
    else:
        src_w = width if ratio < src_ratio else im.width * height // im.height
        src_h = height if ratio >= src_ratio else im.height * width // im.width
    resized = im.resize((src_w, src_h), resample=LANCZOS)
    res = Image.new(im.mode, (width, height))
    res.paste(resized, box=(width // 2 - src_w // 2, height // 2 - src_h // 2))
    if mode == 2:
        if ratio < src_ratio:
            fill = height // 2 - src_h // 2
            if fill > 0:
                res.paste(resized.resize((width, fill), resample=LANCZOS, box=(0, 0, width, 0)),
                          box=(0, 0))
                res.paste(resized.resize((width, fill), resample=LANCZOS,
                                         box=(0, resized.height, width, resized.height)),
                          box=(0, fill + src_h))
        elif ratio > src_ratio:
            fill = width // 2 - src_w // 2
            if fill > 0:
                res.paste(resized.resize((fill, height), resample=LANCZOS, box=(0, 0, 0, height)),
                          box=(0, 0))
                res.paste(resized.resize((fill, height), resample=LANCZOS,
                                         box=(resized.width, 0, resized.width, height)),
                          box=(fill + src_w, 0))
    return res


def sources():
    rng = np.random.Generator(np.random.PCG64(20240601))
    h, w = 23, 37
    y, x = np.mgrid[0:h, 0:w]
    rgb = np.zeros((h, w, 3), np.float64)
    rgb[..., 0] = 255 * x / (w - 1)
    rgb[..., 1] = np.where((x // 6 + y // 5) % 2 == 0, 230, 20)  # hard edges: ringing
    rgb[..., 2] = 128 + 100 * np.sin(x / 3.0) * np.cos(y / 4.0)
    rgb += rng.normal(0, 12, rgb.shape)
    rgb = np.clip(np.rint(rgb), 0, 255).astype(np.uint8)
    gh, gw = 50, 20
    gy, gx = np.mgrid[0:gh, 0:gw]
    gray = np.where((gx - 10) ** 2 + (gy - 25) ** 2 < 64, 255, 0).astype(np.float64)
    gray += rng.normal(0, 8, gray.shape)
    gray = np.clip(np.rint(gray), 0, 255).astype(np.uint8)
    return {"src_rgb.png": Image.fromarray(rgb, "RGB"), "src_gray.png": Image.fromarray(gray, "L")}


def main():
    if Image.__version__ != "9.5.0":
        raise SystemExit(f"Pillow {Image.__version__}: the references need Pillow 9.5.0 (see above)")
    os.makedirs(OUT, exist_ok=True)
    srcs = sources()
    for name, im in srcs.items():
        im.save(os.path.join(OUT, name))
    cases = []
    plain = [  # (source, width, height, box)
        ("src_rgb.png", 64, 48, None), ("src_rgb.png", 16, 8, None), ("src_rgb.png", 37, 61, None),
        ("src_rgb.png", 100, 23, None), ("src_rgb.png", 29, 17, [3.5, 2.0, 30.25, 20.0]),
        ("src_rgb.png", 64, 5, [0, 0, 37, 0]), ("src_rgb.png", 5, 40, [37, 0, 37, 23]),
        ("src_gray.png", 64, 64, None), ("src_gray.png", 7, 9, None),
    ]
    for i, (src, w, h, box) in enumerate(plain):
        im = srcs[src]
        out = im.resize((w, h), resample=LANCZOS, box=tuple(box) if box else None)
        name = f"plain{i}.png"
        out.save(os.path.join(OUT, name))
        cases.append({"kind": "plain", "source": src, "width": w, "height": h, "box": box,
                      "reference": name})
    modes = ["just-resize", "crop-and-resize", "resize-and-fill"]
    sizes = [(64, 64), (96, 40), (24, 72), (40, 24)]
    for src in srcs:
        for m, mode in enumerate(modes):
            for w, h in sizes:
                out = a1111_resize(m, srcs[src], w, h)
                name = f"{mode}_{src[4:-4]}_{w}x{h}.png"
                out.save(os.path.join(OUT, name))
                cases.append({"kind": "a1111", "mode": mode, "source": src, "width": w,
                              "height": h, "reference": name})
    with open(os.path.join(OUT, "manifest.json"), "w") as f:
        json.dump({"about": "Pillow LANCZOS and A1111 resize_image references "
                            "(tools/reference/make_resize_refs.py)",
                   "pillow": Image.__version__, "cases": cases}, f, indent=1)
        f.write("\n")
    print(f"{len(cases)} cases in {OUT}")


if __name__ == "__main__":
    main()
