#!/usr/bin/env python3
"""tools/reference/make_unet_goldens.py - UNet2DConditionModel goldens for tests/unet/.

For each tiny UNet (the committed folders tests/data/models/{sd1,sd1_inpaint,
sd2v,sdxl}/unet, which this script never modifies, plus extra tiny configs
written here under tests/data/unet/<name>/unet), it writes
tests/data/unet/<name>.safetensors with:

  latents      [B, H, W, Cin]   NHWC (the C side's layout)
  timesteps    [B]              a different timestep per row (one fractional)
  context      [B, L, cross]    a different text context per row
  text_embeds  [B, pooled]      SDXL (text_time) only, different per row
  time_ids     [B, n]           SDXL only, different per row
  expected     [B, H, W, Cout]  NHWC: diffusers run ROW BY ROW, concatenated

and checks, before writing, that diffusers' own batched call agrees with the
row-by-row result (so the golden states the contract "rows never mix").
Everything runs in float32 on the CPU.  H != W so a transposed axis fails.

Extra configs (all the same families, smaller shapes diffusers accepts):
  sd1_3block   3 blocks (8, 16, 32), attention in the first two, 1 layer,
               per-block head counts (1, 2, 4), 4 norm groups
  sdxl_refiner text_time with 5 time_ids (aesthetic score), 3 blocks,
               transformer_layers_per_block (1, 2, 1), no attention at top

Deterministic: fixed seeds.  Pinned versions (tools/setup-venv.sh):
torch 2.9.1, diffusers 0.35.2, safetensors 0.6.2.

Usage: . .venv/bin/activate && python tools/reference/make_unet_goldens.py
"""
import json
import os
import sys

import torch
from diffusers import UNet2DConditionModel
from safetensors.torch import save_file

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODELS = os.path.join(ROOT, "tests", "data", "models")
OUT = os.path.join(ROOT, "tests", "data", "unet")


def randomise(module, seed):
    """diffusers zero-initialises some layers; make every weight matter."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.1)


def extra_unets():
    """Tiny configs beyond the committed model folders."""
    torch.manual_seed(7)
    sd1_3 = UNet2DConditionModel(
        sample_size=8, in_channels=4, out_channels=4,
        down_block_types=("CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D"),
        block_out_channels=(8, 16, 32), layers_per_block=1, norm_num_groups=4,
        cross_attention_dim=24, attention_head_dim=(1, 2, 4))
    randomise(sd1_3, 71)
    refiner = UNet2DConditionModel(
        sample_size=8, in_channels=4, out_channels=4,
        down_block_types=("DownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D"),
        up_block_types=("CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "UpBlock2D"),
        block_out_channels=(8, 16, 16), layers_per_block=1, norm_num_groups=2,
        transformer_layers_per_block=(1, 2, 1), attention_head_dim=(2, 2, 4),
        use_linear_projection=True, cross_attention_dim=20,
        addition_embed_type="text_time", addition_time_embed_dim=6,
        projection_class_embeddings_input_dim=10 + 5 * 6)
    randomise(refiner, 72)
    return {"sd1_3block": (sd1_3, 5), "sdxl_refiner": (refiner, 5)}


def nhwc(x):
    return x.permute(0, 2, 3, 1).contiguous()


def make_case(name, unet, n_time_ids, seed, B=3, H=8, W=12, L=77):
    cfg = unet.config
    g = torch.Generator().manual_seed(seed)
    latents = torch.randn(B, cfg.in_channels, H, W, generator=g)
    timesteps = torch.tensor([999.0, 421.5, 1.0][:B])
    context = torch.randn(B, L, cfg.cross_attention_dim, generator=g)
    added = None
    rec = {"latents": nhwc(latents), "timesteps": timesteps, "context": context}
    if cfg.addition_embed_type == "text_time":
        pooled = cfg.projection_class_embeddings_input_dim - n_time_ids * cfg.addition_time_embed_dim
        text_embeds = torch.randn(B, pooled, generator=g)
        rows = [[1024, 1024, 0, 0, 1024, 1024], [768, 1344, 16, 32, 768, 1344],
                [512, 512, 0, 0, 1024, 1024]] if n_time_ids == 6 else \
            [[1024, 1024, 0, 0, 6.0], [768, 1344, 16, 32, 2.5], [512, 512, 8, 0, 9.0]]
        time_ids = torch.tensor(rows[:B], dtype=torch.float32)
        added = {"text_embeds": text_embeds, "time_ids": time_ids}
        rec.update(added)

    def run(sl):
        kw = {}
        if added is not None:
            kw["added_cond_kwargs"] = {k: v[sl] for k, v in added.items()}
        return unet(latents[sl], timesteps[sl], encoder_hidden_states=context[sl], **kw).sample

    with torch.no_grad():
        rows_out = torch.cat([run(slice(i, i + 1)) for i in range(B)])
        batched = run(slice(0, B))
    err = (batched - rows_out).abs().max() / rows_out.abs().max()
    assert err < 1e-5, f"{name}: diffusers batched vs row by row differ ({err:.2e})"
    rec["expected"] = nhwc(rows_out)
    path = os.path.join(OUT, name + ".safetensors")
    save_file({k: v.contiguous().float() for k, v in rec.items()}, path,
              metadata={"source": "tools/reference/make_unet_goldens.py",
                        "n_time_ids": str(n_time_ids)})
    print(f"{name}: B={B} {H}x{W} L={L} max|out|={rows_out.abs().max():.3f} "
          f"batched-vs-rows {err:.1e} -> {os.path.relpath(path, ROOT)}")


def main():
    os.makedirs(OUT, exist_ok=True)
    torch.manual_seed(0)
    for i, name in enumerate(("sd1", "sd1_inpaint", "sd2v", "sdxl")):
        unet = UNet2DConditionModel.from_pretrained(os.path.join(MODELS, name, "unet"),
                                                    torch_dtype=torch.float32).eval()
        make_case(name, unet, 6, 100 + i)
    for i, (name, (unet, nt)) in enumerate(extra_unets().items()):
        unet = unet.eval()
        folder = os.path.join(OUT, name)
        unet.save_pretrained(os.path.join(folder, "unet"), safe_serialization=True)
        with open(os.path.join(folder, "model_index.json"), "w") as f:
            json.dump({"_class_name": "UNetOnly", "_diffusers_version": "0.35.2",
                       "unet": ["diffusers", "UNet2DConditionModel"]}, f, indent=2)
            f.write("\n")
        make_case(name, unet, nt, 200 + i, H=8, W=16 if i == 0 else 8)
        if name == "sd1_3block":
            # odd sizes: 10x14 -> 5x7 -> 3x4; the up path resizes to each
            # skip's size (diffusers' forward_upsample_size)
            make_case(name + "_odd", unet, nt, 300, H=10, W=14)
    return 0


if __name__ == "__main__":
    sys.exit(main())
