#!/usr/bin/env python3
"""tools/reference/make_tiny_models.py - tiny random Stable Diffusion models.

Writes real, loadable diffusers folders under tests/data/models/<name>/ for
the model loader's tests (tests/model/) and for the UNet/VAE goldens:

  sd1          SD 1.x-like: CrossAttn/Down blocks, conv projections, 2 resnets
               per block, quick-GELU CLIP, epsilon prediction
  sd1_inpaint  the same with a 9-channel UNet input
  sd1_f8       sd1 with a 4-block VAE (factor 8, as real checkpoints): the
               TAESD preview path needs one, and the demo model is factor 4
  sd2v         SD 2.x-like: linear projections, per-block head counts,
               GELU (OpenCLIP-style) encoder, v-prediction
  sdxl         SDXL-like: two text encoders (the second with a projection),
               text_time additional embeddings, 1 and 2 transformer layers

and next to each folder <name>.safetensors: the same weights under the
original LDM / SGM key names, written by the independent reverse mapping
below (diffusers -> LDM), then checked by converting it back with diffusers'
own single_file_utils converters and comparing every tensor.  The C tests
then check that Tessera maps the single file to exactly the folder's
tensors.  expected.json records what `tessera inspect` must report.

Deterministic: fixed seeds.  Pinned versions (tools/setup-venv.sh):
torch 2.9.1, diffusers 0.35.2, transformers 4.57.1, safetensors 0.6.2.

Usage: . .venv/bin/activate && python tools/reference/make_tiny_models.py
"""
import json
import os
import shutil
import sys
from types import SimpleNamespace

import torch
from diffusers import (AutoencoderKL, DDIMScheduler, StableDiffusionPipeline,
                       StableDiffusionXLPipeline, UNet2DConditionModel)
from diffusers.loaders import single_file_utils as sfu
from safetensors.torch import load_file, save_file
from transformers import (CLIPTextConfig, CLIPTextModel,
                          CLIPTextModelWithProjection, CLIPTokenizer)
from transformers.models.clip.tokenization_clip import bytes_to_unicode

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "data", "models")


# ---------------------------------------------------------------- tokenizer
def write_tiny_tokenizer(path):
    """A CLIP BPE tokenizer with the byte alphabet and a few word merges."""
    chars = list(bytes_to_unicode().values())  # the byte alphabet, in CLIP's order
    vocab = chars + [c + "</w>" for c in chars]
    merges = []
    for word in ["a", "photo", "of", "cat", "dog", "the", "an", "astronaut", "riding", "horse"]:
        parts = list(word[:-1]) + [word[-1] + "</w>"]
        while len(parts) > 1:
            pair = (parts[0], parts[1])
            merged = parts[0] + parts[1]
            if pair not in merges:
                merges.append(pair)
            if merged not in vocab:
                vocab.append(merged)
            parts = [merged] + parts[2:]
    vocab += ["<|startoftext|>", "<|endoftext|>"]
    os.makedirs(path, exist_ok=True)
    vj = os.path.join(path, "vocab.json")
    mt = os.path.join(path, "merges.txt")
    with open(vj, "w", encoding="utf-8") as f:
        json.dump({t: i for i, t in enumerate(vocab)}, f, ensure_ascii=False)
    with open(mt, "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n")
        for a, b in merges:
            f.write(f"{a} {b}\n")
    tok = CLIPTokenizer(vj, mt, pad_token="<|endoftext|>", model_max_length=77)
    return tok, len(vocab)


# ---------------------------------------------------------------- models
def clip_config(vocab, act, layers=2, proj=None, bos=0, eos=1):
    return CLIPTextConfig(vocab_size=vocab, hidden_size=16, intermediate_size=32,
                          num_hidden_layers=layers, num_attention_heads=2,
                          max_position_embeddings=77, hidden_act=act, projection_dim=proj or 16,
                          bos_token_id=bos, eos_token_id=eos, pad_token_id=eos)


def tiny_vae(scaling, factor=2):
    blocks = {2: (8, 16), 8: (8, 8, 16, 16)}[factor]
    return AutoencoderKL(in_channels=3, out_channels=3, latent_channels=4,
                         down_block_types=("DownEncoderBlock2D",) * len(blocks),
                         up_block_types=("UpDecoderBlock2D",) * len(blocks),
                         block_out_channels=blocks, layers_per_block=1, norm_num_groups=4,
                         sample_size=32, scaling_factor=scaling)


def scheduler(prediction):
    return DDIMScheduler(beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear",
                         clip_sample=False, set_alpha_to_one=False, steps_offset=1,
                         prediction_type=prediction)


