#!/usr/bin/env python3
"""tests/sim/test_sim.py - the scheduler simulator (tools/sim/sim.py) on
cases whose answers are known by hand, and the claims docs/multi-gpu.md
makes from its tables.

  lone_image        one image on one device: steps x (UNet + overhead) +
                    prep + decode + storage + client, to the microsecond
  cfg_pair          the same image split over a CFG pair: one row per call
                    plus the all_gather's latency + bytes / bandwidth
  batching          16 clients on one device fill its calls (~16 images)
  fairness          queue/local.c's pop rule: a worker takes its running shape,
                    but an entry passed over max_batch times goes next
  processor_sharing two busy CPU devices on one core take twice as long;
                    other processes' runnable threads share the cores too
  scaling           the committed GPU tables: 8 devices >= 7.5x one under a
                    saturating load (docs/multi-gpu.md's table)
  deterministic     the same seed gives the same figures

Standard library only; label unit.
"""
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tools", "sim"))
import sim  # noqa: E402

GPU = {
    "name": "synthetic", "kind": "gpu",
    "unet_rows": {"1": 0.010, "2": 0.016, "32": 0.046},
    "decode": {"1": 0.020},
    "prep_s": 0.004, "step_image_s": 0.001, "host_image_s": 0.010, "client_s": 0.002,
    "latent_bytes": 32768, "link_latency_s": 25e-6, "link_GBps": 100, "steps": 10,
}


class SimTest(unittest.TestCase):
    def test_lone_image(self):
        t = sim.Table(GPU)
        r = sim.simulate(t, 1, "data", clients=1, jobs=1)
        want = 0.002 + 0.004 + 10 * (0.016 + 0.001) + 0.020 + 0.010
        self.assertAlmostEqual(r["mean_s"], want, places=9)
        self.assertEqual(r["calls"], 10)

    def test_cfg_pair(self):
        t = sim.Table(GPU)
        r = sim.simulate(t, 2, "cfg", clients=1, jobs=1)
        comm = 25e-6 + 32768 / 100e9
        want = 0.002 + 0.004 / 2 + 10 * (0.010 + 0.001 + comm) + 0.020 + 0.010
        self.assertAlmostEqual(r["mean_s"], want, places=9)
        # three devices in cfg mode: one pair and one device alone
        s = sim.Sim(t, 3, "cfg")
        self.assertEqual([len(u.pools) for u in s.units], [2, 1])

    def test_batching(self):
        t = sim.Table(GPU)
        r = sim.simulate(t, 1, "data", clients=16, jobs=160)
        self.assertGreater(r["images_per_call"], 14.0)
        one = sim.simulate(t, 1, "data", clients=1, jobs=10)
        # a call of 16 images costs 46 + 16 ms, against 17 ms for one
        self.assertGreater(r["images_per_s"], 3 * one["images_per_s"])

    def test_fairness(self):
        t = sim.Table(GPU)
        s = sim.Sim(t, 1, "data", max_batch=2)
        a = sim.Job(1, 1, 10, (64, 64), True, 0, None)
        bs = [sim.Job(2 + i, 1, 10, (128, 128), True, 0, None) for i in range(4)]
        s.queue = [sim.Image(a, 0, 0)] + [sim.Image(b, 0, 1 + i) for i, b in enumerate(bs)]
        # a worker running 128x128 passes the 64x64 entry over twice ...
        self.assertEqual(s.choose((128, 128)).job.id, 2)
        self.assertEqual(s.choose((128, 128)).job.id, 3)
        self.assertEqual(s.queue[0].passed, 2)
        # ... and then must take it
        self.assertEqual(s.choose((128, 128)).job.id, 1)
        # an empty batch takes the head; no match takes the head too
        self.assertEqual(s.choose(None).job.id, 4)
        self.assertEqual(s.choose((999, 999)).job.id, 5)
        self.assertIsNone(s.choose(None))

    def test_processor_sharing(self):
        d = dict(GPU, kind="cpu", cores=1, prep_s=0, step_image_s=0, host_image_s=0,
                 client_s=0, decode={"1": 1e-9})
        t = sim.Table(d)
        one = sim.simulate(t, 1, "data", clients=1, jobs=1)
        two = sim.simulate(t, 2, "data", clients=2, jobs=2)
        self.assertAlmostEqual(one["mean_s"], 10 * 0.016, places=6)
        self.assertAlmostEqual(two["mean_s"], 2 * 10 * 0.016, places=6)
        # one runnable thread of another process: half a core for ours
        busy = sim.simulate(t, 1, "data", clients=1, jobs=1, background=1.0)
        self.assertAlmostEqual(busy["mean_s"], 2 * 10 * 0.016, places=6)

    def test_scaling(self):
        for name in ("gpu_h200_sd15_512.json", "gpu_h200_sdxl_1024.json"):
            t = sim.Table.load(os.path.join(ROOT, "tools", "sim", "tables", name))
            one = sim.simulate(t, 1, "data", clients=16, jobs=96)
            eight = sim.simulate(t, 8, "data", clients=128, jobs=768)
            self.assertGreaterEqual(eight["images_per_s"] / one["images_per_s"], 7.5, name)

    def test_deterministic(self):
        t = sim.Table(GPU)
        a = sim.simulate(t, 4, "data", rate=50, jobs=200, seed=7)
        b = sim.simulate(t, 4, "data", rate=50, jobs=200, seed=7)
        self.assertEqual(a, b)
        self.assertEqual(a["images"], 200)


if __name__ == "__main__":
    unittest.main(verbosity=2)
