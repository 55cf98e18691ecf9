#!/usr/bin/env python3
"""tests/gpu/make_random_model.py - SD1.5- and SDXL-shaped models with random fp16 weights.

Why: the GPU run (tests/gpu/run.sh) times the UNet and the VAE at the real
shapes, and no checkpoint can be downloaded; full-size files (~2 GB for
SD1.5, ~7 GB for SDXL) cannot be carried to the GPU machine either.  This
script builds them there, with the Python standard library only (the GPU
machine's Python has no diffusers): it derives every tensor name and shape of
diffusers' UNet2DConditionModel and AutoencoderKL from a config.json (the
same rules diffusers uses to build the modules), and writes one safetensors
file per component with random fp16 values of magnitude 2^-8..2^-5 (norm
weights 1), so activations stay finite through the network.

The configs start from the tiny models in tests/data/models (sd1, sdxl: the
same architectures, tiny widths) with the published SD1.5 / SDXL-base
widths, depths and head sizes put in.  With --small the tiny configs are kept
and the generated names and shapes are checked against the tiny models'
own safetensors headers (tests/gpu/prepare.sh runs that, then loads them in
tessera): so the full-size names are right if the tiny ones are.
The text encoders are made the same way at the published CLIP ViT-L/14 and
OpenCLIP ViT-bigG/14 sizes, keeping the tiny models' vocabulary (their
tokenizers are copied), so that `tessera generate` and `tessera serve` run
the whole pipeline at full size (run.sh's serve stage on SD1.5 shapes).

Deterministic (fixed seed).  Usage:
  python3 tests/gpu/make_random_model.py --arch sd15|sdxl [--small] --out DIR
"""
import argparse
import json
import math
import os
import random
import shutil
import struct
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TINY = {"sd15": "sd1", "sdxl": "sdxl"}

