#!/usr/bin/env python3
"""tests/service/test_tiles.py - progressive preview tiles (ctest:
service_tiles): `tiles` events while a job runs, immutable tile URLs (same
bytes, strong ETag, 304, Content-Length), the manifest, the final tiles
(every tile re-published at the end, before the `image` event), restart
(final tiles served from --data-dir) and garbage collection (--keep-jobs).
docs/tiles.md is the design."""
import os
import shutil

import svc

PROMPT = "a red circle in the top left on a blue background"
ARGS = ["--tile-size", "32", "--max-batch", "2"]


def setup():
    return svc.Server(ARGS, name="tiles").start()


def tile_events(s, jid):
    ev = s.events("/v1/jobs/%s/events" % jid)
    assert ev[-1].name == "done", [e.name for e in ev]
    return ev, [e for e in ev if e.name == "tiles"]


def test_events_and_urls(s):
    steps = 8
    job = s.submit(prompt=PROMPT, steps=steps, seed=7, width=128, height=96)
    ev, tiles = tile_events(s, job["id"])
    names = [e.name for e in ev]
    # 128x96 with 32 px tiles: 3 rows x 4 cols; the first preview publishes all
    assert len(tiles) >= 3, names
    first = tiles[0].data
    assert len(first["tiles"]) == 12 and first["image"] == 0, first
    # the final publish is the last tiles event, before `image`, every tile, one version
    last = tiles[-1]
    assert names.index("image") > ev.index(last), names
    assert len(last.data["tiles"]) == 12, last.data
    finalv = {t["version"] for t in last.data["tiles"]}
    assert len(finalv) == 1 and finalv.pop() > max(t["version"] for e in tiles[:-1]
                                                   for t in e.data["tiles"]), last.data
    # versions of a tile only grow; URLs are the contract's shape
    seen = {}
    for e in tiles:
        for t in e.data["tiles"]:
            key = (t["row"], t["col"])
            assert t["version"] > seen.get(key, 0), (t, seen.get(key))
            seen[key] = t["version"]
            assert t["url"] == "/v1/jobs/%s/images/0/tiles/%d/%d_%d.jpg" % (
                job["id"], t["version"], t["row"], t["col"]), t
    total = sum(len(e.data["tiles"]) for e in tiles)
    svc.figure("tiles: %d previews published %d tiles for a 3x4 grid over %d steps "
               "(%d would be published without the threshold)" %
               (len(tiles), total, steps, 12 * (steps + 1)))
    # every announced URL serves a JPEG, immutably, with 304 on its ETag
    nbytes = 0
    for e in tiles:
        for t in e.data["tiles"]:
            r = s.get(t["url"])
            assert r.status == 200, (t, r)
            assert r.headers["content-type"] == "image/jpeg", r.headers
            assert r.body[:2] == b"\xff\xd8", r.body[:4]
            assert int(r.headers["content-length"]) == len(r.body), r.headers
            assert r.headers["cache-control"] == "public, max-age=31536000, immutable"
            etag = r.headers["etag"]
            assert etag.startswith('"') and not etag.startswith('W/'), etag
            again = s.get(t["url"])
            assert again.body == r.body and again.headers["etag"] == etag
            nm = s.get(t["url"], headers={"If-None-Match": etag})
            assert nm.status == 304 and nm.body == b"", nm
            nbytes += len(r.body)
    svc.figure("tiles: %d bytes of tiles for one 128x96 image (%d steps, 32 px tiles)" %
               (nbytes, steps))
    # the manifest: current (final) version of every tile
    m = s.get("/v1/jobs/%s/images/0/tiles" % job["id"])
    assert m.status == 200 and m.headers["cache-control"] == "no-cache", m
    mj = m.json
    assert (mj["rows"], mj["cols"], mj["tile_size"], mj["width"], mj["height"]) == \
        (3, 4, 32, 128, 96), mj
    assert mj["final"] is True and len(mj["tiles"]) == 12, mj
    assert {t["url"] for t in mj["tiles"]} == {t["url"] for t in last.data["tiles"]}
    nm = s.get("/v1/jobs/%s/images/0/tiles" % job["id"],
               headers={"If-None-Match": m.headers["etag"]})
    assert nm.status == 304, nm
    # wrong shapes and unknown versions are 404; other methods 405
    for bad in ("/tiles/999/0_0.jpg", "/tiles/1/9_9.jpg", "/tiles/1/0_0.png", "/tiles/x/0_0.jpg"):
        r = s.get("/v1/jobs/%s/images/0%s" % (job["id"], bad))
        assert r.status == 404, (bad, r)
    assert s.get("/v1/jobs/%s/images/3/tiles" % job["id"]).status == 404
    assert s.delete("/v1/jobs/%s/images/0/tiles" % job["id"]).status == 405


