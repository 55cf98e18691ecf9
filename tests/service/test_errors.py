#!/usr/bin/env python3
"""tests/service/test_errors.py - every error status of the contract
(ctest: service_errors): 400 (malformed JSON, wrong types, huge numbers,
floats for integers, invalid UTF-8, bad base64, undecodable images), 401
(--token-file: missing, wrong, right), 404, 405 + Allow, 409, 413
(--max-body), 414, 431, 429 + Retry-After (--max-queue).  Every bad input
tried is printed with the status seen.  Three servers: plain, small limits,
token."""
import json
import os
import re
import socket
import time

import svc

PROMPT = "a blue square"
OK = dict(prompt=PROMPT, width=64, height=64, steps=1)
TOKEN = "s3cret-t0ken-for-tests"
CORS = "http://example.test"
INIT_PNG = svc.png_encode(64, 64, bytes((x * 7 + y * 3) & 255 for y in range(64)
                                        for x in range(64 * 3)))


class Ctx:
    pass


def setup():
    c = Ctx()
    c.s = svc.Server(["--threads", "1", "--max-batch", "4", "--cors-origin", CORS],
                     name="errors").start()
    c.small = svc.Server(["--threads", "1", "--max-batch", "1", "--max-body", "4096",
                          "--max-queue", "3"], name="small").start()
    c.auth = svc.Server(["--threads", "1"], token=TOKEN, name="auth").start()
    return c


def post_raw(s, body, path="/v1/jobs", ctype="application/json"):
    h = {"Content-Type": ctype} if ctype else {}
    return s.request("POST", path, body if isinstance(body, bytes) else body.encode(), headers=h)


def expect(r, status, code=None, field="__any__", what="", soft=None):
    """field: the expected `field`, a tuple of acceptable ones, or "__any__".
    soft: a list to collect the failure in (the caller raises at the end, so
    one wrong answer does not hide the next) instead of raising now."""
    label = what if what.split(" ")[0] in ("GET", "POST", "PUT", "DELETE", "PATCH", "HEAD") \
        else "%s %s" % (r.method, what or r.path)
    svc.note(label, "%d %s %s" % (
        r.status, r.error.get("code", ""), r.error.get("field") or "") if r.json else r.status)
    try:
        assert r.status == status, "%s: want %d, got %r" % (what, status, r)
        if code:
            assert r.error.get("code") == code, "%s: want code %s, got %r" % (what, code, r.json)
        if field != "__any__":
            ok = r.error.get("field") in field if isinstance(field, tuple) else \
                r.error.get("field") == field
            assert ok, "%s: want field %r, got %r" % (what, field, r.json)
    except AssertionError as e:
        if soft is None:
            raise
        soft.append(str(e))


def settle(soft, n):
    if soft:
        raise AssertionError("%d of %d inputs answered wrong:\n  %s" % (len(soft), n,
                                                                      "\n  ".join(soft)))


def cancel_accepted(s, r):
    """A bad input that was accepted anyway must not hold up the next tests."""
    if r.status == 202 and r.json and r.json.get("id", "").startswith("j_"):
        s.delete("/v1/jobs/" + r.json["id"])
    elif r.status == 202 and r.json and r.json.get("id", "").startswith("b_"):
        s.delete("/v1/batches/" + r.json["id"])


# (what, raw JSON body, code, field)
BAD_JSON = [
    ("not JSON", b"prompt=a cat", "invalid_json", None),
    ("empty body", b"", "invalid_json", None),
    ("truncated object", b'{"prompt": "a cat"', "invalid_json", None),
    ("trailing garbage", b'{"prompt": "a cat"} x', "invalid_json", None),
    ("array", b'[{"prompt": "a cat"}]', "invalid_json", None),
    ("string", b'"a cat"', "invalid_json", None),
    ("number", b"42", "invalid_json", None),
    ("null", b"null", "invalid_json", None),
    ("invalid UTF-8 0xff", b'{"prompt": "a \xff\xfe cat"}', "invalid_json", None),
    ("overlong UTF-8 C0 AF", b'{"prompt": "a \xc0\xaf cat"}', "invalid_json", None),
    ("UTF-8 surrogate ED A0 80", b'{"prompt": "a \xed\xa0\x80 cat"}', "invalid_json", None),
    ("truncated UTF-8 E2 82", b'{"prompt": "a \xe2\x82"}', "invalid_json", None),
    ("NaN literal", b'{"prompt": "a", "cfg_scale": NaN}', "invalid_json", None),
    ("single quotes", b"{'prompt': 'a'}", "invalid_json", None),
    ("nesting 100000 deep", b'{"prompt": "a", "x": ' + b"[" * 100000 + b"]" * 100000 + b"}",
     "invalid_json", None),
    ("nesting 65 deep", b'{"prompt": "a", "x": ' + b"[" * 64 + b"]" * 64 + b"}",
     "invalid_json", None),
    ("duplicate key", b'{"prompt": "a", "steps": 1, "steps": 2}', "invalid_json", None),
    ("key with U+0000", b'{"prompt": "a", "st\\u0000eps": 1}', "invalid_json", None),
    ("lone surrogate escape \\ud800", b'{"prompt": "a \\ud800 b"}', "invalid_json", None),
    ("lone low surrogate \\udc00", b'{"prompt": "a \\udc00 b"}', "invalid_json", None),
]

