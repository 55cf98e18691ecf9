#!/usr/bin/env python3
"""tools/sim/sim.py - a discrete-event simulator of `tessera serve`'s
scheduler on several devices, for the machines we cannot borrow (issue 57,
part 5; docs/multi-gpu.md).

Why a simulator, and why this one.  The machines we can borrow have one GPU
at most, so how 2, 4 or 8 GPUs would serve (images/s, p50/p95 latency, data
parallel against CFG-parallel) can only be predicted.  The prediction is
only as good as its model of the server, so the model follows the code:

  queue     service/queue/local.c: one queue of image entries in submission order;
            a worker with a running shape takes the oldest entry of that
            shape unless an older one has been passed over max_batch times
            (then that one), and the head when nothing matches; a worker
            with an empty batch takes the head (its blocking pop).
  worker    service/worker.c: before every step it pops while it holds
            fewer than max_batch images (blocking only when empty), then
            runs one tsr_batch_step.
  step      pipeline/step.c: newly admitted images are prepared (text
            encoding) in the step; the oldest image leads and every image of
            its shape joins one UNet call (rows = 2 per image with CFG);
            each advances one step; images that finish are decoded in chunks
            of at most 4, then handed to the storage thread (PNG), and the
            job is done when its last image is stored.

Costs come from measured tables (tools/sim/tables/*.json): seconds of one
UNet call by rows, of a VAE decode by images, and per-image overheads.  A
device is a resource: a GPU runs its worker's steps one at a time; CPU
devices share the machine's cores (processor sharing: n busy threads on c
cores each run at min(1, c/n) of a core), and so does the host work of a
CPU server (storage thread, tile encoder, HTTP).  That is what makes
`--device cpu,cpu` on 2 cores behave as it does, and lets the check against
the real server (check_cpu.py) include other processes' load on a shared
machine: samples of other sessions' runnable threads and their nice, shared
with as the kernel's CFS does (by weight between sessions, then between
threads; share_table).

CFG-parallel (--mode cfg; --mode auto picks, per step, between that and
splitting the pair's images between its devices): devices work in pairs;
an image's cond and uncond
rows run on the two devices of a pair at once (each call has one row per
image on each device), then one all_gather of the noise predictions (bytes:
images x latent bytes per rank) costs link_latency_s + bytes / link_GBps;
both ranks then run the same sampler step.  Text encoding and the VAE
decodes are shared out between the pair.  A pair holds up to 2 x max_batch
images, so each device sees at most as many rows as in data-parallel mode.
An odd device out works alone (data parallel).

Standard library only.  As a library: Table.load(path), simulate(...).  As a
program: one scenario (--devices, --mode, --clients or --rate) as a table,
or the whole table of docs/multi-gpu.md (--report).
"""
import argparse
import heapq
import json
import math
import os
import random
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


# ------------------------------------------------------------------ costs


def _interp(points, x):
    """Piecewise-linear through sorted (x, y) points; outside them, the line
    through the two nearest points (at least 5 % of the nearest y)."""
    if len(points) == 1:
        (x0, y0), = points
        return y0 * x / x0
    if x <= points[0][0]:
        (x0, y0), (x1, y1) = points[0], points[1]
    elif x >= points[-1][0]:
        (x0, y0), (x1, y1) = points[-2], points[-1]
    else:
        for (x0, y0), (x1, y1) in zip(points, points[1:]):
            if x0 <= x <= x1:
                break
    y = y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    near = y0 if abs(x - x0) < abs(x - x1) else y1
    return max(y, 0.05 * near)


