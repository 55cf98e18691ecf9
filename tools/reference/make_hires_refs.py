#!/usr/bin/env python3
"""A reference for the hires fix's latent path made with diffusers' own
pipelines (tests/pipeline/test_hires.c, case diffusers_latent).

What A1111's hires pass does with a latent upscaler, in diffusers' terms:
txt2img to latents (output_type="latent"), torch.nn.functional.interpolate
of those latents to the new size with the upscaler's mode, then img2img
*from latents* (a 4-channel image is taken as latents: no VAE encode, the
noise is the first draw of a fresh generator seeded with the image's seed,
which is what A1111's new ImageRNG draws) with N = int(K / min(s, 0.999))
steps at a strength that leaves K of them ((K + 0.5) / N, as diffusers
counts int(N * strength)).  Ancestral samplers continue that generator, as
A1111's sampler continues its ImageRNG.

Model: tests/data/models/sd1_sharp (the tiny model whose outputs move with
the conditioning; tools/reference/make_pipeline_goldens.py makes it), at
64x64 -> 128x128.  Writes tests/data/pipeline/hires/diffusers_<case>.png and
diffusers.json (the cases' parameters).  torch 2.9.1, diffusers 0.35.2 (the
reference venv).
Run: /work/main/.venv/bin/python tools/reference/make_hires_refs.py
"""
import json
import os

import torch
from diffusers import (EulerAncestralDiscreteScheduler, EulerDiscreteScheduler,
                       StableDiffusionImg2ImgPipeline, StableDiffusionPipeline)

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
OUT = os.path.join(ROOT, "tests", "data", "pipeline", "hires")
MODEL = os.path.join(ROOT, "tests", "data", "models", "sd1_sharp")

CASES = [  # name, sampler, steps, hires steps K, strength, torch mode, antialias, A1111 name
    ("latent_euler", "euler", 4, 3, 0.6, "bilinear", False, "Latent"),
    ("latent_euler_a_bicubic", "euler_a", 3, 4, 0.55, "bicubic", False, "Latent (bicubic)"),
    ("latent_euler_nearest", "euler", 3, 2, 0.7, "nearest", False, "Latent (nearest)"),
]
SCHEDULERS = {"euler": EulerDiscreteScheduler, "euler_a": EulerAncestralDiscreteScheduler}
PROMPT = "a red cat"
SEED = 91
CFG = 7.5


def main():
    txt = StableDiffusionPipeline.from_pretrained(MODEL, safety_checker=None,
                                                  requires_safety_checker=False)
    cases = []
    for name, sampler, steps, k, s, mode, aa, upscaler in CASES:
        sched = SCHEDULERS[sampler].from_config(txt.scheduler.config)
        txt.scheduler = sched
        g = torch.Generator("cpu").manual_seed(SEED)
        lat = txt(PROMPT, height=64, width=64, num_inference_steps=steps, guidance_scale=CFG,
                  generator=g, output_type="latent").images
        f = txt.vae_scale_factor
        up = torch.nn.functional.interpolate(lat, size=(128 // f, 128 // f), mode=mode,
                                             antialias=aa)
        n = int(k / min(s, 0.999))
        i2i = StableDiffusionImg2ImgPipeline(**txt.components)
        i2i.scheduler = SCHEDULERS[sampler].from_config(txt.scheduler.config)
        g = torch.Generator("cpu").manual_seed(SEED)
        img = i2i(PROMPT, image=up, strength=min(1.0, (k + 0.5) / n), num_inference_steps=n,
                  guidance_scale=CFG, generator=g).images[0]
        img.save(os.path.join(OUT, "diffusers_%s.png" % name))
        cases.append(dict(name=name, sampler=sampler, steps=steps, hires_steps=k,
                          hires_strength=s, hires_upscaler=upscaler, prompt=PROMPT, seed=SEED,
                          cfg_scale=CFG, schedule_steps=n))
    with open(os.path.join(OUT, "diffusers.json"), "w") as fh:
        json.dump({"model": "models/sd1_sharp", "width": 64, "height": 64, "hires_scale": 2,
                   "tolerance": 2, "cases": cases}, fh, indent=1)


if __name__ == "__main__":
    main()
