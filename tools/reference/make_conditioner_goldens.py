#!/usr/bin/env python3
"""Reference prompt conditioning for text/conditioner.c.

For the tiny SD1 / SD2-v / SDXL diffusers folders in tests/data/models, asks
the diffusers pipelines themselves (encode_prompt) for the embeddings of a
few prompts, so the C conditioner is checked against exactly what
StableDiffusionPipeline / StableDiffusionXLPipeline feed the UNet:

  plain       prompt and "" negative, default layer
  clip_skip   diffusers clip_skip=1 (== A1111 / Tessera clip skip 2)
  long        a prompt of more than 75 tokens: A1111-style windows, built
              here from the tokenizer and text encoders directly
  weighted    "a (red:1.5) cat": A1111 emphasis (scale by weight, restore
              the window mean), built here from the plain embeddings

Pinned: torch 2.9.1, diffusers 0.35.2, transformers 4.57.1.
"""
import os

import torch
from diffusers import StableDiffusionPipeline, StableDiffusionXLPipeline
from safetensors.torch import save_file

ROOT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data")
OUT = os.path.join(ROOT, "conditioner")
PROMPT = "a red cat sitting on a blue chair"
LONG = " ".join(["a small red circle on a blue square"] * 12)  # > 75 tokens, no commas (no A1111 comma backtracking)


def windows(tok, text):
    """A1111 windows without comma backtracking for a plain prompt: 75-token chunks."""
    ids = tok(text, add_special_tokens=False)["input_ids"]
    out = []
    for i in range(0, max(len(ids), 1), 75):
        chunk = ids[i:i + 75]
        row = [tok.bos_token_id] + chunk + [tok.eos_token_id]
        row += [tok.pad_token_id] * (77 - len(row))
        out.append(row)
    return torch.tensor(out)


def encode_windows(pipe, ids_list, sdxl, clip_skip=None):
    """Run each text encoder on the windows as the pipeline would on one."""
    encs = [pipe.text_encoder, pipe.text_encoder_2] if sdxl else [pipe.text_encoder]
    parts = []
    for enc, ids in zip(encs, ids_list):
        out = enc(ids, output_hidden_states=True)
        if sdxl:
            parts.append(out.hidden_states[-2])
        else:
            parts.append(out[0])
    z = torch.cat(parts, dim=-1)
    return z.reshape(1, -1, z.shape[-1])


def emphasis(z, weights):
    before = z.mean()
    z = z * weights.reshape(1, -1, 1)
    after = z.mean()
    return z * (before / after)


def main():
    os.makedirs(OUT, exist_ok=True)
    torch.manual_seed(0)
    for name, cls, sdxl in (("sd1", StableDiffusionPipeline, False),
                            ("sd2v", StableDiffusionPipeline, False),
                            ("sdxl", StableDiffusionXLPipeline, True)):
        kw = {"safety_checker": None, "requires_safety_checker": False} if not sdxl else {}
        pipe = cls.from_pretrained(os.path.join(ROOT, "models", name), **kw)
        ref = {}
        with torch.no_grad():
            if sdxl:
                pe, ne, pp, npool = pipe.encode_prompt(PROMPT, device="cpu", num_images_per_prompt=1,
                                                       do_classifier_free_guidance=True,
                                                       negative_prompt="")
                ref.update(plain=pe[0], negative=ne[0], plain_pooled=pp[0], negative_pooled=npool[0])
                pe2, _, pp2, _ = pipe.encode_prompt(PROMPT, device="cpu", num_images_per_prompt=1,
                                                    do_classifier_free_guidance=False, clip_skip=1)
                ref.update(clip_skip=pe2[0], clip_skip_pooled=pp2[0])
                toks = [pipe.tokenizer, pipe.tokenizer_2]
            else:
                pe, ne = pipe.encode_prompt(PROMPT, device="cpu", num_images_per_prompt=1,
                                            do_classifier_free_guidance=True, negative_prompt="")
                ref.update(plain=pe[0], negative=ne[0])
                pe2, _ = pipe.encode_prompt(PROMPT, device="cpu", num_images_per_prompt=1,
                                            do_classifier_free_guidance=False, clip_skip=1)
                ref.update(clip_skip=pe2[0])
                toks = [pipe.tokenizer]
            long_ids = [windows(t, LONG) for t in toks]
            assert long_ids[0].shape[0] >= 2, "LONG must span several windows"
            ref["long"] = encode_windows(pipe, long_ids, sdxl)[0]
            # "a (red:1.5) cat" tokenizes like "a red cat" with weight 1.5 on "red"
            w_ids = [windows(t, "a red cat") for t in toks]
            z = encode_windows(pipe, w_ids, sdxl)
            n_a = len(toks[0]("a", add_special_tokens=False)["input_ids"])
            n_red = len(toks[0]("red", add_special_tokens=False)["input_ids"])
            weights = torch.ones(77)
            weights[1 + n_a:1 + n_a + n_red] = 1.5  # BOS, a..., red...
            ref["weighted"] = emphasis(z, weights)[0]
        save_file({k: v.contiguous().float() for k, v in ref.items()},
                  os.path.join(OUT, f"{name}.safetensors"))
        print(name, {k: tuple(v.shape) for k, v in ref.items()})


if __name__ == "__main__":
    main()