class Table:
    """A device's measured costs (seconds; see tools/sim/tables/*.json).

    kind            "cpu": devices are threads sharing `cores` with the host
                    work; "gpu": each device runs alone, host work on
                    `host_cores`.
    unet_rows       {rows: seconds of one UNet call}
    decode          {images: seconds of one VAE decode call} (chunks <= 4)
    prep_s          text encoding of one image (both prompts)
    step_image_s    worker-thread work per image per step besides the UNet
                    (scale_model_input, guidance, sampler, previews)
    host_image_s    host work per image off the worker thread (PNG, tiles,
                    HTTP), done on the storage thread's FIFO before the job
                    counts as done
    client_s        a client's round trip outside the server's work (submit
                    to queue, done event to the next submit)
    latent_bytes    one row of the UNet's output as the comm moves it
    link_latency_s, link_GBps   the all_gather's cost (CFG-parallel)
    """

    def __init__(self, d, path=""):
        self.path = path
        self.name = d.get("name", os.path.basename(path))
        self.kind = d.get("kind", "gpu")
        self.unet_points = sorted((int(k), float(v)) for k, v in d["unet_rows"].items())
        self.decode_points = sorted((int(k), float(v)) for k, v in d["decode"].items())
        self.prep_s = float(d.get("prep_s", 0))
        self.step_image_s = float(d.get("step_image_s", 0))
        self.host_image_s = float(d.get("host_image_s", 0))
        self.client_s = float(d.get("client_s", 0))
        self.latent_bytes = float(d.get("latent_bytes", 0))
        self.link_latency_s = float(d.get("link_latency_s", 0))
        self.link_GBps = float(d.get("link_GBps", 0)) or float("inf")
        self.cores = float(d.get("cores", 2))
        self.host_cores = float(d.get("host_cores", 16))
        self.steps = int(d.get("steps", 20))
        self.raw = d

    @staticmethod
    def load(path):
        with open(path) as f:
            return Table(json.load(f), path)

    def unet(self, rows):
        return _interp(self.unet_points, rows) if rows > 0 else 0.0

    def decode(self, images):
        t = 0.0
        while images > 0:
            k = min(4, images)
            t += _interp(self.decode_points, k)
            images -= k
        return t

    def all_gather(self, images):
        """One all_gather of `images` rows' predictions between a pair."""
        if images <= 0:
            return 0.0
        return self.link_latency_s + images * self.latent_bytes / (self.link_GBps * 1e9)


# --------------------------------------------------------------- the engine


class Activity:
    __slots__ = ("left", "done", "version", "pool")

    def __init__(self, work, done):
        self.left = work
        self.done = done
        self.version = 0
        self.pool = None


def cfs_weight(nice):
    """The kernel's CFS weight of a nice level: 1024 at 0, about 1.25x per
    level (kernel/sched's table follows that rule)."""
    return 1024.0 / 1.25 ** nice


def _waterfill(cores, demands, weights=None):
    """The kernel's fair share between groups of runnable threads (CFS with
    autogroups: one group per session): cores split between the groups in
    proportion to their weights, a group that needs less leaving the rest
    to the others.  Returns each group's cores."""
    weights = weights or [1.0] * len(demands)
    got = [0.0] * len(demands)
    left, open_ = float(cores), [i for i, d in enumerate(demands) if d > 0]
    while open_ and left > 1e-12:
        wsum = sum(weights[i] for i in open_)
        done = [i for i in open_ if demands[i] - got[i] <= left * weights[i] / wsum]
        if not done:
            for i in open_:
                got[i] += left * weights[i] / wsum
            break
        for i in done:
            left -= demands[i] - got[i]
            got[i] = demands[i]
        open_ = [i for i in open_ if i not in done]
    return got


def share_table(cores, background, n_max=64, nice=0):
    """Cores our process's group gets with n runnable threads, n = 0..n_max,
    given the other processes' load.  background: a number (that many
    runnable threads in our own group: each gets an equal share), or a list
    of samples, each a list of other groups' runnable threads, as counts or
    [count, nice] pairs (what check_cpu.py records); the result is the mean
    over the samples.  nice: our group's (autogroup) nice level."""
    if not isinstance(background, (list, tuple)):
        return [min(float(n), cores * n / (n + background)) if n + background > cores else float(n)
                for n in range(n_max + 1)]
    samples = [s for s in background] or [[]]
    table = [0.0]
    for n in range(1, n_max + 1):
        total = 0.0
        for s in samples:
            groups = [g if isinstance(g, (list, tuple)) else [g, 0] for g in s]
            total += _waterfill(cores, [n] + [g[0] for g in groups],
                                [cfs_weight(nice)] + [cfs_weight(g[1]) for g in groups])[0]
        table.append(total / len(samples))
    return table