# (what, JSON members spliced into OK as text (the spelling of numbers kept), field)
BAD_PARAMS = [
    ("missing prompt", None, "prompt"),
    ("prompt number", '{"prompt": 5}', "prompt"),
    ("prompt null", '{"prompt": null}', "prompt"),
    ("prompt array", '{"prompt": ["a"]}', "prompt"),
    ("prompt with U+0000", '{"prompt": "a red\\u0000 circle"}', "prompt"),
    ("negative_prompt with U+0000", '{"negative_prompt": "\\u0000"}', "negative_prompt"),
    ("prompt 64 KiB + 1", json.dumps({"prompt": "r" * 65537}), "prompt"),
    ("strength 1.5 without init_image", '{"strength": 1.5}', "strength"),
    ("negative_prompt number", '{"negative_prompt": 5}', "negative_prompt"),
    ("width string", '{"width": "64"}', "width"),
    ("width 100 (not /8)", '{"width": 100}', "width"),
    ("width 56 (<64)", '{"width": 56}', "width"),
    ("width 0", '{"width": 0}', "width"),
    ("width -64", '{"width": -64}', "width"),
    ("width 4104 (>4096)", '{"width": 4104}', "width"),
    ("width 2^64", '{"width": 18446744073709551616}', "width"),
    ("width 64.0", '{"width": 64.0}', "width"),
    ("height 72.5", '{"height": 72.5}', "height"),
    ("height true", '{"height": true}', "height"),
    ("steps string", '{"steps": "2"}', "steps"),
    ("steps 30.5", '{"steps": 30.5}', "steps"),
    ("steps 1e3", '{"steps": 1e3}', "steps"),
    ("steps 2.0", '{"steps": 2.0}', "steps"),
    ("steps 1E1", '{"steps": 1E1}', "steps"),
    ("steps 0", '{"steps": 0}', "steps"),
    ("steps -1", '{"steps": -1}', "steps"),
    ("steps 1001", '{"steps": 1001}', "steps"),
    ("steps 2^53+1", '{"steps": 9007199254740993}', "steps"),
    ("steps 1e400", '{"steps": 1e400}', "steps"),
    ("steps 10^30", '{"steps": 1000000000000000000000000000000}', "steps"),
    ("steps -0.0", '{"steps": -0.0}', "steps"),
    ("cfg_scale string", '{"cfg_scale": "7"}', "cfg_scale"),
    ("cfg_scale -0.5", '{"cfg_scale": -0.5}', "cfg_scale"),
    ("cfg_scale 100.5", '{"cfg_scale": 100.5}', "cfg_scale"),
    ("cfg_scale 1e400", '{"cfg_scale": 1e400}', "cfg_scale"),
    ("sampler unknown", '{"sampler": "no_such_sampler"}', "sampler"),
    ("sampler number", '{"sampler": 3}', "sampler"),
    ("scheduler unknown", '{"scheduler": "no_such_schedule"}', "scheduler"),
    ("seed string", '{"seed": "1"}', "seed"),
    ("seed -2", '{"seed": -2}', "seed"),
    ("seed 2^64", '{"seed": 18446744073709551616}', "seed"),
    ("seed 1.5", '{"seed": 1.5}', "seed"),
    ("seed 1e3", '{"seed": 1e3}', "seed"),
    ("n 0", '{"n": 0}', "n"),
    ("n 17", '{"n": 17}', "n"),
    ("n 1.5", '{"n": 1.5}', "n"),
    ("n 2^53+1", '{"n": 9007199254740993}', "n"),
    ("rng gpu", '{"rng": "gpu"}', "rng"),
    ("rng cpu_scalar", '{"rng": "cpu_scalar"}', "rng"),
    ("rng number", '{"rng": 1}', "rng"),
    ("clip_skip 0", '{"clip_skip": 0}', "clip_skip"),
    ("clip_skip 13", '{"clip_skip": 13}', "clip_skip"),
    ("clip_skip string", '{"clip_skip": "1"}', "clip_skip"),
    ("guidance_rescale 1.5", '{"guidance_rescale": 1.5}', "guidance_rescale"),
    ("guidance_rescale -0.1", '{"guidance_rescale": -0.1}', "guidance_rescale"),
    ("init_image not base64", '{"init_image": "%%%not base64%%%"}', "init_image"),
    ("init_image number", '{"init_image": 5}', "init_image"),
    ("init_image base64 of text", '{"init_image": "aGVsbG8gd29ybGQ="}', "init_image"),
    ("init_image truncated PNG", json.dumps({"init_image": svc.b64(INIT_PNG[:60])}), "init_image"),
    ("init_image PNG 64x64 for width 128",
     json.dumps({"init_image": svc.b64(INIT_PNG), "width": 128, "height": 128}),
     ("init_image", "width", "height")),
    ("strength 0 with init_image", json.dumps({"init_image": svc.b64(INIT_PNG), "strength": 0}),
     "strength"),
    ("strength 1.5 with init_image",
     json.dumps({"init_image": svc.b64(INIT_PNG), "strength": 1.5}), "strength"),
    ("strength string", json.dumps({"init_image": svc.b64(INIT_PNG), "strength": "0.5"}),
     "strength"),
    ("mask without init_image", json.dumps({"mask": svc.b64(INIT_PNG)}), "mask"),
    ("strength too low for the steps",
     json.dumps({"init_image": svc.b64(INIT_PNG), "strength": 0.5, "steps": 1}), "strength"),
]


