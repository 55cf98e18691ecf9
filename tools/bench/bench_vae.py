#!/usr/bin/env python3
"""VAE decode: Tessera (`tessera bench vae --json`) vs diffusers' AutoencoderKL
on the CPU, same model folder, shape, thread count and run.

Each side runs in its own process so that peak RSS (VmHWM) is that side's
alone; both report RSS before the first decode (weights loaded) and the
peak, median of --iters decodes after --warmup untimed ones.  Latents are
random normal; the torch side calls vae.decode(latents / scaling_factor)
in f32 as the pipelines do (weights widened from fp16 at load, as Tessera
does).  Prints a markdown table for docs/perf.md.

Pinned: torch 2.9.1, diffusers 0.35.2 (tools/setup-venv.sh).
Usage: . .venv/bin/activate && python tools/bench/bench_vae.py \
           --bin build/bin/tessera --model out/models/sd15 --size 512 --threads 2
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time


def proc_mib(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024.0
    return -1.0


def torch_child(a):
    import torch
    from diffusers import AutoencoderKL
    torch.set_num_threads(a.threads)
    dt = torch.bfloat16 if a.torch_dtype == "bf16" else torch.float32
    vae = AutoencoderKL.from_pretrained(os.path.join(a.model, "vae"), torch_dtype=dt)
    vae.eval()
    f = 2 ** (len(vae.config.block_out_channels) - 1)
    h = a.size // f
    g = torch.Generator().manual_seed(0)
    lat = torch.randn(a.batch, vae.config.latent_channels, h, h, generator=g).to(dt)
    rss_before = proc_mib("VmRSS")
    times = []
    with torch.inference_mode():
        for i in range(a.warmup + a.iters):
            t0 = time.perf_counter()
            vae.decode(lat / vae.config.scaling_factor).sample
            if i >= a.warmup:
                times.append(time.perf_counter() - t0)
    print(json.dumps({"decode_ms": statistics.median(times) * 1e3, "min_ms": min(times) * 1e3,
                      "rss_before_mib": rss_before, "peak_rss_mib": proc_mib("VmHWM"),
                      "dtype": a.torch_dtype, "torch": torch.__version__}))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="build/bin/tessera")
    ap.add_argument("--model", default="out/models/sd15")
    ap.add_argument("--size", type=int, default=512)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--torch-child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--torch-dtype", default="fp32", choices=["fp32", "bf16"],
                    help="the torch side's weights and activations (bf16: end to end, "
                         "the like-for-like peer of Tessera's opt-in --precision bf16)")
    a = ap.parse_args()
    if a.torch_child:
        return torch_child(a)
    common = ["--size", str(a.size), "--batch", str(a.batch), "--threads", str(a.threads),
              "--iters", str(a.iters), "--warmup", str(a.warmup)]
    ts = json.loads(subprocess.run([a.bin, "bench", "vae", "--model", a.model, "--json"] + common,
                                   check=True, capture_output=True, text=True).stdout)
    pt = json.loads(subprocess.run([sys.executable, __file__, "--torch-child", "--model", a.model,
                                    "--torch-dtype", a.torch_dtype] + common,
                                   check=True, capture_output=True, text=True).stdout)
    print(f"VAE decode {a.size}x{a.size}, batch {a.batch}, threads {a.threads}, median of "
          f"{a.iters} after {a.warmup} warm-up; torch {pt['torch']}\n")
    print("| | tessera | torch | ratio (tessera/torch) |")
    print("|---|---:|---:|---:|")
    print(f"| decode ms | {ts['decode_ms']:.0f} | {pt['decode_ms']:.0f} | "
          f"{ts['decode_ms'] / pt['decode_ms']:.2f} |")
    print(f"| RSS before decode MiB | {ts['rss_before_mib']:.0f} | {pt['rss_before_mib']:.0f} | "
          f"{ts['rss_before_mib'] / pt['rss_before_mib']:.2f} |")
    print(f"| peak RSS MiB | {ts['peak_rss_mib']:.0f} | {pt['peak_rss_mib']:.0f} | "
          f"{ts['peak_rss_mib'] / pt['peak_rss_mib']:.2f} |")
    dt, dp = ts["peak_rss_mib"] - ts["rss_before_mib"], pt["peak_rss_mib"] - pt["rss_before_mib"]
    print(f"| decode's own memory (peak - before) MiB | {dt:.0f} | {dp:.0f} | {dt / dp:.2f} |")


if __name__ == "__main__":
    main()
