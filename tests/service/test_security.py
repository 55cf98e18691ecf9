"""tests/service/test_security.py - issue 62, the parts built so far: API keys
(--keys, `tessera keys new`, Bearer and Basic, the 401's shape, a short or
group-readable token), owners (another user key's job, batch, events,
images, tiles and cancel answer 404 as a missing one; admin sees all; A1111
progress and interrupt per key; settings need admin; per-key metrics; the
owner survives a restart), protected mode (a non-loopback --listen without
keys exits 2) and files at rest (data dir 0700, its files 0600).  Every case
runs a real `tessera serve` on loopback through svc.py; docs/security.md
points at each case by name.

Browser defence (test_media_type, test_origin, test_host): 415 for a body
that is not the route's media type, 403 for a foreign Origin or, on
loopback, a foreign Host.

Quotas and fair batching (issue 62) are tests/service/test_fairness.py's,
signed URLs tests/service/test_signed_urls.py's.  Not here yet (a later
slice of issue 62): Redis TLS.
"""
import base64
import hashlib
import json
import os
import stat
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import svc  # noqa: E402


def keys_new(path, name, admin=False):
    argv = [svc.TSR_BIN, "keys", "new", name, "--keys", path] + (["--admin"] if admin else [])
    p = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    return p


def start_fails(args, name, listen=None):
    """Start serve with args; return (exit code, output).  It must not start."""
    srv = svc.Server(args, name=name)
    if listen is not None:
        # the harness's own --host/--port come first; --listen wins over them
        srv.args = srv.args + ["--listen", listen]
    try:
        srv.start(timeout=30)
    except AssertionError:
        srv.wait(30)
        return srv.proc.returncode, srv.output()
    raise AssertionError("%s started:\n%s" % (name, srv.output()))


class Ctx:
    pass


def setup():
    c = Ctx()
    d = svc.tmpdir("tsr-keys-")
    c.keys = os.path.join(d, "keys")
    c.user1 = keys_new(c.keys, "alice").stdout.strip()
    c.user2 = keys_new(c.keys, "bob").stdout.strip()
    c.admin = keys_new(c.keys, "root", admin=True).stdout.strip()
    c.s = svc.Server(["--threads", "1", "--keys", c.keys], name="keys").start()
    return c


def test_keys_new(c):
    """keys new: one key printed, >= 128 bits, its hash appended, file 0600."""
    for k in (c.user1, c.user2, c.admin):
        assert k.startswith("tsr_") and len(k) >= 4 + 32, k
    mode = stat.S_IMODE(os.stat(c.keys).st_mode)
    assert mode == 0o600, oct(mode)
    lines = [ln.split() for ln in open(c.keys).read().splitlines()]
    assert [ln[:2] for ln in lines] == [["alice", "user"], ["bob", "user"], ["root", "admin"]]
    assert lines[0][2] == hashlib.sha256(c.user1.encode()).hexdigest()
    assert c.user1 not in open(c.keys).read()
    # a name already there, a bad name, no --keys: usage errors
    assert keys_new(c.keys, "alice").returncode == 2
    assert keys_new(c.keys, "bad name").returncode == 2
    p = subprocess.run([svc.TSR_BIN, "keys", "new", "x"], capture_output=True, timeout=30)
    assert p.returncode == 2
    svc.note("tessera keys new alice (again)", "exit 2")


def test_keys_file_bad_lines():
    """Each kind of bad line stops the server (exit 2) naming the line."""
    d = svc.tmpdir("tsr-badkeys-")
    good = "ok user " + hashlib.sha256(b"x" * 32).hexdigest()
    cases = {
        "nohash user": "expected NAME ROLE SHA256HEX",
        "a god " + "0" * 64: "the role must be user or admin",
        "a user abc": "64 hex digits",
        "b@d user " + "0" * 64: "the name must be",
        good.replace("ok ", "dup "): "already there",
    }
    for i, (line, why) in enumerate(cases.items()):
        f = os.path.join(d, "k%d" % i)
        with open(f, "w") as fh:
            fh.write("# a comment\n\n" + good + "  # trailing comment\n" + line + "\n")
        os.chmod(f, 0o600)
        rc, out = start_fails(["--keys", f], name="badkeys%d" % i)
        assert rc == 2 and "line 4" in out and why in out, (line, rc, out)
    f = os.path.join(d, "empty")
    with open(f, "w") as fh:
        fh.write("# only a comment\n")
    rc, out = start_fails(["--keys", f], name="nokeys")
    assert rc == 2 and "no keys" in out, out
    svc.note("serve --keys with a bad line", "exit 2")


