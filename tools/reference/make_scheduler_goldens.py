#!/usr/bin/env python3
"""Goldens for scheduler/ (the samplers and torch-compatible RNG).

Pinned: torch 2.9.1 (CPU), diffusers 0.35.2, numpy 2.3.4, scipy 1.16.3 (for
LMSDiscreteScheduler).  Deterministic: fixed seeds, no global RNG use.

Writes tests/data/scheduler/:
  rng.safetensors      torch.randn draws from CPU generators (sequences of
                       draws from one generator; AVX2 kernel and, through a
                       subprocess with ATEN_CPU_CAPABILITY=default, the
                       portable kernel)
  cases.json           one entry per sampler run (config, sampler, schedule,
                       steps, strength, eta, seed, latent shape)
  cases.safetensors    per case: timesteps, sigmas, the sample after every
                       model evaluation (row 0 = initial latents) and the
                       x0 prediction of every evaluation

Each run follows the diffusers pipelines: latents = randn(generator) *
init_noise_sigma (txt2img) or scheduler.add_noise(image, randn, t0) after
img2img truncation; then for each timestep: scale_model_input, a fake model
  model_output = 0.5 * model_input + float32(0.8 * sin(0.01 * t + 0.37 * idx))
(the sine term in float64; idx = NCHW element index)
(idx = NCHW element index, so multistep history is exercised), and
scheduler.step(..., generator=g).  DPMSolverSDEScheduler's BrownianTree noise
sampler is replaced by torch.randn(shape, generator=g) per call, the
convention tessera uses (docs/samplers.md).

Run: . .venv/bin/activate && python tools/reference/make_scheduler_goldens.py
"""
import inspect
import json
import os
import subprocess
import sys

import numpy as np
import torch
from safetensors.numpy import save_file

import diffusers

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "data", "scheduler")
SHAPE = (1, 4, 6, 5)  # 120 elements: not a multiple of 16

SD1 = {"_class_name": "PNDMScheduler", "beta_start": 0.00085, "beta_end": 0.012,
       "beta_schedule": "scaled_linear", "num_train_timesteps": 1000, "set_alpha_to_one": False,
       "skip_prk_steps": True, "steps_offset": 1, "clip_sample": False, "trained_betas": None}
SD2V = {"_class_name": "DDIMScheduler", "beta_start": 0.00085, "beta_end": 0.012,
        "beta_schedule": "scaled_linear", "num_train_timesteps": 1000, "set_alpha_to_one": False,
        "skip_prk_steps": True, "steps_offset": 1, "clip_sample": False,
        "prediction_type": "v_prediction", "trained_betas": None}
SDXL = {"_class_name": "EulerDiscreteScheduler", "beta_start": 0.00085, "beta_end": 0.012,
        "beta_schedule": "scaled_linear", "interpolation_type": "linear", "num_train_timesteps": 1000,
        "prediction_type": "epsilon", "sample_max_value": 1.0, "set_alpha_to_one": False,
        "skip_prk_steps": True, "steps_offset": 1, "timestep_spacing": "leading",
        "trained_betas": None, "use_karras_sigmas": False, "clip_sample": False}
ZSNR = dict(SD2V, rescale_betas_zero_snr=True, timestep_spacing="trailing")
LINEAR = {"beta_schedule": "linear", "num_train_timesteps": 1000}  # class defaults otherwise
COSINE = {"beta_schedule": "squaredcos_cap_v2", "num_train_timesteps": 1000}
CONFIGS = {"sd1": SD1, "sd2v": SD2V, "sdxl": SDXL, "zsnr": ZSNR, "linear": LINEAR, "cosine": COSINE}

CLASSES = {
    "euler": ("EulerDiscreteScheduler", {}),
    "euler_a": ("EulerAncestralDiscreteScheduler", {}),
    "heun": ("HeunDiscreteScheduler", {}),
    "dpmpp_2m": ("DPMSolverMultistepScheduler", {"algorithm_type": "dpmsolver++"}),
    "dpmpp_2m_sde": ("DPMSolverMultistepScheduler", {"algorithm_type": "sde-dpmsolver++"}),
    "dpmpp_sde": ("DPMSolverSDEScheduler", {}),
    "ddim": ("DDIMScheduler", {}),
    "pndm": ("PNDMScheduler", {}),
    "lms": ("LMSDiscreteScheduler", {}),
    "unipc": ("UniPCMultistepScheduler", {}),
    "lcm": ("LCMScheduler", {}),
}
KARRAS_OK = {"euler", "heun", "dpmpp_2m", "dpmpp_2m_sde", "dpmpp_sde", "lms", "unipc"}


