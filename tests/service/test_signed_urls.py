"""tests/service/test_signed_urls.py - signed image URLs (issue 62): with keys
on, every image, tile and manifest URL the server hands out carries
`?md5=SIG&expires=EPOCH` in nginx's secure_link format (SIG = base64url of
MD5("<expires><path> <secret>"), recomputed here with hashlib from the
secret file the test wrote), and

- such a URL opens the PNG, tile or manifest without Authorization, and the
  answer may be cached publicly until the expiry;
- a tampered one (signature, expiry, another path) or an expired one gets
  403, even with a valid key; a bare URL without Authorization gets 401; a
  bare URL with a key works but is `private`;
- every viewer of one job gets the same URL (job record, batch record, SSE
  events, OpenAI's response_format url), also across a restart;
- a tiny --url-ttl expires for real, and the job record then hands out the
  next window's URL;
- keys off: no query at all; the secret file's rules (exit 2).

docs/security.md, "Signed URLs", names each case."""
import base64
import hashlib
import os
import stat
import sys
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import svc  # noqa: E402

SECRET = "test-url-secret-0123456789abcdef"
PROMPT = "a red circle in the top left on a blue background"


def sign(path, expires, secret=SECRET):
    d = hashlib.md5(("%s%s %s" % (expires, path, secret)).encode()).digest()
    return base64.urlsafe_b64encode(d).decode().rstrip("=")


def split(url):
    u = urllib.parse.urlsplit(url)
    return u.path, dict(urllib.parse.parse_qsl(u.query))


def bearer(k):
    return {"Authorization": "Bearer " + k}


def get(port, url, headers=None):
    return svc.request(port, "GET", url, headers=headers)


class Ctx:
    pass


def write_secret(d, text, mode=0o600, name="url-secret"):
    f = os.path.join(d, name)
    with open(f, "w") as fh:
        fh.write(text + "\n")
    os.chmod(f, mode)
    return f


def setup():
    c = Ctx()
    d = svc.tmpdir("tsr-signed-")
    c.dir = d
    c.keys = os.path.join(d, "keys")
    c.alice = svc.new_key(c.keys, "alice")
    c.bob = svc.new_key(c.keys, "bob")
    c.root = svc.new_key(c.keys, "root", admin=True)
    c.secret_file = write_secret(d, SECRET)
    c.s = svc.Server(["--threads", "1", "--keys", c.keys, "--url-secret-file", c.secret_file,
                      "--tile-size", "32"], name="signed").start()
    r = c.s.request("POST", "/v1/jobs", {"prompt": PROMPT, "steps": 6, "seed": 3, "n": 2,
                                         "width": 64, "height": 64}, headers=bearer(c.alice))
    assert r.status == 202, r
    c.job = r.json["id"]
    c.events = c.s.events("/v1/jobs/%s/events" % c.job, headers=bearer(c.alice))
    c.record = c.s.get("/v1/jobs/" + c.job, headers=bearer(c.alice)).json
    assert c.record["state"] == "done", c.record
    return c


def test_signature_format(c):
    """Each URL handed out is path?md5=SIG&expires=E, SIG as nginx computes it."""
    now = time.time()
    urls = [im["url"] for im in c.record["images"]]
    urls += [t["url"] for e in c.events if e.name == "tiles" for t in e.data["tiles"]]
    urls += [e.data["manifest"] for e in c.events if e.name == "tiles"]
    urls += [e.data["url"] for e in c.events if e.name == "image"]
    assert len(urls) > 6, urls
    for url in urls:
        path, q = split(url)
        assert url == "%s?md5=%s&expires=%s" % (path, q["md5"], q["expires"]), url
        assert q["md5"] == sign(path, q["expires"]), url
        # the default --url-ttl (a day): half to one and a half days left
        left = int(q["expires"]) - now
        assert 43200 - 5 <= left <= 129600 + 5, left
    svc.note("URLs of one job (record, tiles, manifest, image events): %d" % len(urls), "signed")


