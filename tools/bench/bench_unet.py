#!/usr/bin/env python3
"""tools/bench/bench_unet.py - one UNet call, Tessera vs diffusers/PyTorch on the CPU.

Runs, in the same invocation and one after the other (never at the same
time: they would share the cores), each in its own process so that peak
RSS is each one's own:

  - `tessera bench unet --json` (the C engine), and
  - diffusers' UNet2DConditionModel (this file, --child), loaded from the same
    folder in float32 (fp16 on disk widened at load, as Tessera does), with
    PyTorch's default attention (scaled_dot_product_attention),

at the same size, batch, thread count and input shapes (rows at different
timesteps; SDXL gets pooled embeddings and time_ids), then prints a table.
Memory is read the same way on both sides: VmHWM from /proc/self/status,
overall (with loading) and for the calls alone (the high-water mark is reset
through /proc/self/clear_refs after loading).  The load average is printed
before and after, because the machine this was written on is shared.

Pinned versions (tools/setup-venv.sh): torch 2.9.1, diffusers 0.35.2.

Usage:
  . .venv/bin/activate
  python tools/bench/bench_unet.py --model out/models/sd15 --size 256 --batch 2 --threads 2
  python tools/bench/bench_unet.py --model out/models/sd15 --size 512 --batch 2 --iters 1 --only-memory
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def status_mib(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return float(line.split()[1]) / 1024.0
    return -1.0


def reset_peak():
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def child(args):
    import torch
    from diffusers import UNet2DConditionModel
    torch.set_num_threads(args.threads)
    t0 = time.time()
    dt = torch.bfloat16 if args.torch_dtype == "bf16" else torch.float32
    unet = UNet2DConditionModel.from_pretrained(os.path.join(args.model, "unet"),
                                                torch_dtype=dt).eval()
    load_s = time.time() - t0
    load_peak, rss_loaded = status_mib("VmHWM"), status_mib("VmRSS")
    peak_ok = reset_peak()
    cfg = unet.config
    B, h, L = args.batch, args.size // 8, 77
    g = torch.Generator().manual_seed(0)
    lat = torch.randn(B, cfg.in_channels, h, h, generator=g)
    t = torch.tensor([float(999 - (37 * r) % 1000) for r in range(B)])
    ctx = torch.randn(B, L, cfg.cross_attention_dim, generator=g)
    kw = {}
    if cfg.addition_embed_type == "text_time":
        pooled = cfg.projection_class_embeddings_input_dim - 6 * cfg.addition_time_embed_dim
        s = float(args.size)
        kw["added_cond_kwargs"] = {
            "text_embeds": torch.randn(B, pooled, generator=g),
            "time_ids": torch.tensor([[s, s, 0, 0, s, s]] * B)}
    if dt != torch.float32:  # bf16 end to end: weights, activations and inputs
        lat, ctx = lat.to(dt), ctx.to(dt)
        kw = {k: {kk: vv.to(dt) for kk, vv in v.items()} for k, v in kw.items()}
    times = []
    first = 0.0
    with torch.inference_mode():
        for i in range(args.warmup + args.iters):
            ts = time.time()
            out = unet(lat, t, encoder_hidden_states=ctx, **kw).sample
            dt = time.time() - ts
            if i == 0:
                first = dt
            if i >= args.warmup:
                times.append(dt)
    peak = status_mib("VmHWM")
    times.sort()
    n = len(times)
    med = times[n // 2] if n % 2 else 0.5 * (times[n // 2 - 1] + times[n // 2])
    print(json.dumps({
        "impl": "pytorch", "dtype": args.torch_dtype, "torch": torch.__version__, "threads": torch.get_num_threads(),
        "size": args.size, "batch": B, "iters": args.iters, "median_s": med, "min_s": times[0],
        "first_s": first, "load_s": load_s,
        "weights_mib": sum(p.numel() * p.element_size() for p in unet.parameters()) / 1048576.0,
        "rss_loaded_mib": rss_loaded, "peak_rss_call_mib": peak if peak_ok else -1,
        "peak_rss_mib": max(peak, load_peak), "mean_abs_out": float(out.abs().mean())}))


def find_tessera():
    env = os.environ.get("TSR_BIN")
    if env:
        return env
    cands = glob.glob(os.path.join(ROOT, "build*", "bin", "tessera"))
    if not cands:
        sys.exit("no tessera binary found: build it or set TSR_BIN")
    return max(cands, key=os.path.getmtime)


def run_json(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stderr}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--torch-dtype", default="fp32", choices=["fp32", "bf16"],
                    help="PyTorch side's dtype: fp32 (default) or bf16 end to end (oneDNN's bf16 "
                         "kernels; the like-for-like of tessera --precision bf16)")
    ap.add_argument("--skip-torch", action="store_true")
    ap.add_argument("--skip-tessera", action="store_true")
    ap.add_argument("--json", action="store_true", help="print both results as JSON")
    args = ap.parse_args()
    if args.child:
        return child(args)

    common = ["--size", str(args.size), "--batch", str(args.batch), "--threads",
              str(args.threads), "--iters", str(args.iters), "--warmup", str(args.warmup)]
    load0 = os.getloadavg()
    res = {}
    if not args.skip_tessera:
        res["tessera"] = run_json([find_tessera(), "bench", "unet", "--model", args.model,
                                   "--json"] + common)
    if not args.skip_torch:
        res["pytorch"] = run_json([sys.executable, os.path.abspath(__file__), "--child",
                                   "--model", args.model] + common)
    load1 = os.getloadavg()
    if args.json:
        print(json.dumps({"results": res, "loadavg_before": load0, "loadavg_after": load1},
                         indent=2))
        return 0
    print(f"UNet {args.model}, {args.size}x{args.size}, batch {args.batch}, "
          f"{args.threads} threads, median of {args.iters} after {args.warmup} warm-up")
    print(f"load average before {load0[0]:.2f} {load0[1]:.2f}, after {load1[0]:.2f} {load1[1]:.2f}")
    rows = [("s per call (median)", "median_s", "{:.3f}"), ("s per call (min)", "min_s", "{:.3f}"),
            ("first call s", "first_s", "{:.3f}"), ("load s", "load_s", "{:.1f}"),
            ("weights MiB", "weights_mib", "{:.0f}"), ("RSS after load MiB", "rss_loaded_mib",
                                                       "{:.0f}"),
            ("peak RSS of the calls MiB", "peak_rss_call_mib", "{:.0f}"),
            ("peak RSS overall MiB", "peak_rss_mib", "{:.0f}"),
            ("mean |output|", "mean_abs_out", "{:.4g}")]
    print(f"{'':28} {'tessera':>10} {'pytorch':>10} {'ratio':>7}")
    for label, key, fmt in rows:
        a = res.get("tessera", {}).get(key)
        b = res.get("pytorch", {}).get(key)
        fa = fmt.format(a) if a is not None else "-"
        fb = fmt.format(b) if b is not None else "-"
        ratio = f"{a / b:.2f}" if a and b and key != "mean_abs_out" else ""
        print(f"{label:28} {fa:>10} {fb:>10} {ratio:>7}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
