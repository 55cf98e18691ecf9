#!/usr/bin/env python3
"""tests/cdn/test_cdn.py - deploy/nginx/tessera.conf in front of a real
`tessera serve` on the demo model (ctest cdn_nginx, label cdn):
- SSE events arrive through nginx while the job runs (unbuffered);
- the manifest is never served stale (no-cache: nginx does not store it);
- a tile's second fetch is a HIT that never reaches Tessera (its access log
  shows one request for it); the final PNG likewise;
- the hit ratio over a few viewers is reported;
- keys on (test_signed_urls): the signed URLs Tessera hands out are checked
  at the edge with secure_link, the secret taken from the snippet Tessera
  writes (<data-dir>/url-secret.nginx): a valid one is cached once and
  served without a key; a tampered or expired one gets 403 from nginx and
  never reaches Tessera; a bare URL goes on to Tessera (401 without a key,
  `private` and never stored with one).
Exit 77 (skipped) without nginx."""
import base64
import hashlib
import os
import sys
import threading
import time
import urllib.parse

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


def test_signed_urls(_ctx):
    d = svc.tmpdir("tsr-cdn-keys-")
    keys = os.path.join(d, "keys")
    auth = {"Authorization": "Bearer " + svc.new_key(keys, "alice")}
    s = svc.Server(["--tile-size", "32", "--keys", keys], name="cdn-keys").start()
    snippet = os.path.join(s.data_dir, "url-secret.nginx")
    ng = nginx_proxy.Nginx(s.port, secret_snippet=snippet).start()
    try:
        job = svc.request(ng.port, "POST", "/v1/jobs", {"prompt": PROMPT, "steps": 6, "seed": 7,
                                                        "width": 64, "height": 64},
                          headers=auth, validate_spec=False)
        assert job.status == 202, job
        jid = job.json["id"]
        events = svc.sse_read(ng.port, "/v1/jobs/%s/events" % jid, headers=auth)
        assert events[-1].name == "done", [e.name for e in events]
        rec = get(ng.port, "/v1/jobs/" + jid, headers=auth).json
        url = rec["images"][0]["url"]
        u = urllib.parse.urlsplit(url)
        q = dict(urllib.parse.parse_qsl(u.query))
        path = u.path
        assert "md5" in q and "expires" in q, url
        # the signed PNG: no key, MISS then HIT, Tessera sees it once
        first = get(ng.port, url)
        assert first.status == 200 and first.headers["x-cache-status"] == "MISS", first.headers
        for _ in range(3):
            r = get(ng.port, url)
            assert r.status == 200 and r.headers["x-cache-status"] == "HIT", r.headers
            assert r.body == first.body
        assert tessera_hits(s, path, 1) == 1, tessera_hits(s, path)
        # a signed tile and the signed manifest, without a key
        tiles = [e for e in events if e.name == "tiles"][-1].data
        t = tiles["tiles"][0]["url"]
        assert get(ng.port, t).status == 200 and get(ng.port, t).headers["x-cache-status"] == "HIT"
        m = get(ng.port, tiles["manifest"])
        assert m.status == 200 and m.headers.get("x-cache-status") != "HIT", m
        # refused at the edge: tampered, another path, expired, half a signature
        secret = open(os.path.join(s.data_dir, "url-secret")).read().strip()
        past = int(time.time()) - 60
        sig = base64.urlsafe_b64encode(hashlib.md5(
            ("%d%s %s" % (past, path, secret)).encode()).digest()).decode().rstrip("=")
        flipped = ("B" if q["md5"][0] == "A" else "A") + q["md5"][1:]
        other = "/v1/jobs/%s/images/0/tiles/1/0_0.jpg" % jid
        bad = {
            "tampered": "%s?md5=%s&expires=%s" % (path, flipped, q["expires"]),
            "later expiry": "%s?md5=%s&expires=%d" % (path, q["md5"], int(q["expires"]) + 60),
            "another path": "%s?md5=%s&expires=%s" % (other, q["md5"], q["expires"]),
            "expired": "%s?md5=%s&expires=%d" % (path, sig, past),
            "expires only": "%s?expires=%s" % (path, q["expires"]),
            "tampered manifest": tiles["manifest"].replace("md5=", "md5=A", 1),
        }
        before = tessera_hits(s, path), tessera_hits(s, other)
        man_path = urllib.parse.urlsplit(tiles["manifest"]).path
        man_before = tessera_hits(s, man_path)
        for what, b in bad.items():
            r = get(ng.port, b, headers=auth)  # a key does not get it through either
            assert r.status == 403 and r.json["error"]["code"] == "forbidden", (what, r)
            svc.note("through nginx: signed URL, %s" % what, "403 at the edge")
        # a sentinel Tessera does see, so its log is known to be current
        assert get(ng.port, path, headers=auth).status == 200
        assert tessera_hits(s, path, before[0] + 1) == before[0] + 1, "a refused URL reached Tessera"
        assert tessera_hits(s, other) == before[1] and tessera_hits(s, man_path) == man_before
        # bare: Tessera answers (401 without a key, 200 private with one, never cached)
        r = get(ng.port, path)
        assert r.status == 401 and r.headers.get("x-cache-status") != "HIT", r
        for _ in range(2):
            r = get(ng.port, path, headers=auth)
            assert r.status == 200 and r.headers["x-cache-status"] != "HIT", r.headers
            assert r.headers["cache-control"].startswith("private"), r.headers
        assert tessera_hits(s, path, before[0] + 4) == before[0] + 4
        svc.figure("cdn, keys on: signed PNG 1 MISS + 3 HITs, Tessera saw it once; %d bad "
                   "signatures refused by nginx, none reached Tessera" % len(bad))
    finally:
        ng.stop()
        s.stop()


