#!/usr/bin/env python3
"""tools/bench/count_flops.py - the multiply-add work of a UNet call and a VAE decode, by kind.

Why: a time means little without the work it did and the machine's ceiling
(`tessera bench peak`).  This counts the flops of the same calls that
tools/bench/bench_side.py times (a UNet call at batch 2, a VAE decode of one
image) with torch's FlopCounterMode on the "meta" device: the model is built
from its config only, nothing is computed or allocated, so it takes seconds
even for SDXL.  Flops count 2 per multiply-add (torch's convention, the same
as `tessera bench ops`), split into convolutions, matrix products (linears,
and attention's two batched products, which SDPA's math path runs as bmm) and
the rest.  Divide by a measured time for GFLOP/s, and by the peak for the
share of the machine a side used.

Usage (repo root, the tools venv):
    . .venv/bin/activate
    python tools/bench/count_flops.py --model out/models/sd15 --size 512
    python tools/bench/count_flops.py --model out/models/sdxl --size 1024 --json
"""
import argparse
import json
import os
from collections import defaultdict

import torch
from torch.utils.flop_counter import FlopCounterMode


def kind_of(op):
    name = str(op)
    if "convolution" in name:
        return "conv"
    if any(k in name for k in ("mm", "addmm", "bmm", "matmul", "linear", "attention")):
        return "matmul"
    return "other"


def count(fn):
    with FlopCounterMode(display=False) as fc:
        fn()
    by = defaultdict(int)
    for op, n in fc.get_flop_counts()["Global"].items():
        by[kind_of(op)] += n
    by["total"] = sum(v for k, v in by.items() if k != "total")
    return dict(by)


def unet_flops(model, size, batch):
    from diffusers import UNet2DConditionModel
    cfg = UNet2DConditionModel.load_config(os.path.join(model, "unet"))
    with torch.device("meta"):
        unet = UNet2DConditionModel.from_config(cfg).eval()
        h = size // 8
        lat = torch.randn(batch, unet.config.in_channels, h, h)
        t = torch.full((batch,), 999.0)
        ctx = torch.randn(batch, 77, unet.config.cross_attention_dim)
        kw = {}
        if unet.config.addition_embed_type == "text_time":
            pooled = (unet.config.projection_class_embeddings_input_dim
                      - 6 * unet.config.addition_time_embed_dim)
            kw["added_cond_kwargs"] = {"text_embeds": torch.randn(batch, pooled),
                                       "time_ids": torch.full((batch, 6), float(size))}
        with torch.no_grad():
            return count(lambda: unet(lat, t, encoder_hidden_states=ctx, **kw))


def vae_flops(model, size, batch):
    from diffusers import AutoencoderKL
    cfg = AutoencoderKL.load_config(os.path.join(model, "vae"))
    with torch.device("meta"):
        vae = AutoencoderKL.from_config(cfg).eval()
        f = 2 ** (len(vae.config.block_out_channels) - 1)
        lat = torch.randn(batch, vae.config.latent_channels, size // f, size // f)
        with torch.no_grad():
            return count(lambda: vae.decode(lat))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, help="diffusers folder (unet/, vae/)")
    ap.add_argument("--size", type=int, default=512)
    ap.add_argument("--unet-batch", type=int, default=2, help="default 2: one image with CFG")
    ap.add_argument("--vae-batch", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    res = {"model": a.model, "size": a.size,
           "unet": unet_flops(a.model, a.size, a.unet_batch),
           "vae_decode": vae_flops(a.model, a.size, a.vae_batch)}
    if a.json:
        print(json.dumps(res))
        return
    print(f"{a.model} at {a.size}x{a.size} (GFLOP, 2 per multiply-add)")
    print("| call | conv | matmul (linear, attention) | other | total |")
    print("|---|---:|---:|---:|---:|")
    for name, key, b in (("UNet", "unet", a.unet_batch), ("VAE decode", "vae_decode",
                                                          a.vae_batch)):
        r = res[key]
        print(f"| {name} (batch {b}) | {r.get('conv', 0) / 1e9:.0f} | "
              f"{r.get('matmul', 0) / 1e9:.0f} | {r.get('other', 0) / 1e9:.0f} | "
              f"{r['total'] / 1e9:.0f} |")


if __name__ == "__main__":
    main()