def test_preview_every(s):
    s2 = svc.Server(ARGS + ["--preview-every", "3"], name="every3").start()
    try:
        job = s2.submit(prompt=PROMPT, steps=9, seed=3, width=64, height=64)
        ev, tiles = tile_events(s2, job["id"])
        previews = [e for e in tiles if e.data["step"] < 9 or len(tiles) == 1]
        # previews after UNet calls 3, 6, 9 (at most) + the final
        assert 1 <= len(tiles) <= 4, [e.data["step"] for e in tiles]
        vers = sorted({t["version"] for e in tiles[:-1] for t in e.data["tiles"]})
        assert all(v % 3 == 0 for v in vers), vers
        del previews
    finally:
        s2.stop()


def test_restart_and_gc(s):
    d = svc.tmpdir("tsr-tiles-data-")
    a = svc.Server(ARGS, data_dir=d, name="tiles-a").start()
    try:
        job = a.submit(prompt=PROMPT, steps=3, seed=11, width=64, height=64)
        assert a.wait_job(job["id"])["state"] == "done"
        m = a.get("/v1/jobs/%s/images/0/tiles" % job["id"]).json
        bodies = {t["url"]: a.get(t["url"]).body for t in m["tiles"]}
    finally:
        a.stop()
    assert os.path.exists(os.path.join(d, "jobs", job["id"], "0.tiles"))
    b = svc.Server(ARGS + ["--keep-jobs", "1"], data_dir=d, name="tiles-b").start()
    try:
        m2 = b.get("/v1/jobs/%s/images/0/tiles" % job["id"]).json
        assert m2["final"] and [t["url"] for t in m2["tiles"]] == [t["url"] for t in m["tiles"]]
        for url, body in bodies.items():
            r = b.get(url)
            assert r.status == 200 and r.body == body, url
        # --keep-jobs 1: a newer finished job evicts the old one, files and all
        j2 = b.submit(prompt=PROMPT, steps=2, seed=12, width=64, height=64)
        assert b.wait_job(j2["id"])["state"] == "done"
        for _ in range(50):
            if b.get("/v1/jobs/%s" % job["id"]).status == 404:
                break
            svc.time.sleep(0.1)
        assert b.get("/v1/jobs/%s" % job["id"]).status == 404
        assert b.get(next(iter(bodies))).status == 404
        for _ in range(50):
            if not os.path.exists(os.path.join(d, "jobs", job["id"])):
                break
            svc.time.sleep(0.1)
        assert not os.path.exists(os.path.join(d, "jobs", job["id"]))
        assert b.get("/v1/jobs/%s/images/0/tiles" % j2["id"]).json["final"]
    finally:
        b.stop()
        shutil.rmtree(d, ignore_errors=True)


def test_cost(s):
    m = s.metrics()
    enc = m.value("tessera_tile_encode_seconds_total")
    unet = m.value("tessera_unet_call_seconds_sum")
    calls = m.value("tessera_unet_calls_total")
    svc.figure("tiles: encoder CPU %.2f ms per UNet call = %.2f%% of the UNet time "
               "(%d calls)" % (1000 * enc / calls, 100 * enc / unet, calls))
    # The bar is < 3% of a UNet call on the demo model at its
    # defaults (128x128, 64 px tiles: ~0.3%, docs/tiles.md).  This server
    # is the stress case (32 px tiles on a 128x96 image: three times the
    # tiles per pixel), and since the CPU UNet call got 1.3-2x faster
    # (issue 16) the encoder's fixed ~0.3 ms per call sits at 2.5-3% of it
    # here, so the stress case is held to 5%.
    assert enc / unet < 0.05, (enc, unet)


TESTS = [test_events_and_urls, test_preview_every, test_restart_and_gc, test_cost]

if __name__ == "__main__":
    raise SystemExit(svc.run_tests(TESTS, setup=setup))
