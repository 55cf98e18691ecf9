#!/usr/bin/env python3
"""Goldens for ComfyUI's ImageScale / ImageScaleBy (issue 59).

The reference runs ComfyUI's arithmetic in torch and Pillow the way its
nodes do (nodes.py ImageScale.upscale / ImageScaleBy.upscale and
comfy/utils.py common_upscale and lanczos, read at comfyanonymous/ComfyUI
00728eb2): the IMAGE is float32 [B, H, W, C] in 0..1, moved to channels
first as a view (movedim, so the tensor torch interpolates is channels-last
in memory), center crop by the aspect rule with Python's round, then
torch.nn.functional.interpolate (nearest-exact, bilinear, area, bicubic;
align_corners and antialias left at their defaults) or, for lanczos, Pillow's
LANCZOS on the image clipped and truncated to 8 bits.  ComfyUI is not
installed here, so this is a rewrite of those few lines, not an import.

The input is a small 8-bit RGB image read as ComfyUI's LoadImage reads a
file (float32 k / 255); every case lists the node's inputs, the output size
and the output floats (float32, little-endian, base64), which
tests/service/test_comfy_scale.c compares with service/api/comfy/comfy_scale.c.

Writes tests/data/comfy/comfy_scale.json.
Run: . .venv/bin/activate && python tools/reference/make_comfy_scale_goldens.py
"""
import base64
import json
import os

import numpy
import torch
from PIL import Image

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data", "comfy",
                   "comfy_scale.json")
W, H = 7, 5


def source():
    """The test image: pixel (x, y, c) = (37 x + 91 y + 53 c + 11) mod 256."""
    px = numpy.zeros((H, W, 3), dtype=numpy.uint8)
    for y in range(H):
        for x in range(W):
            for c in range(3):
                px[y, x, c] = (37 * x + 91 * y + 53 * c + 11) % 256
    return torch.from_numpy(px.astype(numpy.float32) / 255.0)[None]


def lanczos(chw, width, height):
    out = []
    for im in chw:
        u8 = numpy.clip(255. * im.movedim(0, -1).numpy(), 0, 255).astype(numpy.uint8)
        big = Image.fromarray(u8).resize((width, height), resample=Image.Resampling.LANCZOS)
        out.append(torch.from_numpy(numpy.array(big).astype(numpy.float32) / 255.0).movedim(-1, 0))
    return torch.stack(out)


def upscale(chw, width, height, method, crop):
    if crop == "center":
        ow, oh = chw.shape[3], chw.shape[2]
        old_aspect, new_aspect = ow / oh, width / height
        x = y = 0
        if old_aspect > new_aspect:
            x = round((ow - ow * (new_aspect / old_aspect)) / 2)
        elif old_aspect < new_aspect:
            y = round((oh - oh * (old_aspect / new_aspect)) / 2)
        chw = chw[:, :, y:oh - y, x:ow - x]
    if method == "lanczos":
        return lanczos(chw, width, height)
    return torch.nn.functional.interpolate(chw, size=(height, width), mode=method)


def image_scale(image, method, width, height, crop):
    if width == 0 and height == 0:
        return image
    chw = image.movedim(-1, 1)
    if width == 0:
        width = max(1, round(chw.shape[3] * height / chw.shape[2]))
    elif height == 0:
        height = max(1, round(chw.shape[2] * width / chw.shape[3]))
    return upscale(chw, width, height, method, crop).movedim(1, -1)


def image_scale_by(image, method, scale_by):
    chw = image.movedim(-1, 1)
    width = round(chw.shape[3] * scale_by)
    height = round(chw.shape[2] * scale_by)
    return upscale(chw, width, height, method, "disabled").movedim(1, -1)


CASES = [
    # node, method, width, height, crop / scale_by
    ("ImageScale", "nearest-exact", 11, 8, "disabled"),
    ("ImageScale", "nearest-exact", 4, 3, "disabled"),
    ("ImageScale", "bilinear", 11, 8, "disabled"),
    ("ImageScale", "bilinear", 4, 3, "disabled"),
    ("ImageScale", "area", 3, 2, "disabled"),
    ("ImageScale", "area", 10, 7, "disabled"),
    ("ImageScale", "bicubic", 11, 8, "disabled"),
    ("ImageScale", "bicubic", 5, 4, "disabled"),
    ("ImageScale", "lanczos", 11, 8, "disabled"),
    ("ImageScale", "lanczos", 4, 3, "disabled"),
    ("ImageScale", "bilinear", 6, 6, "center"),
    ("ImageScale", "nearest-exact", 9, 0, "disabled"),
    ("ImageScaleBy", "bicubic", 0, 0, 1.5),
    ("ImageScaleBy", "area", 0, 0, 0.5),
]


def main():
    torch.set_num_threads(1)
    image = source()
    cases = []
    for node, method, w, h, extra in CASES:
        if node == "ImageScale":
            out = image_scale(image, method, w, h, extra)
            case = {"node": node, "method": method, "width": w, "height": h, "crop": extra}
        else:
            out = image_scale_by(image, method, extra)
            case = {"node": node, "method": method, "scale_by": extra}
        out = out[0].contiguous().numpy().astype("<f4")
        case["out_width"], case["out_height"] = out.shape[1], out.shape[0]
        case["pixels"] = base64.b64encode(out.tobytes()).decode()
        cases.append(case)
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        json.dump({"width": W, "height": H, "torch": torch.__version__, "cases": cases}, f,
                  indent=0, separators=(",", ":"))
        f.write("\n")
    print(f"{OUT}: {len(cases)} cases")


if __name__ == "__main__":
    main()
