#!/usr/bin/env python3
"""Reference outputs for Tessera's VAE and latent previews (vae/).

Writes to tests/data/vae/:
  f8/                     a tiny AutoencoderKL with four blocks (factor 8, like
                          the published VAEs) and a shift_factor, as a
                          VAE-only diffusers folder
  golden_{sd1,sdxl,f8}.safetensors
      latents   [B,h,w,4]   UNet-scale latents (NHWC)
      decoded   [B,H,W,3]   vae.decode(latents / scaling_factor + shift_factor)
      decoded_u8 [B,H,W,3]  VaeImageProcessor.postprocess + numpy round (uint8)
      images    [B,H,W,3]   encoder input in [-1, 1]
      mean, logvar [B,h,w,4] vae.encode(images).latent_dist (logvar clamped)
      noise     [B,h,w,4]   standard normal draw
      sampled   [B,h,w,4]   (mean + std * noise - shift_factor) * scaling_factor
  preview.safetensors     latents and the linear RGB projections (SD 1.5 and
                          SDXL factors from ComfyUI's comfy/latent_formats.py)
  taesd_random_decoder.safetensors
                          random weights in madebyollin/taesd's decoder
                          format (f16; no TAESD weights ship in any PyPI
                          package that we could find), and
  taesd_golden.safetensors latents -> decoder output of the PyTorch model
                          written below from the published architecture.

The tiny sd1/sdxl VAEs are read from tests/data/models/{sd1,sdxl}/vae
(unchanged).  Pinned: torch 2.9.1, diffusers 0.35.2 (tools/setup-venv.sh).
Deterministic: fixed seeds.
Usage: . .venv/bin/activate && python tools/reference/make_vae_goldens.py
"""
import json
import os

import numpy as np
import torch
import torch.nn as nn
from diffusers import AutoencoderKL
from safetensors.torch import load_file, save_file

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
DATA = os.path.join(ROOT, "tests", "data")
OUT = os.path.join(DATA, "vae")

# Latent -> RGB factors (rows: latent channels, columns: R, G, B), copied as
# numbers from ComfyUI's comfy/latent_formats.py (classes SD15 and SDXL).
SD15_FACTORS = [[0.3512, 0.2297, 0.3227], [0.3250, 0.4974, 0.2350],
                [-0.2829, 0.1762, 0.2721], [-0.2120, -0.2616, -0.7177]]
SD15_BIAS = [0.0, 0.0, 0.0]
SDXL_FACTORS = [[0.3651, 0.4232, 0.4341], [-0.2533, -0.0042, 0.1068],
                [0.1076, 0.1111, -0.0362], [-0.3165, -0.2492, -0.2188]]
SDXL_BIAS = [0.1084, -0.0175, -0.0011]


def nhwc(t):
    return t.permute(0, 2, 3, 1).contiguous()


def nchw(t):
    return t.permute(0, 3, 1, 2).contiguous()


def make_f8():
    torch.manual_seed(0)
    vae = AutoencoderKL(in_channels=3, out_channels=3, latent_channels=4,
                        down_block_types=("DownEncoderBlock2D",) * 4,
                        up_block_types=("UpDecoderBlock2D",) * 4,
                        block_out_channels=(8, 16, 16, 32), layers_per_block=1,
                        norm_num_groups=4, sample_size=64, scaling_factor=1.5305,
                        shift_factor=0.0609, force_upcast=False)
    g = torch.Generator().manual_seed(8)
    with torch.no_grad():
        for name, p in vae.named_parameters():
            if "norm" in name and name.endswith("weight"):
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(torch.randn(p.shape, generator=g) * 0.15)
    folder = os.path.join(OUT, "f8")
    vae.save_pretrained(os.path.join(folder, "vae"), safe_serialization=True)
    with open(os.path.join(folder, "model_index.json"), "w") as f:
        json.dump({"_class_name": "StableDiffusionPipeline", "_diffusers_version": "0.35.2",
                   "vae": ["diffusers", "AutoencoderKL"]}, f, indent=2)
        f.write("\n")
    return folder


def to_u8(decoded):
    # VaeImageProcessor.postprocess(output_type="np") then numpy_to_pil's
    # (images * 255).round().astype("uint8")
    x = (decoded / 2 + 0.5).clamp(0, 1).numpy()
    return torch.from_numpy((x * 255).round().astype(np.uint8))


