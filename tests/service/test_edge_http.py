"""tests/service/test_edge_http.py - the HTTP edge under attack and faults
(issue 61): bodies up to --max-body with Content-Length, the cap on bodies
held at once, running out of descriptors, and the head checks that nginx
makes (Host, framing, bytes, the guard's internal header), the access log's
escaping and one canonical URL per image and tile.

Each case starts its own server on 127.0.0.1 (svc.Server) and talks to it
with real sockets, as clients and attackers do.
"""
import base64
import json
import os
import random
import resource
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import svc  # noqa: E402

SIZE = 64


def photo_png(side=512, seed=7):
    """A photo-sized PNG that does not compress (noise over a gradient):
    about 0.8 MB, 1 MB in base64, as a camera picture would be."""
    rnd = random.Random(seed)
    rgb = bytearray(side * side * 3)
    for y in range(side):
        for x in range(side):
            o = (y * side + x) * 3
            n = rnd.getrandbits(24)
            rgb[o] = (x * 255 // side + (n & 63)) & 255
            rgb[o + 1] = (y * 255 // side + ((n >> 8) & 63)) & 255
            rgb[o + 2] = (n >> 16) & 255
    return svc.png_encode(side, side, bytes(rgb))


def connect(s, timeout=30):
    return socket.create_connection(("127.0.0.1", s.port), timeout=timeout)


def read_response(sock, timeout=30):
    """One response head + Content-Length body: (status, headers, body)."""
    sock.settimeout(timeout)
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = sock.recv(65536)
        if not chunk:
            raise AssertionError("connection closed before a response: %r" % buf[:200])
        buf += chunk
    head, rest = buf.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        k, v = line.split(":", 1)
        headers[k.strip().lower()] = v.strip()
    n = int(headers.get("content-length", "0"))
    while len(rest) < n:
        chunk = sock.recv(65536)
        if not chunk:
            break
        rest += chunk
    return status, headers, rest[:n]


def exchange(s, data, timeout=30):
    sock = connect(s, timeout)
    try:
        sock.sendall(data)
        return read_response(sock, timeout)
    finally:
        sock.close()


def closed_after(sock, timeout=5):
    """Whether the server closes the connection (reads EOF) within timeout."""
    sock.settimeout(timeout)
    try:
        while True:
            if not sock.recv(65536):
                return True
    except socket.timeout:
        return False
    except ConnectionResetError:
        return True


# --------------------------------------------------------------------------
# Bodies
# --------------------------------------------------------------------------
def test_big_bodies_with_content_length(ctx):
    """A1111 img2img, native init_image and OpenAI edits with a 512x512 photo
    sent with Content-Length (1 MB bodies): answered, not left hanging."""
    s = ctx["s"]
    png = photo_png()
    b64 = base64.b64encode(png).decode()
    assert len(png) > 700 * 1024, len(png)
    # A1111 img2img: the photo is resized to 64x64 (A1111's "just resize")
    body = json.dumps({"init_images": [b64], "prompt": "a red circle", "width": SIZE,
                       "height": SIZE, "steps": 2, "seed": 5,
                       "denoising_strength": 0.6}).encode()
    assert len(body) > 1000 * 1000, len(body)
    t0 = time.time()
    r = s.request("POST", "/sdapi/v1/img2img", body,
                  headers={"Content-Type": "application/json"}, timeout=120)
    assert r.status == 200, (r.status, r.body[:300])
    out = json.loads(r.body)
    img = svc.png_decode(base64.b64decode(out["images"][0]))
    assert (img.width, img.height) == (SIZE, SIZE), (img.width, img.height)
    svc.figure("A1111 img2img, 512x512 photo in a %d-byte body: 200 in %.1f s"
               % (len(body), time.time() - t0))
    # the native API: a 512x512 init image means a 512x512 job
    small = svc.png_encode(SIZE, SIZE, bytes(SIZE * SIZE * 3))
    pad = base64.b64encode(small).decode()
    body = json.dumps({"prompt": "x", "init_image": pad, "steps": 2, "strength": 0.5,
                       "negative_prompt": "n" * 60000, "width": SIZE, "height": SIZE,
                       "seed": 1}).encode()
    body = body[:-1] + b', "extra": "' + b"y" * (600 * 1024) + b'"}'
    r = s.post("/v1/jobs", body, headers={"Content-Type": "application/json"}, timeout=60)
    assert r.status == 202, (r.status, r.body[:300])
    s.wait_job(r.json["id"])
    # OpenAI edits: multipart with the photo as a file
    B = "b0undaryEdge61"
    parts = [("prompt", b"a blue square", None), ("size", b"512x512", None),
             ("steps", b"2", None), ("seed", b"3", None), ("response_format", b"b64_json", None),
             ("image", png, "photo.png")]
    data = b""
    for name, value, fn in parts:
        disp = 'form-data; name="%s"' % name + ('; filename="%s"' % fn if fn else "")
        data += b"--" + B.encode() + b"\r\nContent-Disposition: " + disp.encode() + \
            b"\r\n\r\n" + value + b"\r\n"
    data += b"--" + B.encode() + b"--\r\n"
    t0 = time.time()
    r = s.request("POST", "/v1/images/edits", data,
                  headers={"Content-Type": "multipart/form-data; boundary=" + B}, timeout=300)
    assert r.status == 200, (r.status, r.body[:300])
    out = json.loads(r.body)
    img = svc.png_decode(base64.b64decode(out["data"][0]["b64_json"]))
    assert (img.width, img.height) == (512, 512), (img.width, img.height)
    svc.figure("OpenAI edits, 512x512 photo in a %d-byte multipart body: 200 in %.1f s"
               % (len(data), time.time() - t0))


def test_expect_continue(ctx):
    """Expect: 100-continue gets its 100 at once (curl waits a second
    without it), then the answer."""
    s = ctx["s"]
    body = json.dumps({"prompt": "x", "steps": 1, "width": SIZE, "height": SIZE,
                       "pad": "z" * 300000}).encode()
    sock = connect(s)
    try:
        sock.sendall(b"POST /v1/jobs HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                     b"Expect: 100-continue\r\nContent-Length: %d\r\n\r\n" % len(body))
        sock.settimeout(5)  # at once; generous for a loaded CI machine
        got = sock.recv(100)
        assert got.startswith(b"HTTP/1.1 100 Continue\r\n\r\n"), got
        sock.sendall(body)
        status, _, out = read_response(sock)
        assert status == 202, (status, out[:200])
    finally:
        sock.close()


def test_bodies_in_flight_cap(ctx):
    """Parked uploads are capped in bytes all together: past --max-bodies a
    new upload gets 503 + Retry-After at once; when one ends, room is back."""
    s = svc.Server(["--max-body", str(1 << 20), "--max-bodies", str(2 << 20)],
                   name="bodies").start()
    head = (b"POST /v1/jobs HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n" % (1 << 20))
    parked = []
    try:
        for _ in range(2):
            c = connect(s)
            c.sendall(head + b'{"prompt": "')
            parked.append(c)
        time.sleep(0.3)
        held = s.metrics().value("tessera_http_body_bytes")
        assert held >= 2 * len(b'{"prompt": "'), held
        t0 = time.time()
        status, headers, body = exchange(s, head)
        assert status == 503, (status, body[:200])
        assert time.time() - t0 < 10, time.time() - t0  # at once, not after the upload
        assert headers.get("retry-after"), headers
        assert b"--max-bodies" in body, body
        # chunked uploads count too
        c = connect(s)
        c.sendall(b"POST /v1/jobs HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                  b"Transfer-Encoding: chunked\r\n\r\n10\r\n" + b"x" * 16 + b"\r\n")
        status, headers, _ = read_response(c, 10)
        assert status == 503, status
        c.close()
        # the parked ones end: room again
        for c in parked:
            c.close()
        parked = []
        deadline = time.time() + 10
        while True:
            r = s.post("/v1/jobs", {"prompt": "x", "steps": 1, "width": SIZE, "height": SIZE,
                                    "pad": "p" * (900 * 1024)})
            if r.status == 202 or time.time() > deadline:
                break
            time.sleep(0.2)
        assert r.status == 202, (r.status, r.body[:200])
        assert s.metrics().value("tessera_http_body_bytes") == 0
    finally:
        for c in parked:
            c.close()
        s.stop()


# --------------------------------------------------------------------------
# Descriptors
# --------------------------------------------------------------------------
def cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_out_of_descriptors(ctx):
    """At RLIMIT_NOFILE, accept() fails: the loop must not spin, the log
    must not flood (--log-level none: nothing at all), and the server must
    serve again once descriptors free up."""
    for level in ("warn", "none"):
        s = svc.Server(["--log-level", level], name="fds-" + level).start()
        try:
            lim = s.fds() + 16
            resource.prlimit(s.pid, resource.RLIMIT_NOFILE, (lim, lim))
            n_lines = len(s.lines)
            socks = []
            for _ in range(lim + 40):
                try:
                    socks.append(connect(s, 5))
                except OSError:
                    break
            time.sleep(0.5)
            c0, t0 = cpu_seconds(s.pid), time.time()
            time.sleep(3)
            share = (cpu_seconds(s.pid) - c0) / (time.time() - t0)
            new = s.lines[n_lines:]
            svc.figure("--log-level %s, %d connections at a limit of %d: CPU %.0f%%, %d log "
                       "lines" % (level, len(socks), lim, share * 100, len(new)))
            assert share < 0.25, "the loop spins at %.0f%% CPU" % (share * 100)
            if level == "none":
                assert not new, new[:5]
            else:
                warn = [x for x in new if "accept" in x]
                assert 1 <= len(warn) <= 8, new[:10]
                assert not [x for x in new if "[warn]" in x and "libevent" not in x
                            and "accept" not in x], new[:10]
            for c in socks:
                c.close()
            deadline = time.time() + 10
            while True:
                try:
                    r = s.get("/healthz", timeout=2)
                    if r.status == 200:
                        break
                except OSError:
                    pass
                assert time.time() < deadline, "no answer after the descriptors came back"
                time.sleep(0.2)
            assert s.metrics().value("tessera_http_accept_errors_total") >= 1
        finally:
            s.stop()


# --------------------------------------------------------------------------
# The head: what nginx refuses
# --------------------------------------------------------------------------
def test_internal_header_from_a_client(ctx):
    """X-Tessera-Guard-Method is the guard's: from a client it changes
    nothing, PATCH stays PATCH (405), and the job is not cancelled."""
    s = ctx["s"]
    job = s.submit(prompt="x", steps=svc.LONG, width=SIZE, height=SIZE)
    for forged in (b"DELETE", b"POST", b"0123456789abcdef0123456789abcdef DELETE"):
        status, headers, body = exchange(
            s, b"PATCH /v1/jobs/%s HTTP/1.1\r\nHost: localhost\r\nX-Tessera-Guard-Method: %s\r\n"
            b"Content-Length: 0\r\n\r\n" % (job["id"].encode(), forged))
        assert status == 405, (forged, status, body[:200])
        assert b"PATCH" in body, body
    assert s.job(job["id"])["state"] in ("queued", "running"), s.job(job["id"])
    s.delete("/v1/jobs/" + job["id"])
    # a real foreign method still gets its 405 under its own name
    status, _, body = exchange(s, b"PURGE /v1/jobs HTTP/1.1\r\nHost: localhost\r\n\r\n")
    assert status == 405 and b"PURGE" in body, (status, body[:200])


def test_host_header(ctx):
    s = ctx["s"]
    status, _, body = exchange(s, b"GET /healthz HTTP/1.1\r\n\r\n")
    assert status == 400 and b"Host" in body, (status, body)
    status, _, body = exchange(s, b"GET /healthz HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n")
    assert status == 400 and b"Host" in body, (status, body)
    status, _, _ = exchange(s, b"GET /healthz HTTP/1.0\r\n\r\n")
    assert status == 200, status
    status, _, _ = exchange(s, b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
    assert status == 200, status


def test_framing_conflicts(ctx):
    """Content-Length with Transfer-Encoding, and Transfer-Encoding in
    HTTP/1.0: 400, and the connection closes (RFC 9112 6.1)."""
    s = ctx["s"]
    shapes = [
        b"POST /v1/jobs HTTP/1.1\r\nHost: localhost\r\nContent-Length: 5\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        b"POST /v1/jobs HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n"
        b"Content-Length: 5\r\n\r\n0\r\n\r\n",
        b"POST /v1/jobs HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    ]
    for data in shapes:
        sock = connect(s)
        try:
            sock.sendall(data + b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
            status, headers, body = read_response(sock)
            assert status == 400, (data, status, body)
            assert headers.get("connection", "").lower() == "close", headers
            assert closed_after(sock), "the connection stayed open after %r" % data
        finally:
            sock.close()


def test_bad_bytes_in_the_head(ctx):
    s = ctx["s"]
    for data in (b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nX-A: a\x00b\r\n\r\n",
                 b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nX-A: a\nX-B: b\r\n\r\n",
                 b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nX-A: a\rb\r\n\r\n",
                 b"GET /healthz HTTP/1.1\nHost: x\n\n"):
        status, _, body = exchange(s, data)
        assert status == 400, (data, status, body)


def test_access_log_escapes(ctx):
    s = ctx["s"]
    n = len(s.lines)
    for path in (b"/x%0d%0aFORGED-LINE-61", b"/y%1b%5b31mRED", b"/z\"q\\"):
        status, _, _ = exchange(s, b"GET " + path + b" HTTP/1.1\r\nHost: localhost\r\n\r\n")
        assert status in (400, 404), status
    time.sleep(0.3)
    new = s.lines[n:]
    assert not [x for x in new if x.startswith("FORGED")], new
    assert not [x for x in new if "\x1b" in x or "\r" in x], new
    text = "\n".join(new)
    assert "/x\\x0D\\x0AFORGED-LINE-61" in text, text
    assert "/y\\x1B[31mRED" in text, text


def test_one_url_per_image_and_tile(ctx):
    """Images and tiles answer at the one URL the server hands out; other
    spellings of it are 404 (a CDN's cache rule matches the URL)."""
    s = ctx["s"]
    job = s.submit(prompt="a red circle", steps=2, width=SIZE, height=SIZE, seed=3)
    s.wait_job(job["id"])
    jid = job["id"].encode()
    base = b"/v1/jobs/" + jid
    assert exchange(s, b"GET " + base + b"/images/0.png HTTP/1.1\r\nHost: localhost\r\n\r\n")[0] == 200
    m = json.loads(exchange(s, b"GET " + base + b"/images/0/tiles HTTP/1.1\r\nHost: localhost\r\n\r\n")[2])
    tiles = [t for t in json.dumps(m).split('"') if t.endswith(".jpg")]
    assert tiles, m
    tile = tiles[0].encode()
    assert exchange(s, b"GET " + tile + b" HTTP/1.1\r\nHost: localhost\r\n\r\n")[0] == 200, tile
    ver, rc = tile.rsplit(b"/", 2)[-2:]
    r, c = rc[:-4].split(b"_")
    tile_dir = tile.rsplit(b"/", 2)[0]
    others = [
        base + b"/images/%30.png", base + b"/images/00.png", base + b"/images/+0.png",
        base + b"%2fimages%2f0.png", base + b"/images/0%2epng", b"/v1/jobs/%" +
        b"%02x" % jid[0] + jid[1:] + b"/images/0.png",
        tile_dir + b"/" + ver + b"/+" + r + b"_-" + c + b".jpg",
        tile_dir + b"/" + ver + b"/0" + r + b"_" + c + b".jpg",
        tile_dir + b"/+" + ver + b"/" + r + b"_" + c + b".jpg",
        tile_dir + b"/" + ver + b"/" + r + b"_" + c + b"%2ejpg",
        tile_dir + b"/" + ver + b"%2f" + r + b"_" + c + b".jpg",
    ]
    for p in others:
        status = exchange(s, b"GET " + p + b" HTTP/1.1\r\nHost: localhost\r\n\r\n")[0]
        assert status in (404, 400), (p, status)


def setup():
    return {"s": svc.Server(name="edge").start()}


TESTS = [test_big_bodies_with_content_length, test_expect_continue, test_bodies_in_flight_cap,
         test_out_of_descriptors, test_internal_header_from_a_client, test_host_header,
         test_framing_conflicts, test_bad_bytes_in_the_head, test_access_log_escapes,
         test_one_url_per_image_and_tile]

if __name__ == "__main__":
    raise SystemExit(svc.run_tests(TESTS, setup=setup))
