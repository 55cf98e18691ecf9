#!/usr/bin/env python3
"""Goldens for seamless tiling (A1111's `tiling`, Tessera's `tiling`):
circular padding in every convolution of the UNet and the VAE.

Why this reference: A1111 implements tiling by walking every module of the
loaded model and setting `padding_mode = 'circular'` on each torch.nn.Conv2d
(modules/sd_hijack.py, apply_circular); the text encoder has no convolution,
and a conv with padding 0 (1x1 convs, the VAE encoder's downsampler, which
pads (0, 1, 0, 1) with zeros itself before an unpadded stride-2 conv) is
unchanged by it.  So the honest reference is diffusers' own pipeline with
exactly that patch applied to its UNet and VAE, which is what this script
runs.  The op goldens check the one primitive, torch's circular conv
(F.pad(mode='circular') then an unpadded conv), including the stride-2
downsampler and pads equal to the input size.

Writes:
  tests/data/ops/conv2d_circular.safetensors   op cases (make_op_goldens.py's format,
                                               param circular=1)
  tests/data/pipeline/tiling/<case>.png        diffusers' images (tiny sd1_sharp and sdxl_sharp,
                                               tiled and <case>_plain)
  tests/data/pipeline/tiling/manifest.json     per case: the tessera parameters

Pinned as make_pipeline_goldens.py (torch 2.9.1 CPU, diffusers 0.35.2).
Run: . .venv/bin/activate && python tools/reference/make_tiling_goldens.py
"""
import json
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from make_op_goldens import File, d, nchw, nhwc  # noqa: E402

import diffusers  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(HERE))
OUT = os.path.join(ROOT, "tests", "data", "pipeline", "tiling")
MODEL = "sd1_sharp"
PROMPT = "a photo of a red cat on a green sofa"
STEPS = 6
TOLERANCE = 2


def op_goldens():
    gen = torch.Generator().manual_seed(6363)

    def randn(*shape, scale=1.0):
        return (torch.randn(*shape, generator=gen, dtype=torch.float32) * scale).contiguous()

    f = File("conv2d_circular")
    # (name, N, H, W, Ci, Co, KH, KW, stride_h, stride_w, pad t l b r, bias)
    specs = [
        ("k3s1", 2, 5, 7, 3, 4, 3, 3, 1, 1, (1, 1, 1, 1), True),
        ("k3s2_odd", 1, 9, 7, 8, 6, 3, 3, 2, 2, (1, 1, 1, 1), True),   # the UNet's downsampler
        ("k3s2_even", 2, 8, 6, 5, 3, 3, 3, 2, 2, (1, 1, 1, 1), False),
        ("k3x5_asym", 2, 6, 11, 5, 7, 3, 5, 1, 2, (2, 1, 0, 2), True),
        ("k3_size1", 2, 1, 1, 6, 4, 3, 3, 1, 1, (1, 1, 1, 1), True),   # the deepest level of a tiny image
        ("k5_wrap_all", 1, 2, 3, 4, 5, 5, 5, 1, 1, (2, 3, 2, 3), True),  # pads equal the size
        ("k3_wide", 1, 6, 6, 32, 24, 3, 3, 1, 1, (1, 1, 1, 1), False),
    ]
    for name, n, h, w, ci, co, kh, kw, sh, sw, (pt, pl, pb, pr), has_b in specs:
        x = randn(n, h, w, ci)
        wt = randn(co, kh, kw, ci, scale=1.0 / math.sqrt(kh * kw * ci))
        b = randn(co) if has_b else None
        xp = F.pad(d(nchw(x)), (pl, pr, pt, pb), mode="circular")
        y = F.conv2d(xp, d(nchw(wt)), d(b) if has_b else None, stride=(sh, sw))
        if pt == pb and pl == pr:  # torch's own Conv2d(padding_mode='circular') agrees
            conv = torch.nn.Conv2d(ci, co, (kh, kw), (sh, sw), (pt, pl), bias=has_b,
                                   padding_mode="circular").double()
            with torch.no_grad():
                conv.weight.copy_(d(nchw(wt)))
                if has_b:
                    conv.bias.copy_(d(b))
                y2 = conv(d(nchw(x)))
            assert torch.allclose(y, y2, atol=1e-12), name
        params = dict(stride_h=sh, stride_w=sw, pad_t=pt, pad_l=pl, pad_b=pb, pad_r=pr, circular=1)
        tensors = dict(x=x, w=wt, y=nhwc(y))
        if has_b:
            tensors["b"] = b
        f.case(name, params, **tensors)
    print("conv2d_circular:", f.write(), "bytes")