def randomise(module, seed):
    """diffusers zero-initialises some layers; make every weight matter."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.1)


def make_sd(name, seed, inpaint=False, v2=False, vae_factor=2):
    torch.manual_seed(seed)
    tok, vocab = write_tiny_tokenizer(os.path.join("/tmp", f"tok_{name}"))
    eos = vocab - 1
    bos = vocab - 2
    te = CLIPTextModel(clip_config(vocab, "gelu" if v2 else "quick_gelu", bos=bos, eos=eos))
    unet = UNet2DConditionModel(
        sample_size=8, in_channels=9 if inpaint else 4, out_channels=4,
        down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
        block_out_channels=(8, 16), layers_per_block=1 if v2 else 2, norm_num_groups=2,
        cross_attention_dim=16, attention_head_dim=(2, 4) if v2 else 2,
        use_linear_projection=v2, upcast_attention=v2)
    vae = tiny_vae(0.18215, vae_factor)
    for i, m in enumerate((te, unet, vae)):
        randomise(m, seed * 10 + i)
    pipe = StableDiffusionPipeline(vae=vae, text_encoder=te, tokenizer=tok, unet=unet,
                                   scheduler=scheduler("v_prediction" if v2 else "epsilon"),
                                   safety_checker=None, feature_extractor=None,
                                   requires_safety_checker=False)
    return pipe


def make_sdxl(name, seed):
    torch.manual_seed(seed)
    tok, vocab = write_tiny_tokenizer(os.path.join("/tmp", f"tok_{name}"))
    eos, bos = vocab - 1, vocab - 2
    te = CLIPTextModel(clip_config(vocab, "quick_gelu", bos=bos, eos=eos))
    te2 = CLIPTextModelWithProjection(clip_config(vocab, "gelu", layers=3, proj=12, bos=bos,
                                                  eos=eos))
    time_dim = 8
    unet = UNet2DConditionModel(
        sample_size=8, in_channels=4, out_channels=4,
        down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
        up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"),
        block_out_channels=(8, 16), layers_per_block=1, norm_num_groups=2,
        transformer_layers_per_block=(1, 2), attention_head_dim=(2, 4),
        use_linear_projection=True, cross_attention_dim=32,
        addition_embed_type="text_time", addition_time_embed_dim=time_dim,
        projection_class_embeddings_input_dim=12 + 6 * time_dim)
    vae = tiny_vae(0.13025)
    for i, m in enumerate((te, te2, unet, vae)):
        randomise(m, seed * 10 + i)
    return StableDiffusionXLPipeline(vae=vae, text_encoder=te, text_encoder_2=te2, tokenizer=tok,
                                     tokenizer_2=tok, unet=unet, scheduler=scheduler("epsilon"))


# ------------------------------------------- diffusers -> LDM (our own map)
def unet_to_ldm(sd, cfg):
    nb = len(cfg["block_out_channels"])
    L = cfg["layers_per_block"]
    down_attn = [t.startswith("CrossAttn") for t in cfg["down_block_types"]]
    up_attn = [t.startswith("CrossAttn") for t in cfg["up_block_types"]]
    res = [("in_layers.0.", "norm1."), ("in_layers.2.", "conv1."),
           ("emb_layers.1.", "time_emb_proj."), ("out_layers.0.", "norm2."),
           ("out_layers.3.", "conv2."), ("skip_connection.", "conv_shortcut.")]
    pre = [("time_embed.0.", "time_embedding.linear_1."),
           ("time_embed.2.", "time_embedding.linear_2."),
           ("label_emb.0.0.", "add_embedding.linear_1."),
           ("label_emb.0.2.", "add_embedding.linear_2."),
           ("input_blocks.0.0.", "conv_in."), ("out.0.", "conv_norm_out."),
           ("out.2.", "conv_out."),
           ("middle_block.1.", "mid_block.attentions.0.")]
    resp = [("middle_block.0.", "mid_block.resnets.0."), ("middle_block.2.", "mid_block.resnets.1.")]
    for i in range(nb):
        for j in range(L):
            n = 1 + i * (L + 1) + j
            resp.append((f"input_blocks.{n}.0.", f"down_blocks.{i}.resnets.{j}."))
            if down_attn[i]:
                pre.append((f"input_blocks.{n}.1.", f"down_blocks.{i}.attentions.{j}."))
        if i < nb - 1:
            pre.append((f"input_blocks.{1 + i * (L + 1) + L}.0.op.",
                        f"down_blocks.{i}.downsamplers.0.conv."))
        for j in range(L + 1):
            n = i * (L + 1) + j
            resp.append((f"output_blocks.{n}.0.", f"up_blocks.{i}.resnets.{j}."))
            if up_attn[i]:
                pre.append((f"output_blocks.{n}.1.", f"up_blocks.{i}.attentions.{j}."))
        if i < nb - 1:
            pre.append((f"output_blocks.{i * (L + 1) + L}.{2 if up_attn[i] else 1}.conv.",
                        f"up_blocks.{i}.upsamplers.0.conv."))
    out = {}
    for k, v in sd.items():
        done = False
        for ldm, d in resp:
            if k.startswith(d):
                rest = k[len(d):]
                for a, b in res:
                    if rest.startswith(b):
                        out["model.diffusion_model." + ldm + a + rest[len(b):]] = v
                        done = True
                        break
                break
        if not done:
            for ldm, d in pre:
                if k.startswith(d):
                    out["model.diffusion_model." + ldm + k[len(d):]] = v
                    done = True
                    break
        assert done, f"unmapped UNet key {k}"
    return out


def vae_to_ldm(sd, cfg):
    nb = len(cfg["block_out_channels"])
    out = {}
    pairs = [("quant_conv.", "quant_conv."), ("post_quant_conv.", "post_quant_conv.")]
    for s in ("encoder", "decoder"):
        pairs += [(f"{s}.conv_in.", f"{s}.conv_in."), (f"{s}.conv_out.", f"{s}.conv_out."),
                  (f"{s}.norm_out.", f"{s}.conv_norm_out."),
                  (f"{s}.mid.block_1.", f"{s}.mid_block.resnets.0."),
                  (f"{s}.mid.block_2.", f"{s}.mid_block.resnets.1."),
                  (f"{s}.mid.attn_1.", f"{s}.mid_block.attentions.0.")]
    for i in range(nb):
        pairs.append((f"encoder.down.{i}.block.", f"encoder.down_blocks.{i}.resnets."))
        pairs.append((f"encoder.down.{i}.downsample.", f"encoder.down_blocks.{i}.downsamplers.0."))
        u = nb - 1 - i
        pairs.append((f"decoder.up.{u}.block.", f"decoder.up_blocks.{i}.resnets."))
        pairs.append((f"decoder.up.{u}.upsample.", f"decoder.up_blocks.{i}.upsamplers.0."))
    attn = {"group_norm.": "norm.", "to_q.": "q.", "to_k.": "k.", "to_v.": "v.",
            "to_out.0.": "proj_out."}
    for k, v in sd.items():
        for ldm, d in sorted(pairs, key=lambda p: -len(p[1])):
            if k.startswith(d):
                rest = k[len(d):].replace("conv_shortcut.", "nin_shortcut.")
                if "mid_block.attentions" in d:
                    for a, b in attn.items():
                        if rest.startswith(a):
                            rest = b + rest[len(a):]
                            if rest.endswith("weight") and not rest.startswith("norm."):
                                v = v.reshape(*v.shape, 1, 1)
                            break
                out["first_stage_model." + ldm + rest] = v
                break
        else:
            raise AssertionError(f"unmapped VAE key {k}")
    return out


def openclip_to_ldm(sd, prefix, with_projection):
    out = {}
    layer_map = [("layer_norm1.", "ln_1."), ("layer_norm2.", "ln_2."), ("mlp.fc1.", "mlp.c_fc."),
                 ("mlp.fc2.", "mlp.c_proj."), ("self_attn.out_proj.", "attn.out_proj.")]
    qkv = {}
    for k, v in sd.items():
        if k == "text_model.embeddings.position_ids":
            continue
        if k == "text_model.embeddings.token_embedding.weight":
            out[prefix + "token_embedding.weight"] = v
        elif k == "text_model.embeddings.position_embedding.weight":
            out[prefix + "positional_embedding"] = v
        elif k.startswith("text_model.final_layer_norm."):
            out[prefix + "ln_final." + k.split(".")[-1]] = v
        elif k == "text_projection.weight":
            assert with_projection
            out[prefix + "text_projection"] = v.T.contiguous()
        elif k.startswith("text_model.encoder.layers."):
            parts = k.split(".")
            i, rest = int(parts[3]), ".".join(parts[4:])
            base = f"{prefix}transformer.resblocks.{i}."
            for d, l in layer_map:
                if rest.startswith(d):
                    out[base + l + rest[len(d):]] = v
                    break
            else:
                which, kind = rest.split(".")[1][0], rest.split(".")[-1]  # q/k/v, weight/bias
                qkv.setdefault((base, kind), {})[which] = v
        else:
            raise AssertionError(f"unmapped OpenCLIP key {k}")
    for (base, kind), d in qkv.items():
        out[base + "attn.in_proj_" + kind] = torch.cat([d["q"], d["k"], d["v"]], 0)
    return out


def hf_clip_to_ldm(sd, prefix):
    return {prefix + k: v for k, v in sd.items() if not k.endswith("position_ids")}


# ------------------------------------------------------------ cross-check
def check_same(name, got, want):
    assert set(got) == set(want), f"{name}: key sets differ: {sorted(set(got) ^ set(want))[:8]}"
    for k in want:
        assert got[k].shape == want[k].shape, f"{name}: {k} shape {got[k].shape} {want[k].shape}"
        assert torch.equal(got[k], want[k]), f"{name}: {k} differs"


def crosscheck(ldm, comps, kind):
    """Convert the LDM dict back with diffusers' own converters."""
    unet_cfg = dict(comps["unet"].config)
    check_same("unet", sfu.convert_ldm_unet_checkpoint(ldm, unet_cfg), comps["unet"].state_dict())
    vae_cfg = dict(comps["vae"].config)
    check_same("vae", sfu.convert_ldm_vae_checkpoint(ldm, vae_cfg), comps["vae"].state_dict())
    strip = lambda sd: {k: v for k, v in sd.items() if not k.endswith("position_ids")}
    if kind == "sd2v":
        te = comps["text_encoder"]
        got = sfu.convert_open_clip_checkpoint(
            SimpleNamespace(config=SimpleNamespace(hidden_size=te.config.hidden_size)), ldm)
        check_same("text_encoder", got, strip(te.state_dict()))
    elif kind == "sdxl":
        got = sfu.convert_ldm_clip_checkpoint(ldm)
        check_same("text_encoder", strip(got), strip(comps["text_encoder"].state_dict()))
        got = sfu.convert_open_clip_checkpoint(comps["text_encoder_2"], ldm,
                                               prefix="conditioner.embedders.1.model.")
        check_same("text_encoder_2", got, strip(comps["text_encoder_2"].state_dict()))
    else:
        got = sfu.convert_ldm_clip_checkpoint(ldm)
        check_same("text_encoder", strip(got), strip(comps["text_encoder"].state_dict()))