def test_bearer_and_basic(c):
    s = c.s
    for k in (c.user1, c.user2, c.admin):
        r = svc.request(s.port, "GET", "/v1/models", headers={"Authorization": "Bearer " + k})
        assert r.status == 200, r
        basic = "Basic " + base64.b64encode(("anyone:" + k).encode()).decode()
        r = svc.request(s.port, "GET", "/sdapi/v1/samplers", headers={"Authorization": basic})
        assert r.status == 200, r
        # Basic stays an /sdapi/ thing
        r = svc.request(s.port, "GET", "/v1/models", headers={"Authorization": basic})
        assert r.status == 401, r
    for bad in ("Bearer " + c.user1[:-1], "Bearer " + c.user1 + "x", "Bearer ", c.user1,
                "Bearer " + hashlib.sha256(c.user1.encode()).hexdigest()):
        r = svc.request(s.port, "GET", "/v1/models", headers={"Authorization": bad})
        assert r.status == 401, (bad, r)
    # public paths stay public
    assert svc.request(s.port, "GET", "/healthz").status == 200
    svc.note("GET /v1/models with each key", 200)


def test_401_shape(c):
    """Bearer only, on every dialect, and each dialect's body."""
    s = c.s
    for path, code in (("/v1/jobs/j_0000000000000000", "unauthorized"),
                       ("/sdapi/v1/samplers", "unauthorized"),
                       ("/v1/images/generations", "invalid_api_key")):
        r = svc.request(s.port, "GET", path)
        assert r.status == 401, (path, r)
        ch = [v for k, v in r.header_list if k.lower() == "www-authenticate"]
        assert ch == ["Bearer"], (path, ch)
        body = r.json
        got = body["error"]["code"] if isinstance(body.get("error"), dict) else None
        assert got == code, (path, body)
        svc.note("GET %s without a key" % path, r.status)


def raw_post(port, path, body, ctype, headers=None):
    h = dict(headers or {})
    if ctype:
        h["Content-Type"] = ctype
    return svc.request(port, "POST", path, body, headers=h)


def test_media_type(c):
    """415 in each dialect, keys on and off; a bodiless POST passes."""
    plain = svc.Server(["--threads", "1"], name="nokeys").start()
    try:
        for port, h in ((plain.port, {}), (c.s.port, bearer(c.admin))):
            body = b'{"prompt": "x", "width": 64, "height": 64, "steps": 1}'
            for path, ctype in (("/v1/jobs", "text/plain"),
                                ("/v1/batches", "application/x-www-form-urlencoded"),
                                ("/sdapi/v1/txt2img", "text/plain;charset=UTF-8"),
                                ("/sdapi/v1/options", "multipart/form-data; boundary=x"),
                                ("/v1/images/generations", "text/plain"),
                                ("/v1/images/edits", "application/json")):
                r = raw_post(port, path, body, ctype, h)
                assert r.status == 415, (path, ctype, r)
                assert r.json["error"]["code"] == "unsupported_media_type", r.json
                if path.startswith("/sdapi/"):
                    assert "detail" in r.json, r.json
                if path.startswith("/v1/images"):
                    assert r.json["error"]["type"] == "invalid_request_error", r.json
                svc.note("POST %s Content-Type %s" % (path, ctype), r.status)
            # a body without any Content-Type (a no-cors fetch of a Blob)
            head = b"POST /v1/jobs HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n"
            for k, v in h.items():
                head += ("%s: %s\r\n" % (k, v)).encode()
            r = svc.raw(port, head + b"Content-Length: %d\r\n\r\n" % len(body) + body,
                        method="POST", path="/v1/jobs")
            assert r.status == 415, r
            r = raw_post(port, "/v1/jobs", body, "Application/JSON; charset=utf-8", h)
            assert r.status == 202, r
            r = svc.request(port, "POST", "/sdapi/v1/interrupt", None, headers=h)
            assert r.status == 200, r
    finally:
        plain.stop()


def test_origin():
    srv = svc.Server(["--threads", "1", "--cors-origin", "http://app.test"],
                     name="origin").start()
    try:
        own = "http://127.0.0.1:%d" % srv.port
        for origin, want in (("http://evil.example", 403), ("null", 403),
                             ("http://127.0.0.1:1", 403), (own, 200),
                             ("http://app.test", 200)):
            for method, path in (("GET", "/v1/models"), ("POST", "/sdapi/v1/interrupt"),
                                 ("GET", "/v1/images/x")):
                r = svc.request(srv.port, method, path, None, headers={"Origin": origin})
                w = want if not (want == 200 and path == "/v1/images/x") else 404
                assert r.status == w, (origin, path, r)
                if r.status == 403:
                    assert r.json["error"]["code"] == "forbidden", r.json
            svc.note("GET /v1/models Origin %s" % origin, r.status)
    finally:
        srv.stop()


