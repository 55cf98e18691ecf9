#!/usr/bin/env python3
"""Goldens for ComfyUI's sigma schedules and batch noise (issue 59).

The reference is a reimplementation in Python/torch/numpy/scipy of ComfyUI's
own formulas, written from its source (comfy/model_sampling.py:
ModelSamplingDiscrete._register_schedule, .timestep, .sigma;
comfy/samplers.py: normal_scheduler, simple_scheduler, ddim_scheduler,
beta_scheduler, calculate_sigmas, KSampler.set_steps; k-diffusion's
get_sigmas_karras and get_sigmas_exponential), with the same dtypes and torch
calls, since ComfyUI itself is not installed here.  Checked against
Comfy-Org/ComfyUI comfy/samplers.py at e0d4ea77 (SCHEDULER_HANDLERS,
KSampler.set_steps, KSAMPLER's noise_scaling) and comfy/model_sampling.py.  The C side
(scheduler/sched_comfy.c) is a separate implementation checked against this.

Writes tests/data/scheduler/comfy_sigmas.json:
  cases: {model, beta_start, beta_end, schedule, steps, denoise, sigmas,
          timesteps (ModelSamplingDiscrete.timestep of each non-zero sigma)}
  beta_ppf: [[p, a, b, scipy.stats.beta.ppf(p, a, b)], ...]
  noise: {seed, shape [B, 4, h, w], data (torch.randn over the whole batch
          from torch.manual_seed(seed) on the CPU, flattened NCHW)}

Run: . .venv/bin/activate && python tools/reference/make_comfy_sigma_goldens.py
"""
import json
import math
import os

import numpy
import scipy.stats
import torch

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data", "scheduler",
                   "comfy_sigmas.json")


class Discrete:
    """ModelSamplingDiscrete with ComfyUI's "linear" betas (diffusers'
    scaled_linear) over 1000 timesteps."""

    def __init__(self, linear_start, linear_end, timesteps=1000):
        betas = torch.linspace(linear_start ** 0.5, linear_end ** 0.5, timesteps,
                               dtype=torch.float64) ** 2
        alphas = 1.0 - betas
        alphas_cumprod = torch.cumprod(alphas, dim=0)
        sigmas = ((1 - alphas_cumprod) / alphas_cumprod) ** 0.5
        self.sigmas = sigmas.float()
        self.log_sigmas = sigmas.log().float()

    @property
    def sigma_min(self):
        return self.sigmas[0]

    @property
    def sigma_max(self):
        return self.sigmas[-1]

    def timestep(self, sigma):
        log_sigma = sigma.log()
        dists = log_sigma - self.log_sigmas[:, None]
        return dists.abs().argmin(dim=0).view(sigma.shape)

    def sigma(self, timestep):
        t = torch.clamp(timestep.float(), min=0, max=(len(self.sigmas) - 1))
        low_idx = t.floor().long()
        high_idx = t.ceil().long()
        w = t.frac()
        log_sigma = (1 - w) * self.log_sigmas[low_idx] + w * self.log_sigmas[high_idx]
        return log_sigma.exp()


def append_zero(x):
    return torch.cat([x, x.new_zeros([1])])


def get_sigmas_karras(n, sigma_min, sigma_max, rho=7.0):
    ramp = torch.linspace(0, 1, n)
    min_inv_rho = sigma_min ** (1 / rho)
    max_inv_rho = sigma_max ** (1 / rho)
    sigmas = (max_inv_rho + ramp * (min_inv_rho - max_inv_rho)) ** rho
    return append_zero(sigmas)


def get_sigmas_exponential(n, sigma_min, sigma_max):
    sigmas = torch.linspace(math.log(sigma_max), math.log(sigma_min), n).exp()
    return append_zero(sigmas)


def normal_scheduler(s, steps, sgm=False):
    start = s.timestep(s.sigma_max)
    end = s.timestep(s.sigma_min)
    append = True
    if sgm:
        timesteps = torch.linspace(start, end, steps + 1)[:-1]
    else:
        if math.isclose(float(s.sigma(end)), 0, abs_tol=0.00001):
            steps += 1
            append = False
        timesteps = torch.linspace(start, end, steps)
    sigs = [float(s.sigma(ts)) for ts in timesteps]
    if append:
        sigs += [0.0]
    return torch.FloatTensor(sigs)


def simple_scheduler(s, steps):
    sigs = []
    ss = len(s.sigmas) / steps
    for x in range(steps):
        sigs += [float(s.sigmas[-(1 + int(x * ss))])]
    sigs += [0.0]
    return torch.FloatTensor(sigs)