def merged(extra_text):
    """OK with the members of `extra_text` (a JSON object's text) replacing or
    adding to its own, spliced as text so `1e3`, `2.0` and big numbers reach
    the server spelled as written."""
    if extra_text is None:  # no prompt at all
        return json.dumps({k: v for k, v in OK.items() if k != "prompt"}).encode()
    inner = extra_text.strip()[1:-1]
    keys = re.findall(r'"(\w+)"\s*:', inner)
    base = json.dumps({k: v for k, v in OK.items() if k not in keys})
    return (base[:-1] + ", " + inner + "}").encode()


def test_invalid_json(c):
    soft = []
    for what, body, code, field in BAD_JSON:
        r = post_raw(c.s, body)
        expect(r, 400, code, field, "/v1/jobs " + what, soft)
        cancel_accepted(c.s, r)
    assert c.s.get("/healthz").status == 200
    settle(soft, len(BAD_JSON))


def test_invalid_parameters(c):
    soft = []
    for what, extra, field in BAD_PARAMS:
        body = merged(extra)
        r = post_raw(c.s, body)
        expect(r, 400, "invalid_parameter", field, "/v1/jobs " + what, soft)
        if r.status == 400 and not r.error.get("message"):
            soft.append("%s: empty message" % what)
        cancel_accepted(c.s, r)
    settle(soft, len(BAD_PARAMS))
    m = c.s.metrics()
    assert m.value("tessera_queue_images") == 0 and m.value("tessera_running_images") == 0, \
        "a rejected job was queued"


