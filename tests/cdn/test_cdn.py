#!/usr/bin/env python3
"""tests/cdn/test_cdn.py - deploy/nginx/tessera.conf in front of a real
`tessera serve` on the demo model (ctest cdn_nginx, label cdn):
- SSE events arrive through nginx while the job runs (unbuffered);
- the manifest is never served stale (no-cache: nginx does not store it);
- a tile's second fetch is a HIT that never reaches Tessera (its access log
  shows one request for it); the final PNG likewise;
- the hit ratio over a few viewers is reported.
Exit 77 (skipped) without nginx."""
import os
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "service"))
sys.path.insert(0, HERE)
import svc  # noqa: E402
import nginx_proxy  # noqa: E402

PROMPT = "a red circle in the top left on a blue background"


def get(port, path, headers=None):
    return svc.request(port, "GET", path, headers=headers, validate_spec=False)


def tessera_hits(server, path, want=None):
    """Requests for path in Tessera's access log (its lines arrive through a
    pipe: wait up to 3 s for `want`)."""
    deadline = time.time() + 3
    while True:
        n = sum(1 for line in server.all_output().splitlines()
                if "http: GET %s " % path in line)
        if want is None or n >= want or time.time() > deadline:
            return n
        time.sleep(0.05)


def test_through_nginx(ctx):
    s, ng = ctx
    job = svc.request(ng.port, "POST", "/v1/jobs", {"prompt": PROMPT, "steps": 16, "seed": 5,
                                                    "width": 128, "height": 128},
                      validate_spec=False)
    assert job.status == 202, job
    jid = job.json["id"]
    events, seen_running, manifests = [], [], []
    stream = svc.SSE(ng.port, "/v1/jobs/%s/events" % jid, timeout=120)
    assert stream.status == 200, stream.status
    assert stream.headers.get("x-cache-status") in (None, "", "BYPASS"), stream.headers
    t0 = time.time()
    while True:
        e = stream.next()
        if e is None:
            break
        events.append((time.time() - t0, e))
        if e.name == "tiles" and len(seen_running) < 3:
            # the event came through nginx: is the job still running at Tessera?
            seen_running.append(s.job(jid)["state"])
            m = get(ng.port, "/v1/jobs/%s/images/0/tiles" % jid)
            manifests.append(m)
        if e.name in svc.FINAL_EVENTS:
            break
    stream.close()
    names = [e.name for _, e in events]
    assert names[-1] == "done", names
    assert "running" in seen_running, seen_running
    tiles_ev = [e for _, e in events if e.name == "tiles"]
    spread = events[-1][0] - next(t for t, e in events if e.name == "step")
    svc.figure("cdn: %d events through nginx over %.2f s; job state at Tessera when the "
               "first tiles events arrived: %s" % (len(events), spread, seen_running))
    # manifest: never cached, never stale
    for m in manifests:
        assert m.status == 200 and m.headers.get("x-cache-status") != "HIT", m.headers
        assert m.headers["cache-control"] == "no-cache"
    final = get(ng.port, "/v1/jobs/%s/images/0/tiles" % jid)
    assert final.headers.get("x-cache-status") != "HIT", final.headers
    assert final.json["final"] is True, final.json
    assert final.json["tiles"] == s.get("/v1/jobs/%s/images/0/tiles" % jid).json["tiles"]
    # tiles: MISS then HIT, one request at Tessera each
    urls = [t["url"] for e in tiles_ev for t in e.data["tiles"]]
    viewers = 4
    hits = fetches = 0
    for url in urls:
        first = None
        for k in range(viewers):
            r = get(ng.port, url)
            assert r.status == 200, (url, r)
            st = r.headers.get("x-cache-status")
            fetches += 1
            hits += st == "HIT"
            if k == 0:
                first = r.body
                assert st == "MISS", (url, st)
            else:
                assert st == "HIT" and r.body == first, (url, st)
    for url in urls:
        assert tessera_hits(s, url, 1) == 1, (url, tessera_hits(s, url))
    png = "/v1/jobs/%s/images/0.png" % jid
    a, b = get(ng.port, png), get(ng.port, png)
    assert a.headers["x-cache-status"] == "MISS" and b.headers["x-cache-status"] == "HIT"
    assert a.body == b.body and tessera_hits(s, png, 1) == 1
    svc.figure("cdn: %d tile URLs x %d viewers through nginx: %d/%d hits (%.0f%% hit ratio); "
               "Tessera saw each tile once" % (len(urls), viewers, hits, fetches,
                                              100.0 * hits / fetches))
    # a 404 (an image not there yet) is not cached
    missing = "/v1/jobs/%s/images/0/tiles/99999/0_0.jpg" % jid
    assert get(ng.port, missing).status == 404 and get(ng.port, missing).status == 404
    assert tessera_hits(s, missing, 2) == 2


def main():
    if not nginx_proxy.find_nginx():
        print("nginx not installed (scripts/setup.sh): skipped")
        return 77
    s = svc.Server(["--tile-size", "32"], name="cdn-tessera").start()
    ng = nginx_proxy.Nginx(s.port).start()
    try:
        return svc.run_tests([test_through_nginx], setup=lambda: (s, ng))
    finally:
        ng.stop()
        s.stop()


if __name__ == "__main__":
    raise SystemExit(main())
