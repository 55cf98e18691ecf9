#!/usr/bin/env python3
"""Reference outputs for Tessera's CLIP text encoders (text/clip.c).

Builds tiny random text encoders of each family with transformers, saves
them as diffusers-style component folders (config.json + model.safetensors)
and writes, for a fixed batch of token ids, the outputs the pipelines use:

  sd1_clip_l     CLIPTextModel, quick_gelu, EOS padding        (SD 1.x)
  sd2_openclip_h CLIPTextModel, gelu, "!" padding (id 0)       (SD 2.x)
  sdxl_clip_l    CLIPTextModel, quick_gelu                     (SDXL encoder 1)
  sdxl_bigg      CLIPTextModelWithProjection, gelu             (SDXL encoder 2)

Pinned: torch 2.9.1, transformers 4.57.1 (tools/setup-venv.sh).
Usage: . .venv/bin/activate && python tools/reference/make_text_encoder_goldens.py
"""
import json
import os

import torch
from safetensors.torch import save_file
from transformers import CLIPTextConfig, CLIPTextModel, CLIPTextModelWithProjection

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data", "textenc")
VOCAB = 1000
EOS = VOCAB - 1
BOS = VOCAB - 2
L = 77


def make_ids(gen, pad_id, lengths):
    rows = []
    for n in lengths:
        body = torch.randint(1, VOCAB - 2, (n,), generator=gen).tolist()
        row = [BOS] + body + [EOS]
        row += [pad_id] * (L - len(row))
        rows.append(row[:L])
    return torch.tensor(rows, dtype=torch.int64)


def build(folder, component, cls, act, hidden, heads, layers, inter, proj, pad_id, seed):
    torch.manual_seed(seed)
    cfg = CLIPTextConfig(vocab_size=VOCAB, hidden_size=hidden, intermediate_size=inter,
                         num_hidden_layers=layers, num_attention_heads=heads,
                         max_position_embeddings=L, hidden_act=act, projection_dim=proj,
                         bos_token_id=BOS, eos_token_id=EOS, pad_token_id=pad_id,
                         layer_norm_eps=1e-5)
    model = cls(cfg).eval()
    # random LN affine parameters so the test sees them (defaults are 1/0)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "layer_norm" in n:
                p.add_(torch.randn_like(p) * 0.1)
    name = f"{folder}/{component}"
    d = os.path.join(OUT, folder, component)
    os.makedirs(d, exist_ok=True)
    model.config.to_json_file(os.path.join(d, "config.json"))
    save_file({k: v.contiguous() for k, v in model.state_dict().items()},
              os.path.join(d, "model.safetensors"))

    gen = torch.Generator().manual_seed(seed + 1)
    ids = make_ids(gen, pad_id, [5, 20, 75, 0])
    with torch.no_grad():
        out = model(input_ids=ids, output_hidden_states=True)
    hs = out.hidden_states
    ln = model.text_model.final_layer_norm
    ref = {
        "ids": ids.to(torch.int32),
        "last_hidden_state": out.last_hidden_state,          # skip 1, final norm
        "penultimate": hs[-2],                               # skip 2, no final norm (SDXL)
        "penultimate_normed": ln(hs[-2]),                    # skip 2, final norm (A1111 clip_skip 2)
    }
    if cls is CLIPTextModelWithProjection:
        ref["text_embeds"] = out.text_embeds
        # pooled (pre-projection) as the base model computes it
        base = model.text_model(input_ids=ids)
        ref["pooled"] = base.pooler_output
    else:
        ref["pooled"] = out.pooler_output
    save_file({k: v.detach().contiguous().float() if v.dtype != torch.int32 else v.contiguous()
               for k, v in ref.items()}, os.path.join(OUT, folder, f"reference_{component}.safetensors"))
    print(f"{name}: {sum(p.numel() for p in model.parameters())} params")


def main():
    build("sd1", "text_encoder", CLIPTextModel, "quick_gelu", 32, 4, 3, 64, 32, EOS, 1)
    build("sd2", "text_encoder", CLIPTextModel, "gelu", 40, 5, 3, 80, 40, 0, 2)
    build("sdxl", "text_encoder", CLIPTextModel, "quick_gelu", 32, 4, 3, 64, 32, EOS, 3)
    build("sdxl", "text_encoder_2", CLIPTextModelWithProjection, "gelu", 48, 4, 3, 96, 40, 0, 4)
    for folder, comps in (("sd1", ["text_encoder"]), ("sd2", ["text_encoder"]),
                          ("sdxl", ["text_encoder", "text_encoder_2"])):
        index = {"_class_name": "TextEncodersOnly", "_diffusers_version": "0.35.2"}
        for c in comps:
            index[c] = ["transformers", "CLIPTextModelWithProjection" if c.endswith("_2")
                        else "CLIPTextModel"]
        with open(os.path.join(OUT, folder, "model_index.json"), "w") as f:
            json.dump(index, f, indent=2)
    with open(os.path.join(OUT, "README.md"), "w") as f:
        f.write("Tiny random CLIP text encoders and their transformers outputs.\n"
                "Made by tools/reference/make_text_encoder_goldens.py; do not edit.\n")


if __name__ == "__main__":
    main()