def test_valid_edge_inputs(c):
    """Inputs that must be accepted: integer for a float field, data-URL init
    image, unicode and escapes round-tripping, seed -1."""
    cases = [
        ("cfg_scale integer 7", dict(OK, cfg_scale=7)),
        ("cfg_scale 0", dict(OK, cfg_scale=0)),
        ("cfg_scale 100", dict(OK, cfg_scale=100)),
        ("guidance_rescale 1", dict(OK, guidance_rescale=1)),
        ("seed -1", dict(OK, seed=-1)),
        ("unicode prompt", dict(OK, prompt="一只红色的猫 🐱 café")),
        ("escapes in prompt", dict(OK, prompt='quote " backslash \\ newline \n tab \t ctrl \u0001')),
        ("init_image data URL, strength 0.5",
         dict(OK, steps=4, init_image="data:image/png;base64," + svc.b64(INIT_PNG), strength=0.5)),
        ("init_image plain base64, strength 1", dict(OK, init_image=svc.b64(INIT_PNG), strength=1)),
        ("n 16", dict(OK, n=16)),
        ("long prompt 20 KB", dict(OK, prompt=("red circle " * 2000)[:20000])),
        ("null = absent", dict(OK, seed=None, sampler=None, negative_prompt=None, n=None)),
        ("strength 0.5 without init_image", dict(OK, strength=0.5)),
        ("unknown field nested 40 deep", dict(OK, x=json.loads("[" * 40 + "]" * 40))),
    ]
    ids = []
    for what, body in cases:
        r = c.s.post("/v1/jobs", body)
        expect(r, 202, what="/v1/jobs " + what)
        ids.append((what, body, r.json["id"]))
    # a UTF-8 byte order mark before the JSON: RFC 8259 lets a parser ignore it or refuse it
    r = post_raw(c.s, b'\xef\xbb\xbf' + json.dumps(OK).encode())
    svc.note("/v1/jobs UTF-8 BOM before the object", r.status)
    assert r.status in (202, 400), r
    cancel_accepted(c.s, r)
    for what, body, jid in ids:
        j = c.s.wait_job(jid, timeout=300)
        assert j["state"] == "done", (what, j)
        assert j["params"]["prompt"] == body["prompt"], (what, j["params"]["prompt"][:100])
        if what == "unicode prompt":
            png = svc.png_decode(c.s.image(jid))
            assert body["prompt"] in j["images"][0]["infotext"], j["images"][0]["infotext"]
            assert "parameters" in png.texts
        if what.startswith("init_image data URL"):
            d = svc.tmpdir()
            path = os.path.join(d, "init.png")
            with open(path, "wb") as f:
                f.write(INIT_PNG)
            if j["params"]["seed"] < 2**63:
                svc.assert_same_image(c.s.image(jid), dict(prompt=PROMPT, width=64, height=64,
                                                           steps=4, seed=j["params"]["seed"],
                                                           strength=0.5, init_image=path),
                                      "img2img (data URL) vs generate --init-image")


def test_batch_validation(c):
    s = c.s
    good = {"prompt": PROMPT, "width": 64, "height": 64, "steps": 1}
    cases = [
        ("batch jobs missing", {"defaults": good}, "jobs"),
        ("batch jobs empty", {"defaults": good, "jobs": []}, "jobs"),
        ("batch jobs not array", {"defaults": good, "jobs": {"seed": 1}}, "jobs"),
        ("batch 1001 jobs", {"defaults": good, "jobs": [{}] * 1001}, "jobs"),
        ("batch jobs[3].width 100", {"defaults": good,
                                     "jobs": [{}, {}, {}, {"width": 100}, {}]}, "jobs[3].width"),
        ("batch jobs[1] no prompt anywhere", {"defaults": {"width": 64, "height": 64, "steps": 1},
                                              "jobs": [{"prompt": "x"}, {}]}, "jobs[1].prompt"),
        ("batch jobs[0] not object", {"defaults": good, "jobs": [5]}, "jobs[0]"),
        ("batch defaults bad steps", {"defaults": dict(good, steps=0), "jobs": [{}]},
         "jobs[0].steps"),
        ("batch jobs[2].seed -5", {"defaults": good, "jobs": [{}, {}, {"seed": -5}]},
         "jobs[2].seed"),
    ]
    before = s.metrics().value("tessera_http_responses_total", code="202") or 0
    soft = []
    for what, body, field in cases:
        r = s.post("/v1/batches", body)
        if what == "batch defaults bad steps":
            # the contract names jobs[i].x; accept defaults.steps too
            field = ("jobs[0].steps", "defaults.steps")
        expect(r, 400, "invalid_parameter", field, "/v1/batches " + what, soft)
        cancel_accepted(s, r)
    r = post_raw(s, b'{"jobs": [', "/v1/batches")
    expect(r, 400, "invalid_json", None, "/v1/batches truncated", soft)
    r = post_raw(s, b"[]", "/v1/batches")
    expect(r, 400, "invalid_json", None, "/v1/batches array", soft)
    settle(soft, len(cases) + 2)
    m = s.metrics()
    assert m.value("tessera_queue_images") == 0, "a rejected batch queued images"
    assert (m.value("tessera_http_responses_total", code="202") or 0) == before


