#!/usr/bin/env python3
"""tools/sim/check_cpu.py - the simulator (tools/sim/sim.py) against the real
server on CPU devices: `tessera serve --device cpu,cpu --threads 2` (one
thread per device) under closed-loop load from tessera-loadtest.

Why this way.  The simulator is trusted for GPUs only as far as its model
of the scheduler is right, and CPU devices are the only several-device
server that can run here.  So the check measures the simulator's inputs
independently of the runs it predicts, then predicts those runs:

  1. the CPU table: `tessera bench unet` CPU seconds per call at 1..32 rows
     and `tessera bench vae` CPU seconds per decode at 1..4 images, one
     thread (CPU time, not wall: it hardly moves with other processes' load
     on a shared machine, which the simulator models separately);
  2. the per-image costs the benches do not see, from one calibration run
     of the real server on ONE device (`--device cpu --threads 1`, one
     client): the worker thread's CPU seconds per image beyond the UNet
     calls and the decode (text encoding, sampler, previews) and every
     other thread's (tile encoder, PNG, HTTP), read from
     /proc/PID/task/*/stat; the client's round trip from the loadtest's
     submit time.  Written to tools/sim/tables/cpu_demo128.json.
  3. the runs checked: TWO devices at 2, 4 and 8 closed-loop clients, each
     client count --repeats times (default 2, in rounds).  The machine is
     shared with other sessions' builds and tests, and the kernel (CFS with
     autogroups, as here) shares the cores between busy sessions by weight,
     then between their threads.  So the server runs in a session of its
     own whose autogroup nice is raised (--nice, default -19, as root: it
     then gets most of the cores it asks for and other sessions' bursts
     move the figures less), and during each run a sampler (a child in a
     session of its own) records 4 times a second how many threads of
     every other session are runnable, and at what nice.  The simulator is
     given the same: the server's share of the cores follows from those
     samples and the weights (sim.share_table).  (The cores other processes
     *got* are reported too, but not used: they depend on what the server
     took.)  The check passes when, for every client count, the mean
     predicted images/s is within 15% of the mean measured.

The result (tables, figures, commands) is printed as Markdown and written
to --out (default tools/sim/results/cpu_check.md) with the raw JSON beside
it.  Standard library only.  Run from the repository root after building:

    python3 tools/sim/check_cpu.py --build build-comm
"""
import argparse
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import sim  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


def sh(cmd, timeout=900):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        sys.exit("check_cpu: %s failed (%d): %s" % (" ".join(cmd), r.returncode,
                                                     r.stderr.strip()[-500:]))
    return r.stdout


def child_cpu():
    u = resource.getrusage(resource.RUSAGE_CHILDREN)
    return u.ru_utime + u.ru_stime


# ------------------------------------------------------------- 1. benches


def vae_factor(model):
    """The VAE's spatial factor, 2^(blocks - 1): 4 for the demo model."""
    with open(os.path.join(model, "vae", "config.json")) as f:
        return 2 ** (len(json.load(f)["block_out_channels"]) - 1)


def latent_bytes(a):
    """One f32 row of the UNet's output at --size."""
    with open(os.path.join(a.model, "unet", "config.json")) as f:
        channels = json.load(f).get("out_channels", 4)
    side = a.size // vae_factor(a.model)
    return channels * side * side * 4


def bench_unet(a, rows):
    # `bench unet --size` takes the image side and assumes a factor-8 VAE
    # (latents size / 8); ask for the side that gives this model's latents
    side = a.size * 8 // vae_factor(a.model)
    out = sh([a.bin, "--log-level", "warn", "bench", "unet", "--model", a.model, "--size",
              str(side), "--batch", str(rows), "--threads", "1", "--iters", str(a.iters),
              "--json"])
    d = json.loads(out.strip().splitlines()[-1])
    return d["cpu_s"], d["median_s"]


def bench_vae_cpu(a, images):
    """CPU seconds of one decode: (iters N) - (iters 1) over N - 1, so that
    loading and the warm-up call cancel."""
    def run(iters):
        c0 = child_cpu()
        sh([a.bin, "--log-level", "warn", "bench", "vae", "--model", a.model, "--size",
            str(a.size), "--batch", str(images), "--threads", "1", "--iters", str(iters),
            "--json"])
        return child_cpu() - c0
    n = max(3, a.iters)
    return (run(n) - run(1)) / (n - 1)


