#!/usr/bin/env python3
"""Compare `tessera bench ops` with PyTorch on the same shapes, same threads.

Why: the CPU backend's goal is to be within 1.2x of PyTorch's CPU time on
every heavy op of an SD 1.5 UNet step.  This runs `build/bin/tessera bench
ops --json`, then the same list through torch (conv2d in torch's default
NCHW layout, F.linear, F.scaled_dot_product_attention on [B, H, L, D] views
of [B, L, H*D] tensors, exactly as diffusers calls them), timing each the
same way (one warm-up, median of --iters), and prints a markdown table:
ms and GFLOP/s for both and the ratio tessera/torch (below 1 = faster).

Pinned: torch 2.9.1 CPU (tools/setup-venv.sh).  Run from the repo root:
    . .venv/bin/activate
    python tools/bench/bench_ops.py --threads 2 --iters 5 [--bin build/bin/tessera]
"""
import argparse
import json
import statistics
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

# Mirrors `shapes` in cli/cmd_bench.c (same names, same order).
CONV = "conv"
LINEAR = "linear"
ATTN = "attn"
SHAPES = [
    ("conv_in 3x3 64x64 4->320", CONV, (2, 64, 64, 4, 320, 3, 1, 1)),
    ("conv 3x3 64x64 320->320", CONV, (2, 64, 64, 320, 320, 3, 1, 1)),
    ("conv 3x3 s2 64x64 320->320", CONV, (2, 64, 64, 320, 320, 3, 2, 1)),
    ("conv 3x3 32x32 640->640", CONV, (2, 32, 32, 640, 640, 3, 1, 1)),
    ("conv 3x3 16x16 1280->1280", CONV, (2, 16, 16, 1280, 1280, 3, 1, 1)),
    ("conv 3x3 8x8 1280->1280", CONV, (2, 8, 8, 1280, 1280, 3, 1, 1)),
    ("conv 1x1 64x64 320->320 (proj)", CONV, (2, 64, 64, 320, 320, 1, 1, 0)),
    ("conv 1x1 64x64 640->320 (shortcut)", CONV, (2, 64, 64, 640, 320, 1, 1, 0)),
    ("linear 8192x320 -> 320 (q/k/v/out)", LINEAR, (8192, 320, 320)),
    ("linear 8192x320 -> 2560 (geglu proj)", LINEAR, (8192, 320, 2560)),
    ("linear 8192x1280 -> 320 (ff out)", LINEAR, (8192, 1280, 320)),
    ("linear 154x768 -> 320 (cross k/v)", LINEAR, (154, 768, 320)),
    ("linear 2048x640 -> 640 (32x32 attn)", LINEAR, (2048, 640, 640)),
    ("linear 512x1280 -> 1280 (16x16 attn)", LINEAR, (512, 1280, 1280)),
    ("attention self 4096x4096 8x40", ATTN, (2, 4096, 4096, 8, 40)),
    ("attention cross 4096x77 8x40", ATTN, (2, 4096, 77, 8, 40)),
    ("attention self 1024x1024 8x80", ATTN, (2, 1024, 1024, 8, 80)),
    ("attention self 256x256 8x160", ATTN, (2, 256, 256, 8, 160)),
    ("attention self 4096x4096 1x512 (VAE mid)", ATTN, (1, 4096, 4096, 1, 512)),
]


def torch_case(kind, p):
    g = torch.Generator().manual_seed(0)
    if kind == CONV:
        n, h, w, ci, co, k, st, pad = p
        x = torch.rand(n, ci, h, w, generator=g) - 0.5
        wt = torch.rand(co, ci, k, k, generator=g) - 0.5
        b = torch.rand(co, generator=g)
        ho, wo = (h + 2 * pad - k) // st + 1, (w + 2 * pad - k) // st + 1
        return (lambda: F.conv2d(x, wt, b, stride=st, padding=pad)), 2.0 * n * ho * wo * co * k * k * ci
    if kind == LINEAR:
        m, k, n = p
        x = torch.rand(m, k, generator=g) - 0.5
        wt = torch.rand(n, k, generator=g) - 0.5
        b = torch.rand(n, generator=g)
        return (lambda: F.linear(x, wt, b)), 2.0 * m * k * n
    b, lq, lk, heads, d = p
    q = torch.rand(b, lq, heads * d, generator=g) - 0.5
    k = torch.rand(b, lk, heads * d, generator=g) - 0.5
    v = torch.rand(b, lk, heads * d, generator=g) - 0.5

    def run():
        qh = q.view(b, lq, heads, d).transpose(1, 2)
        kh = k.view(b, lk, heads, d).transpose(1, 2)
        vh = v.view(b, lk, heads, d).transpose(1, 2)
        y = F.scaled_dot_product_attention(qh, kh, vh)
        return y.transpose(1, 2).reshape(b, lq, heads * d)

    return run, 4.0 * b * heads * lq * lk * d


def time_torch(fn, iters):
    with torch.inference_mode():
        fn()
        times = []
        for _ in range(iters):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default="build/bin/tessera")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--filter", default=None)
    args = ap.parse_args()

    cmd = [args.bin, "bench", "ops", "--json", "--threads", str(args.threads), "--iters",
           str(args.iters)]
    if args.filter:
        cmd += ["--filter", args.filter]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    report = json.loads(out)
    ours = {r["name"]: r for r in report["results"]}
    peak = report.get("peak_gflops")   # the measured ceiling (tessera bench peak)

    def pct(gflops):
        return f"{100 * gflops / peak:.0f}%" if peak else "-"

    torch.set_num_threads(args.threads)
    print(f"threads {args.threads}, median of {args.iters}; torch {torch.__version__} "
          f"({torch.backends.cpu.get_cpu_capability()}), `{' '.join(cmd)}`")
    if peak:
        print(f"peak {peak:.1f} GFLOP/s ({report.get('peak_kind')}, {args.threads} threads, "
              "measured by tessera: the % columns are shares of it)")
    print()
    print("| op | tessera ms | torch ms | tessera GFLOP/s | torch GFLOP/s | tessera % peak | "
          "torch % peak | ratio (tessera/torch) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    worst = 0.0
    for name, kind, p in SHAPES:
        if name not in ours:
            continue
        fn, flops = torch_case(kind, p)
        t = time_torch(fn, args.iters)
        r = ours[name]
        ratio = r["ms"] / (t * 1e3)
        worst = max(worst, ratio)
        tg = flops / t * 1e-9
        print(f"| {name} | {r['ms']:.2f} | {t * 1e3:.2f} | {r['gflops']:.1f} | {tg:.1f} | "
              f"{pct(r['gflops'])} | {pct(tg)} | {ratio:.2f} |")
    print(f"\nworst ratio {worst:.2f}", file=sys.stderr)


if __name__ == "__main__":
    main()