class Pool:
    """Processor sharing: `capacity` cores; each activity is one thread (at
    most one core).  Other processes take their share as the kernel gives
    it (share_table): with n of ours runnable, each runs at share[n] / n."""

    def __init__(self, sim, capacity, name, background=0.0, nice=0):
        self.sim, self.capacity, self.name = sim, capacity, name
        self.share = share_table(capacity, background, nice=nice)
        self.acts = []
        self.last = 0.0
        self.busy_time = 0.0  # core-seconds delivered

    def rate(self):
        n = len(self.acts)
        if n == 0:
            return 1.0
        if n < len(self.share):
            return self.share[n] / n
        return min(1.0, self.capacity / n)

    def _advance(self):
        now = self.sim.now
        dt = now - self.last
        if dt > 0 and self.acts:
            r = self.rate()
            for a in self.acts:
                a.left -= dt * r
            self.busy_time += dt * r * len(self.acts)
        self.last = now

    def _reschedule(self):
        r = self.rate()
        for a in self.acts:
            a.version += 1
            self.sim.at(self.sim.now + max(a.left, 0.0) / r, self._finish, a, a.version)

    def run(self, work, done):
        self._advance()
        a = Activity(work, done)
        a.pool = self
        self.acts.append(a)
        self._reschedule()

    def _finish(self, a, version):
        if version != a.version or a not in self.acts:
            return
        self._advance()
        self.acts.remove(a)
        self._reschedule()
        a.done()


class Fifo:
    """One thread serving work items in order on a pool (the storage
    thread)."""

    def __init__(self, pool):
        self.pool, self.items, self.busy = pool, [], False

    def submit(self, work, done):
        self.items.append((work, done))
        if not self.busy:
            self._next()

    def _next(self):
        if not self.items:
            self.busy = False
            return
        self.busy = True
        work, done = self.items.pop(0)

        def fin():
            done()
            self._next()

        self.pool.run(work, fin)


class Job:
    __slots__ = ("id", "n", "steps", "shape", "cfg", "t_submit", "left", "t_first", "t_done",
                 "client")

    def __init__(self, jid, n, steps, shape, cfg, t, client):
        self.id, self.n, self.steps, self.shape, self.cfg = jid, n, steps, shape, cfg
        self.t_submit, self.left, self.t_first, self.t_done, self.client = t, n, None, None, client


class Image:
    __slots__ = ("job", "index", "seq", "passed", "shape", "steps", "done_steps", "prepared",
                 "order")

    def __init__(self, job, index, seq):
        self.job, self.index, self.seq, self.passed = job, index, seq, 0
        self.shape, self.steps = job.shape, job.steps
        self.done_steps, self.prepared, self.order = 0, False, 0

    @property
    def rows(self):
        return 2 if self.job.cfg else 1


class Unit:
    """A worker: one device (data parallel) or a CFG pair."""

    def __init__(self, uid, pools, capacity):
        self.id, self.pools, self.capacity = uid, pools, capacity
        self.slots = []  # oldest first
        self.busy = False
        self.calls = 0
        self.images_in_calls = 0
        self.order = 0

    @property
    def pair(self):
        return len(self.pools) == 2