def test_last_event_id(c):
    """Last-Event-ID: decimal digits up to 2^32-1, one rule for a job's and a
    batch's stream (the batch stream once read "+1" by strtoull).  evhttp strips
    the blanks around a header value."""
    s = c.s
    job = s.submit(**OK)
    s.wait_job(job["id"])
    b = s.post("/v1/batches", {"defaults": OK, "jobs": [{}]})
    assert b.status == 202, b
    s.wait_job(b.json["jobs"][0]["id"])
    soft = []
    paths = ("/v1/jobs/%s/events" % job["id"], "/v1/batches/%s/events" % b.json["id"])
    bad = ("+1", "-1", "1 2", "abc", "0x1", "4294967296", "99999999999999999999")
    for path in paths:
        for v in bad:
            r = s.get(path, headers={"Last-Event-ID": v})
            expect(r, 400, "invalid_parameter", "Last-Event-ID", "GET %s Last-Event-ID %r"
                   % (path, v), soft)
        for v in ("0", "1", "4294967295"):
            r = s.get(path, headers={"Last-Event-ID": v})
            expect(r, 200, what="GET %s Last-Event-ID %r" % (path, v), soft=soft)
    settle(soft, len(paths) * (len(bad) + 3))


def test_not_found(c):
    s = c.s
    done = s.submit(**OK)
    s.wait_job(done["id"])
    paths = ["/index.htm", "/nope", "/v1", "/v1/", "/v1/jobs/j_0000000000000000", "/v1/jobs/nope",
             "/v1/jobs/J_0000000000000000", "/v1/jobs/j_000000000000000", "/v1/jobs/j_0000000000000000/events",
             "/v1/jobs/j_0000000000000000/images/0.png", "/v1/jobs/%s/images/1.png" % done["id"],
             "/v1/jobs/%s/images/-1.png" % done["id"], "/v1/jobs/%s/images/abc.png" % done["id"],
             "/v1/jobs/%s/images/0.jpg" % done["id"], "/v1/jobs/%s/images/00.png" % done["id"],
             "/v1/jobs/%s/images/99999999999999999999.png" % done["id"],
             "/v1/jobs/%s/nope" % done["id"], "/v1/batches/b_0000000000000000",
             "/v1/batches/b_0000000000000000/events", "/v1/batches/%s" % done["id"],
             "/v1/jobs/%2e%2e/%2e%2e/etc/passwd", "/v1/jobs/../../../etc/passwd",
             "/v1/jobs/%s%%00" % done["id"], "/V1/MODELS", "/healthz/extra",
             "/v1/jobs/%s/images/0/tiles/1/0_0.jpg" % "j_0000000000000000",
             "/v1/jobs/%s/images/0/tiles/999/0_0.jpg" % done["id"],
             "/v1/jobs/%s/images/5/tiles" % done["id"], "/app.js/x"]
    soft = []
    for p in paths:
        try:
            r = s.get(p)
        except AssertionError as e:  # a spec violation: keep going
            soft.append("GET %s: %s" % (p, e))
            continue
        expect(r, 404, "not_found", what=p, soft=soft)
    for p in ("/v1/jobs/j_0000000000000000", "/v1/batches/b_0000000000000000"):
        r = s.delete(p)
        expect(r, 404, "not_found", what="DELETE " + p, soft=soft)
    settle(soft, len(paths) + 2)


def test_method_not_allowed(c):
    s = c.s
    j = s.submit(**OK)
    s.wait_job(j["id"])
    jid = j["id"]
    cases = [("GET", "/v1/jobs"), ("PUT", "/v1/jobs"), ("DELETE", "/v1/jobs"),
             ("PATCH", "/v1/jobs/" + jid), ("POST", "/v1/jobs/" + jid), ("PUT", "/v1/jobs/" + jid),
             ("POST", "/v1/jobs/%s/events" % jid), ("DELETE", "/v1/jobs/%s/images/0.png" % jid),
             ("GET", "/v1/batches"), ("PUT", "/v1/batches/b_0000000000000000"),
             ("POST", "/healthz"), ("DELETE", "/readyz"), ("POST", "/metrics"),
             ("DELETE", "/v1/models"), ("POST", "/v1/samplers"), ("PUT", "/v1/schedulers")]
    soft = []
    for method, path in cases:
        try:
            r = s.request(method, path, b"{}" if method in ("POST", "PUT", "PATCH") else None)
        except AssertionError as e:  # a spec violation (e.g. no Allow): keep going
            soft.append("%s %s: %s" % (method, path, e))
            continue
        expect(r, 405, "method_not_allowed", what="%s %s" % (method, path), soft=soft)
        cancel_accepted(s, r)
        if r.status != 405:
            continue
        allow = {m.strip() for m in r.headers["allow"].split(",")}
        want = {m.upper() for m in svc.SPEC.match(path)[1] if m in
                ("get", "post", "put", "delete", "patch")}
        if not want <= allow <= want | {"HEAD", "OPTIONS"}:
            soft.append("%s %s: Allow %s, want %s" % (method, path, sorted(allow), sorted(want)))
    # methods evhttp may not know at all: still the contract's 405, JSON, and
    # a response the client can delimit (Content-Length or close) at once
    for method in ("FOO", "TRACE", "CONNECT"):
        t0 = time.time()
        try:
            r = svc.raw(s.port, ("%s /v1/jobs HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\n\r\n"
                                 % method).encode(), method=method, path="/v1/jobs", timeout=5,
                        validate_spec=False)
        except AssertionError as e:
            soft.append("%s /v1/jobs: %s" % (method, e))
            continue
        took = time.time() - t0
        svc.note("%s /v1/jobs" % method, "%d %s%s" % (r.status, r.headers.get("content-type"),
                                                      ", not delimited" if took > 4 else ""))
        if took > 4:
            soft.append("%s /v1/jobs: %d without Content-Length on an open connection (the "
                        "client waits for the close)" % (method, r.status))
        if r.status != 405:
            soft.append("%s /v1/jobs: %d %s %r, want 405 JSON with Allow" % (
                method, r.status, r.headers.get("content-type"), r.body[:80]))
        else:
            try:
                svc.validate(r)
            except AssertionError as e:
                soft.append(str(e))
    assert s.get("/healthz").status == 200
    settle(soft, len(cases) + 3)