# the published architectures (diffusers configs of SD 1.5 and SDXL base 1.0)
FULL_UNET = {
    "sd15": {
        "block_out_channels": [320, 640, 1280, 1280], "layers_per_block": 2,
        "down_block_types": ["CrossAttnDownBlock2D"] * 3 + ["DownBlock2D"],
        "up_block_types": ["UpBlock2D"] + ["CrossAttnUpBlock2D"] * 3,
        "attention_head_dim": 8, "cross_attention_dim": 768, "norm_num_groups": 32,
        "transformer_layers_per_block": 1, "use_linear_projection": False, "sample_size": 64,
    },
    "sdxl": {
        "block_out_channels": [320, 640, 1280], "layers_per_block": 2,
        "down_block_types": ["DownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D"],
        "up_block_types": ["CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "UpBlock2D"],
        "attention_head_dim": [5, 10, 20], "cross_attention_dim": 2048, "norm_num_groups": 32,
        "transformer_layers_per_block": [1, 2, 10], "use_linear_projection": True,
        "addition_embed_type": "text_time", "addition_time_embed_dim": 256,
        "projection_class_embeddings_input_dim": 2816, "sample_size": 128,
    },
}
FULL_VAE = {
    "block_out_channels": [128, 256, 512, 512], "layers_per_block": 2, "norm_num_groups": 32,
    "down_block_types": ["DownEncoderBlock2D"] * 4, "up_block_types": ["UpDecoderBlock2D"] * 4,
    "latent_channels": 4,
}


def per_block(v, n):
    return list(v) if isinstance(v, list) else [v] * n


def resnet(out, p, cin, cout, temb):
    out[p + "norm1.weight"] = [cin]
    out[p + "norm1.bias"] = [cin]
    out[p + "conv1.weight"] = [cout, cin, 3, 3]
    out[p + "conv1.bias"] = [cout]
    if temb:
        out[p + "time_emb_proj.weight"] = [cout, temb]
        out[p + "time_emb_proj.bias"] = [cout]
    out[p + "norm2.weight"] = [cout]
    out[p + "norm2.bias"] = [cout]
    out[p + "conv2.weight"] = [cout, cout, 3, 3]
    out[p + "conv2.bias"] = [cout]
    if cin != cout:
        out[p + "conv_shortcut.weight"] = [cout, cin, 1, 1]
        out[p + "conv_shortcut.bias"] = [cout]


def linear(out, p, o, i, bias=True):
    out[p + ".weight"] = [o, i]
    if bias:
        out[p + ".bias"] = [o]


def transformer(out, p, c, cross, layers, linear_proj):
    out[p + "norm.weight"] = [c]
    out[p + "norm.bias"] = [c]
    for name in ("proj_in", "proj_out"):
        out[p + name + ".weight"] = [c, c] if linear_proj else [c, c, 1, 1]
        out[p + name + ".bias"] = [c]
    for t in range(layers):
        b = "%stransformer_blocks.%d." % (p, t)
        for n in ("norm1", "norm2", "norm3"):
            out[b + n + ".weight"] = [c]
            out[b + n + ".bias"] = [c]
        for a, kv in (("attn1", c), ("attn2", cross)):
            linear(out, b + a + ".to_q", c, c, False)
            linear(out, b + a + ".to_k", c, kv, False)
            linear(out, b + a + ".to_v", c, kv, False)
            linear(out, b + a + ".to_out.0", c, c)
        linear(out, b + "ff.net.0.proj", 8 * c, c)
        linear(out, b + "ff.net.2", c, 4 * c)


def unet_tensors(cfg):
    out = {}
    boc = cfg["block_out_channels"]
    nb = len(boc)
    lpb = cfg["layers_per_block"]
    te = 4 * boc[0]
    cross = cfg["cross_attention_dim"]
    tl = per_block(cfg.get("transformer_layers_per_block", 1), nb)
    lin = bool(cfg.get("use_linear_projection"))
    out["conv_in.weight"] = [boc[0], cfg["in_channels"], 3, 3]
    out["conv_in.bias"] = [boc[0]]
    linear(out, "time_embedding.linear_1", te, boc[0])
    linear(out, "time_embedding.linear_2", te, te)
    if cfg.get("addition_embed_type") == "text_time":
        linear(out, "add_embedding.linear_1", te, cfg["projection_class_embeddings_input_dim"])
        linear(out, "add_embedding.linear_2", te, te)
    oc = boc[0]
    for i, kind in enumerate(cfg["down_block_types"]):
        ic, oc = oc, boc[i]
        for j in range(lpb):
            resnet(out, "down_blocks.%d.resnets.%d." % (i, j), ic if j == 0 else oc, oc, te)
            if kind.startswith("CrossAttn"):
                transformer(out, "down_blocks.%d.attentions.%d." % (i, j), oc, cross, tl[i], lin)
        if i < nb - 1:
            out["down_blocks.%d.downsamplers.0.conv.weight" % i] = [oc, oc, 3, 3]
            out["down_blocks.%d.downsamplers.0.conv.bias" % i] = [oc]
    c = boc[-1]
    resnet(out, "mid_block.resnets.0.", c, c, te)
    transformer(out, "mid_block.attentions.0.", c, cross, tl[-1], lin)
    resnet(out, "mid_block.resnets.1.", c, c, te)
    rev = list(reversed(boc))
    rtl = list(reversed(tl))
    oc = rev[0]
    for i, kind in enumerate(cfg["up_block_types"]):
        prev, oc = oc, rev[i]
        ic = rev[min(i + 1, nb - 1)]
        for j in range(lpb + 1):
            skip = ic if j == lpb else oc
            rin = prev if j == 0 else oc
            resnet(out, "up_blocks.%d.resnets.%d." % (i, j), rin + skip, oc, te)
            if kind.startswith("CrossAttn"):
                transformer(out, "up_blocks.%d.attentions.%d." % (i, j), oc, cross, rtl[i], lin)
        if i < nb - 1:
            out["up_blocks.%d.upsamplers.0.conv.weight" % i] = [oc, oc, 3, 3]
            out["up_blocks.%d.upsamplers.0.conv.bias" % i] = [oc]
    out["conv_norm_out.weight"] = [boc[0]]
    out["conv_norm_out.bias"] = [boc[0]]
    out["conv_out.weight"] = [cfg["out_channels"], boc[0], 3, 3]
    out["conv_out.bias"] = [cfg["out_channels"]]
    return out


def vae_mid(out, p, c):
    resnet(out, p + "resnets.0.", c, c, 0)
    out[p + "attentions.0.group_norm.weight"] = [c]
    out[p + "attentions.0.group_norm.bias"] = [c]
    for n in ("to_q", "to_k", "to_v", "to_out.0"):
        linear(out, p + "attentions.0." + n, c, c)
    resnet(out, p + "resnets.1.", c, c, 0)


def vae_tensors(cfg):
    out = {}
    boc = cfg["block_out_channels"]
    nb = len(boc)
    lpb = cfg["layers_per_block"]
    lat = cfg["latent_channels"]
    out["encoder.conv_in.weight"] = [boc[0], cfg.get("in_channels", 3), 3, 3]
    out["encoder.conv_in.bias"] = [boc[0]]
    oc = boc[0]
    for i in range(nb):
        ic, oc = oc, boc[i]
        for j in range(lpb):
            resnet(out, "encoder.down_blocks.%d.resnets.%d." % (i, j), ic if j == 0 else oc, oc, 0)
        if i < nb - 1:
            out["encoder.down_blocks.%d.downsamplers.0.conv.weight" % i] = [oc, oc, 3, 3]
            out["encoder.down_blocks.%d.downsamplers.0.conv.bias" % i] = [oc]
    vae_mid(out, "encoder.mid_block.", boc[-1])
    out["encoder.conv_norm_out.weight"] = [boc[-1]]
    out["encoder.conv_norm_out.bias"] = [boc[-1]]
    out["encoder.conv_out.weight"] = [2 * lat, boc[-1], 3, 3]
    out["encoder.conv_out.bias"] = [2 * lat]
    out["quant_conv.weight"] = [2 * lat, 2 * lat, 1, 1]
    out["quant_conv.bias"] = [2 * lat]
    out["post_quant_conv.weight"] = [lat, lat, 1, 1]
    out["post_quant_conv.bias"] = [lat]
    out["decoder.conv_in.weight"] = [boc[-1], lat, 3, 3]
    out["decoder.conv_in.bias"] = [boc[-1]]
    vae_mid(out, "decoder.mid_block.", boc[-1])
    rev = list(reversed(boc))
    oc = rev[0]
    for i in range(nb):
        prev, oc = oc, rev[i]
        for j in range(lpb + 1):
            resnet(out, "decoder.up_blocks.%d.resnets.%d." % (i, j), prev if j == 0 else oc, oc, 0)
        if i < nb - 1:
            out["decoder.up_blocks.%d.upsamplers.0.conv.weight" % i] = [oc, oc, 3, 3]
            out["decoder.up_blocks.%d.upsamplers.0.conv.bias" % i] = [oc]
    out["decoder.conv_norm_out.weight"] = [boc[0]]
    out["decoder.conv_norm_out.bias"] = [boc[0]]
    out["decoder.conv_out.weight"] = [cfg.get("out_channels", 3), boc[0], 3, 3]
    out["decoder.conv_out.bias"] = [cfg.get("out_channels", 3)]
    return out


# the published text encoders: CLIP ViT-L/14's (SD 1.5, SDXL's first) and
# OpenCLIP ViT-bigG/14's (SDXL's second, with its projection); the tiny
# models' vocabulary and activation are kept (their tokenizer is copied)
FULL_TEXT = {
    "clip-l": {"hidden_size": 768, "intermediate_size": 3072, "num_attention_heads": 12,
               "num_hidden_layers": 12, "projection_dim": 768},
    "bigg": {"hidden_size": 1280, "intermediate_size": 5120, "num_attention_heads": 20,
             "num_hidden_layers": 32, "projection_dim": 1280},
}
FULL_TEXT_OF = {("sd15", "text_encoder"): "clip-l", ("sdxl", "text_encoder"): "clip-l",
                ("sdxl", "text_encoder_2"): "bigg"}


def clip_tensors(cfg):
    """transformers' CLIPTextModel (+ text_projection for ...WithProjection)."""
    h, f = cfg["hidden_size"], cfg["intermediate_size"]
    p = "text_model."
    t = {p + "embeddings.token_embedding.weight": [cfg["vocab_size"], h],
         p + "embeddings.position_embedding.weight": [cfg["max_position_embeddings"], h],
         p + "final_layer_norm.weight": [h], p + "final_layer_norm.bias": [h]}
    for i in range(cfg["num_hidden_layers"]):
        q = "%sencoder.layers.%d." % (p, i)
        for n in ("q_proj", "k_proj", "v_proj", "out_proj"):
            t[q + "self_attn.%s.weight" % n] = [h, h]
            t[q + "self_attn.%s.bias" % n] = [h]
        for n in ("layer_norm1", "layer_norm2"):
            t[q + n + ".weight"] = [h]
            t[q + n + ".bias"] = [h]
        t[q + "mlp.fc1.weight"] = [f, h]
        t[q + "mlp.fc1.bias"] = [f]
        t[q + "mlp.fc2.weight"] = [h, f]
        t[q + "mlp.fc2.bias"] = [h]
    if "CLIPTextModelWithProjection" in cfg.get("architectures", []):
        t["text_projection.weight"] = [cfg["projection_dim"], h]
    return t


def read_header(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h = json.loads(f.read(n))
    h.pop("__metadata__", None)
    return {k: v["shape"] for k, v in h.items()}


def write_safetensors(path, tensors, rng):
    names = sorted(tensors)
    header, off = {}, 0
    for n in names:
        size = 2
        for d in tensors[n]:
            size *= d
        header[n] = {"dtype": "F16", "shape": tensors[n], "data_offsets": [off, off + size]}
        off += size
    hb = json.dumps(header, separators=(",", ":")).encode()
    hb += b" " * (-len(hb) % 8)
    # high bytes: sign | exponent 0x08..0x0a (2^-7 .. 2^-5) | 2 mantissa bits
    table = bytes(((b & 0x80) | (0x20 + ((b >> 2) % 3) * 4) | (b & 0x03)) for b in range(256))
    one = b"\x00\x3c"
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)))
        f.write(hb)
        for n in names:
            count = header[n]["data_offsets"][1] // 2 - header[n]["data_offsets"][0] // 2
            is_norm_w = n.endswith(".weight") and len(tensors[n]) == 1 and "norm" in n
            if is_norm_w:
                f.write(one * count)
                continue
            done = 0
            while done < count:
                k = min(count - done, 1 << 24)
                buf = bytearray(2 * k)
                buf[0::2] = rng.randbytes(k)
                buf[1::2] = rng.randbytes(k).translate(table)
                f.write(buf)
                done += k


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--arch", choices=sorted(TINY), required=True)
    ap.add_argument("--small", action="store_true", help="keep the tiny widths and check names")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    src = os.path.join(ROOT, "tests", "data", "models", TINY[a.arch])
    if os.path.exists(a.out):
        shutil.rmtree(a.out)
    shutil.copytree(src, a.out, ignore=shutil.ignore_patterns("*.safetensors"))
    rng = random.Random(1234)
    comps = [("unet", unet_tensors, FULL_UNET[a.arch], "diffusion_pytorch_model.safetensors"),
             ("vae", vae_tensors, FULL_VAE, "diffusion_pytorch_model.safetensors")]
    for d in sorted(os.listdir(src)):
        if d.startswith("text_encoder"):
            comps.append((d, clip_tensors, FULL_TEXT[FULL_TEXT_OF[(a.arch, d)]], "model.safetensors"))
    for comp, make, full, fname in comps:
        cpath = os.path.join(a.out, comp, "config.json")
        cfg = json.load(open(cpath))
        if not a.small:
            cfg.update(full)
            if comp == "unet" and a.arch == "sd15":
                cfg["num_attention_heads"] = None
            json.dump(cfg, open(cpath, "w"), indent=2)
        tensors = make(cfg)
        if a.small:
            want = read_header(os.path.join(src, comp, fname))
            want.pop("text_model.embeddings.position_ids", None)  # a buffer, not a weight
            missing = sorted(set(want) - set(tensors))
            extra = sorted(set(tensors) - set(want))
            bad = sorted(n for n in want if n in tensors and list(want[n]) != list(tensors[n]))
            if missing or extra or bad:
                sys.exit("%s %s: names differ from %s: missing %s, extra %s, shapes %s"
                         % (a.arch, comp, src, missing[:5], extra[:5], bad[:5]))
        n = sum(math.prod(s) for s in tensors.values())
        write_safetensors(os.path.join(a.out, comp, fname), tensors, rng)
        print("%s/%s: %d tensors, %.1fM parameters" % (a.out, comp, len(tensors), n / 1e6))


if __name__ == "__main__":
    main()
