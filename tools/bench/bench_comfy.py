#!/usr/bin/env python3
"""tools/bench/bench_comfy.py - ComfyUI's API under load (issue 59): N
`/prompt` clients, each sending its next workflow when its last one is in
`/history` (closed loop), against a ComfyUI-style sequential server
(`--max-batch 1`: one image per UNet call, as ComfyUI runs one prompt at a
time) and against step-level batching (`--max-batch 16`).

    python3 tools/bench/bench_comfy.py [--bin build/bin/tessera] [--model models/demo]
        [--clients 16] [--prompts 2] [--steps 20] [--size 128] [--configs 1,16]

For each --max-batch of --configs it starts its own server on a free
loopback port with a temporary data dir, runs one warm-up prompt, then the
clients; it prints images/s over the whole run and the p50/p95/max of a
prompt's latency (POST /prompt to its /history entry), and a markdown row.
Each workflow is ComfyUI's default graph (euler, normal) with its own seed.
The server is started and stopped by serve_client.py.  Standard library only.
"""
import argparse
import os
import sys
import threading
import time

import serve_client


def workflow(ckpt, seed, steps, size):
    return {
        "3": {"class_type": "KSampler", "inputs": {
            "seed": seed, "steps": steps, "cfg": 7.5, "sampler_name": "euler",
            "scheduler": "normal", "denoise": 1.0, "model": ["4", 0], "positive": ["6", 0],
            "negative": ["7", 0], "latent_image": ["5", 0]}},
        "4": {"class_type": "CheckpointLoaderSimple", "inputs": {"ckpt_name": ckpt}},
        "5": {"class_type": "EmptyLatentImage",
              "inputs": {"width": size, "height": size, "batch_size": 1}},
        "6": {"class_type": "CLIPTextEncode",
              "inputs": {"text": "a red circle on a blue background %d" % seed, "clip": ["4", 1]}},
        "7": {"class_type": "CLIPTextEncode", "inputs": {"text": "", "clip": ["4", 1]}},
        "8": {"class_type": "VAEDecode", "inputs": {"samples": ["3", 0], "vae": ["4", 2]}},
        "9": {"class_type": "SaveImage",
              "inputs": {"filename_prefix": "bench", "images": ["8", 0]}},
    }


def run_prompt(port, wf):
    t0 = time.time()
    status, body = serve_client.call(port, "POST", "/prompt", {"prompt": wf})
    if status != 200:
        raise RuntimeError("POST /prompt -> %d %s" % (status, body))
    pid = body["prompt_id"]
    while True:
        status, h = serve_client.call(port, "GET", "/history/" + pid)
        if status == 200 and pid in h:
            if h[pid]["status"]["status_str"] != "success":
                raise RuntimeError("prompt %s: %s" % (pid, h[pid]["status"]))
            return time.time() - t0
        time.sleep(0.02)


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(round(p / 100 * (len(v) - 1))))]


def bench(a, max_batch):
    srv, port = serve_client.start(a.bin, a.model, ["--device", "cpu", "--max-batch",
                                                    str(max_batch), "--max-queue", "1000"],
                                   "bench_comfy")
    try:
        ckpt = serve_client.call(port, "GET", "/models/checkpoints")[1][0]
        run_prompt(port, workflow(ckpt, 999, a.steps, a.size))  # warm-up
        lat, errors = [], []
        lock = threading.Lock()

        def client(k):
            try:
                for i in range(a.prompts):
                    t = run_prompt(port, workflow(ckpt, k * 1000 + i, a.steps, a.size))
                    with lock:
                        lat.append(t)
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(str(e))

        threads = [threading.Thread(target=client, args=(k,)) for k in range(a.clients)]
        t0 = time.time()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.time() - t0
        if errors:
            sys.exit("bench_comfy: %s" % errors[0])
        return len(lat) / wall, pct(lat, 50), pct(lat, 95), max(lat), wall
    finally:
        serve_client.stop(srv)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="build/bin/tessera")
    ap.add_argument("--model", default="models/demo")
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--prompts", type=int, default=2)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--size", type=int, default=128)
    ap.add_argument("--configs", default="1,16")
    a = ap.parse_args()
    load = os.getloadavg()[0]
    print("%d /prompt clients x %d prompts, %dx%d, %d steps, euler/normal; load average %.1f"
          % (a.clients, a.prompts, a.size, a.size, a.steps, load))
    print("| --max-batch | images/s | p50 s | p95 s | max s | wall s |")
    print("|---|---|---|---|---|---|")
    for mb in [int(x) for x in a.configs.split(",")]:
        ips, p50, p95, mx, wall = bench(a, mb)
        print("| %d | %.2f | %.1f | %.1f | %.1f | %.1f |" % (mb, ips, p50, p95, mx, wall),
              flush=True)


if __name__ == "__main__":
    main()