def test_conflict(c):
    s = c.s
    j = s.submit(**OK)
    s.wait_job(j["id"])
    r = s.delete("/v1/jobs/" + j["id"])
    expect(r, 409, "conflict", what="DELETE finished job")


def test_payload_too_large(c):
    s = c.small
    r = s.post("/v1/jobs", dict(OK, prompt="x" * 5000))
    expect(r, 413, "payload_too_large", None, "/v1/jobs body 5 KB > --max-body 4096")
    r = s.post("/v1/batches", {"defaults": OK, "jobs": [{"seed": i} for i in range(400)]})
    expect(r, 413, "payload_too_large", None, "/v1/batches body > --max-body 4096")
    # a huge Content-Length is refused without waiting for the body
    t0 = time.time()
    r = s.raw(b"POST /v1/jobs HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
              b"Content-Length: 10000000000\r\n\r\n{\"prompt\":", method="POST", path="/v1/jobs",
              timeout=20)
    expect(r, 413, "payload_too_large", what="/v1/jobs Content-Length 10^10, 10 bytes sent")
    assert time.time() - t0 < 10, "413 took %.1fs" % (time.time() - t0)
    # chunked bodies count too
    chunk = b"x" * 1000
    body = b"".join(b"%x\r\n%s\r\n" % (len(chunk), chunk) for _ in range(6)) + b"0\r\n\r\n"
    r = s.raw(b"POST /v1/jobs HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
              b"Transfer-Encoding: chunked\r\n\r\n" + body, method="POST", path="/v1/jobs")
    expect(r, 413, "payload_too_large", what="/v1/jobs chunked 6 KB > --max-body 4096")
    # just under the limit is fine
    small = json.dumps(dict(OK, prompt="y" * 3900))
    assert len(small) < 4096
    r = s.post("/v1/jobs", small)
    expect(r, 202, what="/v1/jobs body just under --max-body")
    s.wait_job(r.json["id"])
    assert s.get("/healthz").status == 200


def test_uri_too_long(c):
    s = c.s
    for path in ("/v1/jobs/" + "a" * 9000, "/healthz?x=" + "b" * 9000):
        r = s.raw(("GET %s HTTP/1.1\r\nHost: localhost\r\n\r\n" % path).encode(), path=path)
        expect(r, 414, "uri_too_long", None, "GET path of %d bytes" % len(path))
    # 7 KiB is within the limit (the request line is under 8 KiB)
    path = "/healthz?x=" + "c" * 7000
    r = s.raw(("GET %s HTTP/1.1\r\nHost: localhost\r\n\r\n" % path).encode(), path=path)
    expect(r, 200, what="GET path of 7 KB")
    assert s.get("/healthz").status == 200


