#!/usr/bin/env python3
"""tools/loadtest/plot.py - a PNG chart of a tessera-loadtest run, from its
--csv file: latency over time (time to done and to first preview of every
job, by submission time, with a rolling p95) above throughput over time
(images finished per second, in buckets) and the jobs in flight.

    tessera-loadtest ... --csv run.csv
    .venv-test/bin/python tools/loadtest/plot.py run.csv -o run.png [--title TEXT]
        [--bucket SECONDS]

Needs matplotlib (scripts/setup-test-venv.sh installs it into .venv-test).
Exit status: 0 written, 1 the CSV cannot be read or holds no job, 2 usage.
"""
import argparse
import csv
import math
import sys


def load(path):
    rows = []
    with open(path, newline="") as f:
        r = csv.DictReader(f)
        need = {"t_submit_s", "t_end_s", "done_ms", "first_preview_ms", "images", "state"}
        missing = need - set(r.fieldnames or [])
        if missing:
            raise ValueError("not a tessera-loadtest CSV (missing %s)" % ", ".join(sorted(missing)))
        for row in r:
            rows.append(row)
    return rows


def fnum(s):
    return float(s) if s not in ("", None) else None


def rolling_p95(xs, ys, window):
    """p95 of the last `window` samples (nearest rank), at each x."""
    out = []
    for i in range(len(xs)):
        w = sorted(ys[max(0, i - window + 1):i + 1])
        out.append(w[max(0, math.ceil(0.95 * len(w)) - 1)])
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv")
    ap.add_argument("-o", "--output", default=None, help="PNG path (default: CSV name + .png)")
    ap.add_argument("--title", default=None)
    ap.add_argument("--bucket", type=float, default=0,
                    help="throughput bucket in seconds (default: wall / 30, at least 0.5)")
    a = ap.parse_args()
    if a.bucket < 0:
        ap.error("--bucket must be >= 0")
    out = a.output or (a.csv.rsplit(".", 1)[0] + ".png")
    try:
        rows = load(a.csv)
    except (OSError, ValueError, csv.Error) as e:
        print("plot.py: %s: %s" % (a.csv, e), file=sys.stderr)
        return 1
    if not rows:
        print("plot.py: %s: no jobs" % a.csv, file=sys.stderr)
        return 1
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    done = sorted((fnum(r["t_submit_s"]), fnum(r["done_ms"]) / 1e3) for r in rows
                  if r["state"] == "done" and fnum(r["done_ms"]) is not None)
    prev = sorted((fnum(r["t_submit_s"]), fnum(r["first_preview_ms"]) / 1e3) for r in rows
                  if fnum(r["first_preview_ms"]) is not None)
    errs = [(fnum(r["t_submit_s"]), r["error"]) for r in rows if r["state"] != "done"]
    ends = sorted((fnum(r["t_end_s"]), int(r["images"] or 0)) for r in rows
                  if fnum(r["t_end_s"]) is not None and fnum(r["t_end_s"]) >= 0)
    wall = max([e for e, _ in ends] + [fnum(r["t_submit_s"]) for r in rows] + [1e-3])
    bucket = a.bucket or max(0.5, wall / 30)

    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(10, 7), sharex=True)
    if done:
        xs, ys = zip(*done)
        ax1.scatter(xs, ys, s=10, label="time to done", color="tab:blue")
        ax1.plot(xs, rolling_p95(xs, ys, 20), color="tab:blue", lw=1,
                 label="time to done, rolling p95 (20 jobs)")
    if prev:
        xs, ys = zip(*prev)
        ax1.scatter(xs, ys, s=8, marker="x", label="time to first preview", color="tab:orange")
    if errs:
        ax1.scatter([x for x, _ in errs], [0] * len(errs), s=25, marker="v", color="tab:red",
                    label="errors (%d)" % len(errs))
    ax1.set_ylabel("latency (s)")
    ax1.set_ylim(bottom=0)
    ax1.grid(alpha=0.3)
    ax1.legend(loc="upper left", fontsize=8)

    nb = max(1, int(math.ceil(wall / bucket)))
    imgs = [0] * nb
    for t, n in ends:
        imgs[min(nb - 1, int(t / bucket))] += n
    centers = [(i + 0.5) * bucket for i in range(nb)]
    ax2.bar(centers, [n / bucket for n in imgs], width=bucket * 0.9, color="tab:green",
            label="images/s (per %.1f s)" % bucket)
    ax2.set_ylabel("images per second")
    ax2.set_xlabel("seconds since the first submission")
    ax2.grid(alpha=0.3)
    ax3 = ax2.twinx()
    events = sorted([(fnum(r["t_submit_s"]), 1) for r in rows] +
                    [(fnum(r["t_end_s"]), -1) for r in rows if fnum(r["t_end_s"]) is not None])
    t_in, n_in, level = [0.0], [0], 0
    for t, d in events:
        level += d
        t_in += [t, t]
        n_in += [n_in[-1], level]
    ax3.plot(t_in, n_in, color="tab:gray", lw=1, label="jobs in flight")
    ax3.set_ylabel("jobs in flight")
    ax3.set_ylim(bottom=0)
    h1, l1 = ax2.get_legend_handles_labels()
    h2, l2 = ax3.get_legend_handles_labels()
    ax2.legend(h1 + h2, l1 + l2, loc="upper left", fontsize=8)
    total = sum(n for _, n in ends)
    fig.suptitle(a.title or "tessera-loadtest: %d jobs, %d images in %.1f s (%.2f images/s)"
                 % (len(rows), total, wall, total / wall if wall > 0 else 0))
    fig.tight_layout()
    try:
        fig.savefig(out, dpi=100)
    except OSError as e:
        print("plot.py: %s: %s" % (out, e), file=sys.stderr)
        return 1
    print("plot.py: wrote %s" % out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
