#!/usr/bin/env python3
"""tools/make_fullsize_models.py - full-size SD1.5- and SDXL-shaped models with random weights.

Why: the benchmarks and memory measurements (tessera bench unet/vae,
tools/bench/*.py, docs/perf.md) need models with the real shapes, and no
checkpoint can be downloaded here.  Shapes, not trained values, decide speed
and memory, so this script builds the published architectures with diffusers
(UNet, VAE, CLIP text encoders with their real configs, tokenizer files,
scheduler config, model_index.json) and random weights, and saves them as
ordinary diffusers folders in fp16 (as the fp16 downloads are), one
safetensors file per component (no shards):

  out/models/sd15/   SD 1.5-shaped  (UNet 860M params, VAE 84M, CLIP-L 123M)
  out/models/sdxl/   SDXL-base-shaped (UNet 2.6G params, VAE 84M, CLIP-L + bigG)

out/ is git-ignored.  Modules are built directly in fp16 (torch default
dtype) so the SDXL UNet never exists in f32 here: peak memory stays near
the size of the largest component in fp16 (~5 GB for SDXL).  The tokenizer
files are derived from the CLIP BPE shipped in the open-clip-torch wheel
(already in the venv), so nothing is downloaded.

Deterministic: fixed seeds.  Pinned versions (tools/setup-venv.sh):
torch 2.9.1, diffusers 0.35.2, transformers 4.57.1, open-clip-torch 3.2.0.

Usage: . .venv/bin/activate && python tools/make_fullsize_models.py [--which sd15,sdxl] [--out DIR]
"""
import argparse
import gc
import gzip
import importlib.util
import json
import os
import shutil
import sys
import time

import torch
from diffusers import (AutoencoderKL, EulerDiscreteScheduler, PNDMScheduler,
                       StableDiffusionPipeline, StableDiffusionXLPipeline,
                       UNet2DConditionModel)
from transformers import (CLIPTextConfig, CLIPTextModel, CLIPTextModelWithProjection,
                          CLIPTokenizer)
from transformers.models.clip.tokenization_clip import bytes_to_unicode

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ---------------------------------------------------------------- tokenizer
def clip_vocab_files(outdir):
    """vocab.json + merges.txt of OpenAI CLIP, from open_clip's BPE file."""
    spec = importlib.util.find_spec("open_clip")
    if spec is None:
        sys.exit("open-clip-torch is not installed (tools/setup-venv.sh)")
    gz = os.path.join(os.path.dirname(spec.origin), "bpe_simple_vocab_16e6.txt.gz")
    lines = gzip.open(gz).read().decode("utf-8").split("\n")
    merges = [tuple(m.split()) for m in lines[1:49152 - 256 - 2 + 1]]
    chars = list(bytes_to_unicode().values())  # the byte alphabet, in CLIP's order
    vocab = chars + [c + "</w>" for c in chars] + ["".join(m) for m in merges]
    vocab += ["<|startoftext|>", "<|endoftext|>"]
    assert len(vocab) == 49408
    os.makedirs(outdir, exist_ok=True)
    vj, mt = os.path.join(outdir, "vocab.json"), os.path.join(outdir, "merges.txt")
    with open(vj, "w", encoding="utf-8") as f:
        json.dump({t: i for i, t in enumerate(vocab)}, f, ensure_ascii=False)
    with open(mt, "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n")
        for a, b in merges:
            f.write(f"{a} {b}\n")
    return vj, mt


def tokenizer(files, pad):
    return CLIPTokenizer(files[0], files[1], pad_token=pad, model_max_length=77)


# ---------------------------------------------------------------- configs
def clip_l():
    """openai/clip-vit-large-patch14 text tower (SD 1.x; SDXL encoder 1)."""
    return CLIPTextConfig(vocab_size=49408, hidden_size=768, intermediate_size=3072,
                          num_hidden_layers=12, num_attention_heads=12,
                          max_position_embeddings=77, hidden_act="quick_gelu",
                          projection_dim=768, bos_token_id=0, eos_token_id=2, pad_token_id=1)


def clip_bigg():
    """OpenCLIP ViT-bigG/14 text tower as SDXL ships it (text_encoder_2)."""
    return CLIPTextConfig(vocab_size=49408, hidden_size=1280, intermediate_size=5120,
                          num_hidden_layers=32, num_attention_heads=20,
                          max_position_embeddings=77, hidden_act="gelu", projection_dim=1280,
                          bos_token_id=0, eos_token_id=2, pad_token_id=1)


