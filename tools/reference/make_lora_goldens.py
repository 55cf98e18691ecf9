#!/usr/bin/env python3
"""LoRA goldens: random LoRA files in kohya and PEFT formats, and the images
diffusers makes with them through load_lora_weights (issue 58).

Why this script exists: the bar for LoRAs is "the image diffusers gives
with load_lora_weights at the same scale, within 1/255".  The only honest
reference is diffusers itself: its kohya converter (lora_unet_*, lora_te*_*,
.alpha), its PEFT loader (unet.<module>.lora_A/lora_B, text_encoder.*) and
PEFT's LoRA layers for Linear and Conv2d (LoCon).  The files are written
here with random matrices large enough to move pixels (asserted below, so
a LoRA that is silently not applied fails the test), on the tiny models of
tests/data/models (sd1_sharp, which hears its conditioning, and sdxl_sharp, made here the
same way).

Also written: each case's image with the LoRA merged into the weights
(diffusers' fuse_lora), the reference for "within 1/255 of the merged
weights", and a kohya SDXL file that spells its UNet modules in LDM names
(input_blocks_4_1_...), as kohya writes SDXL LoRAs, made here from the
standard diffusers -> LDM block numbering (not from Tessera's tables).

Pinned as make_pipeline_goldens.py, plus peft 0.17.1.

Writes tests/data/lora/:
  loras/<name>.safetensors   the LoRA files (the test's --lora-dir)
  <case>.png, <case>-fused.png
  manifest.json              per case: model, prompt (with its tags), the
                             loras field, seed, steps, sampler, the files

Run: . .venv/bin/activate && python tools/reference/make_lora_goldens.py
"""
import json
import math
import os

import numpy as np
import torch
from PIL import Image
from safetensors.torch import save_file

import diffusers
from diffusers import EulerDiscreteScheduler

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "data", "lora")
LORAS = os.path.join(OUT, "loras")
MODELS_REL = "tests/data/models"
SIZE = 64
STEPS = 4
PROMPT = "a photo of a red cat on a green sofa"
NEGATIVE = "blurry, low quality"
XL_GAIN = 1.2

UNET_LINEAR = ("to_q", "to_k", "to_v", "to_out.0", "ff.net.0.proj", "ff.net.2", "proj_in",
               "proj_out", "time_emb_proj")
UNET_CONV = ("conv1", "conv2", "conv_shortcut", "downsamplers.0.conv", "upsamplers.0.conv")
TE_LINEAR = ("q_proj", "k_proj", "v_proj", "out_proj", "fc1", "fc2")


def targets(module, names, kinds=(torch.nn.Linear, torch.nn.Conv2d)):
    out = []
    for n, m in module.named_modules():
        if isinstance(m, kinds) and any(n.endswith(s) for s in names):
            out.append((n, m))
    return out


def rand_pair(m, rank, g, gain):
    w = m.weight
    if w.ndim == 4:
        o, i, kh, kw = w.shape
        down = torch.randn(rank, i, kh, kw, generator=g) / math.sqrt(i * kh * kw)
        up = torch.randn(o, rank, 1, 1, generator=g) * gain / math.sqrt(rank)
    else:
        o, i = w.shape
        down = torch.randn(rank, i, generator=g) / math.sqrt(i)
        up = torch.randn(o, rank, generator=g) * gain / math.sqrt(rank)
    return down, up


def ldm_name(n, lpb, attn_blocks_up):
    """diffusers UNet module -> LDM (SGM) module, the standard numbering."""
    p = n.split(".")
    if p[0] == "down_blocks":
        i = int(p[1])
        if p[2] == "downsamplers":
            return f"input_blocks.{(lpb + 1) * (i + 1)}.0.op" + "".join("." + x for x in p[5:])
        j = int(p[3])
        sub = "0" if p[2] == "resnets" else "1"
        rest = ".".join(p[4:])
        return f"input_blocks.{(lpb + 1) * i + j + 1}.{sub}.{res_suffix(rest) if sub == '0' else rest}"
    if p[0] == "mid_block":
        j = int(p[2])
        rest = ".".join(p[3:])
        if p[1] == "attentions":
            return f"middle_block.1.{rest}"
        return f"middle_block.{2 * j}.{res_suffix(rest)}"
    if p[0] == "up_blocks":
        i = int(p[1])
        if p[2] == "upsamplers":
            k = 2 if attn_blocks_up[i] else 1
            return f"output_blocks.{(lpb + 1) * i + lpb}.{k}.conv"
        j = int(p[3])
        sub = "0" if p[2] == "resnets" else "1"
        rest = ".".join(p[4:])
        return f"output_blocks.{(lpb + 1) * i + j}.{sub}.{res_suffix(rest) if sub == '0' else rest}"
    raise ValueError(n)


