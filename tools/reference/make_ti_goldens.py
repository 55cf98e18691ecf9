#!/usr/bin/env python3
"""Textual-inversion goldens: random embedding files in A1111's, SDXL's and
diffusers' formats, and what diffusers' load_textual_inversion makes of them
(issue 58, part 2).

Why this script exists: the bar is "the conditioning and the image diffusers
gives after pipe.load_textual_inversion, for a prompt that contains the
embedding's name".  diffusers adds the name (and name_1, name_2, ... for a
multi-vector file) to the tokenizer and the vectors as new rows of the token
embedding table; Tessera, as A1111, finds the name's tokens in the prompt and
puts the vectors in the token-embedding output.  With the name standing as
a word of the prompt the two give the text encoders the same input, so the
outputs must agree.  The vectors are drawn large enough to move pixels
(asserted below against the same prompt without the embeddings loaded, so an
embedding that is silently not applied fails the test).

Files (tests/data/ti/):
  sd1/tiemb.safetensors    A1111: {"emb_params": [3, 16]}   (3 vectors)
  sd1/tione.safetensors    diffusers: {"tione": [16]}        (1 vector)
  sdxl/tixl.safetensors    SDXL: {"clip_l": [2, 16], "clip_g": [2, 16]}
  cond_sd1.safetensors     encode_prompt's prompt_embeds / negative_prompt_embeds
  cond_sdxl.safetensors    the same, plus the pooled embeds
  sd2/tisd2.safetensors    A1111 for the tiny SD 2.x (v) model: {"emb_params": [2, 16]}
  cond_sd2v.safetensors    its conditioning (written last: the files above keep
                           their random draws)
  <case>.png               the images, 64x64, 4 Euler steps, CFG 7.5
  manifest.json            the cases

Models: sd1_sharp and sdxl_sharp (make_lora_goldens.py), which hear their
conditioning.  Pinned as make_pipeline_goldens.py (torch 2.9.1, diffusers
0.35.2, transformers 4.57.1).

Run: . .venv/bin/activate && python tools/reference/make_ti_goldens.py
"""
import json
import os

import numpy as np
import torch
from PIL import Image
from safetensors.torch import save_file

import diffusers
from diffusers import EulerDiscreteScheduler

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "data", "ti")
MODELS_REL = "tests/data/models"
SIZE = 64
STEPS = 4


def load_pipe(model):
    path = os.path.join(ROOT, MODELS_REL, model)
    cls = diffusers.StableDiffusionXLPipeline if "xl" in model else diffusers.StableDiffusionPipeline
    kw = {} if "xl" in model else dict(safety_checker=None, requires_safety_checker=False)
    pipe = cls.from_pretrained(path, torch_dtype=torch.float32, **kw)
    pipe.scheduler = EulerDiscreteScheduler.from_config(pipe.scheduler.config)
    pipe.set_progress_bar_config(disable=True)
    return pipe


def rand_vectors(table, n, g, gain=4.0):
    """n vectors of the table's width, `gain` times its spread."""
    std = table.weight.detach().std().item()
    return (torch.randn(n, table.weight.shape[1], generator=g) * std * gain).contiguous()


def run(pipe, prompt, negative, seed):
    with torch.no_grad():
        img = pipe(prompt=prompt, negative_prompt=negative, num_inference_steps=STEPS,
                   guidance_scale=7.5, width=SIZE, height=SIZE,
                   generator=torch.Generator().manual_seed(seed), output_type="np").images[0]
    return (img * 255).round().clip(0, 255).astype(np.uint8)