# --------------------------------------------------------- server runs


def autogroup(pid, with_nice=False):
    """/proc/PID/autogroup: "/autogroup-N nice K" -> "/autogroup-N" (and K)."""
    try:
        with open("/proc/%s/autogroup" % pid) as f:
            parts = f.read().split()
    except OSError:
        return (None, 0) if with_nice else None
    name = parts[0] if parts else "?"
    if not with_nice:
        return name
    try:
        return name, int(parts[2])
    except (IndexError, ValueError):
        return name, 0


def sample_load(out_path, exclude_group, period=0.25):
    """The --sample-load mode (its own session, so its own autogroup): every
    `period` s, the runnable threads of every other autogroup (sessions:
    the kernel's CFS shares the cores between them, then between their
    threads), one JSON list per line, until SIGTERM."""
    import signal
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    mine = autogroup("self")
    groups = {}
    while not stop:
        counts, nices = {}, {}
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            g, nice = groups.get(pid) or autogroup(pid, True)
            if g is None:
                continue
            groups[pid] = (g, nice)
            if g in (mine, exclude_group):
                continue
            nices[g] = nice
            try:
                for tid in os.listdir("/proc/%s/task" % pid):
                    with open("/proc/%s/task/%s/stat" % (pid, tid)) as f:
                        if f.read().rsplit(")", 1)[1].split()[0] == "R":
                            counts[g] = counts.get(g, 0) + 1
            except OSError:
                groups.pop(pid, None)
        with open(out_path, "a") as out:
            out.write(json.dumps(sorted([[c, nices[g]] for g, c in counts.items()],
                                        reverse=True)) + "\n")
        time.sleep(period)


class LoadSampler:
    """Runs sample_load in a child of its own session for the length of a
    run; .samples() stops it and returns what it saw (for sim.Pool's
    share_table).  Why not the CPU other processes got: that depends on how
    much the server took; their runnable threads do not."""

    def __init__(self, server_pid, path):
        self.path = path
        self.p = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--sample-load",
                                   path, "--exclude-group", autogroup(server_pid) or "-"],
                                  start_new_session=True)

    def samples(self):
        self.p.terminate()
        self.p.wait()
        with open(self.path) as f:
            return [json.loads(line) for line in f if line.strip()]


def proc_stat_busy():
    """(busy, total) jiffies of the whole machine."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + (v[4] if len(v) > 4 else 0)
    return sum(v) - idle, sum(v)


def threads_cpu(pid):
    """{tid: cpu seconds} of a process's threads."""
    out = {}
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/stat" % (pid, tid)) as f:
                s = f.read().rsplit(")", 1)[1].split()
            out[int(tid)] = (int(s[11]) + int(s[12])) / TICK
        except OSError:
            pass
    return out


class Server:
    def __init__(self, a, device, threads):
        self.dir = tempfile.mkdtemp(prefix="tessera-simcheck-")
        self.log = open(os.path.join(self.dir, "server.log"), "w+")
        self.cmd = [a.bin, "serve", "--model", a.model, "--listen", "127.0.0.1:0", "--device",
                    device, "--threads", str(threads), "--max-batch", str(a.max_batch),
                    "--data-dir", os.path.join(self.dir, "data"), "--log-level", "warn",
                    # the simulator's data mode is what is checked (serve's default,
                    # auto, pairs devices for lone images: docs/multi-gpu.md section 6)
                    "--parallel", "data"]
        # its own session, so its own autogroup, whose nice we may raise:
        # the kernel then shares the cores between it and the other
        # sessions by weight (sim.share_table is told the same)
        self.p = subprocess.Popen(self.cmd, stdout=self.log, stderr=subprocess.STDOUT,
                                  start_new_session=True)
        self.nice = 0
        if a.nice:
            try:
                with open("/proc/%d/autogroup" % self.p.pid, "w") as f:
                    f.write(str(a.nice))
                self.nice = a.nice
            except OSError as e:
                print("check_cpu: cannot set the server's autogroup nice to %d (%s); running "
                      "at 0" % (a.nice, e), file=sys.stderr)
        self.port = None
        for _ in range(600):
            self.log.seek(0)
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", self.log.read())
            if m:
                self.port = int(m.group(1))
                break
            if self.p.poll() is not None:
                break
            time.sleep(0.1)
        if not self.port:
            self.stop()
            self.log.seek(0)
            sys.exit("check_cpu: the server did not start: " + self.log.read()[-800:])
        self.a = a

    def load(self, clients, jobs, steps, out_json):
        return sh([self.a.loadtest, "--url", "http://127.0.0.1:%d" % self.port, "--clients",
                   str(clients), "--jobs", str(jobs), "--size",
                   "%dx%d" % (self.a.size, self.a.size),
                   "--steps", str(steps), "--seed", "1", "--timeout", "600", "--quiet"] +
                  (["--json", out_json] if out_json else ["--no-metrics"]), timeout=1800)

    def stop(self):
        if self.p.poll() is None:
            self.p.terminate()
            try:
                self.p.wait(60)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()


