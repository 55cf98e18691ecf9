#!/usr/bin/env python3
"""tools/tiles/measure_mad.py - how much preview tiles change per UNet call,
and what the tiles cost, measured on `tessera serve` itself.

Starts `tessera serve` (demo model) with --tile-threshold 0 and debug logs,
runs a few jobs, and reads the encoder's debug lines (`tiles: mad ...`: the
mean absolute difference, 0..255, of every tile against its last published
version, which with threshold 0 is the previous preview).  Prints the MAD
distribution, the share of tile updates each threshold would publish, and
from /metrics the encoder CPU time against the UNet time.  docs/tiles.md
gives the figures.

    python3 tools/tiles/measure_mad.py build/bin/tessera [--tile 64] [--steps 30] [--size 128]
"""
import argparse
import json
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tests", "service"))
import svc  # noqa: E402

PROMPTS = ["a red circle in the top left on a blue background",
           "a large green square in the center on a white background",
           "a small yellow triangle at the bottom right on a black background"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bin")
    ap.add_argument("--tile", type=int, default=64)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--size", type=int, default=128)
    ap.add_argument("--threshold", type=float, default=0.0)
    a = ap.parse_args()
    os.environ["TSR_BIN"] = a.bin
    s = svc.Server(args=["--tile-size", str(a.tile), "--tile-threshold", str(a.threshold),
                         "--log-level", "debug", "--max-batch", "1"])
    s.start()
    try:
        for k, prompt in enumerate(PROMPTS):
            job = s.submit(prompt=prompt, steps=a.steps, seed=100 + k, width=a.size,
                           height=a.size)
            s.wait_job(job["id"], timeout=600)
        m = s.metrics()
        out = s.all_output()
    finally:
        s.stop()
    mads = []
    for line in out.splitlines():
        mm = re.search(r"tiles: mad step \d+ version \d+:(.*)$", line)
        if mm:
            mads += [float(x) for x in mm.group(1).split()]
    mads.sort()
    q = lambda p: mads[min(len(mads) - 1, int(p * len(mads)))]
    print("tile updates compared: %d (tile %d px, image %d px, %d steps, %d prompts)" %
          (len(mads), a.tile, a.size, a.steps, len(PROMPTS)))
    print("MAD quantiles: p10 %.2f p25 %.2f p50 %.2f p75 %.2f p90 %.2f max %.2f" %
          (q(.1), q(.25), q(.5), q(.75), q(.9), mads[-1]))
    for t in (0.5, 1, 1.5, 2, 3, 4, 6, 8):
        print("threshold %4.1f: %5.1f%% of tile updates published" %
              (t, 100.0 * sum(x > t for x in mads) / len(mads)))
    enc = m.value("tessera_tile_encode_seconds_total")
    unet = m.value("tessera_unet_call_seconds_sum")
    calls = m.value("tessera_unet_calls_total")
    tiles = m.value("tessera_tiles_published_total")
    tbytes = m.value("tessera_tile_bytes_total")
    print("UNet: %d calls, %.3f s (%.2f ms/call); tiles: encoder CPU %.4f s (%.3f ms/call) = %.2f%% "
          "of UNet time" % (calls, unet, 1000 * unet / calls, enc, 1000 * enc / calls,
                            100 * enc / unet))
    print("tiles published %d, %d bytes; per image %.0f bytes" %
          (tiles, tbytes, tbytes / len(PROMPTS)))


if __name__ == "__main__":
    main()