def ddim_scheduler(s, steps):
    x = 1
    if math.isclose(float(s.sigmas[x]), 0, abs_tol=0.00001):
        steps += 1
        sigs = []
    else:
        sigs = [0.0]
    ss = max(len(s.sigmas) // steps, 1)
    while x < len(s.sigmas):
        sigs += [float(s.sigmas[x])]
        x += ss
    sigs = sigs[::-1]
    return torch.FloatTensor(sigs)


def beta_scheduler(s, steps, alpha=0.6, beta=0.6):
    total_timesteps = len(s.sigmas) - 1
    ts = 1 - numpy.linspace(0, 1, steps, endpoint=False)
    ts = numpy.rint(scipy.stats.beta.ppf(ts, alpha, beta) * total_timesteps)
    sigs = []
    last_t = -1
    for t in ts:
        if t != last_t:
            sigs += [float(s.sigmas[int(t)])]
        last_t = t
    sigs += [0.0]
    return torch.FloatTensor(sigs)


def calculate_sigmas(s, name, steps):
    if name == "karras":
        return get_sigmas_karras(steps, float(s.sigma_min), float(s.sigma_max))
    if name == "exponential":
        return get_sigmas_exponential(steps, float(s.sigma_min), float(s.sigma_max))
    if name == "normal":
        return normal_scheduler(s, steps)
    if name == "sgm_uniform":
        return normal_scheduler(s, steps, sgm=True)
    if name == "simple":
        return simple_scheduler(s, steps)
    if name == "ddim_uniform":
        return ddim_scheduler(s, steps)
    if name == "beta":
        return beta_scheduler(s, steps)
    raise ValueError(name)


def set_steps(s, name, steps, denoise):
    """KSampler.set_steps (for samplers outside its discard-penultimate set)."""
    if denoise is None or denoise > 0.9999:
        return calculate_sigmas(s, name, steps)
    new_steps = int(steps / denoise)
    return calculate_sigmas(s, name, new_steps)[-(steps + 1):]


MODELS = [
    # SD 1.x and SDXL: the same discrete schedule in ComfyUI (0.00085..0.012)
    ("sd1", 0.00085, 0.012),
    ("sdxl", 0.00085, 0.012),
    # another beta range, so a test that ignored the config would fail
    ("beta_end_0.02", 0.00085, 0.02),
]
SCHEDULES = ["normal", "karras", "exponential", "sgm_uniform", "simple", "ddim_uniform", "beta"]


def f32(v):
    """The shortest decimal that reads back as the same float32."""
    return float(repr(numpy.float32(v)).replace("np.float32(", "").rstrip(")"))


def main():
    cases = []
    for model, b0, b1 in MODELS:
        s = Discrete(b0, b1)
        steps_list = [1, 2, 3, 7, 10, 20, 30, 50] if model == "sd1" else [1, 2, 20, 30]
        for name in SCHEDULES:
            runs = [(n, 1.0) for n in steps_list]
            # the long edge cases (ddim_uniform's stride 1, beta's repeats
            # dropped) for some schedules only, to keep the file small
            if model == "sd1" and name == "ddim_uniform":
                runs += [(1000, 1.0)]
            if model == "sd1" and name == "beta":
                runs += [(300, 1.0)]
            if model != "beta_end_0.02":
                runs += [(20, 0.5), (20, 0.75), (10, 0.3), (1, 0.5), (2, 0.9999), (25, 0.6)]
            for steps, denoise in runs:
                sig = set_steps(s, name, steps, denoise)
                nz = sig[sig > 0]
                ts = s.timestep(nz).tolist() if len(nz) else []
                cases.append({"model": model, "beta_start": b0, "beta_end": b1,
                              "schedule": name, "steps": steps, "denoise": denoise,
                              "sigmas": [f32(v) for v in sig.tolist()],
                              "timesteps": [int(v) for v in ts]})
    ppf = []
    for a, b in [(0.6, 0.6), (0.5, 0.5), (2.0, 3.0), (0.3, 1.7)]:
        for p in [1e-12, 1e-6, 0.001, 0.05, 0.1, 0.25, 0.5, 0.6666, 0.9, 0.95, 0.999, 1 - 1e-9]:
            ppf.append([p, a, b, float(scipy.stats.beta.ppf(p, a, b))])
    seed, shape = 1234567, [3, 4, 8, 6]
    torch.manual_seed(seed)
    noise = torch.randn(shape, generator=None, device="cpu")
    g = torch.Generator(device="cpu").manual_seed(seed)
    assert torch.equal(noise, torch.randn(shape, generator=g, device="cpu"))
    out = {"cases": cases, "beta_ppf": ppf,
           "noise": {"seed": seed, "shape": shape,
                     "data": [f32(v) for v in noise.flatten().tolist()]}}
    with open(OUT, "w") as f:
        json.dump(out, f, separators=(",", ":"))
        f.write("\n")
    print(f"{OUT}: {len(cases)} sigma cases, {len(ppf)} ppf values, noise {shape}")


if __name__ == "__main__":
    main()