def res_suffix(s):
    return {"conv1": "in_layers.2", "conv2": "out_layers.3", "time_emb_proj": "emb_layers.1",
            "conv_shortcut": "skip_connection"}[s]


def half(sd):
    """Matrices as f16 (exact in f32 on both sides; half the bytes in git),
    alphas as f32 scalars, as kohya writes them."""
    return {k: (v if k.endswith(".alpha") else v.half()).contiguous() for k, v in sd.items()}


def kohya_file(pipe, name, seed, rank, alpha, gain, te_keys, unet_names, ldm=None):
    g = torch.Generator().manual_seed(seed)
    sd = {}
    for n, m in targets(pipe.unet, unet_names):
        d, u = rand_pair(m, rank, g, gain)
        mod = ldm(n) if ldm else n
        k = "lora_unet_" + mod.replace(".", "_")
        sd[k + ".lora_down.weight"] = d
        sd[k + ".lora_up.weight"] = u
        sd[k + ".alpha"] = torch.tensor(float(alpha))
    for prefix, enc in te_keys:
        for n, m in targets(enc, TE_LINEAR):
            d, u = rand_pair(m, rank, g, gain)
            k = prefix + n.replace(".", "_")
            sd[k + ".lora_down.weight"] = d
            sd[k + ".lora_up.weight"] = u
            sd[k + ".alpha"] = torch.tensor(float(alpha))
    save_file(half(sd), os.path.join(LORAS, name + ".safetensors"))
    return sd


def peft_file(pipe, name, seed, rank, gain, unet_names, te=True):
    g = torch.Generator().manual_seed(seed)
    sd = {}
    for n, m in targets(pipe.unet, unet_names):
        d, u = rand_pair(m, rank, g, gain)
        sd[f"unet.{n}.lora_A.weight"] = d
        sd[f"unet.{n}.lora_B.weight"] = u
    encoders = [("text_encoder", pipe.text_encoder)] if te else []
    if te and getattr(pipe, "text_encoder_2", None) is not None:
        encoders.append(("text_encoder_2", pipe.text_encoder_2))
    for prefix, enc in encoders:
        for n, m in targets(enc, TE_LINEAR):
            d, u = rand_pair(m, rank, g, gain)
            sd[f"{prefix}.{n}.lora_A.weight"] = d
            sd[f"{prefix}.{n}.lora_B.weight"] = u
    save_file(half(sd), os.path.join(LORAS, name + ".safetensors"))


def make_sharp_xl():
    """tests/data/models/sdxl_sharp: the tiny SDXL model with its UNet and
    text encoders re-initialised at unit gain (as make_pipeline_goldens.py
    makes sd1_sharp) and stored as f16 (exact in f32 for both diffusers and
    Tessera), so that a LoRA moves pixels; the VAE, tokenizers and
    scheduler are symlinks to sdxl's."""
    pipe = load_pipe("sdxl")
    dst = os.path.join(ROOT, MODELS_REL, "sdxl_sharp")
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for mod, gain in ((pipe.unet, 1.6), (pipe.text_encoder, 1.3), (pipe.text_encoder_2, 1.3)):
            for n, p in mod.named_parameters():
                if p.ndim >= 2:
                    v = torch.randn(p.shape, generator=g) * gain / math.sqrt(p[0].numel())
                elif "norm" in n and n.endswith("weight"):
                    v = 1 + 0.1 * torch.randn(p.shape, generator=g)
                else:
                    v = 0.1 * torch.randn(p.shape, generator=g)
                p.copy_(v.half().float())
    os.makedirs(dst, exist_ok=True)
    for part in ("unet", "text_encoder", "text_encoder_2"):
        getattr(pipe, part).to(torch.float16).save_pretrained(os.path.join(dst, part),
                                                              safe_serialization=True)
    for part in ("vae", "tokenizer", "tokenizer_2", "scheduler", "model_index.json"):
        link = os.path.join(dst, part)
        if os.path.islink(link):
            os.remove(link)
        os.symlink(os.path.join("..", "sdxl", part), link)