def set_circular(pipe, on):
    """A1111's apply_circular: every Conv2d of the UNet and the VAE."""
    n = 0
    for module in (pipe.unet, pipe.vae):
        for layer in module.modules():
            if type(layer) is torch.nn.Conv2d:
                layer.padding_mode = "circular" if on else "zeros"
                n += 1
    return n


def init_image():
    y, x = np.mgrid[0:64, 0:64].astype(np.float64)
    r = 128 + 100 * np.sin(x / 9.0) * np.cos(y / 13.0)
    g = 40 + 3 * y
    b = 220 - 2.5 * x
    rgb = np.clip(np.stack([r, g, b], -1), 0, 255).round().astype(np.uint8)
    return Image.fromarray(rgb, "RGB")


def pipeline_goldens():
    os.makedirs(OUT, exist_ok=True)
    path = os.path.join(ROOT, "tests", "data", "models", MODEL)
    kw = dict(safety_checker=None, requires_safety_checker=False, torch_dtype=torch.float32)
    t2i = diffusers.StableDiffusionPipeline.from_pretrained(path, **kw)
    i2i = diffusers.StableDiffusionImg2ImgPipeline(**t2i.components)
    xl = diffusers.StableDiffusionXLPipeline.from_pretrained(
        os.path.join(ROOT, "tests", "data", "models", "sdxl_sharp"), torch_dtype=torch.float32)
    for p in (t2i, i2i, xl):
        p.scheduler = diffusers.EulerDiscreteScheduler.from_config(p.scheduler.config)
        p.set_progress_bar_config(disable=True)
    init = init_image()
    init.save(os.path.join(OUT, "init.png"))
    cases = [
        dict(name="t2i_64x64", kind="txt2img", width=64, height=64, seed=6301),
        dict(name="t2i_96x64", kind="txt2img", width=96, height=64, seed=6302),
        dict(name="i2i_64x64", kind="img2img", width=64, height=64, seed=6303, strength=0.6),
        dict(name="xl_t2i_64x64", kind="txt2img", width=64, height=64, seed=6310,
             model="tests/data/models/sdxl_sharp"),
    ]
    manifest = dict(model=f"tests/data/models/{MODEL}", prompt=PROMPT, steps=STEPS, cfg=7.5,
                    sampler="euler", tolerance=TOLERANCE, cases=[])
    for c in cases:
        imgs = {}
        for tiled in (True, False):
            pipe = xl if "model" in c else t2i if c["kind"] == "txt2img" else i2i
            n = set_circular(pipe, tiled)
            g = torch.Generator("cpu").manual_seed(c["seed"])
            args = dict(prompt=PROMPT, num_inference_steps=STEPS, guidance_scale=7.5,
                        generator=g, output_type="pil")
            if c["kind"] == "txt2img":
                args.update(width=c["width"], height=c["height"])
            else:
                args.update(image=init, strength=c["strength"])
            with torch.no_grad():
                imgs[tiled] = pipe(**args).images[0]
        set_circular(t2i, False)
        c.setdefault("model", manifest["model"])
        a = np.asarray(imgs[True]).astype(int)
        b = np.asarray(imgs[False]).astype(int)
        diff = int(np.abs(a - b).max())
        # the golden can fail a Tessera that ignores tiling
        assert diff > 4 * TOLERANCE, f"{c['name']}: tiling moves pixels by only {diff}"
        imgs[True].save(os.path.join(OUT, c["name"] + ".png"))
        imgs[False].save(os.path.join(OUT, c["name"] + "_plain.png"))
        c["convs_patched"] = n
        c["tiling_moves_pixels_by"] = diff
        manifest["cases"].append(c)
        print(c["name"], "patched", n, "convs; tiling moves pixels by up to", diff)
    with open(os.path.join(OUT, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=2)
        f.write("\n")


if __name__ == "__main__":
    op_goldens()
    pipeline_goldens()
