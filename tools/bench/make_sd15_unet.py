#!/usr/bin/env python3
"""tools/bench/make_sd15_unet.py - an SD 1.5-shaped UNet with random fp16 weights, no torch.

Why: `tessera bench unet` needs the real shapes (859.5M parameters) to say
anything about speed and memory, and tools/make_fullsize_models.py needs a
torch/diffusers venv that a machine may not have.  This writes the same
tensors (diffusers' names and shapes for the published SD 1.5 UNet config)
with pure Python: small random fp16 values (|w| < 0.06, never inf or NaN),
tiled from one random block, so it takes seconds.  The other components
(text encoder, VAE, tokenizer, scheduler) are copied from the tiny test
model, so the folder opens as a model; only the UNet is full size.

Usage: python3 tools/bench/make_sd15_unet.py OUT_DIR
       build/bin/tessera bench unet --model OUT_DIR --size 256 --threads 1
"""
import json
import os
import random
import shutil
import struct
import sys
from array import array

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TINY = os.path.join(ROOT, "tests", "data", "models", "sd1")
CROSS = 768   # CLIP-L width
TEMB = 1280   # 4 * block_out_channels[0]


def tensor_list():
    """(name, shape) of every UNet tensor, in the order diffusers builds them."""
    out = []

    def t(name, *shape):
        out.append((name, shape))

    def resnet(p, cin, cout):
        t(p + "norm1.weight", cin)
        t(p + "norm1.bias", cin)
        t(p + "conv1.weight", cout, cin, 3, 3)
        t(p + "conv1.bias", cout)
        t(p + "time_emb_proj.weight", cout, TEMB)
        t(p + "time_emb_proj.bias", cout)
        t(p + "norm2.weight", cout)
        t(p + "norm2.bias", cout)
        t(p + "conv2.weight", cout, cout, 3, 3)
        t(p + "conv2.bias", cout)
        if cin != cout:
            t(p + "conv_shortcut.weight", cout, cin, 1, 1)
            t(p + "conv_shortcut.bias", cout)

    def transformer(p, c):
        t(p + "norm.weight", c)
        t(p + "norm.bias", c)
        t(p + "proj_in.weight", c, c, 1, 1)
        t(p + "proj_in.bias", c)
        b = p + "transformer_blocks.0."
        for n in ("norm1", "norm2", "norm3"):
            t(b + n + ".weight", c)
            t(b + n + ".bias", c)
        for a, kv in (("attn1", c), ("attn2", CROSS)):
            t(b + a + ".to_q.weight", c, c)
            t(b + a + ".to_k.weight", c, kv)
            t(b + a + ".to_v.weight", c, kv)
            t(b + a + ".to_out.0.weight", c, c)
            t(b + a + ".to_out.0.bias", c)
        t(b + "ff.net.0.proj.weight", 8 * c, c)
        t(b + "ff.net.0.proj.bias", 8 * c)
        t(b + "ff.net.2.weight", c, 4 * c)
        t(b + "ff.net.2.bias", c)
        t(p + "proj_out.weight", c, c, 1, 1)
        t(p + "proj_out.bias", c)

    boc = [320, 640, 1280, 1280]
    t("time_embedding.linear_1.weight", TEMB, boc[0])
    t("time_embedding.linear_1.bias", TEMB)
    t("time_embedding.linear_2.weight", TEMB, TEMB)
    t("time_embedding.linear_2.bias", TEMB)
    t("conv_in.weight", boc[0], 4, 3, 3)
    t("conv_in.bias", boc[0])
    skips, cur = [boc[0]], boc[0]
    for i in range(4):
        for j in range(2):
            resnet(f"down_blocks.{i}.resnets.{j}.", cur, boc[i])
            cur = boc[i]
            if i < 3:
                transformer(f"down_blocks.{i}.attentions.{j}.", cur)
            skips.append(cur)
        if i < 3:
            t(f"down_blocks.{i}.downsamplers.0.conv.weight", cur, cur, 3, 3)
            t(f"down_blocks.{i}.downsamplers.0.conv.bias", cur)
            skips.append(cur)
    resnet("mid_block.resnets.0.", cur, boc[3])
    transformer("mid_block.attentions.0.", boc[3])
    resnet("mid_block.resnets.1.", boc[3], boc[3])
    for i in range(4):
        co = boc[3 - i]
        for j in range(3):
            resnet(f"up_blocks.{i}.resnets.{j}.", cur + skips.pop(), co)
            cur = co
            if i > 0:
                transformer(f"up_blocks.{i}.attentions.{j}.", co)
        if i < 3:
            t(f"up_blocks.{i}.upsamplers.0.conv.weight", co, co, 3, 3)
            t(f"up_blocks.{i}.upsamplers.0.conv.bias", co)
    t("conv_norm_out.weight", boc[0])
    t("conv_norm_out.bias", boc[0])
    t("conv_out.weight", 4, boc[0], 3, 3)
    t("conv_out.bias", 4)
    return sorted(out)


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    if os.path.exists(out):
        shutil.rmtree(out)
    shutil.copytree(TINY, out)
    cfg = json.load(open(os.path.join(TINY, "unet", "config.json")))
    cfg.update({"attention_head_dim": 8, "block_out_channels": [320, 640, 1280, 1280],
                "cross_attention_dim": CROSS, "layers_per_block": 2, "norm_num_groups": 32,
                "sample_size": 64,
                "down_block_types": ["CrossAttnDownBlock2D"] * 3 + ["DownBlock2D"],
                "up_block_types": ["UpBlock2D"] + ["CrossAttnUpBlock2D"] * 3})
    tensors = tensor_list()
    header, off = {}, 0
    for name, shape in tensors:
        n = 1
        for d in shape:
            n *= d
        header[name] = {"dtype": "F16", "shape": list(shape), "data_offsets": [off, off + 2 * n]}
        off += 2 * n
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    # one block of random fp16 values: sign, exponent 5..10 (2^-10 .. 2^-4), mantissa
    rnd = random.Random(1)
    block = array("H", [(rnd.getrandbits(1) << 15) | (rnd.randint(5, 10) << 10) |
                        rnd.getrandbits(10) for _ in range(1 << 22)]).tobytes()
    twice = block + block
    with open(os.path.join(out, "unet", "diffusion_pytorch_model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        piece = 0
        for name, _ in tensors:
            begin, end = header[name]["data_offsets"]
            left = end - begin
            while left:
                k = min(left, len(block) - 2 * 4096)
                start = (piece * 7919 * 2) % len(block)  # a different window each time
                f.write(twice[start:start + k])
                left -= k
                piece += 1
    with open(os.path.join(out, "unet", "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    print(f"{out}: {len(tensors)} tensors, {off / 2 / 1e6:.1f}M parameters")


if __name__ == "__main__":
    main()