class Sim:
    def __init__(self, table, devices, mode="data", max_batch=16, background=0.0, seed=1,
                 nice=0):
        self.t = table
        self.now = 0.0
        self.events = []
        self.seq = 0
        self.max_batch = max_batch
        self.queue = []  # Image entries in submission order
        self.next_seq = 0
        if table.kind == "cpu":
            cpu = Pool(self, table.cores, "cpu", background, nice)
            dev_pools = [cpu] * devices
            host = cpu
        else:
            dev_pools = [Pool(self, 1, "gpu%d" % d) for d in range(devices)]
            host = Pool(self, table.host_cores, "host")
        self.host_pool = host
        self.storage = Fifo(host)
        self.units = []
        self.mode = mode
        if mode in ("cfg", "auto"):
            d = 0
            while d + 1 < devices:
                self.units.append(Unit(len(self.units), [dev_pools[d], dev_pools[d + 1]],
                                       2 * max_batch))
                d += 2
            if d < devices:
                self.units.append(Unit(len(self.units), [dev_pools[d]], max_batch))
        else:
            for d in range(devices):
                self.units.append(Unit(d, [dev_pools[d]], max_batch))
        self.idle = list(self.units)  # waiting in a blocking pop, longest first
        self.jobs = []
        self.rng = random.Random(seed)
        self.on_job_done = None

    # events
    def at(self, t, fn, *args):
        self.seq += 1
        heapq.heappush(self.events, (t, self.seq, fn, args))

    def run(self):
        while self.events:
            t, _, fn, args = heapq.heappop(self.events)
            self.now = t
            fn(*args)

    # the queue (service/queue/local.c)
    def push(self, job):
        for i in range(job.n):
            self.queue.append(Image(job, i, self.next_seq))
            self.next_seq += 1
        # idle workers wake (pthread_cond_broadcast) and pop in turn
        woken, self.idle = self.idle, []
        taken = []
        for u in woken:
            e = self.choose(None)
            if e is None:
                self.idle.append(u)
                continue
            self.admit(u, e)
            taken.append(u)
        for u in taken:
            self.fill(u)
            self.step(u)

    def choose(self, shape):
        q = self.queue
        if not q:
            return None
        if shape is None:
            return q.pop(0)
        pick = 0
        for i, e in enumerate(q):
            if e.passed >= self.max_batch or e.shape == shape:
                pick = i
                break
        for e in q[:pick]:
            e.passed += 1
        return q.pop(pick)

    # the worker (service/worker.c)
    def admit(self, u, e):
        u.order += 1
        e.order = u.order
        u.slots.append(e)

    def fill(self, u):
        while len(u.slots) < u.capacity:
            e = self.choose(u.slots[0].shape if u.slots else None)
            if e is None:
                break
            self.admit(u, e)

    def step(self, u):
        """One tsr_batch_step on unit u (its slots are non-empty)."""
        t = self.t
        new = [e for e in u.slots if not e.prepared]
        for e in new:
            e.prepared = True
        lead = min(u.slots, key=lambda e: e.order)
        group = [e for e in u.slots if e.shape == lead.shape]
        rows = sum(e.rows for e in group)
        finishing = [e for e in group if e.done_steps + 1 >= e.steps]
        u.calls += 1
        u.images_in_calls += len(group)
        u.busy = True
        if u.pair:
            # cfg: each device runs one row (cond or uncond) of every image,
            # one all_gather of the predictions follows, and both ranks run
            # the same guidance and sampler step (their latents stay equal);
            # the text encoding and the decodes are shared out.  auto: that,
            # or the pair's images split between its devices (whole images,
            # each rank its own sampler steps, the all_gather then keeping
            # the latents in step), whichever step ends sooner.
            half = sum((e.rows + 1) // 2 for e in group)
            prep = t.prep_s * len(new) / 2
            works = [prep + t.unet(half) + t.step_image_s * len(group) +
                     t.decode(len(finishing[m::2])) for m in (0, 1)]
            if self.mode == "auto":
                own = [group[0::2], group[1::2]]
                split = [prep + t.unet(sum(e.rows for e in own[m])) +
                         t.step_image_s * len(own[m]) +
                         t.decode(len([e for e in own[m] if e in finishing])) for m in (0, 1)]
                if max(split) < max(works):
                    works = split
            comm = t.all_gather(len(group))
        else:
            works = [t.prep_s * len(new) + t.unet(rows) + t.step_image_s * len(group) +
                     t.decode(len(finishing))]
            comm = 0.0
        pending = [len(works)]

        def member_done():
            pending[0] -= 1
            if pending[0] == 0:
                if comm > 0:
                    self.at(self.now + comm, self.step_done, u, group)
                else:
                    self.step_done(u, group)

        for pool, w in zip(u.pools, works):
            pool.run(w, member_done)

    def step_done(self, u, group):
        for e in group:
            e.done_steps += 1
            if e.job.t_first is None:
                e.job.t_first = self.now
            if e.done_steps >= e.steps:
                u.slots.remove(e)
                self.storage.submit(self.t.host_image_s, lambda e=e: self.image_stored(e))
        u.busy = False
        self.fill(u)
        if u.slots:
            self.step(u)
        else:
            self.idle.append(u)

    def image_stored(self, e):
        job = e.job
        job.left -= 1
        if job.left == 0:
            job.t_done = self.now + self.t.client_s / 2
            if self.on_job_done:
                self.at(job.t_done, self.on_job_done, job)

    def submit(self, job):
        self.jobs.append(job)
        self.at(job.t_submit + self.t.client_s / 2, self.push, job)


# ---------------------------------------------------------------- workloads


def _pct(xs, q):
    """Nearest rank, as tessera-loadtest reports."""
    if not xs:
        return float("nan")
    s = sorted(xs)
    return s[max(0, math.ceil(q * len(s)) - 1)]


def simulate(table, devices, mode="data", clients=None, rate=None, jobs=64, steps=None, n=1,
             cfg=True, max_batch=16, background=0.0, seed=1, steps_mix=None, cores=None,
             nice=0):
    """One run: closed loop of `clients` (each submits its next job when its
    last one is done) or Poisson arrivals at `rate` jobs/s, `jobs` in all.
    Returns images/s (images over first submit to last done), done latency
    p50/p95/mean, first-step p50/p95, images per UNet call.  cores: a CPU
    table's machine size (default the table's).  background, nice: other
    processes' load and the server's autogroup nice (share_table)."""
    if cores is not None:
        table = Table(dict(table.raw, cores=cores), table.path)
    sim = Sim(table, devices, mode, max_batch, background, seed, nice)
    steps = steps or table.steps
    rng = random.Random(seed)
    made = [0]

    def new_job(t, client):
        s = rng.choice(steps_mix) if steps_mix else steps
        made[0] += 1
        return Job(made[0], n, s, (512, 512), cfg, t, client)

    if clients:
        def done(job):
            if made[0] < jobs:
                sim.submit(new_job(sim.now, job.client))

        sim.on_job_done = done
        for c in range(min(clients, jobs)):
            sim.submit(new_job(0.0, c))
    else:
        t = 0.0
        for _ in range(jobs):
            sim.submit(new_job(t, None))
            t += rng.expovariate(rate)
    sim.run()
    js = sim.jobs
    wall = max(j.t_done for j in js) - min(j.t_submit for j in js)
    lat = [j.t_done - j.t_submit for j in js]
    first = [j.t_first - j.t_submit for j in js]
    calls = sum(u.calls for u in sim.units)
    return {
        "devices": devices, "mode": mode, "clients": clients, "rate": rate, "jobs": len(js),
        "images": sum(j.n for j in js), "wall_s": wall,
        "images_per_s": sum(j.n for j in js) / wall if wall > 0 else float("nan"),
        "p50_s": _pct(lat, 0.50), "p95_s": _pct(lat, 0.95), "mean_s": sum(lat) / len(lat),
        "first_p50_s": _pct(first, 0.5), "first_p95_s": _pct(first, 0.95),
        "images_per_call": sum(u.images_in_calls for u in sim.units) / calls if calls else 0,
        "calls": calls,
    }


# ------------------------------------------------------------------ report


def cfg_breakeven(table, target=1.8):
    """The largest 1-row UNet call (seconds) at which CFG-parallel on a pair
    makes a lone image `target` times faster than one device (bisection on
    the table's 1-row point; None when even a free call does not)."""
    base = simulate(table, 1, "data", clients=1, jobs=1)["mean_s"]

    def gain(u1):
        d = dict(table.raw)
        d["unet_rows"] = {k: v for k, v in table.raw["unet_rows"].items() if int(k) != 1}
        d["unet_rows"]["1"] = u1
        return base / simulate(Table(d, table.path), 2, "cfg", clients=1, jobs=1)["mean_s"]

    lo, hi = 0.0, table.unet(2)
    if gain(lo) < target:
        return None
    for _ in range(50):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if gain(mid) >= target else (lo, mid)
    return lo


def report(tables, out):
    """The tables of docs/multi-gpu.md: for each cost table, 1/2/4/8 devices
    x data/cfg/auto: a lone image's latency; a saturated closed loop (16
    clients per device, 6 jobs each) for images/s and p50/p95; and Poisson
    arrivals at half the data-parallel capacity of that many devices for
    p50/p95.  A CPU table gets as many cores as devices (one thread each)."""
    lines = []
    for path in tables:
        t = Table.load(path)
        lines.append("%s (`%s`, %d steps, CFG on, max batch 16):" % (
            t.name, os.path.relpath(path, os.path.dirname(os.path.dirname(HERE))), t.steps))
        lines.append("")
        lines.append("| devices | mode | lone image (s) | speed-up | saturated images/s | "
                     "scaling | saturated p50 / p95 (s) | images per call | half load: "
                     "p50 / p95 (s) |")
        lines.append("|---:|---|---:|---:|---:|---:|---:|---:|---:|")
        base_lone = base_ips = None
        for d in (1, 2, 4, 8):
            cores = d if t.kind == "cpu" else None
            cap = None
            for mode in ("data", "cfg", "auto"):
                if d == 1 and mode != "data":
                    continue
                lone = simulate(t, d, mode, clients=1, jobs=3, cores=cores)
                sat = simulate(t, d, mode, clients=16 * d, jobs=16 * d * 6, cores=cores)
                if cap is None:
                    cap = sat["images_per_s"]
                half = simulate(t, d, mode, rate=cap / 2, jobs=100 * d, cores=cores)
                if base_lone is None:
                    base_lone, base_ips = lone["mean_s"], sat["images_per_s"]
                lines.append("| %d | %s | %.3f | %.2fx | %.2f | %.2fx | %.2f / %.2f | %.1f | "
                             "%.2f / %.2f |" % (
                                 d, mode, lone["mean_s"], base_lone / lone["mean_s"],
                                 sat["images_per_s"], sat["images_per_s"] / base_ips,
                                 sat["p50_s"], sat["p95_s"], sat["images_per_call"],
                                 half["p50_s"], half["p95_s"]))
        lines.append("")
        be = cfg_breakeven(t)
        lines.append("UNet call of 1 row: %.1f ms in this table (%s), against %.1f ms for 2 rows; "
                     "CFG-parallel makes a lone image 1.8x faster when it is at most %s." % (
                         1e3 * t.unet(1),
                         "measured" if any(r == 1 for r, _ in t.unet_points) else "extrapolated",
                         1e3 * t.unet(2), "%.1f ms" % (1e3 * be) if be is not None else
                         "(never: the rest of the image's time is too large)"))
        lines.append("")
    text = "\n".join(lines)
    out.write(text + "\n")
    return text


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--table", action="append",
                    help="a cost table (tools/sim/tables/*.json); --report takes several")
    ap.add_argument("--devices", default="1,2,4,8", help="comma-separated device counts")
    ap.add_argument("--mode", default="data,cfg", help="data, cfg, auto: comma-separated")
    ap.add_argument("--clients", type=int, help="closed loop: concurrent clients")
    ap.add_argument("--rate", type=float, help="open loop: Poisson arrivals, jobs/s")
    ap.add_argument("--jobs", type=int, default=64)
    ap.add_argument("--steps", type=int, help="denoising steps per image (default: the table's)")
    ap.add_argument("--n", type=int, default=1, help="images per job")
    ap.add_argument("--no-cfg", action="store_true", help="guidance off (one row per image)")
    ap.add_argument("--max-batch", type=int, default=16)
    ap.add_argument("--background", type=float, default=0.0,
                    help="CPU tables: runnable threads of other processes in the server's own "
                         "session, on average (check_cpu.py passes per-session samples)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", action="store_true", help="one JSON object per scenario")
    ap.add_argument("--report", action="store_true",
                    help="the docs/multi-gpu.md tables for every --table (default: the GPU "
                         "tables and the CPU one)")
    a = ap.parse_args()
    if a.report:
        tables = a.table or [os.path.join(HERE, "tables", f) for f in
                             ("gpu_h200_sd15_512.json", "gpu_h200_sdxl_1024.json",
                              "cpu_demo128.json")]
        report(tables, sys.stdout)
        return 0
    if not a.table or len(a.table) != 1:
        ap.error("one --table (or --report)")
    if (a.clients is None) == (a.rate is None):
        ap.error("give --clients N (closed loop) or --rate R (Poisson)")
    t = Table.load(a.table[0])
    rows = []
    for d in [int(x) for x in a.devices.split(",")]:
        for mode in a.mode.split(","):
            r = simulate(t, d, mode, clients=a.clients, rate=a.rate, jobs=a.jobs, steps=a.steps,
                         n=a.n, cfg=not a.no_cfg, max_batch=a.max_batch,
                         background=a.background, seed=a.seed)
            rows.append(r)
            if a.json:
                print(json.dumps(r))
    if not a.json:
        print("%-7s %-5s %10s %9s %9s %9s %8s" % ("devices", "mode", "images/s", "p50 s",
                                                  "p95 s", "first p95", "img/call"))
        for r in rows:
            print("%-7d %-5s %10.3f %9.3f %9.3f %9.3f %8.2f" % (
                r["devices"], r["mode"], r["images_per_s"], r["p50_s"], r["p95_s"],
                r["first_p95_s"], r["images_per_call"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
