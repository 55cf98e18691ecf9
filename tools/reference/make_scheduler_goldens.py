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
                       steps, strength, eta, seed, latent shape; tol/tol_t
                       where diffusers' formula is ill-conditioned)
  cases.safetensors    per case: timesteps, sigmas, the sample after every
                       model evaluation (row 0 = initial latents) and the
                       x0 prediction of every evaluation
  steps.json           999- and 1000-step runs of every sampler (issue 10) and
                       what diffusers did with them (ok / nan / error: ...)
  steps.safetensors    per run: diffusers' timesteps, its sigmas where there
                       is no final sample, and the final sample where its
                       run is finite

Each run follows the diffusers pipelines: latents = randn(generator) *
init_noise_sigma (txt2img) or scheduler.add_noise(image, randn, t0) after
img2img truncation; then for each timestep: scale_model_input, a fake model
  model_output = 0.5 * model_input + float32(0.8 * sin(0.01 * t + 0.37 * idx))
(the sine term in float64; idx = NCHW element index)
(idx = NCHW element index, so multistep history is exercised), and
scheduler.step(..., generator=g).  DPMSolverSDEScheduler's BrownianTree noise
sampler is replaced by torch.randn(shape, generator=g) per call, the
convention tessera uses (docs/samplers.md).  DPM++ 2S a has no diffusers
class: KDiffusionDPMPP2SAncestral below writes out k-diffusion's
sample_dpmpp_2s_ancestral with diffusers' scheduler interface.