def golden(name, folder, h, w, batch, seed):
    vae = AutoencoderKL.from_pretrained(os.path.join(folder, "vae")).eval()
    cfg = vae.config
    f = 2 ** (len(cfg.block_out_channels) - 1)
    shift = cfg.shift_factor or 0.0
    g = torch.Generator().manual_seed(seed)
    latents = torch.randn(batch, 4, h, w, generator=g)
    images = torch.rand(batch, 3, h * f, w * f, generator=g) * 2 - 1
    noise = torch.randn(batch, 4, h, w, generator=g)
    with torch.no_grad():
        decoded = vae.decode(latents / cfg.scaling_factor + shift).sample
        dist = vae.encode(images).latent_dist
        mean, logvar = dist.mean, dist.logvar
        sampled = (mean + dist.std * noise - shift) * cfg.scaling_factor
    out = {
        "latents": nhwc(latents), "decoded": nhwc(decoded), "decoded_u8": to_u8(nhwc(decoded)),
        "images": nhwc(images), "mean": nhwc(mean), "logvar": nhwc(logvar),
        "noise": nhwc(noise), "sampled": nhwc(sampled),
    }
    save_file(out, os.path.join(OUT, f"golden_{name}.safetensors"))
    print(f"{name}: decoded {tuple(decoded.shape)} range [{decoded.min():.3f}, {decoded.max():.3f}]"
          f", mean std {mean.std():.3f}")


def preview_u8(rgb):
    # ComfyUI's preview_to_image: ((x + 1) / 2).clamp(0, 1) * 255, cast to uint8 (truncates)
    return (((rgb + 1.0) / 2.0).clamp(0, 1) * 255).to(torch.uint8)


def previews():
    g = torch.Generator().manual_seed(5)
    latents = torch.randn(2, 7, 5, 4, generator=g) * 1.5  # NHWC
    out = {"latents": latents}
    for fam, fac, bias in (("sd15", SD15_FACTORS, SD15_BIAS), ("sdxl", SDXL_FACTORS, SDXL_BIAS)):
        rgb = latents @ torch.tensor(fac) + torch.tensor(bias)
        out[f"{fam}_rgb"] = rgb.contiguous()
        out[f"{fam}_u8"] = preview_u8(rgb).contiguous()
    save_file(out, os.path.join(OUT, "preview.safetensors"))


# ---- TAESD decoder, written from the description of madebyollin/taesd ----

class TaesdBlock(nn.Module):
    """relu(conv3(relu(conv2(relu(conv1(x))))) + x), convs 3x3 with bias."""

    def __init__(self, c):
        super().__init__()
        self.conv = nn.Sequential(nn.Conv2d(c, c, 3, padding=1), nn.ReLU(),
                                  nn.Conv2d(c, c, 3, padding=1), nn.ReLU(),
                                  nn.Conv2d(c, c, 3, padding=1))

    def forward(self, x):
        return torch.relu(self.conv(x) + x)


class TaesdClamp(nn.Module):
    def forward(self, x):
        return torch.tanh(x / 3) * 3


def taesd_decoder(latent_channels=4, c=64):
    mods = [TaesdClamp(), nn.Conv2d(latent_channels, c, 3, padding=1), nn.ReLU()]
    for stage in range(3):
        mods += [TaesdBlock(c), TaesdBlock(c), TaesdBlock(c), nn.Upsample(scale_factor=2),
                 nn.Conv2d(c, c, 3, padding=1, bias=False)]
    mods += [TaesdBlock(c), nn.Conv2d(c, 3, 3, padding=1)]
    return nn.Sequential(*mods)


def taesd():
    torch.manual_seed(3)
    dec = taesd_decoder()
    g = torch.Generator().manual_seed(33)
    with torch.no_grad():
        for name, p in dec.named_parameters():
            fan_in = p[0].numel() if p.dim() > 1 else 64
            p.copy_(torch.randn(p.shape, generator=g) * (0.75 / fan_in ** 0.5))
    sd = {k: v.to(torch.float16).contiguous() for k, v in dec.state_dict().items()}
    path = os.path.join(OUT, "taesd_random_decoder.safetensors")
    save_file(sd, path)
    dec.load_state_dict({k: v.float() for k, v in load_file(path).items()})
    lat = torch.randn(1, 4, 8, 6, generator=g) * 2.0
    with torch.no_grad():
        img = dec(lat)
    save_file({"latents": nhwc(lat), "decoded": nhwc(img)},
              os.path.join(OUT, "taesd_golden.safetensors"))
    print(f"taesd: out {tuple(img.shape)} range [{img.min():.3f}, {img.max():.3f}] std {img.std():.3f}")
    print("taesd keys:", sorted(sd)[:6], "...", len(sd))


def main():
    os.makedirs(OUT, exist_ok=True)
    torch.set_num_threads(1)
    f8 = make_f8()
    golden("sd1", os.path.join(DATA, "models", "sd1"), 6, 5, 2, 11)
    golden("sdxl", os.path.join(DATA, "models", "sdxl"), 5, 7, 2, 12)
    golden("f8", f8, 4, 3, 2, 13)
    previews()
    taesd()


if __name__ == "__main__":
    main()