def vae(scaling, sample, force_upcast):
    return AutoencoderKL(in_channels=3, out_channels=3, latent_channels=4,
                         down_block_types=("DownEncoderBlock2D",) * 4,
                         up_block_types=("UpDecoderBlock2D",) * 4,
                         block_out_channels=(128, 256, 512, 512), layers_per_block=2,
                         norm_num_groups=32, sample_size=sample, scaling_factor=scaling,
                         force_upcast=force_upcast)


def sd15_unet():
    return UNet2DConditionModel(
        sample_size=64, in_channels=4, out_channels=4,
        down_block_types=("CrossAttnDownBlock2D",) * 3 + ("DownBlock2D",),
        up_block_types=("UpBlock2D",) + ("CrossAttnUpBlock2D",) * 3,
        block_out_channels=(320, 640, 1280, 1280), layers_per_block=2,
        cross_attention_dim=768, attention_head_dim=8, norm_num_groups=32)


def sdxl_unet():
    return UNet2DConditionModel(
        sample_size=128, in_channels=4, out_channels=4,
        down_block_types=("DownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D"),
        up_block_types=("CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "UpBlock2D"),
        block_out_channels=(320, 640, 1280), layers_per_block=2,
        transformer_layers_per_block=(1, 2, 10), attention_head_dim=(5, 10, 20),
        use_linear_projection=True, cross_attention_dim=2048,
        addition_embed_type="text_time", addition_time_embed_dim=256,
        projection_class_embeddings_input_dim=2816, norm_num_groups=32)


def sd_scheduler():
    return PNDMScheduler(beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear",
                         skip_prk_steps=True, set_alpha_to_one=False, steps_offset=1,
                         num_train_timesteps=1000)


def sdxl_scheduler():
    return EulerDiscreteScheduler(beta_start=0.00085, beta_end=0.012,
                                  beta_schedule="scaled_linear", steps_offset=1,
                                  timestep_spacing="leading", num_train_timesteps=1000)


# ---------------------------------------------------------------- build
def build(which, tok_files):
    if which == "sd15":
        torch.manual_seed(15)
        return StableDiffusionPipeline(
            vae=vae(0.18215, 512, True), text_encoder=CLIPTextModel(clip_l()),
            tokenizer=tokenizer(tok_files, "<|endoftext|>"), unet=sd15_unet(),
            scheduler=sd_scheduler(), safety_checker=None, feature_extractor=None,
            requires_safety_checker=False)
    torch.manual_seed(20)
    return StableDiffusionXLPipeline(
        vae=vae(0.13025, 1024, True), text_encoder=CLIPTextModel(clip_l()),
        text_encoder_2=CLIPTextModelWithProjection(clip_bigg()),
        tokenizer=tokenizer(tok_files, "<|endoftext|>"), tokenizer_2=tokenizer(tok_files, "!"),
        unet=sdxl_unet(), scheduler=sdxl_scheduler())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--which", default="sd15,sdxl", help="comma list of sd15, sdxl")
    ap.add_argument("--out", default=os.path.join(ROOT, "out", "models"))
    ap.add_argument("--force", action="store_true", help="rebuild folders that exist")
    args = ap.parse_args()
    tok_files = clip_vocab_files(os.path.join(args.out, ".clip_bpe"))
    torch.set_default_dtype(torch.float16)  # build in fp16: no f32 copy ever exists
    for which in args.which.split(","):
        if which not in ("sd15", "sdxl"):
            sys.exit(f"unknown model '{which}' (sd15, sdxl)")
        folder = os.path.join(args.out, which)
        if os.path.exists(os.path.join(folder, "model_index.json")) and not args.force:
            print(f"{folder}: exists (use --force to rebuild)")
            continue
        t0 = time.time()
        pipe = build(which, tok_files)
        shutil.rmtree(folder, ignore_errors=True)
        pipe.save_pretrained(folder, safe_serialization=True, max_shard_size="100GB")
        n = {k: sum(p.numel() for p in v.parameters())
             for k, v in pipe.components.items() if isinstance(v, torch.nn.Module)}
        print(f"{folder}: " + ", ".join(f"{k} {v / 1e6:.0f}M" for k, v in n.items()) +
              f" params, fp16, {time.time() - t0:.0f} s")
        del pipe
        gc.collect()
    return 0


if __name__ == "__main__":
    sys.exit(main())