Run: . .venv/bin/activate && python tools/reference/make_scheduler_goldens.py
"""
import inspect
import json
import os
import subprocess
import sys
from types import SimpleNamespace

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
# the demo model's own scheduler_config.json (models/demo): DDIM's keys, "leading" spacing,
# no skip_prk_steps (so PNDMScheduler runs its PRK warm-up unless told otherwise)
DEMO = {"_class_name": "DDIMScheduler", "beta_end": 0.012, "beta_schedule": "scaled_linear",
        "beta_start": 0.00085, "clip_sample": False, "clip_sample_range": 1.0,
        "dynamic_thresholding_ratio": 0.995, "num_train_timesteps": 1000, "prediction_type": "epsilon",
        "rescale_betas_zero_snr": False, "sample_max_value": 1.0, "set_alpha_to_one": False,
        "steps_offset": 1, "thresholding": False, "timestep_spacing": "leading", "trained_betas": None}
# SD-Turbo / SDXL-Turbo: EulerAncestralDiscreteScheduler with "trailing" spacing in the file
TURBO = {"_class_name": "EulerAncestralDiscreteScheduler", "beta_end": 0.012,
         "beta_schedule": "scaled_linear", "beta_start": 0.00085, "clip_sample": False,
         "interpolation_type": "linear", "num_train_timesteps": 1000, "prediction_type": "epsilon",
         "sample_max_value": 1.0, "set_alpha_to_one": False, "skip_prk_steps": True,
         "steps_offset": 1, "timestep_spacing": "trailing", "trained_betas": None,
         "use_karras_sigmas": False}
# LCM-LoRA / latent-consistency lcm-sdxl: LCMScheduler, 50 original inference steps
LCM_SDXL = {"_class_name": "LCMScheduler", "beta_end": 0.012, "beta_schedule": "scaled_linear",
            "beta_start": 0.00085, "clip_sample": False, "clip_sample_range": 1.0,
            "dynamic_thresholding_ratio": 0.995, "num_train_timesteps": 1000,
            "original_inference_steps": 50, "prediction_type": "epsilon",
            "rescale_betas_zero_snr": False, "sample_max_value": 1.0, "set_alpha_to_one": True,
            "steps_offset": 1, "thresholding": False, "timestep_scaling": 10.0,
            "timestep_spacing": "leading", "trained_betas": None}
LINEAR = {"beta_schedule": "linear", "num_train_timesteps": 1000}  # class defaults otherwise
COSINE = {"beta_schedule": "squaredcos_cap_v2", "num_train_timesteps": 1000}
CONFIGS = {"sd1": SD1, "sd2v": SD2V, "sdxl": SDXL, "zsnr": ZSNR, "linear": LINEAR, "cosine": COSINE,
           "demo": DEMO, "turbo": TURBO, "lcmxl": LCM_SDXL}

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
    "plms": ("PNDMScheduler", {"skip_prk_steps": True}),
    "dpm2": ("KDPM2DiscreteScheduler", {}),
    "dpm2_a": ("KDPM2AncestralDiscreteScheduler", {}),
    "dpmpp_2s_a": ("KDiffusionDPMPP2SAncestral", {}),  # no diffusers class: see below
    "dpmpp_3m_sde": ("DPMSolverMultistepScheduler", {"algorithm_type": "sde-dpmsolver++",
                                                     "solver_order": 3}),
    "ddpm": ("DDPMScheduler", {}),
}
KARRAS_OK = {"euler", "heun", "dpmpp_2m", "dpmpp_2m_sde", "dpmpp_sde", "lms", "unipc", "dpm2",
             "dpm2_a", "dpmpp_2s_a", "dpmpp_3m_sde"}
# the samplers added for issue 10 (their goldens use fewer steps: smaller files)
NEW = {"plms", "dpm2", "dpm2_a", "dpmpp_2s_a", "dpmpp_3m_sde", "ddpm"}
# the classes whose set_timesteps() reads timestep_spacing (LCM and DPM-Solver
# singlestep have their own spacing)
SPACING = [s for s in CLASSES if s != "lcm"]


class KDiffusionDPMPP2SAncestral:
    """A1111's "DPM++ 2S a": k-diffusion's sample_dpmpp_2s_ancestral (eta 1,
    s_noise 1) written out here as a scheduler with diffusers' interface, so
    the goldens can drive it like the diffusers classes.  No diffusers class
    does this: DPMSolverSinglestepScheduler (order 2) takes its intermediate
    evaluation at the next grid timestep and adds no ancestral noise.

    Schedule: EulerDiscreteScheduler's (sigmas, timesteps, init_noise_sigma,
    Karras/exponential/trailing options) for the same config, so "Automatic"
    means what it means for Euler.  Per step i (sigma_i -> sigma_{i+1}):
      denoised = x0(x, sigma_i)
      sigma_up = min(s1, sqrt(s1^2 (s0^2 - s1^2) / s0^2)),  sigma_down = sqrt(s1^2 - up^2)
      sigma_down == 0 (last step): Euler, x += (x - denoised) / s0 * (sigma_down - s0)
      else t = -log s0, t_next = -log sigma_down, h = t_next - t, s = t + h/2
           x2 = (e^-s / e^-t) x - expm1(-h/2) denoised     (second model evaluation at e^-s)
           x  = (e^-t_next / e^-t) x - expm1(-h) x0(x2, e^-s)
      sigma_{i+1} > 0: x += randn(generator) * sigma_up
    Every scalar is a 0-dim float32 tensor, as in k-diffusion.  The model
    evaluation at e^-s gets timestep _sigma_to_t(e^-s), as DPMSolverSDEScheduler
    does for its midpoints.  Timesteps and sigmas are laid out as
    DPMSolverSDEScheduler lays out its two-stage steps: [t0, m0, t1, m1, ..., t_{n-1}]
    and [s0, s1, s1, ..., s_{n-1}, s_{n-1}, 0]."""

    order = 2

    def __init__(self, config, **kw):
        self.euler = diffusers.EulerDiscreteScheduler.from_config(config, **kw)
        self.config = self.euler.config
        self._begin = 0

    def set_timesteps(self, n, device=None):
        e = self.euler
        e.set_timesteps(n)
        acp = e.alphas_cumprod
        self.log_sigmas = np.log(np.array(((1 - acp) / acp) ** 0.5))
        self.plain = e.sigmas.to(torch.float32)  # n + 1 entries, last 0
        self.up, self.down, self.mid = [], [], []
        for i in range(n):
            s0, s1 = self.plain[i], self.plain[i + 1]
            up = min(s1, 1.0 * (s1 ** 2 * (s0 ** 2 - s1 ** 2) / s0 ** 2) ** 0.5)
            down = (s1 ** 2 - up ** 2) ** 0.5
            t, t_next = s0.log().neg(), down.log().neg()
            h = t_next - t
            self.up.append(up)
            self.down.append(down)
            self.mid.append((t + 0.5 * h).neg().exp())
        ts = [float(e.timesteps[0])]
        for i in range(1, n):
            ts.append(float(self.euler._sigma_to_t(np.array(float(self.mid[i - 1])), self.log_sigmas)))
            ts.append(float(e.timesteps[i]))
        self.timesteps = torch.tensor(ts, dtype=torch.float32)
        self.sigmas = torch.cat([self.plain[:1], self.plain[1:-1].repeat_interleave(2), self.plain[-1:]])
        self.pos = self._begin
        self.saved = None

    def set_begin_index(self, i):
        self._begin = i
        self.pos = i

    @property
    def init_noise_sigma(self):
        return self.euler.init_noise_sigma

    def add_noise(self, x0, noise, _t):
        return x0 + noise * self.plain[self._begin // 2]

    def _sigma(self):
        k = self.pos // 2
        return self.plain[k] if self.pos % 2 == 0 else self.mid[k]

    def scale_model_input(self, x, _t):
        return x / ((self._sigma() ** 2 + 1) ** 0.5)

    def _x0(self, x, mo):
        sigma = self._sigma()
        if self.config.prediction_type == "epsilon":
            return x - sigma * mo
        return mo * (-sigma / (sigma ** 2 + 1) ** 0.5) + (x / (sigma ** 2 + 1))

    def step(self, mo, _t, x, generator=None, return_dict=True):
        k = self.pos // 2
        s0, s1 = self.plain[k], self.plain[k + 1]
        denoised = self._x0(x, mo)
        t = s0.log().neg()
        if self.pos % 2 == 0 and self.down[k] == 0:
            d = (x - denoised) / s0
            out = x + d * (self.down[k] - s0)
            self.pos += 1
        elif self.pos % 2 == 0:
            h = self.down[k].log().neg() - t
            s = t + 0.5 * h
            self.saved = x
            out = (s.neg().exp() / t.neg().exp()) * x - (-h * 0.5).expm1() * denoised
            self.pos += 1
        else:
            t_next = self.down[k].log().neg()
            h = t_next - t
            out = (t_next.neg().exp() / t.neg().exp()) * self.saved - (-h).expm1() * denoised
            self.pos += 1
        if self.pos % 2 == 0 or (self.pos % 2 == 1 and self.down[k] == 0):
            if s1 > 0:
                out = out + torch.randn(out.shape, generator=generator) * 1.0 * self.up[k]
        if not return_dict:
            return out, denoised
        return SimpleNamespace(prev_sample=out, pred_original_sample=denoised)


def make_scheduler(c, steps=None):
    cls_name, kw = CLASSES[c["sampler"]]
    kw = dict(kw)
    if c["schedule"] == "karras":
        kw["use_karras_sigmas"] = True
    elif c["schedule"] == "exponential":
        kw["use_exponential_sigmas"] = True
    elif c["schedule"] == "sgm_uniform":
        kw["timestep_spacing"] = "trailing"
    kw.update(c.get("ref_options", {}))
    if cls_name == "KDiffusionDPMPP2SAncestral":
        return KDiffusionDPMPP2SAncestral(c["config"], **kw), cls_name, kw
    return getattr(diffusers, cls_name).from_config(c["config"], **kw), cls_name, kw


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
        add(s, "sd2v", steps=4 if s == "lcm" else (8 if s in NEW else 20))
    for s in sorted(KARRAS_OK):
        add(s, "sd1", schedule="karras")
        add(s, "sdxl", schedule="karras", steps=10 if s in NEW else 20)
    for s in ("euler", "dpmpp_2m", "unipc", "heun", "dpm2", "dpm2_a", "dpmpp_2s_a", "dpmpp_3m_sde"):
        add(s, "sd1", schedule="exponential")
    for s in ("euler", "euler_a", "dpmpp_2m", "ddim", "unipc", "pndm", "lms"):
        add(s, "sd1", schedule="sgm_uniform", steps=10)
    for s in ("euler", "euler_a", "dpmpp_2m", "dpmpp_2m_sde", "unipc"):
        add(s, "sdxl", steps=25)
    # zero-SNR: diffusers' Euler and Euler a clamp the last alphas_cumprod to
    # 2^-24; the sigma-space solvers without that clamp produce inf/NaN in
    # diffusers too
    for s in ("euler", "ddim", "lcm", "euler_a", "ddpm"):
        add(s, "zsnr", steps=4 if s == "lcm" else 10)
    for s in ("euler_a", "dpmpp_2m", "ddim", "heun", "pndm", "dpmpp_sde", "lcm", "unipc", "plms",
              "dpm2", "dpm2_a", "dpmpp_2s_a", "dpmpp_3m_sde", "ddpm"):
        add(s, "sd1", steps=8 if s == "lcm" else (10 if s in NEW else 15), strength=0.6)
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
    # issue 10: DDPM's own defaults (clip_sample on) and fixed_small_log
    add("ddpm", "linear", steps=10)
    add("ddpm", "sd1", steps=10, extra={"variance_type": "fixed_small_log"})
    add("dpmpp_3m_sde", "sdxl", steps=25)
    # PLMS on the demo model's config (no skip_prk_steps in the file): A1111's
    # PLMS has no PRK warm-up; `pndm` keeps the file's choice (PRK)
    for n in (10, 20):
        add("plms", "demo", steps=n)
    add("pndm", "demo", steps=10)
    # trailing spacing from the file (SD-Turbo's config) for every sampler
    # whose diffusers class reads timestep_spacing; 1 and 4 steps for the
    # turbo model's own sampler
    for s in SPACING:
        add(s, "turbo", steps=4)
    add("euler_a", "turbo", steps=1)
    # LCM-LoRA / lcm-sdxl: 4 steps (and 1, 2)
    for n in (1, 2, 4):
        add("lcm", "lcmxl", steps=n)
    # 1 and 2 steps for every sampler on the demo (leading, offset 1) and SD1
    # configs, where diffusers runs them (PRK needs 4 steps in diffusers)
    for s in CLASSES:
        for cfg in ("demo", "sd1"):
            for n in (1, 2):
                if s == "pndm" and cfg == "demo":
                    continue
                add(s, cfg, steps=n)
    return out


# Cases where diffusers' own formula is ill-conditioned, so that torch's
# float32 sqrt (through MKL: 1 ulp from correctly rounded in ~15% of inputs)
# shows beyond the 1e-6 of a step (tol) and 1e-4 of a timestep (tol_t)
# that every other case meets:
ILL_CONDITIONED = {
    # 2 steps from sigma 14.6 to 0.029: sigma_down = sqrt(s1^2 - up^2) cancels
    # to 4e-6 of its terms, so an ulp of sigma_up moves sigma_down (and the
    # intermediate sigma and its timestep near 0) by ~1%
    "dpm2_a-sd1-default-2": (2e-4, 0.05),
    "dpmpp_2s_a-sd1-default-2": (2e-4, 0.05),
    "dpm2_a-demo-default-2": (3e-6, 1e-4),
    # 2 steps: the second-stage derivative (x - x0) / 0.029 cancels, then is
    # multiplied by dt = -14.6; an ulp of sigma 0.029 shows
    "heun-sd1-default-2": (3e-6, 1e-4),
    # linear betas: x - sqrt(1 - a) eps cancels in x0 at alphas_cumprod ~ 4e-5
    "ddpm-linear-default-10": (3e-6, 1e-4),
}


def fake_model(inp, t, idx):
    # the sine term in float64, rounded once: torch's vectorised float sin
    # and libm's sinf differ by an ulp, which zero-SNR's sigma 4096 amplifies
    tt = torch.as_tensor(t).to(torch.float64)
    wave = (0.8 * torch.sin(0.01 * tt + 0.37 * idx.to(torch.float64))).to(torch.float32)
    return 0.5 * inp + wave


def run_sampler(c, keep_rows=True):
    """One full run; returns (timesteps, rows, x0 rows, scheduler).  Raises
    whatever diffusers raises."""
    sched, _, _ = make_scheduler(c)
    steps = c["steps"]
    ref = c.get("ref_set_timesteps", {})
    if "timesteps" in ref:
        # custom timesteps (DPMSolverMultistepScheduler's option); UniPC has no
        # such option, so it gets the arrays DPM-Solver builds from them
        sched.set_timesteps(steps)
        dpm = diffusers.DPMSolverMultistepScheduler.from_config(c["config"])
        dpm.set_timesteps(timesteps=ref["timesteps"])
        sched.timesteps, sched.sigmas = dpm.timesteps, dpm.sigmas
    else:
        sched.set_timesteps(steps, **ref)
    timesteps = sched.timesteps
    c["_timesteps"] = timesteps
    c["_sched"] = sched
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
        if hasattr(sched, "set_begin_index"):
            sched.set_begin_index(0)
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
        if keep_rows or len(samples) < 1:
            samples.append(latents.reshape(-1).clone())
        else:
            samples[-1:] = [latents.reshape(-1).clone()]
        x0 = getattr(out, "pred_original_sample", None)
        if x0 is None:
            x0 = getattr(out, "denoised", None)
        if keep_rows:
            x0s.append(x0.reshape(-1).clone() if x0 is not None else torch.full((n,), float("nan")))
    return timesteps, samples, x0s, sched


def run_case(c):
    timesteps, samples, x0s, sched = run_sampler(c)
    n = int(np.prod(SHAPE))
    sig = getattr(sched, "sigmas", None)
    tens = {
        c["name"] + ".timesteps": timesteps.to(torch.float64).numpy(),
        c["name"] + ".samples": torch.stack(samples).numpy().astype(np.float32),
        c["name"] + ".x0": torch.stack(x0s).numpy().astype(np.float32),
        c["name"] + ".init_noise_sigma": np.array([float(sched.init_noise_sigma)], np.float32),
    }
    if sig is not None and c["sampler"] not in ("ddim", "pndm", "plms", "lcm", "ddpm"):
        tens[c["name"] + ".sigmas"] = sig.numpy().astype(np.float32)
    c["has_x0"] = bool(x0s and not torch.isnan(x0s[0]).any())
    c["shape"] = list(SHAPE)
    c.pop("_timesteps", None)
    c.pop("_sched", None)
    assert all(torch.isfinite(r).all() for r in samples), c["name"]
    return tens


# --------------------------------------------------------------- step range
#
# Every sampler at 1, 2, 999 and 1000 steps (issue 10).  1 and 2 steps are
# ordinary golden cases above.  999 and 1000 are kept small: the timesteps and
# sigmas diffusers builds, the final sample, and what diffusers did with them
# ("ok", "nan": its run produced NaN, "error: ..."), on the demo model's config
# (leading, steps_offset 1) and SD1's (each class's default spacing).  Where
# Tessera's documented rule for a step count diffusers cannot run is itself a
# diffusers configuration, that configuration is the reference (ref_options /
# ref_set_timesteps / ref_timesteps below); docs/samplers.md lists the rules.
MULTISTEP = ("dpmpp_2m", "dpmpp_2m_sde", "dpmpp_3m_sde", "unipc")


def range_runs():
    out = []
    for s in CLASSES:
        # SD1's config leaves spacing to the class: leading with steps_offset 1
        # for these, as the demo's config says, so only the demo runs them
        cfgs = ("demo",) if s in ("ddim", "pndm", "plms", "ddpm", "lcm") else ("demo", "sd1")
        for cfg in cfgs:
            for n in (999, 1000):
                c = dict(name=f"{s}-{cfg}-{n}", sampler=s, schedule="default", steps=n,
                         strength=1.0, eta=0.0, seed=77, config=dict(CONFIGS[cfg]))
                spacing = c["config"].get("timestep_spacing")
                if s == "lcm":
                    # more steps than original_inference_steps: Tessera raises it to the step count
                    c["ref_set_timesteps"] = {"original_inference_steps": n}
                    c["rule"] = "original_inference_steps = steps"
                if s in MULTISTEP and spacing == "leading" and 1000 // (n + 1) == 0:
                    # leading's step ratio 1000 // (n + 1) is 0: all timesteps equal
                    # steps_offset.  Tessera uses a ratio of at least 1.
                    ts = (np.arange(0, n + 1) * 1).round()[::-1][:-1].copy().astype(np.int64) + 1
                    c["ref_set_timesteps"] = {"timesteps": ts.tolist()}
                    c["rule"] = "leading step ratio at least 1"
                out.append(c)
    return out


def run_range(c):
    status = "ok"
    rows = None
    try:
        with np.errstate(all="ignore"):
            _, rows, _, _ = run_sampler(c, keep_rows=False)
        if not torch.isfinite(rows[-1]).all():
            status = "nan"
    except Exception as e:  # diffusers' own failure is part of the record
        status = f"error: {type(e).__name__}: {e}"[:200]
    tens = {}
    ts = c.pop("_timesteps", None)
    sched = c.pop("_sched", None)
    if "ref_set_timesteps" in c and "timesteps" in c["ref_set_timesteps"]:
        c["ref_set_timesteps"] = {"timesteps": "leading with step ratio 1"}
        c.pop("num_inference_steps", None)
    if ts is not None:
        tens[c["name"] + ".timesteps"] = ts.to(torch.float64).numpy().astype(np.float32)
        # sigmas where there is no final sample to check them through
        sig = getattr(sched, "sigmas", None)
        if (status != "ok" and sig is not None
                and c["sampler"] not in ("ddim", "pndm", "plms", "lcm", "ddpm")):
            tens[c["name"] + ".sigmas"] = sig.numpy().astype(np.float32)
    if status == "ok":
        tens[c["name"] + ".final"] = rows[-1].numpy().astype(np.float32)
    c["diffusers"] = status
    c["shape"] = list(SHAPE)
    print(f"{c['name']:28s} {status[:90]}", flush=True)
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
    names = [c["name"] for c in cs]
    assert len(set(names)) == len(names), "duplicate case names"
    for c in cs:
        all_t.update(run_case(c))
        if c["name"] in ILL_CONDITIONED:
            c["tol"], c["tol_t"] = ILL_CONDITIONED[c["name"]]
    save_file(all_t, os.path.join(OUT, "cases.safetensors"))
    with open(os.path.join(OUT, "cases.json"), "w") as f:
        json.dump({"shape": list(SHAPE), "fake_model": "0.5*in + float(0.8*sin(0.01*t + 0.37*idx) in double)",
                   "cases": cs}, f, indent=1)
    print(f"{len(cs)} cases")
    rt = {}
    rs = range_runs()
    for c in rs:
        rt.update(run_range(c))
    save_file(rt, os.path.join(OUT, "steps.safetensors"))
    with open(os.path.join(OUT, "steps.json"), "w") as f:
        json.dump({"shape": list(SHAPE), "about": "999 and 1000 steps: timesteps, sigmas and the final "
                   "sample of diffusers' run where it is finite (diffusers: ok|nan|error)",
                   "runs": rs}, f, indent=1)
    print(f"{len(rs)} step-range runs")


if __name__ == "__main__":
    main()