def measured_run(a, device, threads, clients, jobs, tag):
    """A fresh server, one warm-up job, then the closed-loop run; returns
    the loadtest's figures, per-thread server CPU over the run, and the
    cores other processes took meanwhile."""
    s = Server(a, device, threads)
    try:
        s.load(1, 1, 2, None)  # warm-up: the first call plans the workspaces
        out = os.path.join(a.raw_dir, "%s.json" % tag)
        t0, b0, tot0 = time.monotonic(), *proc_stat_busy()
        c0 = threads_cpu(s.p.pid)
        sampler = LoadSampler(s.p.pid, os.path.join(a.raw_dir, "%s.load.jsonl" % tag))
        s.load(clients, jobs, a.steps, out)
        load = sampler.samples()
        c1 = threads_cpu(s.p.pid)
        t1, b1, tot1 = time.monotonic(), *proc_stat_busy()
    finally:
        s.stop()
    with open(out) as f:
        lt = json.load(f)
    load_path = os.path.relpath(sampler.path, ROOT)
    ncpu = os.cpu_count() or 1
    wall = t1 - t0
    machine_busy = (b1 - b0) / (tot1 - tot0) * ncpu  # cores busy on average
    per_thread = {t: c1.get(t, 0) - c0.get(t, 0) for t in c1}
    server = sum(per_thread.values())
    return {
        "tag": tag, "device": device, "autogroup_nice": s.nice, "threads": threads,
        "clients": clients, "jobs": jobs,
        "steps": a.steps, "images": lt["images"], "images_per_s": lt["images_per_s"],
        "p50_s": lt["latency_ms"]["done"]["p50"] / 1e3,
        "p95_s": lt["latency_ms"]["done"]["p95"] / 1e3,
        "submit_p50_s": lt["latency_ms"]["submit"]["p50"] / 1e3,
        "wall_s": wall, "server_cpu_s": server,
        "thread_cpu_s": sorted(per_thread.values(), reverse=True),
        "background_cores": max(0.0, machine_busy - server / wall),
        "background_samples": load,
        "background_samples_file": load_path,
        "background_groups": sum(len(x) for x in load) / max(1, len(load)),
        "background_runnable": sum(sum(g[0] for g in x) for x in load) / max(1, len(load)),
        "server": " ".join(s.cmd), "loadtest_json": os.path.relpath(out, ROOT),
    }


# ---------------------------------------------------------------- main