def cases():
    out = []

    def add(sampler, cfg, steps=12, schedule="default", strength=1.0, eta=0.0, seed=1234, extra=None):
        name = f"{sampler}-{cfg}-{schedule}-{steps}"
        if strength != 1.0:
            name += f"-s{strength}"
        if eta:
            name += f"-eta{eta}"
        config = dict(CONFIGS[cfg])
        if extra:
            config.update(extra)
            name += "-" + "-".join(f"{k}{v}" for k, v in extra.items())
        out.append(dict(name=name, sampler=sampler, schedule=schedule, steps=steps,
                        strength=strength, eta=eta, seed=seed, config=config))

    for s in CLASSES:
        add(s, "sd1", steps=4 if s == "lcm" else 12)
        add(s, "sd2v", steps=4 if s == "lcm" else 20)
    for s in sorted(KARRAS_OK):
        add(s, "sd1", schedule="karras")
        add(s, "sdxl", schedule="karras", steps=20)
    for s in ("euler", "dpmpp_2m", "unipc", "heun"):
        add(s, "sd1", schedule="exponential")
    for s in ("euler", "euler_a", "dpmpp_2m", "ddim", "unipc", "pndm", "lms"):
        add(s, "sd1", schedule="sgm_uniform", steps=10)
    for s in ("euler", "euler_a", "dpmpp_2m", "dpmpp_2m_sde", "unipc"):
        add(s, "sdxl", steps=25)
    # zero-SNR: diffusers' Euler clamps the last alphas_cumprod to 2^-24; the
    # sigma-space solvers without that clamp produce inf/NaN in diffusers too
    for s in ("euler", "ddim", "lcm"):
        add(s, "zsnr", steps=4 if s == "lcm" else 10)
    for s in ("euler_a", "dpmpp_2m", "ddim", "heun", "pndm", "dpmpp_sde", "lcm", "unipc"):
        add(s, "sd1", steps=8 if s == "lcm" else 15, strength=0.6)
    add("ddim", "sd1", eta=0.5)
    add("pndm", "linear", steps=10)  # PRK warm-up (skip_prk_steps false)
    add("dpmpp_2m", "sd1", extra={"solver_order": 3})
    add("unipc", "sd1", extra={"solver_order": 3})
    add("dpmpp_2m", "sd1", extra={"final_sigmas_type": "sigma_min"}, schedule="karras")
    add("euler", "sd1", extra={"final_sigmas_type": "sigma_min"})
    add("ddim", "cosine", steps=10, extra={"clip_sample": True})
    add("heun", "sd2v", extra={"clip_sample": True})
    add("euler", "linear", steps=7)
    add("dpmpp_2m", "sd1", steps=30)
    return out


def fake_model(inp, t, idx):
    # the sine term in float64, rounded once: torch's vectorised float sin
    # and libm's sinf differ by an ulp, which zero-SNR's sigma 4096 amplifies
    tt = torch.as_tensor(t).to(torch.float64)
    wave = (0.8 * torch.sin(0.01 * tt + 0.37 * idx.to(torch.float64))).to(torch.float32)
    return 0.5 * inp + wave