def test_host():
    srv = svc.Server(["--threads", "1", "--allowed-host", "tessera.test,a.test",
                      "--allowed-host", "b.test"], name="host").start()
    try:
        for host, want in (("evil.example", 403), ("evil.example:%d" % srv.port, 403),
                           ("127.0.0.2", 403), ("localhost:1", 200), ("LOCALHOST", 200),
                           ("127.0.0.1:%d" % srv.port, 200), ("[::1]:9", 200),
                           ("tessera.test", 200), ("a.test:8080", 200), ("b.test", 200)):
            r = svc.request(srv.port, "GET", "/v1/models", headers={"Host": host})
            assert r.status == want, (host, r)
            svc.note("GET /v1/models Host %s (loopback)" % host, r.status)
        r = svc.request(srv.port, "GET", "/sdapi/v1/samplers", headers={"Host": "evil.example"})
        assert r.status == 403 and "detail" in r.json, r
    finally:
        srv.stop()
    # not on a non-loopback address (keys or --insecure-no-auth decide there)
    srv = svc.Server(["--insecure-no-auth", "--listen", "0.0.0.0:0"], name="host-any").start()
    try:
        r = svc.request(srv.port, "GET", "/v1/models", headers={"Host": "tessera.example"})
        assert r.status == 200, r
    finally:
        srv.stop()


def test_token_file_rules():
    """--token-file: under 16 bytes exits 2; a group-readable one warns; 16 works."""
    d = svc.tmpdir("tsr-tok-")
    short = os.path.join(d, "short")
    with open(short, "w") as f:
        f.write("fifteen-bytes-x\n")
    os.chmod(short, 0o600)
    rc, out = start_fails(["--token-file", short], name="short-token")
    assert rc == 2 and "fewer than 16" in out, (rc, out)
    ok = os.path.join(d, "ok")
    with open(ok, "w") as f:
        f.write("sixteen-bytes-xx\n")
    os.chmod(ok, 0o644)
    srv = svc.Server(["--token-file", ok], name="token16").start()
    try:
        assert "can be read by group or others" in srv.output(), srv.output()
        r = svc.request(srv.port, "GET", "/v1/models",
                        headers={"Authorization": "Bearer sixteen-bytes-xx"})
        assert r.status == 200, r
    finally:
        srv.stop()
    svc.note("serve --token-file (15 bytes)", "exit 2")


def test_protected_mode():
    rc, out = start_fails([], name="exposed", listen="0.0.0.0:0")
    assert rc == 2 and "protected mode" in out, (rc, out)
    svc.note("serve --listen 0.0.0.0:0 (no keys)", "exit 2")
    srv = svc.Server(["--insecure-no-auth", "--listen", "0.0.0.0:0"], name="insecure")
    srv.start()
    try:
        assert svc.request(srv.port, "GET", "/healthz").status == 200
    finally:
        srv.stop()


def test_file_modes(c):
    """The data dir 0700, its folders 0700, its files 0600, after a job."""
    s = c.s
    r = svc.request(s.port, "POST", "/v1/jobs",
                    {"prompt": "a cat", "width": 64, "height": 64, "steps": 2},
                    headers={"Authorization": "Bearer " + c.user1})
    assert r.status == 202, r
    j = r.json["id"]
    deadline = time.time() + 120
    while True:
        r = svc.request(s.port, "GET", "/v1/jobs/" + j,
                        headers={"Authorization": "Bearer " + c.user1})
        if r.json["state"] == "done" or time.time() > deadline:
            break
        time.sleep(0.1)
    assert r.json["state"] == "done", r.json
    time.sleep(0.5)  # job.json follows the last image
    d = s.data_dir
    # the harness makes the data dir itself (mkdtemp: 0700); a new one is made 0700 by serve
    bad = []
    n_files = 0
    for root, dirs, files in os.walk(d):
        for x in dirs:
            m = stat.S_IMODE(os.stat(os.path.join(root, x)).st_mode)
            if m != 0o700:
                bad.append((os.path.join(root, x), oct(m)))
        for x in files:
            n_files += 1
            m = stat.S_IMODE(os.stat(os.path.join(root, x)).st_mode)
            if m != 0o600:
                bad.append((os.path.join(root, x), oct(m)))
    assert n_files >= 3 and not bad, (n_files, bad)
    fresh = os.path.join(svc.tmpdir("tsr-fresh-"), "a", "data")
    srv = svc.Server(["--threads", "1"], data_dir=fresh, name="fresh").start()
    try:
        for p in (fresh, os.path.dirname(fresh)):
            m = stat.S_IMODE(os.stat(p).st_mode)
            assert m == 0o700, (p, oct(m))
    finally:
        srv.stop()
    svc.note("files under --data-dir", "0600 (dirs 0700)")


