#!/usr/bin/env python3
"""tools/bench/bench_side.py - Tessera, PyTorch and stable-diffusion.cpp side by side on the CPU.

For each case (UNet step or VAE decode, SD 1.5 or SDXL, a square size) it
runs, one after the other and each in its own process (never two at once:
they would share the cores), at the same thread count:

  tessera          `tessera bench unet|vae --json`, OPENBLAS_CORETYPE unset
  tessera-haswell  the same with OPENBLAS_CORETYPE=Haswell in the environment
  tessera-bf16     the same with --device cpu-bf16gemm: the opt-in bf16 mode
                   (AVX512_BF16 only; an error cell elsewhere)
  pytorch          diffusers fp32 with PyTorch's SDPA attention, through the
                   existing tools/bench/bench_unet.py --child and
                   tools/bench/bench_vae.py --torch-child (not duplicated here)
and, only when named in --sides:
  tessera-avx2     tessera with TESSERA_CPU_ISA=avx2 (its AVX2 kernels on an
                   AVX-512 machine: the AVX2 figure where no AVX2-only machine
                   is at hand)
  pytorch-avx2     pytorch capped the same way: ATEN_CPU_CAPABILITY=avx2
                   ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2
  pytorch-bf16     pytorch in bf16 end to end (--torch-dtype bf16): the
                   like-for-like peer of tessera-bf16
  sdcpp            stable-diffusion.cpp's sd-cli on a single-file checkpoint
                   written by `tessera convert --to single` (cached under out/)

What is timed (honest ratio: same work on both sides):
  unet-*   Tessera and PyTorch: one UNet call at batch 2 (one image with
           classifier-free guidance), median of --iters after --warmup.
           sd.cpp: one sampling step at --cfg-scale 7 (a conditional and an
           unconditional UNet evaluation), read from its progress line
           ("k/N - X s/it", steps after the warm-up ones); it runs
           --warmup + --iters euler steps, then a tiled VAE decode (untimed).
  vae-*    Tessera and PyTorch: one decode of batch 1 latents, median of
           --iters after --warmup.  sd.cpp: its log line
           "decode_first_stage completed, taking X s" of a 1-step run
           (one decode per process, so it is a FIRST call: graph and buffer
           setup included; --rounds repeats the process).
Peak RSS of each side is ru_maxrss of its process from wait4() (= VmHWM at
exit, with loading; for sd.cpp the whole pipeline: text encoder, UNet and
VAE).  Tessera's and PyTorch's own VmHWM reports are kept in the JSON.

With --rounds R each case runs R rounds of all sides, the order reversed
every other round, so that the shared machine's load hits every side; a
side's figure is the median of its rounds.

sd.cpp: --sdcpp PATH is a source checkout (with its ggml submodule checked
out in PATH/ggml).  Unless --sdcpp-bin is given or BUILD/bin/sd-cli exists,
the script configures and builds it (cmake, Release, GGML_NATIVE=ON, CPU
only, nice, -j --jobs) into --sdcpp-build (default out/sdcpp-build).  Nothing
of sd.cpp is vendored here.  Without --sdcpp the sd.cpp column says "not
given".  sd.cpp gets an f32 checkpoint (weights in f32, as Tessera and
PyTorch do) unless --sdcpp-dtype f16.

Usage (from the repository root, venv with torch 2.9.1 and diffusers 0.35.2):
  . .venv/bin/activate
  # quick check, a few minutes:
  python tools/bench/bench_side.py --bin build/bin/tessera --sd15 out/models/sd15 \\
      --sdcpp ../sdcpp-src --threads 2 --cases unet-sd15-256,vae-sd15-256 --out out/side.json
  # the issue's figures (SDXL 1024 takes several minutes per side):
  python tools/bench/bench_side.py --bin build/bin/tessera --sd15 out/models/sd15 \\
      --sdxl out/models/sdxl --sdcpp ../sdcpp-src --threads 2 \\
      --cases unet-sd15-512,vae-sd15-512,unet-sdxl-1024 --iters 1 --out out/side.json
"""
import argparse
import importlib.metadata
import json
import os
import re
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_SIDES = ["tessera", "tessera-haswell", "tessera-bf16", "pytorch", "sdcpp"]
SIDES = DEFAULT_SIDES + ["tessera-avx2", "pytorch-avx2", "pytorch-bf16"]
AVX2_CAP = {"TESSERA_CPU_ISA": "avx2", "ATEN_CPU_CAPABILITY": "avx2",
            "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"}