def test_signed_url_without_key(c):
    s = c.s
    url = c.record["images"][0]["url"]
    path, q = split(url)
    r = get(s.port, url)  # no Authorization
    assert r.status == 200 and r.body[:8] == b"\x89PNG\r\n\x1a\n", r
    cc = r.headers["cache-control"]
    assert cc.startswith("public, max-age=") and cc.endswith(", immutable"), cc
    max_age = int(cc.split("max-age=")[1].split(",")[0])
    assert abs(max_age - (int(q["expires"]) - time.time())) <= 3, (cc, q)
    keyed = get(s.port, path, headers=bearer(c.alice))
    assert keyed.status == 200 and keyed.body == r.body, keyed
    assert keyed.headers["cache-control"] == "private, max-age=31536000, immutable", keyed.headers
    # HEAD and a revalidation too
    assert svc.request(s.port, "HEAD", url).status == 200
    etag = r.headers["etag"]
    assert get(s.port, url, headers={"If-None-Match": etag}).status == 304
    # tiles and the manifest
    tiles = [e for e in c.events if e.name == "tiles"]
    for t in tiles[-1].data["tiles"]:
        rt = get(s.port, t["url"])
        assert rt.status == 200 and rt.headers["content-type"] == "image/jpeg", (t, rt)
    m = get(s.port, tiles[-1].data["manifest"])
    assert m.status == 200 and m.headers["cache-control"] == "no-cache", m
    for t in m.json["tiles"]:
        assert get(s.port, t["url"]).status == 200, t
    mk = get(s.port, split(tiles[-1].data["manifest"])[0], headers=bearer(c.alice))
    assert mk.status == 200 and mk.headers["cache-control"] == "private, no-cache", mk.headers
    svc.note("GET signed PNG, tile, manifest without Authorization", 200)


def test_signed_url_is_a_capability_for_its_path(c):
    """Another key's job is 404 by its bare URL, but its signed URL opens it
    (the holder of the URL was given it); the signature binds the path."""
    s = c.s
    url = c.record["images"][0]["url"]
    path, q = split(url)
    assert get(s.port, path, headers=bearer(c.bob)).status == 404
    # with a key and a valid signature, the signature decides: served
    assert get(s.port, url, headers=bearer(c.bob)).status == 200


def test_tampered_or_expired_403(c):
    s = c.s
    url = c.record["images"][0]["url"]
    path, q = split(url)
    sig, exp = q["md5"], q["expires"]
    flipped = ("B" if sig[5] == "A" else "A").join([sig[:5], sig[6:]])
    other = path.replace("/0.png", "/1.png")
    cases = {
        "a flipped character": "%s?md5=%s&expires=%s" % (path, flipped, exp),
        "a later expiry": "%s?md5=%s&expires=%d" % (path, sig, int(exp) + 3600),
        "another image": "%s?md5=%s&expires=%s" % (other, sig, exp),
        "another secret": "%s?md5=%s&expires=%s" % (path, sign(path, exp, "x" * 32), exp),
        "md5 only": "%s?md5=%s" % (path, sig),
        "expires only": "%s?expires=%s" % (path, exp),
        "twice": "%s?md5=%s&expires=%s&md5=%s" % (path, sig, exp, sig),
    }
    past = int(time.time()) - 10
    cases["expired"] = "%s?md5=%s&expires=%d" % (path, sign(path, past), past)
    for what, u in cases.items():
        for h in (None, bearer(c.alice)):  # a key does not mend a bad signature
            r = get(s.port, u, headers=h)
            assert r.status == 403 and r.error["code"] == "forbidden", (what, u, r)
            want = "expired" if what == "expired" else "not valid"
            assert want in r.error["message"], (what, r.error)
        svc.note("signed URL with %s" % what, 403)
    # the manifest and a tile likewise
    tiles = [e for e in c.events if e.name == "tiles"][-1].data
    for u in (tiles["manifest"], tiles["tiles"][0]["url"]):
        p, qq = split(u)
        assert get(s.port, "%s?md5=%s&expires=%d" % (p, qq["md5"],
                                                     int(qq["expires"]) + 1)).status == 403


def test_bare_url_401(c):
    s = c.s
    path = split(c.record["images"][0]["url"])[0]
    for p in (path, path.replace(".png", "/tiles"), path + "?v=1"):
        r = get(s.port, p)
        assert r.status == 401 and r.error["code"] == "unauthorized", (p, r)
        assert r.headers["www-authenticate"] == "Bearer"
    # a signature does not open other routes: the job record needs a key
    q = split(c.record["images"][0]["url"])[1]
    r = get(s.port, "/v1/jobs/%s?md5=%s&expires=%s" % (c.job, q["md5"], q["expires"]))
    assert r.status == 401, r
    svc.note("GET bare image URL without Authorization", 401)