def bearer(k):
    return {"Authorization": "Bearer " + k}


MISSING = "j_00000000deadbeef"


def job_paths(jid):
    return ["/v1/jobs/%s" % jid, "/v1/jobs/%s/events" % jid, "/v1/jobs/%s/images/0.png" % jid,
            "/v1/jobs/%s/images/0/tiles" % jid, "/v1/jobs/%s/images/0/tiles/1/0_0.jpg" % jid]


def same_as_missing(s, key, jid, method="GET"):
    """Every job route answers key as for a job that does not exist."""
    for p, pm in zip(job_paths(jid), job_paths(MISSING)):
        if method == "HEAD" and p.endswith("/events"):
            continue  # no HEAD there (405 for every job)
        a = svc.request(s.port, method, p, headers=bearer(key), timeout=10)
        b = svc.request(s.port, method, pm, headers=bearer(key), timeout=10)
        assert a.status == 404 and a.status == b.status, (p, a, b)
        assert a.body.replace(jid.encode(), b"ID") == b.body.replace(MISSING.encode(), b"ID"), \
            (p, a.body, b.body)


def test_owners(c):
    s = c.s
    r = svc.request(s.port, "POST", "/v1/jobs",
                    {"prompt": "alice's cat", "width": 64, "height": 64, "steps": 2},
                    headers=bearer(c.user1))
    assert r.status == 202, r
    jid = r.json["id"]
    deadline = time.time() + 120
    while svc.request(s.port, "GET", "/v1/jobs/" + jid,
                      headers=bearer(c.user1)).json["state"] != "done":
        assert time.time() < deadline
        time.sleep(0.05)
    # bob: 404 on every route, as for a job that does not exist; DELETE too
    same_as_missing(s, c.user2, jid)
    same_as_missing(s, c.user2, jid, method="HEAD")
    r = svc.request(s.port, "DELETE", "/v1/jobs/" + jid, headers=bearer(c.user2))
    assert r.status == 404, r
    svc.note("GET/HEAD/DELETE another user key's job, events, image, tiles", 404)
    # alice and the admin see it
    for k in (c.user1, c.admin):
        for p in job_paths(jid)[:4]:
            r = svc.request(s.port, "GET", p, headers=bearer(k), timeout=30)
            assert r.status == 200, (p, r)
    # a long job of alice: bob cannot cancel it, the admin can
    r = svc.request(s.port, "POST", "/v1/jobs",
                    {"prompt": "long", "width": 64, "height": 64, "steps": svc.LONG},
                    headers=bearer(c.user1))
    long_id = r.json["id"]
    assert svc.request(s.port, "DELETE", "/v1/jobs/" + long_id,
                       headers=bearer(c.user2)).status == 404
    r = svc.request(s.port, "DELETE", "/v1/jobs/" + long_id, headers=bearer(c.admin))
    assert r.status == 200 and r.json["state"] == "cancelled", r
    svc.note("DELETE another user key's job (admin key)", 200)
    # per-key counters
    m = svc.parse_metrics(svc.request(s.port, "GET", "/metrics").body.decode())
    assert m.value("tessera_key_jobs_total", key="alice") >= 2, m
    assert m.value("tessera_key_images_total", key="alice") >= 1
    assert m.value("tessera_key_jobs_total", key="bob") == 0
    c.alice_job = jid


def test_batches_owned(c):
    s = c.s
    body = {"defaults": {"prompt": "b", "width": 64, "height": 64, "steps": 1},
            "jobs": [{"seed": 1}, {"seed": 2}]}
    r = svc.request(s.port, "POST", "/v1/batches", body, headers=bearer(c.user1))
    assert r.status == 202, r
    bid = r.json["id"]
    missing = "b_00000000deadbeef"
    for suffix in ("", "/events"):
        a = svc.request(s.port, "GET", "/v1/batches/" + bid + suffix, headers=bearer(c.user2))
        b = svc.request(s.port, "GET", "/v1/batches/" + missing + suffix,
                        headers=bearer(c.user2))
        assert a.status == 404 == b.status, (a, b)
        assert a.body.replace(bid.encode(), b"ID") == b.body.replace(missing.encode(), b"ID")
    assert svc.request(s.port, "DELETE", "/v1/batches/" + bid,
                       headers=bearer(c.user2)).status == 404
    for k in (c.user1, c.admin):
        assert svc.request(s.port, "GET", "/v1/batches/" + bid, headers=bearer(k)).status == 200
    # the batch's jobs are alice's too
    for jid in r.json["jobs"]:
        jid = jid["id"] if isinstance(jid, dict) else jid
        assert svc.request(s.port, "GET", "/v1/jobs/" + jid,
                           headers=bearer(c.user2)).status == 404
    svc.note("GET another user key's batch, events", 404)