def test_headers_too_large(c):
    s = c.s
    r = s.raw(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nX-Big: " + b"a" * 17000 + b"\r\n\r\n",
              path="/healthz")
    expect(r, 431, "headers_too_large", None, "GET one 17 KB header")
    many = b"".join(b"X-H%d: %s\r\n" % (i, b"v" * 40) for i in range(500))
    r = s.raw(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n" + many + b"\r\n", path="/healthz")
    expect(r, 431, "headers_too_large", None, "GET 500 headers, 24 KB")
    r = s.raw(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nX-Ok: " + b"a" * 12000 + b"\r\n\r\n",
              path="/healthz")
    expect(r, 200, what="GET one 12 KB header")
    assert s.get("/healthz").status == 200


def test_malformed_http(c):
    s = c.s
    for what, data in [("garbage request line", b"GARBAGE\r\n\r\n"),
                       ("HTTP/9.9", b"GET /healthz HTTP/9.9\r\nHost: localhost\r\n\r\n"),
                       ("bad Content-Length", b"POST /v1/jobs HTTP/1.1\r\nHost: localhost\r\n"
                                              b"Content-Length: abc\r\n\r\n{}"),
                       ("negative Content-Length", b"POST /v1/jobs HTTP/1.1\r\nHost: localhost\r\n"
                                                   b"Content-Length: -5\r\n\r\n{}"),
                       ("header without colon", b"GET /healthz HTTP/1.1\r\nHost x\r\n\r\n")]:
        try:
            r = svc.raw(s.port, data, path="/v1/jobs" if b"POST" in data else "/healthz",
                        method="POST" if b"POST" in data else "GET", timeout=10,
                        validate_spec=False)
            status = r.status
        except AssertionError:
            status = "closed without a response"
        svc.note(what, status)
        assert status == "closed without a response" or 400 <= status < 500, (what, status)
        if isinstance(status, int):
            svc.validate(r)
    assert s.get("/healthz").status == 200


def test_queue_full(c):
    s = c.small
    a = s.submit(prompt=PROMPT, width=64, height=64, steps=svc.LONG)
    svc.wait_until(lambda: s.job(a["id"])["state"] == "running", 60, "A running")
    b = s.submit(prompt=PROMPT, width=64, height=64, steps=1, n=3)   # queue = 3 = --max-queue
    r = s.post("/v1/jobs", dict(OK))
    expect(r, 429, "queue_full", None, "/v1/jobs 4th queued image, --max-queue 3")
    ra = int(r.headers["retry-after"])
    assert ra >= 1, r.headers
    r = s.post("/v1/batches", {"defaults": OK, "jobs": [{}]})
    expect(r, 429, "queue_full", None, "/v1/batches 1 job, queue full")
    s.delete("/v1/jobs/" + b["id"])
    r = s.post("/v1/jobs", dict(OK, n=4))
    expect(r, 429, "queue_full", None, "/v1/jobs n=4 > --max-queue 3 (queue empty)")
    r = s.post("/v1/batches", {"defaults": OK, "jobs": [{}, {}, {}, {}]})
    expect(r, 429, "queue_full", None, "/v1/batches 4 jobs > --max-queue 3")
    r = s.post("/v1/jobs", dict(OK, n=3))
    expect(r, 202, what="/v1/jobs n=3 = --max-queue after cancelling")
    s.delete("/v1/jobs/" + r.json["id"])
    s.delete("/v1/jobs/" + a["id"])
    m = s.metrics()
    assert m.value("tessera_http_responses_total", code="429") >= 4


def test_auth(c):
    s = c.auth
    for what, h in [("no Authorization", None), ("empty Authorization", {"Authorization": ""}),
                    ("wrong token", {"Authorization": "Bearer wrong"}),
                    ("token prefix", {"Authorization": "Bearer " + TOKEN[:-1]}),
                    ("token + 1 char", {"Authorization": "Bearer " + TOKEN + "x"}),
                    ("Basic scheme", {"Authorization": "Basic " + svc.b64(TOKEN.encode())}),
                    ("token without scheme", {"Authorization": TOKEN}),
                    ("Bearer with no token", {"Authorization": "Bearer "})]:
        for method, path, body in [("GET", "/v1/models", None), ("POST", "/v1/jobs", OK),
                                   ("GET", "/v1/jobs/j_0000000000000000", None),
                                   ("DELETE", "/v1/jobs/j_0000000000000000", None)]:
            r = svc.request(s.port, method, path, body, h or {})
            expect(r, 401, "unauthorized", None, "%s %s %s" % (method, path, what))
            assert r.headers["www-authenticate"].startswith("Bearer"), r.headers
    r = s.get("/v1/models")
    expect(r, 200, what="GET /v1/models right token")
    j = s.submit(**OK)
    assert s.wait_job(j["id"])["state"] == "done"
    r = s.get("/v1/jobs/%s/images/0.png" % j["id"])
    expect(r, 200, what="GET image right token")
    r = svc.request(s.port, "GET", "/v1/jobs/%s/images/0.png" % j["id"])
    expect(r, 401, "unauthorized", what="GET image no token")
    r = svc.request(s.port, "GET", "/v1/jobs/%s/events" % j["id"])
    expect(r, 401, "unauthorized", what="GET events no token")
    ev = s.events("/v1/jobs/%s/events" % j["id"])
    assert ev[-1].name == "done"
    # the scheme is case-insensitive (RFC 7235)
    r = svc.request(s.port, "GET", "/v1/models", headers={"Authorization": "bearer " + TOKEN})
    svc.note("GET /v1/models 'bearer' lower-case scheme", r.status)
    # probes: reported, either answer is within the spec
    for p in ("/healthz", "/readyz", "/metrics"):
        r = svc.request(s.port, "GET", p)
        svc.note("GET %s without token (--token-file set)" % p, r.status)
        assert r.status in (200, 401), r


def test_token_file_missing():
    d = svc.tmpdir()
    srv = svc.Server(["--token-file", os.path.join(d, "absent")], name="no-token-file")
    t0 = time.time()
    try:
        srv.start(timeout=30)
        ok = False
    except AssertionError:
        ok = not srv.alive()
    svc.note("serve --token-file /absent", "exit %s" % srv.proc.returncode)
    assert ok and srv.proc.returncode not in (0, None), \
        "serve started with a missing --token-file:\n" + srv.output()
    assert time.time() - t0 < 30
    # an empty token file is refused too (an empty token would let anyone in)
    tf = os.path.join(d, "empty")
    open(tf, "w").close()
    srv = svc.Server(["--token-file", tf], name="empty-token-file")
    try:
        srv.start(timeout=30)
        ok = False
    except AssertionError:
        ok = not srv.alive()
    svc.note("serve --token-file (empty file)", "exit %s" % srv.proc.returncode)
    assert ok, "serve started with an empty --token-file:\n" + srv.output()


def test_cors(c):
    s = c.s
    for path in ("/v1/jobs", "/v1/jobs/j_0000000000000000/events", "/healthz"):
        r = s.request("OPTIONS", path, headers={"Origin": CORS,
                                                "Access-Control-Request-Method": "POST"})
        svc.note("OPTIONS %s (--cors-origin)" % path, r.status)
        assert r.status == 204, r
        assert r.headers.get("access-control-allow-origin") == CORS, r.headers
        allow_h = {h.strip().lower() for h in
                   r.headers.get("access-control-allow-headers", "").split(",")}
        assert {"authorization", "content-type", "last-event-id", "if-none-match"} <= allow_h, \
            r.headers
        assert r.headers.get("access-control-max-age") == "600", r.headers
    for r in (s.get("/v1/models"), s.get("/v1/jobs/j_0000000000000000"),
              s.post("/v1/jobs", b"nope")):
        assert r.headers.get("access-control-allow-origin") == CORS, (r, r.headers)
    # an event stream (the page's progress) carries it too
    job = s.submit(**OK)
    ev = svc.SSE(s.port, "/v1/jobs/%s/events" % job["id"], headers=s.auth(None))
    try:
        assert ev.status == 200, ev.status
        assert ev.headers.get("access-control-allow-origin") == CORS, ev.headers
        assert ev.headers.get("content-type") == "text/event-stream", ev.headers
    finally:
        ev.close()
    # without --cors-origin: no CORS header
    r = c.small.get("/v1/models")
    assert "access-control-allow-origin" not in r.headers, r.headers


def test_still_healthy(c):
    for s in (c.s, c.small, c.auth):
        assert s.alive(), s.output()
        assert s.get("/healthz").status == 200
    # nothing left over on a raw connection that sends nothing
    sock = socket.create_connection(("127.0.0.1", c.s.port))
    sock.close()
    assert c.s.get("/healthz").status == 200


TESTS = [test_invalid_json, test_invalid_parameters, test_valid_edge_inputs, test_batch_validation,
         test_last_event_id, test_not_found, test_method_not_allowed, test_conflict, test_payload_too_large,
         test_uri_too_long, test_headers_too_large, test_malformed_http, test_queue_full,
         test_auth, test_token_file_missing, test_cors, test_still_healthy]

if __name__ == "__main__":
    raise SystemExit(svc.run_tests(TESTS, setup=setup))