def test_same_url_for_every_viewer(c):
    """Owner and admin, record, events and batch views: one URL per image."""
    s = c.s
    mine = [im["url"] for im in s.get("/v1/jobs/" + c.job, headers=bearer(c.alice)).json["images"]]
    admin = [im["url"] for im in s.get("/v1/jobs/" + c.job, headers=bearer(c.root)).json["images"]]
    assert mine == admin == [im["url"] for im in c.record["images"]], (mine, admin)
    ev = sorted((e.data["index"], e.data["url"]) for e in c.events if e.name == "image")
    assert [u for _, u in ev] == mine, (ev, mine)
    again = s.events("/v1/jobs/%s/events" % c.job, headers=bearer(c.root))
    tiles_a = [t["url"] for e in c.events if e.name == "tiles" for t in e.data["tiles"]]
    tiles_b = [t["url"] for e in again if e.name == "tiles" for t in e.data["tiles"]]
    assert tiles_a == tiles_b, "tile URLs differ between viewers"
    # a batch: its record and its events sign the same way
    r = s.request("POST", "/v1/batches", {"defaults": {"steps": 3, "width": 64, "height": 64},
                                          "jobs": [{"prompt": PROMPT}, {"prompt": "a star"}]},
                  headers=bearer(c.alice))
    assert r.status == 202, r
    bid = r.json["id"]
    bev = s.events("/v1/batches/%s/events" % bid, headers=bearer(c.alice))
    rec = s.get("/v1/batches/" + bid, headers=bearer(c.root)).json
    from_rec = sorted(im["url"] for j in rec["jobs"] for im in j["images"])
    from_ev = sorted(e.data["url"] for e in bev if e.name == "image")
    assert from_rec == from_ev and len(from_rec) == 2, (from_rec, from_ev)
    for u in from_rec:
        path, q = split(u)
        assert q["md5"] == sign(path, q["expires"]) and get(s.port, u).status == 200, u
    svc.note("the image URL seen by owner, admin, events, batch", "one URL")


def test_openai_url(c):
    s = c.s
    r = s.request("POST", "/v1/images/generations",
                  {"prompt": "a blue square", "size": "64x64", "steps": 3, "seed": 1,
                   "response_format": "url"}, headers=bearer(c.alice))
    assert r.status == 200, r
    url = r.json["data"][0]["url"]
    u = urllib.parse.urlsplit(url)
    assert u.netloc == "127.0.0.1:%d" % s.port, url
    q = dict(urllib.parse.parse_qsl(u.query))
    assert q["md5"] == sign(u.path, q["expires"]), url
    got = get(s.port, u.path + "?" + u.query)
    assert got.status == 200 and got.body[:4] == b"\x89PNG", got
    svc.note("OpenAI response_format url, fetched without a key", 200)


def test_restart_keeps_urls(c):
    """The expiry is the job's (created + ttl), the secret the file's: a
    restarted server hands out byte-identical URLs, so a CDN's copies stay."""
    s = c.s
    before = [im["url"] for im in c.record["images"]]
    s.stop()
    s.start()
    after = [im["url"] for im in s.get("/v1/jobs/" + c.job, headers=bearer(c.alice)).json["images"]]
    assert before == after, (before, after)
    assert get(s.port, after[1]).status == 200