def to_ldm(pipe, kind):
    c = pipe.components
    ldm = {}
    ldm.update(unet_to_ldm(c["unet"].state_dict(), c["unet"].config))
    ldm.update(vae_to_ldm(c["vae"].state_dict(), c["vae"].config))
    if kind == "sd2v":
        ldm.update(openclip_to_ldm(c["text_encoder"].state_dict(), "cond_stage_model.model.",
                                   False))
    elif kind == "sdxl":
        ldm.update(hf_clip_to_ldm(c["text_encoder"].state_dict(),
                                  "conditioner.embedders.0.transformer."))
        ldm.update(openclip_to_ldm(c["text_encoder_2"].state_dict(),
                                   "conditioner.embedders.1.model.", True))
    else:
        ldm.update(hf_clip_to_ldm(c["text_encoder"].state_dict(), "cond_stage_model.transformer."))
    return {k: v.contiguous() for k, v in ldm.items()}


def main():
    os.makedirs(OUT, exist_ok=True)
    specs = [
        ("sd1", lambda: make_sd("sd1", 1), "sd1", "SD1.x", False, "epsilon"),
        ("sd1_inpaint", lambda: make_sd("sd1_inpaint", 2, inpaint=True), "sd1", "SD1.x", True,
         "epsilon"),
        ("sd1_f8", lambda: make_sd("sd1_f8", 5, vae_factor=8), "sd1", "SD1.x", False,
         "epsilon"),
        ("sd2v", lambda: make_sd("sd2v", 3, v2=True), "sd2v", "SD2.x", False, "v_prediction"),
        ("sdxl", lambda: make_sdxl("sdxl", 4), "sdxl", "SDXL", False, "epsilon"),
    ]
    expected = {}
    for name, build, kind, family, inpaint, pred in specs:
        pipe = build()
        folder = os.path.join(OUT, name)
        shutil.rmtree(folder, ignore_errors=True)
        pipe.save_pretrained(folder, safe_serialization=True)
        comps = {k: v for k, v in pipe.components.items()
                 if k in ("unet", "vae", "text_encoder", "text_encoder_2") and v is not None}
        ldm = to_ldm(pipe, kind)
        crosscheck(ldm, comps, kind)
        single = os.path.join(OUT, name + ".safetensors")
        if name in ("sd1", "sd2v", "sdxl"):
            save_file(ldm, single)
            assert load_file(single).keys() == ldm.keys()
        entry = {"family": family, "inpainting": inpaint, "prediction": pred,
                 "refiner": False, "components": {}}
        for cname, mod in comps.items():
            sd = {k: v for k, v in mod.state_dict().items() if not k.endswith("position_ids")}
            entry["components"][cname] = {
                "tensors": len(sd), "params": int(sum(v.numel() for v in sd.values()))}
        expected[name] = entry
        print(f"{name}: {family} ok, " + ", ".join(
            f"{k} {v['params']} params" for k, v in entry["components"].items()))
    with open(os.path.join(OUT, "expected.json"), "w") as f:
        json.dump(expected, f, indent=2, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    sys.exit(main())