def run_case(c):
    cls_name, kw = CLASSES[c["sampler"]]
    cls = getattr(diffusers, cls_name)
    kw = dict(kw)
    if c["schedule"] == "karras":
        kw["use_karras_sigmas"] = True
    elif c["schedule"] == "exponential":
        kw["use_exponential_sigmas"] = True
    elif c["schedule"] == "sgm_uniform":
        kw["timestep_spacing"] = "trailing"
    sched = cls.from_config(c["config"], **kw)
    steps = c["steps"]
    sched.set_timesteps(steps)
    timesteps = sched.timesteps
    g = torch.Generator().manual_seed(c["seed"])
    n = int(np.prod(SHAPE))
    idx = torch.arange(n, dtype=torch.float32).reshape(SHAPE)
    if c["strength"] < 1.0:
        init_t = min(int(steps * c["strength"]), steps)
        t_start = max(steps - init_t, 0)
        timesteps = timesteps[t_start * sched.order:]
        if hasattr(sched, "set_begin_index"):
            sched.set_begin_index(t_start * sched.order)
        image = torch.cos(0.21 * idx) * 0.9
        noise = torch.randn(SHAPE, generator=g)
        latents = sched.add_noise(image, noise, timesteps[:1].repeat(1))
    else:
        latents = torch.randn(SHAPE, generator=g) * sched.init_noise_sigma
    if c["sampler"] == "dpmpp_sde":
        sched.noise_sampler = lambda sigma, sigma_next: torch.randn(SHAPE, generator=g)
    params = inspect.signature(sched.step).parameters
    kwargs = {}
    if "generator" in params:
        kwargs["generator"] = g
    if c["eta"]:
        kwargs["eta"] = c["eta"]
    samples = [latents.reshape(-1).clone()]
    x0s = []
    for t in timesteps:
        inp = sched.scale_model_input(latents, t)
        mo = fake_model(inp, t, idx)
        out = sched.step(mo, t, latents, **kwargs)
        latents = out.prev_sample
        samples.append(latents.reshape(-1).clone())
        x0 = getattr(out, "pred_original_sample", None)
        if x0 is None:
            x0 = getattr(out, "denoised", None)
        x0s.append(x0.reshape(-1).clone() if x0 is not None else torch.full((n,), float("nan")))
    sig = getattr(sched, "sigmas", None)
    tens = {
        c["name"] + ".timesteps": timesteps.to(torch.float64).numpy(),
        c["name"] + ".samples": torch.stack(samples).numpy().astype(np.float32),
        c["name"] + ".x0": torch.stack(x0s).numpy().astype(np.float32),
        c["name"] + ".init_noise_sigma": np.array([float(sched.init_noise_sigma)], np.float32),
    }
    if sig is not None and c["sampler"] not in ("ddim", "pndm", "lcm"):
        tens[c["name"] + ".sigmas"] = sig.numpy().astype(np.float32)
    c["has_x0"] = bool(x0s and not torch.isnan(x0s[0]).any())
    c["shape"] = list(SHAPE)
    return tens


RNG_SEQ = [("s0", 0, [(1, 4, 64, 64), (2, 4, 96, 96), (4, 4, 1, 1), (7,), (15,), (17,), (33,)]),
           ("s42", 42, [(7,), (3,), (1,), (16,), (33,), (5,), (1, 4, 8, 8)]),
           ("big", 1234567890123, [(1, 4, 16, 16), (3,)])]


def rng_tensors(prefix):
    t = {}
    for tag, seed, shapes in RNG_SEQ:
        if prefix == "scalar" and tag == "s0":
            shapes = [(1, 4, 64, 64), (7,), (17,), (33,)]
        g = torch.Generator().manual_seed(seed)
        for i, sh in enumerate(shapes):
            t[f"{prefix}.{tag}.{i}"] = torch.randn(sh, generator=g).numpy().reshape(-1)
    return t


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--rng-scalar":
        save_file(rng_tensors("scalar"), sys.argv[2])
        return
    assert torch.__version__.startswith("2.9.1"), torch.__version__
    assert diffusers.__version__ == "0.35.2", diffusers.__version__
    torch.set_num_threads(1)
    os.makedirs(OUT, exist_ok=True)
    rng = rng_tensors("avx2")
    tmp = os.path.join(OUT, "rng_scalar.tmp.safetensors")
    env = dict(os.environ, ATEN_CPU_CAPABILITY="default")
    subprocess.run([sys.executable, __file__, "--rng-scalar", tmp], check=True, env=env)
    from safetensors.numpy import load_file
    rng.update(load_file(tmp))
    os.remove(tmp)
    save_file(rng, os.path.join(OUT, "rng.safetensors"),
              metadata={"sequences": json.dumps([[tag, seed, [list(s) for s in shapes]]
                                                 for tag, seed, shapes in RNG_SEQ])})
    all_t = {}
    cs = cases()
    for c in cs:
        all_t.update(run_case(c))
    save_file(all_t, os.path.join(OUT, "cases.safetensors"))
    with open(os.path.join(OUT, "cases.json"), "w") as f:
        json.dump({"shape": list(SHAPE), "fake_model": "0.5*in + float(0.8*sin(0.01*t + 0.37*idx) in double)",
                   "cases": cs}, f, indent=1)
    print(f"{len(cs)} cases")


if __name__ == "__main__":
    main()