# sd.cpp's tokenizer vocab headers for non-CLIP text encoders are large files that a
# partial checkout (e.g. a mirror without large blobs) may lack; SD 1.5 and SDXL only
# use CLIP's.  Missing ones get a one-byte placeholder so that the build goes through.
SDCPP_VOCAB_STUBS = {
    "gemma2_merges": "gemma2_merges_utf8_c_str", "gemma2_vocab": "gemma2_vocab_json_utf8_c_str",
    "gemma_merges": "gemma_merges_utf8_c_str", "gemma_vocab": "gemma_vocab_json_utf8_c_str",
    "gpt_oss_merges": "gpt_oss_merges_utf8_c_str", "gpt_oss_vocab": "gpt_oss_vocab_json_utf8_c_str",
    "mistral_merges": "mistral_merges_utf8_c_str", "mistral_vocab": "mistral_vocab_json_utf8_c_str",
    "qwen_merges": "qwen2_merges_utf8_c_str", "t5": "t5_tokenizer_json_str",
    "umt5": "umt5_tokenizer_json_str"}


def log(msg):
    print(f"[bench_side {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def run_child(cmd, env=None):
    """Run cmd in its own process: (rc, stdout, stderr, its peak RSS MiB from wait4, wall s)."""
    t0 = time.time()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                         text=True, errors="replace")
    import threading
    bufs = {"out": [], "err": []}

    def pump(stream, key):
        for chunk in iter(lambda: stream.read(65536), ""):
            bufs[key].append(chunk)
    th = [threading.Thread(target=pump, args=(p.stdout, "out")),
          threading.Thread(target=pump, args=(p.stderr, "err"))]
    for t in th:
        t.start()
    _, status, ru = os.wait4(p.pid, 0)
    for t in th:
        t.join()
    p.returncode = os.waitstatus_to_exitcode(status)
    wall = time.time() - t0
    run_child.cpu_s = ru.ru_utime + ru.ru_stime     # read by note_cpu()
    return p.returncode, "".join(bufs["out"]), "".join(bufs["err"]), ru.ru_maxrss / 1024.0, wall


def note_cpu(res):
    """CPU seconds of the process and its share of the wall time (threads * 100 % = no
    contention): on a shared machine a low share says the figure is the load's."""
    res["cpu_s"] = run_child.cpu_s
    if res.get("wall_s"):
        res["cpu_share"] = run_child.cpu_s / res["wall_s"]
    return res


def last_json(text):
    for line in reversed(text.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            return json.loads(line)
    raise ValueError("no JSON line in output")


def sh(cmd, **kw):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, **kw).stdout.strip()
    except OSError:
        return ""


# ---------------------------------------------------------------------------- machine header