def main():
    if len(sys.argv) == 5 and sys.argv[1] == "--sample-load":
        sample_load(sys.argv[2], sys.argv[4])
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--model", default="models/demo")
    ap.add_argument("--size", type=int, default=128)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--max-batch", type=int, default=16)
    ap.add_argument("--iters", type=int, default=5, help="bench iterations per point")
    ap.add_argument("--clients", default="2,4,8", help="the two-device runs checked")
    ap.add_argument("--jobs-per-client", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=2,
                    help="rounds over the client counts; each is judged on its mean")
    ap.add_argument("--calib-jobs", type=int, default=12)
    ap.add_argument("--tolerance", type=float, default=0.15)
    ap.add_argument("--table-out", default=os.path.join(HERE, "tables", "cpu_demo128.json"))
    ap.add_argument("--out", default=os.path.join(HERE, "results", "cpu_check.md"))
    ap.add_argument("--nice", type=int, default=-19,
                    help="the server's autogroup nice (root only for < 0; 0 = leave it): how "
                         "much of the shared machine it is given; the simulator is told")
    ap.add_argument("--reuse-table", action="store_true",
                    help="skip steps 1-2: use --table-out as it is")
    a = ap.parse_args()
    os.chdir(ROOT)
    a.bin = os.path.join(a.build, "bin", "tessera")
    a.loadtest = os.path.join(a.build, "bin", "tessera-loadtest")
    for b in (a.bin, a.loadtest):
        if not os.access(b, os.X_OK):
            sys.exit("check_cpu: %s is missing: build first" % b)
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    a.raw_dir = os.path.join(os.path.dirname(a.out), "cpu_check_raw")
    os.makedirs(a.raw_dir, exist_ok=True)
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())

    if not a.reuse_table:
        # 1. the benches
        rows = [1, 2, 4, 8, 16, 32]
        unet = {}
        for r in rows:
            cpu, wall = bench_unet(a, r)
            unet[r] = cpu
            print("bench unet %2d rows: %.4f CPU s (wall %.4f)" % (r, cpu, wall), flush=True)
        decode = {}
        for k in (1, 2, 4):
            decode[k] = bench_vae_cpu(a, k)
            print("bench vae %d images: %.4f CPU s" % (k, decode[k]), flush=True)
        # 2. calibration on one device
        cal = measured_run(a, "cpu", 1, 1, a.calib_jobs, "calibration_1dev_1client")
        per_img = cal["images"]
        worker = cal["thread_cpu_s"][0] / per_img
        others = sum(cal["thread_cpu_s"][1:]) / per_img
        unet_part = a.steps * unet[2]
        step_image = max(0.0, (worker - unet_part - decode[1]) / a.steps)
        table = {
            "name": "demo model 128x128 on CPU devices (1 thread each), measured here",
            "kind": "cpu",
            "source": "tools/sim/check_cpu.py, %s: unet_rows and decode are CPU seconds of "
                      "`tessera bench unet/vae --threads 1`; step_image_s (worker-thread CPU per "
                      "image per step beyond the UNet: text encoding spread over the steps, "
                      "sampler, previews) and host_image_s (every other server thread's CPU per "
                      "image: tiles, PNG, HTTP) from a one-device, one-client run of tessera "
                      "serve (%d images, %d steps); client_s = 2 x the loadtest's submit p50"
                      % (started, per_img, a.steps),
            "unet_rows": {str(r): round(v, 6) for r, v in unet.items()},
            "decode": {str(k): round(v, 6) for k, v in decode.items()},
            "prep_s": 0.0,
            "step_image_s": round(step_image, 6),
            "host_image_s": round(others, 6),
            "client_s": round(2 * cal["submit_p50_s"], 6),
            # CFG-parallel over the host comm: one f32 prediction row per
            # image; two barrier wake-ups and a memcpy (assumed, not measured)
            "latent_bytes": latent_bytes(a),
            "link_latency_s": 2e-5,
            "link_GBps": 10,
            "cores": os.cpu_count() or 1,
            "steps": a.steps,
            "calibration": {k: v for k, v in cal.items() if k != "background_samples"},
        }
        with open(a.table_out, "w") as f:
            json.dump(table, f, indent=2)
            f.write("\n")
        print("calibration: worker %.4f s/image (UNet %.4f, decode %.4f), other threads %.4f "
              "s/image, background %.2f cores" % (worker, unet_part, decode[1], others,
                                                  cal["background_cores"]), flush=True)
    t = sim.Table.load(a.table_out)

    # 3. the two-device runs, each against its prediction; --repeats rounds
    # over the client counts, each judged on its mean over the rounds
    results = []
    counts = [int(x) for x in a.clients.split(",")]
    for rep in range(a.repeats):
        for c in counts:
            jobs = max(8, a.jobs_per_client * c)
            m = measured_run(a, "cpu,cpu", 2, c, jobs, "two_devices_%d_clients_%d" % (c, rep + 1))
            p = sim.simulate(t, 2, "data", clients=c, jobs=jobs, steps=a.steps,
                             max_batch=a.max_batch, background=m["background_samples"],
                             nice=m["autogroup_nice"])
            err = p["images_per_s"] / m["images_per_s"] - 1
            results.append({"round": rep + 1, "measured": m, "predicted": p, "error": err})
            print("2 devices, %d clients (round %d): measured %.3f images/s, predicted %.3f "
                  "(%+.1f%%); p50 %.2f/%.2f s; other sessions: %.2f busy, %.2f runnable threads, "
                  "%.2f cores" % (c, rep + 1, m["images_per_s"], p["images_per_s"], 100 * err,
                                  m["p50_s"], p["p50_s"], m["background_groups"],
                                  m["background_runnable"], m["background_cores"]), flush=True)
    summary = []
    for c in counts:
        rs = [r for r in results if r["measured"]["clients"] == c]
        mi = sum(r["measured"]["images_per_s"] for r in rs) / len(rs)
        pi = sum(r["predicted"]["images_per_s"] for r in rs) / len(rs)
        summary.append({"clients": c, "rounds": len(rs), "measured_images_per_s": mi,
                        "predicted_images_per_s": pi, "error": pi / mi - 1})
    ok = all(abs(x["error"]) <= a.tolerance for x in summary)

    lines = ["# tools/sim/check_cpu.py: the simulator against `tessera serve --device cpu,cpu`",
             "",
             "Run %s on this machine (%d cores, shared with other builds), `%s`; model %s at "
             "%dx%d, %d steps, CFG on (2 rows per image), max batch %d; the server's session "
             "at autogroup nice %d." % (
                 started, os.cpu_count() or 1, " ".join(sys.argv), a.model, a.size, a.size,
                 a.steps, a.max_batch,
                 results[0]["measured"]["autogroup_nice"] if results else a.nice),
             "",
             "Inputs (tools/sim/tables/cpu_demo128.json): UNet CPU s per call by rows %s; "
             "decode CPU s by images %s; worker CPU beyond UNet and decode %.4f s per image "
             "per step; other threads %.4f s per image; client round trip %.4f s." % (
                 ", ".join("%s: %.4f" % kv for kv in sorted(t.unet_points)),
                 ", ".join("%s: %.4f" % kv for kv in sorted(t.decode_points)), t.step_image_s,
                 t.host_image_s, t.client_s),
             "",
             "| clients | round | jobs | measured images/s | predicted | error | "
             "measured p50 / p95 (s) "
             "| predicted p50 / p95 (s) | other sessions: busy / runnable threads (sampled, "
             "given to the simulator) / cores they got |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        m, p = r["measured"], r["predicted"]
        lines.append("| %d | %d | %d | %.3f | %.3f | %+.1f%% | %.2f / %.2f | %.2f / %.2f | "
                     "%.2f / %.2f / %.2f |"
                     % (m["clients"], r["round"], m["jobs"], m["images_per_s"], p["images_per_s"],
                        100 * r["error"], m["p50_s"], m["p95_s"], p["p50_s"], p["p95_s"],
                        m["background_groups"], m["background_runnable"],
                        m["background_cores"]))
    lines += ["", "Mean over the %d round%s, per client count:" % (a.repeats,
                                                              "" if a.repeats == 1 else "s"), "",
              "| clients | measured images/s | predicted | error |", "|---:|---:|---:|---:|"]
    for x in summary:
        lines.append("| %d | %.3f | %.3f | %+.1f%% |" % (
            x["clients"], x["measured_images_per_s"], x["predicted_images_per_s"],
            100 * x["error"]))
    lines += ["", "Verdict: %s (every mean images/s prediction within %.0f%%; single rounds "
              "range from %+.1f%% to %+.1f%%)." % (
                  "PASS" if ok else "FAIL", 100 * a.tolerance,
                  100 * min(r["error"] for r in results), 100 * max(r["error"] for r in results)),
              ""]
    lines.append("Server: `%s`" % results[0]["measured"]["server"] if results else "")
    text = "\n".join(lines) + "\n"
    with open(a.out, "w") as f:
        f.write(text)
    with open(os.path.splitext(a.out)[0] + ".json", "w") as f:
        slim = [{"round": r["round"],
                 "measured": {k: v for k, v in r["measured"].items() if k != "background_samples"},
                 "predicted": r["predicted"], "error": r["error"]} for r in results]
        json.dump({"table": t.raw, "results": slim, "summary": summary, "ok": ok}, f, indent=1)
        f.write("\n")
    print()
    print(text)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