def test_comfy_websocket(ctx):
    """ComfyUI's /ws through nginx, and /comfy/ws as its web UI (--comfy-ui)
    opens it: the upgrade reaches Tessera (101, the RFC 6455 accept key) and
    its first frame, the status message, comes back."""
    s, ng = ctx
    for path in ("/ws", "/comfy/ws"):
        comfy_websocket(ng, path)
    r = svc.request(ng.port, "GET", "/comfy/", validate_spec=False)
    assert r.status == 200 and r.body.startswith(b"<!doctype html>"), r


def comfy_websocket(ng, path):
    import socket
    key = base64.b64encode(os.urandom(16)).decode()
    sock = socket.create_connection(("127.0.0.1", ng.port), timeout=30)
    try:
        sock.sendall(("GET %s?clientId=cdn HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
                      "Upgrade: websocket\r\nConnection: Upgrade\r\n"
                      "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n"
                      % (path, ng.port, key)).encode())
        buf = b""
        while b"\r\n\r\n" not in buf or b'"status"' not in buf:
            chunk = sock.recv(4096)
            assert chunk, "closed: %r" % buf
            buf += chunk
        head = buf.split(b"\r\n\r\n", 1)[0].decode()
        assert head.startswith("HTTP/1.1 101"), head
        want = base64.b64encode(hashlib.sha1(
            (key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").encode()).digest()).decode()
        assert ("Sec-WebSocket-Accept: " + want) in head, head
        assert b'"sid":"cdn"' in buf, buf
    finally:
        sock.close()


def main():
    if not nginx_proxy.find_nginx():
        print("nginx not installed (scripts/setup.sh): skipped")
        return 77
    ui = svc.tmpdir("tsr-cdn-ui-")  # a stand-in for ComfyUI's frontend folder
    with open(os.path.join(ui, "index.html"), "w") as f:
        f.write("<!doctype html><title>ComfyUI</title>")
    s = svc.Server(["--tile-size", "32", "--comfy-ui", ui], name="cdn-tessera").start()
    ng = nginx_proxy.Nginx(s.port).start()
    try:
        return svc.run_tests([test_through_nginx, test_signed_urls, test_comfy_websocket],
                             setup=lambda: (s, ng))
    finally:
        ng.stop()
        s.stop()


if __name__ == "__main__":
    raise SystemExit(main())