def load_pipe(model):
    path = os.path.join(ROOT, MODELS_REL, model)
    cls = diffusers.StableDiffusionXLPipeline if "xl" in model else diffusers.StableDiffusionPipeline
    kw = {} if "xl" in model else dict(safety_checker=None, requires_safety_checker=False)
    pipe = cls.from_pretrained(path, torch_dtype=torch.float32, **kw)
    pipe.scheduler = EulerDiscreteScheduler.from_config(pipe.scheduler.config)
    pipe.set_progress_bar_config(disable=True)
    return pipe


def run(pipe, prompt, seed, negative=None):
    with torch.no_grad():
        img = pipe(prompt=prompt, negative_prompt=negative, num_inference_steps=STEPS,
                   guidance_scale=7.5, width=SIZE, height=SIZE,
                   generator=torch.Generator().manual_seed(seed), output_type="np").images[0]
    return (img * 255).round().clip(0, 255).astype(np.uint8)


def with_loras(model, loras, prompt, seed, negative=None, fuse=False):
    """loras: [(name, te, unet)]"""
    pipe = load_pipe(model)
    names = []
    for i, (name, te, unet) in enumerate(loras):
        an = f"a{i}"
        pipe.load_lora_weights(LORAS, weight_name=name + ".safetensors", adapter_name=an)
        names.append(an)
    if names:
        comps = {"unet": None}
        weights = []
        for (name, te, unet) in loras:
            w = {"unet": unet, "text_encoder": te}
            if hasattr(pipe, "text_encoder_2") and pipe.text_encoder_2 is not None:
                w["text_encoder_2"] = te
            weights.append(w)
        pipe.set_adapters(names, adapter_weights=weights)
        del comps
        if fuse:
            pipe.fuse_lora(adapter_names=names, lora_scale=1.0)
            pipe.unload_lora_weights()
    return run(pipe, prompt, seed, negative)