def main():
    os.makedirs(os.path.join(OUT, "sd1"), exist_ok=True)
    os.makedirs(os.path.join(OUT, "sdxl"), exist_ok=True)
    g = torch.Generator().manual_seed(58)

    sd1 = load_pipe("sd1_sharp")
    tab = sd1.text_encoder.get_input_embeddings()
    tiemb = rand_vectors(tab, 3, g)
    tione = rand_vectors(tab, 1, g)[0]
    save_file({"emb_params": tiemb}, os.path.join(OUT, "sd1", "tiemb.safetensors"))
    save_file({"tione": tione}, os.path.join(OUT, "sd1", "tione.safetensors"))

    xl = load_pipe("sdxl_sharp")
    xl_l = rand_vectors(xl.text_encoder.get_input_embeddings(), 2, g)
    xl_g = rand_vectors(xl.text_encoder_2.get_input_embeddings(), 2, g)
    save_file({"clip_l": xl_l, "clip_g": xl_g}, os.path.join(OUT, "sdxl", "tixl.safetensors"))

    cases = [
        dict(name="sd1_ti", model="sd1_sharp", prompt="a photo of tiemb on a green sofa",
             negative="tione, blurry", seed=11, dir="ti/sd1"),
        dict(name="sdxl_ti", model="sdxl_sharp", prompt="a photo of tixl on a green sofa",
             negative="blurry tixl", seed=21, dir="ti/sdxl"),
    ]
    manifest = []
    for c in cases:
        plain = load_pipe(c["model"])
        base = run(plain, c["prompt"], c["negative"], c["seed"])
        pipe = load_pipe(c["model"])
        if c["model"] == "sd1_sharp":
            pipe.load_textual_inversion(os.path.join(OUT, "sd1", "tiemb.safetensors"), token="tiemb")
            pipe.load_textual_inversion(os.path.join(OUT, "sd1", "tione.safetensors"), token="tione")
            with torch.no_grad():
                pe, ne = pipe.encode_prompt(c["prompt"], "cpu", 1, True, c["negative"])
            save_file({"prompt": pe[0].contiguous(), "negative": ne[0].contiguous()},
                      os.path.join(OUT, "cond_sd1.safetensors"))
        else:
            pipe.load_textual_inversion(xl_l, token="tixl", text_encoder=pipe.text_encoder,
                                        tokenizer=pipe.tokenizer)
            pipe.load_textual_inversion(xl_g, token="tixl", text_encoder=pipe.text_encoder_2,
                                        tokenizer=pipe.tokenizer_2)
            with torch.no_grad():
                pe, ne, pp, np_ = pipe.encode_prompt(c["prompt"], device="cpu",
                                                      num_images_per_prompt=1,
                                                      do_classifier_free_guidance=True,
                                                      negative_prompt=c["negative"])
            save_file({"prompt": pe[0].contiguous(), "negative": ne[0].contiguous(),
                       "pooled": pp[0].contiguous(), "negative_pooled": np_[0].contiguous()},
                      os.path.join(OUT, "cond_sdxl.safetensors"))
        img = run(pipe, c["prompt"], c["negative"], c["seed"])
        Image.fromarray(img).save(os.path.join(OUT, c["name"] + ".png"))
        d = np.abs(img.astype(int) - base.astype(int)).max()
        print(f"{c['name']}: the embeddings move pixels by up to {d}/255")
        assert d > 8, f"{c['name']}: the embeddings move pixels by only {d}/255"
        manifest.append(dict(name=c["name"], model=f"{MODELS_REL}/{c['model']}",
                             prompt=c["prompt"], negative=c["negative"], seed=c["seed"],
                             steps=STEPS, size=SIZE, sampler="euler",
                             embeddings_dir=c["dir"], image=c["name"] + ".png"))
    with open(os.path.join(OUT, "manifest.json"), "w") as f:
        json.dump({"cases": manifest, "tolerance": 1}, f, indent=1)
        f.write("\n")

    # SD 2.x (the OpenCLIP-H layout, v-prediction): the conditioning only
    os.makedirs(os.path.join(OUT, "sd2"), exist_ok=True)
    sd2 = load_pipe("sd2v")
    ti2 = rand_vectors(sd2.text_encoder.get_input_embeddings(), 2, g)
    save_file({"emb_params": ti2}, os.path.join(OUT, "sd2", "tisd2.safetensors"))
    sd2.load_textual_inversion(os.path.join(OUT, "sd2", "tisd2.safetensors"), token="tisd2")
    with torch.no_grad():
        pe, ne = sd2.encode_prompt("a tisd2 sitting on a chair", "cpu", 1, True, "tisd2")
    save_file({"prompt": pe[0].contiguous(), "negative": ne[0].contiguous()},
              os.path.join(OUT, "cond_sd2v.safetensors"))


if __name__ == "__main__":
    main()