def test_short_ttl_expires():
    """--url-ttl 2: the URL expires for real (403), and the record then hands
    out the next window's URL, which works.  The default data-dir secret is
    made 0600 and written for nginx."""
    d = svc.tmpdir("tsr-signed-ttl-")
    keys = os.path.join(d, "keys")
    k = svc.new_key(keys, "alice")
    s = svc.Server(["--threads", "1", "--keys", keys, "--url-ttl", "2"], name="ttl").start()
    try:
        own = os.path.join(s.data_dir, "url-secret")
        secret = open(own).read().strip()
        assert len(secret) == 43 and stat.S_IMODE(os.stat(own).st_mode) == 0o600, secret
        snippet = open(os.path.join(s.data_dir, "url-secret.nginx")).read()
        assert 'set $tessera_url_secret "%s";' % secret in snippet, snippet
        assert stat.S_IMODE(os.stat(os.path.join(s.data_dir, "url-secret.nginx")).st_mode) == 0o600
        job = s.request("POST", "/v1/jobs", {"prompt": PROMPT, "steps": 2, "width": 64,
                                             "height": 64}, headers=bearer(k)).json["id"]
        deadline = time.time() + 60
        while True:
            rec = s.get("/v1/jobs/" + job, headers=bearer(k)).json
            if rec["state"] == "done" or time.time() > deadline:
                break
            time.sleep(0.05)
        url = rec["images"][0]["url"]
        path, q = split(url)
        assert q["md5"] == sign(path, q["expires"], secret), url
        left = int(q["expires"]) - time.time()
        assert 0 <= left <= 4, left
        assert get(s.port, url).status == 200
        while time.time() < int(q["expires"]) + 1.2:
            time.sleep(0.1)
        r = get(s.port, url)
        assert r.status == 403 and "expired" in r.error["message"], r
        fresh = s.get("/v1/jobs/" + job, headers=bearer(k)).json["images"][0]["url"]
        assert fresh != url and int(split(fresh)[1]["expires"]) > int(q["expires"]), fresh
        assert (int(split(fresh)[1]["expires"]) - int(q["expires"])) % 2 == 0, fresh
        assert get(s.port, fresh).status == 200
        svc.note("--url-ttl 2: the URL after its expiry", 403)
    finally:
        s.stop()


def test_keys_off_no_query():
    s = svc.Server(["--threads", "1"], name="nokeys").start()
    try:
        job = s.submit(prompt=PROMPT, steps=2, width=64, height=64)["id"]
        rec = s.wait_job(job)
        assert rec["images"][0]["url"] == "/v1/jobs/%s/images/0.png" % job, rec
        ev = s.events("/v1/jobs/%s/events" % job)
        for e in ev:
            if e.name == "tiles":
                assert "?" not in e.data["manifest"] and all("?" not in t["url"]
                                                             for t in e.data["tiles"]), e
        r = s.get(rec["images"][0]["url"])
        assert r.headers["cache-control"] == "public, max-age=31536000, immutable", r.headers
        assert not os.path.exists(os.path.join(s.data_dir, "url-secret"))
    finally:
        s.stop()
    svc.note("keys off: image URL", "no query")


def start_fails(args, name):
    srv = svc.Server(args, name=name)
    try:
        srv.start(timeout=30)
    except AssertionError:
        srv.wait(30)
        return srv.proc.returncode, srv.output()
    srv.stop()
    raise AssertionError("%s started:\n%s" % (name, srv.output()))


def test_secret_file_rules(c):
    d = svc.tmpdir("tsr-signed-bad-")
    cases = [
        (write_secret(d, "short", name="short"), "characters; it needs 16"),
        (write_secret(d, "a" * 20 + " b" * 5, name="space"), "not a base64 one"),
    ]
    world = os.path.join(d, "world")
    with open(world, "w") as f:
        f.write(SECRET + "\n")
    os.chmod(world, 0o644)
    cases.append((world, "can be read by others"))
    for i, (path, why) in enumerate(cases):
        rc, out = start_fails(["--keys", c.keys, "--url-secret-file", path], "badsecret%d" % i)
        assert rc == 2 and why in out, (why, rc, out)
    rc, out = start_fails(["--url-secret-file", c.secret_file], "secret-without-keys")
    assert rc == 2 and "needs --keys" in out, out
    for bad in ("0", "-5", "x"):
        rc, out = start_fails(["--keys", c.keys, "--url-ttl", bad], "badttl")
        assert rc == 2 and "url-ttl" in out, (bad, rc, out)
    svc.note("serve --url-secret-file short / not base64 / mode 644 / without keys", "exit 2")


def main():
    return svc.run_tests([test_signature_format, test_signed_url_without_key,
                          test_signed_url_is_a_capability_for_its_path,
                          test_tampered_or_expired_403, test_bare_url_401,
                          test_same_url_for_every_viewer, test_openai_url,
                          test_restart_keeps_urls, test_short_ttl_expires,
                          test_keys_off_no_query, test_secret_file_rules], setup=setup)


if __name__ == "__main__":
    raise SystemExit(main())