def main():
    os.makedirs(LORAS, exist_ok=True)
    make_sharp_xl()
    sd1 = load_pipe("sd1_sharp")
    xl = load_pipe("sdxl_sharp")
    # kohya SD1: UNet (linear + LoCon convs) and text encoder, alpha/rank = 0.5
    kohya_file(sd1, "k_sd1", 1, 4, 2.0, 1.2, [("lora_te_", sd1.text_encoder)],
               UNET_LINEAR + UNET_CONV)
    # kohya SD1, UNet attention only (a second, different LoRA for batching)
    kohya_file(sd1, "k_sd1_attn", 2, 2, 2.0, 1.5, [], ("to_q", "to_k", "to_v", "to_out.0"))
    # PEFT SD1: UNet attention, LoCon conv1, conv_in/out, the time embedding (a
    # SiLU after it: the delta goes before the activation), text encoder
    peft_file(sd1, "p_sd1", 3, 4, 0.8, ("to_q", "to_k", "to_v", "to_out.0", "conv1", "conv_in",
                                        "conv_out", "time_embedding.linear_1"))
    # kohya SDXL: te1 + te2 + UNet, diffusers module names
    kohya_file(xl, "k_sdxl", 4, 4, 4.0, XL_GAIN,
               [("lora_te1_", xl.text_encoder), ("lora_te2_", xl.text_encoder_2)],
               UNET_LINEAR + UNET_CONV)
    # PEFT SDXL: UNet attention + LoCon conv1, both text encoders
    peft_file(xl, "p_sdxl", 5, 4, 1.0, ("to_q", "to_k", "to_v", "to_out.0", "conv1"))
    # the same matrices, UNet modules in LDM names (kohya's SDXL spelling)
    cfg = xl.unet.config
    attn_up = ["CrossAttn" in t for t in cfg.up_block_types]
    kohya_file(xl, "k_sdxl_ldm", 4, 4, 4.0, XL_GAIN,
               [("lora_te1_", xl.text_encoder), ("lora_te2_", xl.text_encoder_2)],
               UNET_LINEAR + UNET_CONV, ldm=lambda n: ldm_name(n, cfg.layers_per_block, attn_up))

    cases = [
        dict(name="sd1_kohya_tag", model="sd1_sharp", prompt=PROMPT + "<lora:k_sd1:0.8>",
             encode=PROMPT, loras=[], use=[("k_sd1", 0.8, 0.8)], seed=11),
        dict(name="sd1_kohya_split", model="sd1_sharp", prompt=PROMPT, encode=PROMPT,
             loras=[{"name": "k_sd1", "te_weight": 0.5, "unet_weight": 1.1}],
             use=[("k_sd1", 0.5, 1.1)], seed=11, negative=NEGATIVE),
        dict(name="sd1_peft", model="sd1_sharp", prompt=PROMPT + " <lora:p_sd1:1>",
             encode=PROMPT + " ", loras=[], use=[("p_sd1", 1.0, 1.0)], seed=11),
        dict(name="sd1_two", model="sd1_sharp", prompt=PROMPT, encode=PROMPT,
             loras=[{"name": "k_sd1_attn", "te_weight": 1.0, "unet_weight": 1.0},
                    {"name": "p_sd1", "te_weight": 0.7, "unet_weight": 0.6}],
             use=[("k_sd1_attn", 1.0, 1.0), ("p_sd1", 0.7, 0.6)], seed=11),
        dict(name="sd1_none", model="sd1_sharp", prompt=PROMPT, encode=PROMPT, loras=[], use=[],
             seed=11),
        dict(name="sdxl_kohya", model="sdxl_sharp", prompt=PROMPT + "<lora:k_sdxl:1>", encode=PROMPT,
             loras=[], use=[("k_sdxl", 1.0, 1.0)], seed=21),
        dict(name="sdxl_kohya_ldm", model="sdxl_sharp", prompt=PROMPT + "<lora:k_sdxl_ldm:0.9:1.2>",
             encode=PROMPT, loras=[], use=[("k_sdxl_ldm", 0.9, 1.2)], seed=21),
        dict(name="sdxl_peft", model="sdxl_sharp", prompt=PROMPT, encode=PROMPT,
             loras=[{"name": "p_sdxl", "te_weight": 0.8, "unet_weight": 1.0}],
             use=[("p_sdxl", 0.8, 1.0)], seed=21),
        dict(name="sdxl_none", model="sdxl_sharp", prompt=PROMPT, encode=PROMPT, loras=[], use=[],
             seed=21),
    ]
    manifest = []
    base = {}
    for c in cases:
        img = with_loras(c["model"], c["use"], c["encode"], c["seed"], c.get("negative"))
        Image.fromarray(img).save(os.path.join(OUT, c["name"] + ".png"))
        entry = {k: c[k] for k in ("name", "model", "prompt", "loras", "seed")}
        entry["negative"] = c.get("negative")
        entry["model"] = f"{MODELS_REL}/{c['model']}"
        entry["steps"] = STEPS
        entry["size"] = SIZE
        entry["sampler"] = "euler"
        entry["image"] = c["name"] + ".png"
        if c["use"]:
            fused = with_loras(c["model"], c["use"], c["encode"], c["seed"], c.get("negative"),
                               fuse=True)
            Image.fromarray(fused).save(os.path.join(OUT, c["name"] + "-fused.png"))
            entry["fused"] = c["name"] + "-fused.png"
            d = np.abs(fused.astype(int) - img.astype(int)).max()
            print(f"{c['name']}: fused vs unfused (diffusers) max diff {d}/255")
        else:
            base[(c["model"], c["seed"])] = img
        manifest.append(entry)
    # a LoRA must move pixels, or the comparison proves nothing
    for c in cases:
        if c["use"] and (c["model"], c["seed"]) in base:
            img = np.array(Image.open(os.path.join(OUT, c["name"] + ".png")))
            d = np.abs(img.astype(int) - base[(c["model"], c["seed"])].astype(int)).max()
            print(f"{c['name']}: the LoRA moves pixels by up to {d}/255")
            assert d > 8, f"{c['name']}: the LoRA moves pixels by only {d}/255"
    with open(os.path.join(OUT, "manifest.json"), "w") as f:
        json.dump({"cases": manifest, "tolerance": 1}, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