def test_settings_need_admin(c):
    s = c.s
    r = svc.request(s.port, "POST", "/sdapi/v1/options", {"CLIP_stop_at_last_layers": 1},
                    headers=bearer(c.user1))
    assert r.status == 403 and r.json["error"]["code"] == "forbidden" and "detail" in r.json, r
    svc.note("POST /sdapi/v1/options (user key)", r.status)
    r = svc.request(s.port, "POST", "/sdapi/v1/options", {"CLIP_stop_at_last_layers": 1},
                    headers=bearer(c.admin))
    assert r.status == 200, r
    assert svc.request(s.port, "GET", "/sdapi/v1/options", headers=bearer(c.user1)).status == 200


def test_a1111_calls_per_key(c):
    """progress, interrupt and skip see only the caller's own calls."""
    import threading
    s = c.s
    out = {}

    def call():
        out["r"] = svc.request(s.port, "POST", "/sdapi/v1/txt2img",
                               {"prompt": "alice", "width": 64, "height": 64,
                                "steps": svc.LONG}, headers=bearer(c.user1), timeout=300)
    t = threading.Thread(target=call, daemon=True)
    t.start()
    deadline = time.time() + 60
    while True:
        p = svc.request(s.port, "GET", "/sdapi/v1/progress", headers=bearer(c.user1)).json
        if p["state"]["job_count"] > 0 and p["progress"] > 0:
            break
        assert time.time() < deadline, p
        time.sleep(0.05)
    p = svc.request(s.port, "GET", "/sdapi/v1/progress", headers=bearer(c.user2)).json
    assert p["progress"] == 0 and p["state"]["job_count"] == 0, p
    for stop in ("/sdapi/v1/interrupt", "/sdapi/v1/skip"):
        r = svc.request(s.port, "POST", stop, headers=bearer(c.user2))
        assert r.status == 200, r
    time.sleep(0.5)
    assert t.is_alive(), "bob's interrupt ended alice's call"
    p = svc.request(s.port, "GET", "/sdapi/v1/progress", headers=bearer(c.user1)).json
    assert p["state"]["job_count"] > 0 and not p["state"]["interrupted"], p
    svc.note("POST /sdapi/v1/interrupt by another user key", "alice's call runs on")
    r = svc.request(s.port, "POST", "/sdapi/v1/interrupt", headers=bearer(c.user1))
    assert r.status == 200
    t.join(60)
    assert not t.is_alive() and out["r"].status == 200, out


def test_owner_survives_restart(c):
    s = c.s
    # jobs come back from the journal's accept record or job.json (the drain may finish it)
    r = svc.request(s.port, "POST", "/v1/jobs",
                    {"prompt": "queued", "width": 64, "height": 64, "steps": svc.LONG},
                    headers=bearer(c.user1))
    assert r.status == 202, r
    queued = r.json["id"]
    s.stop()
    s.start()
    same_as_missing(s, c.user2, queued)
    r = svc.request(s.port, "GET", "/v1/jobs/" + queued, headers=bearer(c.user1))
    assert r.status == 200, r
    jid = c.alice_job
    same_as_missing(s, c.user2, jid)
    assert svc.request(s.port, "GET", "/v1/jobs/" + jid, headers=bearer(c.user1)).status == 200
    assert svc.request(s.port, "GET", "/v1/jobs/" + jid, headers=bearer(c.admin)).status == 200
    with open(os.path.join(s.data_dir, "jobs", jid, "job.json")) as f:
        js = json.load(f)
    assert js.get("owner") == "alice", js
    svc.note("another user key's job after a restart", 404)


if __name__ == "__main__":
    sys.exit(svc.run_tests([test_keys_new, test_keys_file_bad_lines, test_bearer_and_basic,
                            test_401_shape, test_owners, test_batches_owned,
                            test_settings_need_admin, test_a1111_calls_per_key,
                            test_owner_survives_restart, test_media_type, test_origin,
                            test_host, test_token_file_rules, test_protected_mode,
                            test_file_modes], setup=setup))