def machine_info(args):
    info = {"date_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
            "threads": args.threads, "nproc": os.cpu_count()}
    lscpu = sh(["lscpu"])
    for line in lscpu.splitlines():
        k, _, v = line.partition(":")
        if k.strip() in ("Model name", "Flags", "Architecture", "CPU(s)", "L1d cache", "L2 cache",
                         "L3 cache", "CPU family", "Model"):
            info["lscpu_" + k.strip().lower().replace(" ", "_").replace("(s)", "s")] = v.strip()
    # the measured ceiling the figures run under (tessera bench peak)
    peak = sh([args.bin, "bench", "peak", "--threads", str(args.threads), "--json"])
    try:
        info["peak"] = {r["kind"]: [r["gflops_1"], r["gflops_all"]]
                        for r in json.loads(peak)["results"]}
    except ValueError:
        info["peak"] = {}
    py = args.python
    vers = sh([py, "-c", "import importlib.metadata as m; print(m.version('torch'), "
               "m.version('diffusers'))"])
    info["torch"], info["diffusers"] = (vers.split() + ["?", "?"])[:2]
    info["python"] = sh([py, "-c", "import sys; print(sys.version.split()[0])"])
    info["tessera_bin"] = os.path.abspath(args.bin)
    info["tessera_commit"] = sh(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"])
    info["openblas"] = openblas_info(args.bin, py)
    if args.sdcpp:
        info["sdcpp_commit"] = sh(["git", "-C", args.sdcpp, "rev-parse", "HEAD"]) or "?"
        info["ggml_commit"] = sh(["git", "-C", os.path.join(args.sdcpp, "ggml"), "rev-parse",
                                  "HEAD"]) or "?"
        info["sdcpp_dtype"] = args.sdcpp_dtype
    return info


def openblas_info(binary, py):
    """OpenBLAS the tessera binary links (ldd), its version and the core it picks with
    and without OPENBLAS_CORETYPE=Haswell (openblas_get_config/corename through ctypes)."""
    lib = ""
    for line in sh(["ldd", binary]).splitlines():
        if "blas" in line.lower() and "=>" in line:
            lib = line.split("=>")[1].split("(")[0].strip()
            break
    if not lib:
        return {"lib": "not linked (ldd shows no BLAS)"}
    res = {"lib": lib, "real": os.path.realpath(lib)}
    probe = ("import ctypes,sys; l=ctypes.CDLL(sys.argv[1]);"
             "f=l.openblas_get_config; f.restype=ctypes.c_char_p;"
             "g=l.openblas_get_corename; g.restype=ctypes.c_char_p;"
             "print(f().decode()); print(g().decode())")
    for tag, extra in (("default", None), ("haswell", "Haswell")):
        env = dict(os.environ)
        env.pop("OPENBLAS_CORETYPE", None)
        if extra:
            env["OPENBLAS_CORETYPE"] = extra
        out = sh([sys.executable, "-c", probe, lib], env=env).splitlines()
        if len(out) >= 2:
            res["config"] = out[0]
            res["core_" + tag] = out[1]
    return res


# ---------------------------------------------------------------------------- sd.cpp

def sdcpp_binary(args):
    if args.sdcpp_bin:
        return args.sdcpp_bin
    bdir = args.sdcpp_build
    for name in ("sd-cli", "sd"):
        cand = os.path.join(bdir, "bin", name)
        if os.access(cand, os.X_OK):
            return cand
    src = args.sdcpp
    if not os.path.exists(os.path.join(src, "ggml", "CMakeLists.txt")):
        sys.exit(f"{src}/ggml is empty: check out sd.cpp's ggml submodule there "
                 f"(git submodule update --init ggml, or the commit `git -C {src} ls-tree HEAD "
                 "ggml` names)")
    vocab = os.path.join(src, "src", "tokenizers", "vocab")
    if os.path.isdir(vocab):
        for name, sym in SDCPP_VOCAB_STUBS.items():
            path = os.path.join(vocab, name + ".hpp")
            if not os.path.exists(path):
                log(f"sd.cpp checkout lacks {path}: writing a placeholder (not used by SD/SDXL)")
                with open(path, "w") as f:
                    f.write(f"static const unsigned char {sym}[] = {{0x00}}; "
                            "/* placeholder written by tessera tools/bench/bench_side.py */\n")
    log(f"building sd.cpp from {src} into {bdir} (several minutes)")
    cfg = ["nice", "cmake", "-S", src, "-B", bdir, "-DCMAKE_BUILD_TYPE=Release",
           "-DGGML_NATIVE=ON", "-DSD_WEBP=OFF", "-DSD_WEBM=OFF"]
    bld = ["nice", "cmake", "--build", bdir, "-j", str(args.jobs), "--target", "sd-cli"]
    for cmd in (cfg, bld):
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            sys.exit(f"{' '.join(cmd)} failed:\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    return os.path.join(bdir, "bin", "sd-cli")


def sdcpp_checkpoint(args, model_dir):
    """Single-file LDM checkpoint of a diffusers folder for sd.cpp (cached under out/)."""
    name = os.path.basename(os.path.normpath(model_dir))
    os.makedirs(args.work, exist_ok=True)
    dst = os.path.join(args.work, f"{name}-{args.sdcpp_dtype}-single.safetensors")
    src_m = os.path.getmtime(os.path.join(model_dir, "model_index.json"))
    if os.path.exists(dst) and os.path.getmtime(dst) >= src_m:
        return dst
    log(f"writing {dst} with tessera convert --to single --dtype {args.sdcpp_dtype}")
    if os.path.exists(dst):
        os.remove(dst)
    p = subprocess.run(["nice", args.bin, "convert", "--to", "single", "--dtype",
                        args.sdcpp_dtype, model_dir, dst],
                       capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"tessera convert failed: {p.stderr.strip()[-500:]}")
    return dst


STEP_RE = re.compile(r"(\d+)/(\d+) - ([0-9.]+)(s/it|it/s)")


def run_sdcpp(args, case, model_dir):
    if not args.sdcpp and not args.sdcpp_bin:
        return {"error": "not given"}
    if case["kind"] == "unet":
        steps = args.warmup + args.iters
        if steps < 2:
            steps = 2          # step 1 carries no time of its own in sd.cpp's progress line
    else:
        steps = 1
    try:
        binary = sdcpp_binary(args)
        ckpt = sdcpp_checkpoint(args, model_dir)
    except (RuntimeError, SystemExit) as e:
        return {"error": str(e)[-300:]}
    outpng = os.path.join(args.work, "sdcpp-out.png")
    cmd = [binary, "-m", ckpt, "-p", "a photograph of an astronaut riding a horse",
           "-W", str(case["size"]), "-H", str(case["size"]), "--steps", str(steps),
           "--cfg-scale", "7", "--sampling-method", "euler", "--seed", "1",
           "-t", str(args.threads), "-o", outpng]
    if case["kind"] == "unet":
        cmd += ["--vae-tiling"]     # keep the untimed decode's memory out of the UNet's peak
    rc, out, err, peak, wall = run_child(cmd)
    text = out + "\n" + err
    res = {"cmd": " ".join(cmd), "peak_rss_mib": peak, "wall_s": wall, "rc": rc,
           "log": [l for l in text.replace("\r", "\n").splitlines()
                   if l.strip() and not STEP_RE.search(l)][-60:]}
    if rc != 0:
        tail = [l for l in text.replace("\r", "\n").splitlines() if l.strip()][-3:]
        res["error"] = f"sd-cli exit {rc}: " + " | ".join(tail)[-300:]
        return res
    m = re.search(r"Diffusion model weight type stat:\s*(.*)", text)
    if m:
        res["unet_weight_types"] = m.group(1).strip()
    m = re.search(r"sampling completed, taking ([0-9.]+)s", text)
    if m:
        res["sampling_s"] = float(m.group(1))
        res["steps"] = steps
    m = re.search(r"decode_first_stage completed, taking ([0-9.]+)s", text)
    if m:
        res["decode_s"] = float(m.group(1))
    if case["kind"] == "unet":
        per = {}
        # only the sampler's progress lines: the tiled decode after it prints its own
        # "k/N - X s/it" lines per tile
        head = text.split("sampling completed", 1)[0]
        for k, n, v, unit in STEP_RE.findall(head.replace("\r", "\n")):
            if int(n) != steps:
                continue
            v = float(v)
            if v > 0:
                per[int(k)] = v if unit == "s/it" else 1.0 / v
        timed = [per[k] for k in sorted(per) if k > max(args.warmup, 1)]
        if not timed:     # fall back to the total over the steps
            timed = [per[k] for k in sorted(per)] or (
                [res["sampling_s"] / steps] if "sampling_s" in res else [])
        res["step_times_s"] = timed
        if timed:
            res["s"] = statistics.median(timed)
        else:
            res["error"] = "no step time in sd-cli's output"
    else:
        if "decode_s" in res:
            res["s"] = res["decode_s"]
        else:
            res["error"] = "no decode_first_stage line in sd-cli's output"
    return res


# ---------------------------------------------------------------------------- Tessera, PyTorch

def env_prefix(env, keys):
    return "".join(f"{k}={env[k]} " for k in keys if k in env)


def run_tessera(args, case, model_dir, haswell, device="cpu", avx2=False):
    env = dict(os.environ)
    env.pop("OPENBLAS_CORETYPE", None)
    env.pop("TESSERA_CPU_ISA", None)
    if haswell:
        env["OPENBLAS_CORETYPE"] = "Haswell"
    if avx2:
        env["TESSERA_CPU_ISA"] = AVX2_CAP["TESSERA_CPU_ISA"]
    common = ["--device", device, "--size", str(case["size"]), "--threads", str(args.threads),
              "--iters", str(args.iters), "--warmup", str(args.warmup), "--json"]
    if case["kind"] == "unet":
        cmd = [args.bin, "bench", "unet", "--model", model_dir, "--batch", "2"] + common
    else:
        cmd = [args.bin, "bench", "vae", "--model", model_dir, "--batch", "1"] + common
    rc, out, err, peak, wall = run_child(cmd, env=env)
    res = {"cmd": env_prefix(env, ["OPENBLAS_CORETYPE", "TESSERA_CPU_ISA"]) + " ".join(cmd),
           "peak_rss_mib": peak, "wall_s": wall, "rc": rc}
    if rc != 0:
        res["error"] = f"exit {rc}: {err.strip()[-300:]}"
        return res
    j = last_json(out)
    res["report"] = j
    res["s"] = j["median_s"] if case["kind"] == "unet" else j["decode_ms"] / 1e3
    return res


def run_pytorch(args, case, model_dir, dtype="fp32", avx2=False):
    common = ["--model", model_dir, "--size", str(case["size"]), "--threads", str(args.threads),
              "--iters", str(args.iters), "--warmup", str(args.warmup), "--torch-dtype", dtype]
    if case["kind"] == "unet":
        cmd = [args.python, os.path.join(HERE, "bench_unet.py"), "--child", "--batch", "2"]
    else:
        cmd = [args.python, os.path.join(HERE, "bench_vae.py"), "--torch-child", "--batch", "1"]
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", str(args.threads))
    for k in AVX2_CAP:
        env.pop(k, None)
    if avx2:
        env.update({k: v for k, v in AVX2_CAP.items() if k != "TESSERA_CPU_ISA"})
    rc, out, err, peak, wall = run_child(cmd + common, env=env)
    res = {"cmd": env_prefix(env, list(AVX2_CAP)) + " ".join(cmd + common),
           "peak_rss_mib": peak, "wall_s": wall, "rc": rc}
    if rc != 0:
        res["error"] = f"exit {rc}: {err.strip()[-300:]}"
        return res
    j = last_json(out)
    res["report"] = j
    res["s"] = j["median_s"] if case["kind"] == "unet" else j["decode_ms"] / 1e3
    return res


# ---------------------------------------------------------------------------- cases and table

def parse_case(text, args):
    m = re.fullmatch(r"(unet|vae)-(sd15|sdxl)-(\d+)", text.strip())
    if not m:
        sys.exit(f"bad case {text!r}: want unet|vae-sd15|sdxl-SIZE, e.g. unet-sd15-512")
    kind, model, size = m.group(1), m.group(2), int(m.group(3))
    model_dir = args.sd15 if model == "sd15" else args.sdxl
    if not model_dir:
        sys.exit(f"case {text} needs --{model}")
    return {"name": text.strip(), "kind": kind, "model": model, "size": size, "dir": model_dir}


# How each side runs: the runner and its arguments.
SIDE_RUNS = {
    "tessera": (run_tessera, dict(haswell=False)),
    "tessera-haswell": (run_tessera, dict(haswell=True)),
    "tessera-bf16": (run_tessera, dict(haswell=False, device="cpu-bf16gemm")),
    "tessera-avx2": (run_tessera, dict(haswell=False, avx2=True)),
    "pytorch": (run_pytorch, {}),
    "pytorch-avx2": (run_pytorch, dict(avx2=True)),
    "pytorch-bf16": (run_pytorch, dict(dtype="bf16")),
    "sdcpp": (run_sdcpp, {}),
}
assert set(SIDE_RUNS) == set(SIDES)


def run_case(args, case):
    order = [s for s in args.sides if s not in args.skip]
    per_side = {s: [] for s in order}
    loads = [os.getloadavg()]
    for r in range(args.rounds):
        seq = order if r % 2 == 0 else list(reversed(order))
        for side in seq:
            log(f"{case['name']} round {r + 1}/{args.rounds}: {side} "
                f"(load {os.getloadavg()[0]:.2f})")
            run, kw = SIDE_RUNS[side]
            res = run(args, case, case["dir"], **kw)
            if "wall_s" in res:
                note_cpu(res)
            res["loadavg_after"] = os.getloadavg()
            log(f"  -> {side}: " + (f"{res['s']:.3f} s" if "s" in res else res.get("error", "?"))
                + (f", peak {res['peak_rss_mib']:.0f} MiB" if "peak_rss_mib" in res else ""))
            per_side[side].append(res)
            if side == "sdcpp" and res.get("error") == "not given":
                order = [s for s in order if s != "sdcpp"]
    loads.append(os.getloadavg())
    summary = {}
    for side, runs in per_side.items():
        ok = [x for x in runs if "s" in x]
        if ok:
            summary[side] = {"s": statistics.median(x["s"] for x in ok),
                             "rounds_s": [x["s"] for x in ok],
                             "peak_rss_mib": max(x["peak_rss_mib"] for x in ok),
                             "cpu_share": statistics.median(x.get("cpu_share", 0) for x in ok)}
        elif runs:
            summary[side] = {"error": runs[-1].get("error", "failed")}
    return {"case": case, "runs": per_side, "summary": summary, "loadavg_before": loads[0],
            "loadavg_after": loads[1]}


def fmt_s(summ, side):
    x = summ.get(side)
    if x is None:
        return "skipped"
    if "s" in x:
        return f"{x['s']:.3f}" if x["s"] < 10 else f"{x['s']:.1f}"
    return x["error"].replace("|", "/")


def table(info, results):
    lines = []
    ob = info.get("openblas", {})
    lines.append(f"Machine: {info.get('lscpu_model_name', '?')}, {info['nproc']} CPUs visible, "
                 f"{info['threads']} threads per side; {info['date_utc']} UTC")
    lines.append(f"CPU family {info.get('lscpu_cpu_family', '?')} model "
                 f"{info.get('lscpu_model', '?')}; L1d {info.get('lscpu_l1d_cache', '?')}, L2 "
                 f"{info.get('lscpu_l2_cache', '?')}, L3 {info.get('lscpu_l3_cache', '?')}")
    lines.append(f"Flags: {info.get('lscpu_flags', '?')}")
    if info.get("peak"):
        lines.append("Measured peak (tessera bench peak, GFLOP/s on 1 / "
                     f"{info['threads']} threads): " + "; ".join(
                         f"{k} {v[0]:.0f} / {v[1]:.0f}" for k, v in info["peak"].items()))
    lines.append(f"Tessera {info['tessera_commit']} ({info['tessera_bin']}); OpenBLAS "
                 f"{ob.get('config', ob.get('lib', '?'))}, core {ob.get('core_default', '?')} "
                 f"by default, {ob.get('core_haswell', '?')} with OPENBLAS_CORETYPE=Haswell")
    lines.append(f"PyTorch {info['torch']}, diffusers {info['diffusers']} (fp32, SDPA), "
                 f"Python {info['python']}")
    if "sdcpp_commit" in info:
        lines.append(f"stable-diffusion.cpp {info['sdcpp_commit']}, ggml {info['ggml_commit']}, "
                     f"{info.get('sdcpp_dtype', '?')} single-file checkpoint from tessera convert")
    else:
        lines.append("stable-diffusion.cpp: not given")
    lines.append("")
    # One row per (case, side): each side's speed-up over its PyTorch peer (fp32 for
    # the fp32 sides, the AVX2-capped run for tessera-avx2, bf16 for tessera-bf16).
    peer = {"tessera": "pytorch", "tessera-haswell": "pytorch", "tessera-avx2": "pytorch-avx2",
            "tessera-bf16": "pytorch-bf16", "sdcpp": "pytorch"}
    lines.append("| case | side | s | vs PyTorch fp32 | vs its PyTorch peer (peer) | "
                 "peak RSS MiB | CPU share (cores busy / wall) | load avg before -> after |")
    lines.append("|---|---|---:|---:|---:|---:|---:|---|")
    for r in results:
        summ = r["summary"]
        load = f"{r['loadavg_before'][0]:.2f} -> {r['loadavg_after'][0]:.2f}"

        def speedup(side, other):
            x, o = summ.get(side, {}), summ.get(other, {})
            return f"{o['s'] / x['s']:.2f}x" if "s" in x and "s" in o else "-"
        for side in [x for x in SIDES if x in summ]:
            x = summ[side]
            pe = peer.get(side)
            vs_peer = f"{speedup(side, pe)} ({pe})" if pe else "-"
            rss = f"{x['peak_rss_mib']:.0f}" if "peak_rss_mib" in x else "-"
            share = f"{x['cpu_share']:.2f}" if "cpu_share" in x else "-"
            lines.append(f"| {r['case']['name']} | {side} | {fmt_s(summ, side)} | "
                         f"{speedup(side, 'pytorch')} | {vs_peer} | {rss} | {share} | {load} |")
    lines.append("")
    lines.append("unet-*: s per UNet call at batch 2 (one image with CFG), median of the "
                 "iterations after warm-up, for Tessera and PyTorch; for sd.cpp s per euler "
                 "sampling step at cfg-scale 7 (cond + uncond evaluation) from its progress "
                 "line, steps after the first.  vae-*: s per decode of one image; sd.cpp's is "
                 "its 'decode_first_stage completed' log line, a first call (one per process).  "
                 "Peak RSS: ru_maxrss of each process (with loading; sd.cpp's holds the whole "
                 "pipeline).  CPU share: the process's CPU seconds (wait4) over its wall time, "
                 "loading included; near the thread count on an idle machine, well below it "
                 "when other work took the cores.  vs ...: the peer's time over this side's "
                 "(above 1x = this side is faster).  With several rounds, the median of the "
                 "rounds.")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(
        description="Tessera vs PyTorch (diffusers fp32, SDPA) vs stable-diffusion.cpp on the "
                    "CPU: UNet step and VAE decode times and peak RSS, one process at a time, "
                    "printed as a markdown table with the machine (lscpu flags) and versions.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin", "tessera"),
                    help="tessera binary (default build/bin/tessera)")
    ap.add_argument("--sd15", help="SD 1.5 diffusers folder (cases *-sd15-*)")
    ap.add_argument("--sdxl", help="SDXL diffusers folder (cases *-sdxl-*)")
    ap.add_argument("--sdcpp", help="stable-diffusion.cpp source checkout with ggml/ checked out; "
                    "built into --sdcpp-build unless a binary is there (optional)")
    ap.add_argument("--sdcpp-build", default=os.path.join(ROOT, "out", "sdcpp-build"),
                    help="sd.cpp build folder (default out/sdcpp-build)")
    ap.add_argument("--sdcpp-bin", help="an sd.cpp sd-cli binary to use as is (skips the build)")
    ap.add_argument("--sdcpp-dtype", default="f32", choices=["f32", "f16"],
                    help="dtype of the checkpoint written for sd.cpp (default f32, as Tessera "
                         "and PyTorch compute; sd-cli's --type f32 does not widen f16 weights)")
    ap.add_argument("--jobs", type=int, default=2, help="build jobs for sd.cpp (default 2)")
    ap.add_argument("--threads", type=int, default=2, help="threads for every side (default 2)")
    ap.add_argument("--cases", default="unet-sd15-512,vae-sd15-512,unet-sdxl-1024",
                    help="comma-separated KIND-MODEL-SIZE, KIND unet|vae, MODEL sd15|sdxl "
                         "(default unet-sd15-512,vae-sd15-512,unet-sdxl-1024; quick: "
                         "unet-sd15-256,vae-sd15-256)")
    ap.add_argument("--iters", type=int, default=1, help="timed calls per process (default 1)")
    ap.add_argument("--warmup", type=int, default=1, help="untimed calls first (default 1)")
    ap.add_argument("--rounds", type=int, default=1,
                    help="rounds of all sides per case, order reversed every other round")
    ap.add_argument("--sides", default=",".join(DEFAULT_SIDES),
                    help="comma-separated sides to run, in this order (default "
                         f"{','.join(DEFAULT_SIDES)}; also: tessera-avx2, pytorch-avx2, "
                         "pytorch-bf16)")
    ap.add_argument("--skip", default="", help="comma-separated sides to leave out of --sides")
    ap.add_argument("--python", default=sys.executable,
                    help="Python with torch and diffusers for the PyTorch side")
    ap.add_argument("--work", default=os.path.join(ROOT, "out", "bench_side"),
                    help="folder for converted checkpoints and sd.cpp's image (default "
                         "out/bench_side)")
    ap.add_argument("--out", help="write every measurement and the header here as JSON")
    args = ap.parse_args()
    args.skip = [s for s in args.skip.split(",") if s]
    args.sides = [s for s in args.sides.split(",") if s]
    bad = [s for s in args.sides if s not in SIDES]
    if bad:
        sys.exit(f"unknown side(s) {','.join(bad)}: choose from {','.join(SIDES)}")
    if args.sdcpp:
        args.sdcpp = os.path.abspath(args.sdcpp)
    if not os.access(args.bin, os.X_OK):
        sys.exit(f"no tessera binary at {args.bin}: build it (scripts/build.sh build) or --bin")
    cases = [parse_case(c, args) for c in args.cases.split(",") if c.strip()]
    info = machine_info(args)
    results = []
    for case in cases:
        results.append(run_case(args, case))
        if args.out:       # after every case, so that a long run keeps what it measured
            with open(args.out, "w") as f:
                json.dump({"machine": info, "results": results}, f, indent=1)
    text = table(info, results)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"machine": info, "results": results, "table": text}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
