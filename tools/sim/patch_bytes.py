#!/usr/bin/env python3
"""tools/sim/patch_bytes.py - the communication of patch parallelism
(DistriFusion's displaced patches) for an SDXL UNet, counted from the UNet's
structure: the figures of docs/multi-gpu.md, "Patch parallelism".

Why a script: the bytes per step follow from the diffusers config (block
widths, attention layers per block, resnets per block) and the latent size,
and are easy to get wrong by hand; this walks the same graph as
unet/unet.c builds (down blocks, mid block, up blocks with their skip
concatenations) and counts, for N devices each holding 1/N of the latent's
rows:

  kv     every self-attention layer: the keys and values of the other
         patches (all_gather of K and V, [tokens, C] each, f16).  The bulk.
  halo   every 3x3 convolution: the row above and below a patch from its
         neighbours (C_in channels, f16).
  gn     every GroupNorm: each patch's per-group sum and sum of squares
         (f32), all_gathered so statistics stay global.

All per denoising step, for one image with CFG (2 rows), received by one
device (an interior patch; an all_gather brings in (N-1)/N of the whole).
Standard library only:

    python3 tools/sim/patch_bytes.py [--sizes 2048,4096] [--devices 2,4,8]
"""
import argparse

# diffusers' SDXL base UNet (stabilityai/stable-diffusion-xl-base-1.0 config)
SDXL = {
    "block_out_channels": [320, 640, 1280],
    "down_attention": [False, True, True],
    "transformer_layers_per_block": [1, 2, 10],
    "layers_per_block": 2,
    "in_channels": 4,
    "vae_factor": 8,
}


def walk(cfg, side):
    """Yield ("conv3", width, c_in), ("attn", tokens, c), ("gn", groups) for
    one UNet call at a latent of side x side."""
    ch = cfg["block_out_channels"]
    tl = cfg["transformer_layers_per_block"]
    lpb = cfg["layers_per_block"]
    w = side
    yield ("conv3", w, cfg["in_channels"])
    skips = [ch[0]]
    c = ch[0]

    def resnet(c_in, c_out, w):
        yield ("gn", 32)
        yield ("conv3", w, c_in)
        yield ("gn", 32)
        yield ("conv3", w, c_out)

    def transformer(c, w, layers):
        yield ("gn", 32)
        for _ in range(layers):
            yield ("attn", w * w, c)

    for i, c_out in enumerate(ch):
        for _ in range(lpb):
            yield from resnet(c, c_out, w)
            c = c_out
            if cfg["down_attention"][i]:
                yield from transformer(c, w, tl[i])
            skips.append(c)
        if i < len(ch) - 1:
            yield ("conv3", w, c)  # downsample (stride 2: its input's halo)
            w //= 2
            skips.append(c)
    yield from resnet(c, c, w)
    yield from transformer(c, w, tl[-1])
    yield from resnet(c, c, w)
    for i, c_out in reversed(list(enumerate(ch))):
        for _ in range(lpb + 1):
            c_in = c + skips.pop()
            yield from resnet(c_in, c_out, w)
            c = c_out
            if cfg["down_attention"][i]:
                yield from transformer(c, w, tl[i])
        if i > 0:
            w *= 2
            yield ("conv3", w, c)  # upsample conv
    yield ("gn", 32)
    yield ("conv3", w, c)  # conv_out


def per_step(cfg, size, n, rows=2):
    side = size // cfg["vae_factor"]
    kv = halo = gn = 0.0
    attn_layers = 0
    for op in walk(cfg, side):
        if op[0] == "attn":
            _, tokens, c = op
            kv += 2 * tokens * c * 2 * (n - 1) / n  # K and V, f16
            attn_layers += 1
        elif op[0] == "conv3":
            _, w, c_in = op
            halo += 2 * w * c_in * 2  # a row from each neighbour, f16
        else:
            gn += op[1] * 2 * 4 * (n - 1)  # sum and sum of squares per group, f32
    return {"kv": kv * rows, "halo": halo * rows, "gn": gn * rows, "attn_layers": attn_layers}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="2048,4096")
    ap.add_argument("--devices", default="2,4,8")
    a = ap.parse_args()
    print("| image | devices | K/V all_gather | conv halos | GroupNorm stats | total per step "
          "(per device, received) |")
    print("|---|---:|---:|---:|---:|---:|")
    for size in [int(s) for s in a.sizes.split(",")]:
        for n in [int(d) for d in a.devices.split(",")]:
            r = per_step(SDXL, size, n)
            tot = r["kv"] + r["halo"] + r["gn"]
            print("| SDXL %d² | %d | %.2f GB | %.1f MB | %.1f KB | %.2f GB |" % (
                size, n, r["kv"] / 1e9, r["halo"] / 1e6, r["gn"] / 1e3, tot / 1e9))
    print()
    print("self-attention layers per UNet call: %d" % per_step(SDXL, 1024, 2)["attn_layers"])


if __name__ == "__main__":
    main()
