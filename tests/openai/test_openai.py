"""tests/openai/test_openai.py - the OpenAI-compatible images API
(docs/compat-openai.md) driven by the official `openai` Python client, as its
users drive it, plus raw HTTP checks of the shapes and of hostile input.

Runs with .venv-test/bin/python (scripts/setup-test-venv.sh installs the
pinned client).  The harness (Server, assert_same_image, png_decode, ...) is
tests/service/svc.py.  Do not import locust here: with openai in the same
process it breaks ssl.

The raw HTTP calls (svc.request, http.client) are validated against
docs/openapi.yaml (tests/service/openapi.py): statuses, headers, bodies and
each stream event's data (the operation's x-tessera-events), so a drift
between service/compat_openai*.c and the spec fails the case.
"""
import base64
import http.client
import json
import os
import socket
import sys
import time
import urllib.parse
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "service"))
import svc  # noqa: E402

import openai  # noqa: E402
from openai import OpenAI  # noqa: E402

TOKEN = "openai-test-token"
SIZE = 64
STEPS = 6


def client(s, key=TOKEN):
    return OpenAI(base_url="http://127.0.0.1:%d/v1" % s.port, api_key=key, max_retries=0,
                  timeout=120)


def gen_params(prompt, seed, steps=STEPS, size=SIZE):
    return dict(prompt=prompt, width=size, height=size, steps=steps, seed=seed)


def check_stream(resp, text, path):
    """A raw event-stream answer: its status and headers validated against
    the spec, each event's data against the operation's x-tessera-events
    (the `event:` line must be the data's type).  Returns the types."""
    svc.validate(svc.Response(resp.status, resp.reason, resp.getheaders(), b"", "POST", path))
    schemas = svc.SPEC.events(path, "POST")
    kinds = []
    for block in text.split("\n\n"):
        lines = [line for line in block.split("\n") if line and not line.startswith(":")]
        if not lines:
            continue  # a keepalive comment, or the end
        fields = dict(line.split(": ", 1) for line in lines)
        data = svc.openapi._strict_json(fields["data"].encode())
        assert data["type"] == fields["event"], block[:200]
        svc.SPEC.check_event(schemas, fields["event"], data, "POST " + path)
        kinds.append(data["type"])
    return kinds


def form_body(boundary, parts):
    """multipart/form-data of (name, value bytes, filename or None) parts."""
    out = b""
    for name, value, filename in parts:
        disp = 'form-data; name="%s"' % name
        if filename:
            disp += '; filename="%s"' % filename
        out += b"--" + boundary.encode() + b"\r\nContent-Disposition: " + disp.encode() + \
            b"\r\n\r\n" + value + b"\r\n"
    return out + b"--" + boundary.encode() + b"--\r\n"


def assert_error_shape(resp, status, param="__any__"):
    assert resp.status == status, "%s: want %d, got %d %r" % (resp.path, status, resp.status,
                                                              resp.body[:300])
    body = json.loads(resp.body)
    assert set(body) == {"error"}, body
    e = body["error"]
    assert set(e) == {"message", "type", "param", "code"}, e
    assert isinstance(e["message"], str) and e["message"], e
    want_type = {400: "invalid_request_error", 401: "authentication_error",
                 404: "invalid_request_error", 405: "invalid_request_error",
                 415: "invalid_request_error", 403: "permission_error",
                 429: "rate_limit_error"}.get(status, "server_error")
    assert e["type"] == want_type, e
    if param != "__any__":
        assert e["param"] == param, e
    return e


def test_images():
    d = svc.tmpdir("tsr-oai-img-")
    w = h = SIZE
    rgb = bytes(((x * 4 + y) % 256, (y * 4) % 256, 128) [c] for y in range(h) for x in range(w)
                for c in range(3))
    img = svc.png_encode(w, h, rgb)
    # OpenAI's mask: alpha 0 = edit (the left half)
    rgba = b"".join(bytes([0, 0, 0, 0 if x < w // 2 else 255]) for y in range(h)
                    for x in range(w))
    mask = svc.png_encode(w, h, rgba, 4)
    # the same mask in Tessera's convention: white = repaint
    gray = b"".join(bytes([255 if x < w // 2 else 0]) for y in range(h) for x in range(w))
    native_mask = svc.png_encode(w, h, gray, 1)
    paths = {}
    for name, data in (("img.png", img), ("mask.png", mask)):
        paths[name] = os.path.join(d, name)
        with open(paths[name], "wb") as f:
            f.write(data)
    return {"img": img, "mask": mask, "native_mask": native_mask, "paths": paths}


def setup():
    # one thread, as `tessera generate` in svc.generate(): pixel-exact comparisons
    s = svc.Server(["--threads", "1"], token=TOKEN, name="openai").start()
    return {"s": s, "files": test_images()}


def teardown(ctx):
    """A clean exit after all that (under ASan: no leaks, no errors)."""
    s = ctx["s"]
    rc = s.stop()
    assert rc == 0, "%s exited %s:\n%s" % (s.name, rc, s.output()[-4000:])


# ---------------------------------------------------------------- generations
def test_generate_b64(ctx):
    s = ctx["s"]
    r = client(s).images.generate(prompt="a lighthouse", size="64x64", n=1,
                                   response_format="b64_json", quality="high", style="vivid",
                                   user="u-1", model="demo",
                                   extra_body={"seed": 11, "steps": STEPS})
    assert isinstance(r.created, int) and abs(r.created - time.time()) < 600, r.created
    assert len(r.data) == 1 and r.data[0].b64_json and r.data[0].url is None, r
    assert r.size == "64x64" and r.output_format == "png" and r.background == "opaque", r
    assert r.usage is not None and r.usage.input_tokens_details.text_tokens == 2, r.usage
    png = base64.b64decode(r.data[0].b64_json)
    svc.assert_same_image(png, gen_params("a lighthouse", 11), "b64_json")


def test_generate_url_n2(ctx):
    s = ctx["s"]
    # an OpenAI model name maps to the loaded model
    r = client(s).images.generate(prompt="two boats", size="64x64", n=2, response_format="url",
                                  model="dall-e-3", extra_body={"seed": 20, "steps": STEPS})
    assert len(r.data) == 2, r
    for i, item in enumerate(r.data):
        assert item.b64_json is None and item.url, item
        prefix = "http://127.0.0.1:%d/v1/jobs/" % s.port
        path = urllib.parse.urlsplit(item.url).path
        assert item.url.startswith(prefix) and path.endswith("/images/%d.png" % i), item.url
        # keys on: a signed URL (docs/security.md), fetched as a browser or
        # the openai client's user would, without the key
        assert "?md5=" in item.url and "&expires=" in item.url, item.url
        with urllib.request.urlopen(item.url, timeout=30) as f:
            assert f.headers["Content-Type"] == "image/png"
            png = f.read()
            svc.validate(svc.Response(f.status, f.reason, f.getheaders(), png, "GET",
                                      urllib.parse.urlsplit(item.url).path))
        # image i uses seed + i, as native jobs
        svc.assert_same_image(png, gen_params("two boats", 20 + i), "url image %d" % i)


def test_generate_auto_size(ctx):
    s = ctx["s"]
    models = client(s).models.list()
    r = client(s).images.generate(prompt="auto", size="auto", extra_body={"steps": 2})
    png = svc.png_decode(base64.b64decode(r.data[0].b64_json))
    side = s.get("/v1/models").json["data"][0]["default_size"]
    assert (png.width, png.height) == (side, side) and r.size == "%dx%d" % (side, side), r.size
    assert models.data[0].id == "demo"


def test_stream(ctx):
    s = ctx["s"]
    steps = 12
    stream = client(s).images.generate(prompt="a stream", size="64x64", stream=True,
                                       partial_images=2,
                                       extra_body={"seed": 5, "steps": steps})
    events = list(stream)
    kinds = [e.type for e in events]
    assert kinds[-1] == "image_generation.completed", kinds
    partials = [e for e in events if e.type == "image_generation.partial_image"]
    assert kinds == ["image_generation.partial_image"] * len(partials) + \
        ["image_generation.completed"], kinds
    # previews of a 12-step 64x64 image come every step, so both partials
    # normally arrive; the tile encoder may drop stale previews under load
    # (OpenAI's "up to"), so at least one, indexes in order
    assert 1 <= len(partials) <= 2, kinds
    assert [p.partial_image_index for p in partials] == list(range(len(partials))), kinds
    for p in partials:
        png = svc.png_decode(base64.b64decode(p.b64_json))
        assert (png.width, png.height) == (SIZE, SIZE)
        assert p.size == "64x64" and p.output_format == "png" and p.created_at > 0, p
    done = events[-1]
    assert done.usage.total_tokens == done.usage.input_tokens, done.usage
    assert done.size == "64x64" and done.quality == "auto" and done.background == "auto", done
    svc.assert_same_image(base64.b64decode(done.b64_json), gen_params("a stream", 5, steps),
                          "streamed image")
    figure_partials = len(partials)
    svc.figure("stream: %d partial images then completed" % figure_partials)


def test_stream_raw_shape(ctx):
    """The wire format: `event:` lines named as the data's type; headers and
    every event's data as docs/openapi.yaml says."""
    s = ctx["s"]
    conn = http.client.HTTPConnection("127.0.0.1", s.port, timeout=120)
    conn.request("POST", "/v1/images/generations",
                 json.dumps({"prompt": "raw", "size": "64x64", "stream": True,
                             "partial_images": 1, "steps": 4, "n": 2}),
                 {"Authorization": "Bearer " + TOKEN, "Content-Type": "application/json"})
    r = conn.getresponse()
    assert r.status == 200 and r.getheader("Content-Type") == "text/event-stream"
    assert r.getheader("X-Tessera-Job", "").startswith("j_")
    text = r.read().decode()
    conn.close()
    evs = check_stream(r, text, "/v1/images/generations")
    assert evs.count("image_generation.completed") == 2, evs


# ---------------------------------------------------------------------- edits
def test_edit(ctx):
    s, f = ctx["s"], ctx["files"]
    with open(f["paths"]["img.png"], "rb") as im, open(f["paths"]["mask.png"], "rb") as mk:
        r = client(s).images.edit(image=im, mask=mk, prompt="a red door", size="64x64",
                                  extra_body={"seed": 9, "steps": STEPS})
    assert len(r.data) == 1 and r.usage.input_tokens_details.image_tokens == 2, r
    got = base64.b64decode(r.data[0].b64_json)
    # the same job through the native API, with the mask in Tessera's convention
    j = s.submit(prompt="a red door", init_image=svc.b64(f["img"]),
                 mask=svc.b64(f["native_mask"]), seed=9, steps=STEPS)
    assert s.wait_job(j["id"])["state"] == "done"
    want = s.image(j["id"])
    assert svc.png_decode(got).rgb() == svc.png_decode(want).rgb(), \
        "edit differs from the native inpainting job"
    # without a mask: img2img of the whole image (several images as image[])
    with open(f["paths"]["img.png"], "rb") as im:
        r = client(s).images.edit(image=[im], prompt="plain img2img",
                                  extra_body={"seed": 3, "steps": 4})
    assert svc.png_decode(base64.b64decode(r.data[0].b64_json)).width == SIZE


def test_edit_stream(ctx):
    s, f = ctx["s"], ctx["files"]
    with open(f["paths"]["img.png"], "rb") as im, open(f["paths"]["mask.png"], "rb") as mk:
        stream = client(s).images.edit(image=im, mask=mk, prompt="streamed edit", stream=True,
                                       partial_images=1, extra_body={"seed": 4, "steps": 10})
        kinds = [e.type for e in stream]
    assert kinds[-1] == "image_edit.completed", kinds
    assert set(kinds[:-1]) <= {"image_edit.partial_image"}, kinds


# ------------------------------------------------------------- models, errors
def test_models(ctx):
    s = ctx["s"]
    c = client(s)
    lst = c.models.list()
    assert [m.id for m in lst.data] == ["demo"] and lst.data[0].object == "model", lst
    assert lst.data[0].owned_by == "tessera"
    m = c.models.retrieve("demo")
    assert m.id == "demo" and m.object == "model" and isinstance(m.created, int), m
    try:
        c.models.retrieve("gpt-4o")
        raise AssertionError("an unknown model was found")
    except openai.NotFoundError as e:
        assert e.body["code"] == "model_not_found", e.body


def test_auth(ctx):
    s = ctx["s"]
    bad = client(s, key="wrong-key")
    for call in (lambda: bad.images.generate(prompt="x", size="64x64"),
                 lambda: bad.models.list(),
                 lambda: bad.models.retrieve("demo")):
        try:
            call()
            raise AssertionError("a wrong api key was accepted")
        except openai.AuthenticationError as e:
            assert e.status_code == 401
    r = s.request("POST", "/v1/images/generations", {"prompt": "x"},
                  headers={"Authorization": "Bearer nope"})
    e = assert_error_shape(r, 401)
    assert e["code"] == "invalid_api_key", e


def test_bad_requests_client(ctx):
    s = ctx["s"]
    c = client(s)
    cases = [(dict(size="65x64"), "size"), (dict(size="banana"), "size"),
             (dict(size="64x99999"), "size"), (dict(n=11), "n"), (dict(n=0), "n"),
             (dict(model="stable-diffusion-9"), "model"),
             (dict(background="transparent"), "background"),
             (dict(output_format="webp"), "output_format"),
             (dict(response_format="gif"), "response_format"),
             (dict(quality="ultra"), "quality"),
             (dict(extra_body={"steps": 0}), "steps"),
             (dict(extra_body={"seed": "x"}), "seed")]
    for kw, param in cases:
        try:
            c.images.generate(prompt="bad", **kw)
            raise AssertionError("%s was accepted" % kw)
        except openai.BadRequestError as e:
            assert e.body["param"] == param, (kw, e.body)
            svc.note("generate %s" % kw, 400)
    try:
        c.images.generate(prompt="x", stream=True, response_format="url")
        raise AssertionError("a url stream was accepted")
    except openai.BadRequestError as e:
        assert e.body["param"] == "response_format", e.body


def test_hostile_raw(ctx):
    s = ctx["s"]
    P = "/v1/images/generations"
    E = "/v1/images/edits"

    def post(path, body, ctype="application/json", status=400, param="__any__"):
        data = body if isinstance(body, bytes) else body.encode()
        r = s.request("POST", path, data, headers={"Content-Type": ctype})
        svc.note("%s %r" % (path, data[:50]), r.status)
        return assert_error_shape(r, status, param)

    post(P, "not json")
    post(P, "[1, 2]")
    post(P, '{"prompt": 7}', param="prompt")
    post(P, '{"size": "64x64"}', param="prompt")
    post(P, '{"prompt": "x", "n": 1000000}', param="n")
    post(P, '{"prompt": "x", "n": 1e3}', param="n")
    post(P, '{"prompt": "x", "n": 2.5}', param="n")
    post(P, '{"prompt": "x", "size": "999999999x999999999"}', param="size")
    post(P, '{"prompt": "x", "size": "64x64x64"}', param="size")
    post(P, '{"prompt": "x", "size": "-64x64"}', param="size")
    post(P, '{"prompt": "x", "stream": "yes"}', param="stream")
    post(P, '{"prompt": "x", "partial_images": 4}', param="partial_images")
    post(P, '{"prompt": "x\\u0000y"}', param="prompt")
    post(P, '{"prompt": "x", "prompt": "y"}')
    # multipart
    B = "XbOuNdArY"
    mp = "multipart/form-data; boundary=" + B

    def form(*parts, close=True):
        body = form_body(B, parts)
        return body if close else body[:-len(b"--" + B.encode() + b"--\r\n")]

    img = ctx["files"]["img"]
    post(E, form(("prompt", b"x", None), ("image", img, "a.png")), ctype="text/plain",
         status=415)  # only multipart (issue 62)
    post(E, form(("prompt", b"x", None)), ctype="multipart/form-data")
    post(E, b"garbage", ctype=mp)
    post(E, form(("prompt", b"x", None), ("image", img, "a.png"), close=False), ctype=mp)
    post(E, b"--" + B.encode() + b"\r\nX: y\r\n\r\nv\r\n--" + B.encode() + b"--", ctype=mp)
    post(E, b"--" + B.encode() + b"\r\nContent-Disposition: form-data; name=\"a\"\r\n" +
         b"X" * 20000 + b"\r\n\r\nv\r\n--" + B.encode() + b"--", ctype=mp)
    post(E, form(*[("f%d" % i, b"v", None) for i in range(100)]), ctype=mp)
    post(E, form(("prompt", b"x", None)), ctype=mp, param="image")
    post(E, form(("prompt", b"x", None), ("image", b"not an image", "a.png")), ctype=mp,
         param="image")
    post(E, form(("prompt", b"x", None), ("image", img, "a.png"), ("image", img, "b.png")),
         ctype=mp, param="image")
    post(E, form(("prompt", b"x", None), ("image", img, "a.png"), ("mask", b"junk", "m.png")),
         ctype=mp, param="mask")
    post(E, form(("prompt", b"x\0y", None), ("image", img, "a.png")), ctype=mp, param="prompt")
    post(E, form(("prompt", b"\xff\xfe", None), ("image", img, "a.png")), ctype=mp)
    post(E, form(("prompt", b"x", None), ("n", b"99", None), ("image", img, "a.png")),
         ctype=mp, param="n")
    post(E, form(("prompt", b"x", None), ("size", b"128x128", None), ("image", img, "a.png")),
         ctype=mp, param="size")
    # routes and methods
    r = s.request("GET", P)
    assert_error_shape(r, 405)
    r = s.request("POST", "/v1/images/variations", b"{}")
    assert_error_shape(r, 404)
    # still serving
    r = client(s).images.generate(prompt="after the storm", size="64x64",
                                  extra_body={"steps": 2})
    assert r.data[0].b64_json


def test_spec_raw(ctx):
    """The main routes over raw HTTP, every answer validated against
    docs/openapi.yaml (svc.request, check_stream): generations (b64_json and
    url), edits (with a mask, and streamed), the model object, and the errors
    of unknown paths, wrong methods and a missing token."""
    s, f = ctx["s"], ctx["files"]
    G, E = "/v1/images/generations", "/v1/images/edits"
    r = s.post(G, {"prompt": "a raw boat", "size": "64x64", "steps": 2, "seed": 3,
                   "quality": "medium"})
    assert r.status == 200 and r.headers["x-tessera-job"].startswith("j_"), r
    assert r.json["quality"] == "medium" and r.json["size"] == "64x64", r.json.keys()
    r = s.post(G, {"prompt": "two raw boats", "size": "64x64", "steps": 2, "n": 2,
                   "response_format": "url"})
    assert r.status == 200 and len(r.json["data"]) == 2, r
    r = s.get(urllib.parse.urlsplit(r.json["data"][1]["url"]).path)
    assert r.status == 200, r
    B = "sPeCbOuNdArY"
    mp = {"Content-Type": "multipart/form-data; boundary=" + B}
    body = form_body(B, [("prompt", b"a raw edit", None), ("size", b"64x64", None),
                         ("steps", b"4", None), ("seed", b"4", None),
                         ("image", f["img"], "img.png"), ("mask", f["mask"], "mask.png")])
    r = s.request("POST", E, body, headers=mp)
    assert r.status == 200 and r.headers["x-tessera-job"].startswith("j_"), r
    assert r.json["usage"]["input_tokens_details"]["image_tokens"] == 2, r.json["usage"]
    body = form_body(B, [("prompt", b"a streamed raw edit", None), ("stream", b"true", None),
                         ("partial_images", b"1", None), ("steps", b"4", None),
                         ("image", f["img"], "img.png")])
    conn = http.client.HTTPConnection("127.0.0.1", s.port, timeout=120)
    conn.request("POST", E, body, s.auth(mp))
    r = conn.getresponse()
    text = r.read().decode()
    conn.close()
    kinds = check_stream(r, text, E)
    assert kinds and kinds[-1] == "image_edit.completed", kinds
    r = s.get("/v1/models/demo")
    assert r.status == 200 and r.json["id"] == "demo", r
    r = s.request("HEAD", "/v1/models/demo")
    assert r.status == 200 and r.body == b"", r
    for path in ("/v1/models/gpt-4o", "/v1/models/", "/v1/models/demo/x"):
        e = assert_error_shape(s.get(path), 404, "model")
        assert e["code"] == "model_not_found", e
    for method, path in (("DELETE", "/v1/models/demo"), ("POST", "/v1/models/demo"),
                         ("PUT", E), ("DELETE", G)):
        r = s.request(method, path, b"{}" if method in ("POST", "PUT") else None)
        assert_error_shape(r, 405)
        assert r.headers.get("allow"), r
    for path in ("/v1/images", "/v1/images/", "/v1/images/nope"):
        e = assert_error_shape(s.post(path, {}), 404)
        assert e["code"] == "not_found", e
    # no token: OpenAI's 401 on these routes, Tessera's on GET /v1/models
    for method, path in (("POST", G), ("POST", E), ("GET", "/v1/models/demo"),
                         ("GET", "/v1/images/nope")):
        r = svc.request(s.port, method, path, b"{}" if method == "POST" else None)
        e = assert_error_shape(r, 401)
        assert e["code"] == "invalid_api_key", e
    r = svc.request(s.port, "GET", "/v1/models")
    assert r.status == 401 and r.json["error"]["code"] == "unauthorized", r


def test_disconnect_cancels(ctx):
    """A streaming client that goes away cancels its job."""
    s = ctx["s"]
    conn = http.client.HTTPConnection("127.0.0.1", s.port, timeout=60)
    conn.request("POST", "/v1/images/generations",
                 json.dumps({"prompt": "long", "size": "64x64", "stream": True,
                             "steps": svc.LONG}),
                 {"Authorization": "Bearer " + TOKEN, "Content-Type": "application/json"})
    r = conn.getresponse()
    job = r.getheader("X-Tessera-Job")
    assert r.status == 200 and job, r.status
    conn.sock.shutdown(socket.SHUT_RDWR)
    conn.close()
    j = s.wait_job(job, timeout=60)
    assert j["state"] == "cancelled", j["state"]


def test_disconnect_cancels_waiting(ctx):
    """A non-streaming client that goes away cancels its job too."""
    s = ctx["s"]

    def cancelled():
        return s.metrics().value("tessera_jobs_total", state="cancelled") or 0

    before = cancelled()
    body = json.dumps({"prompt": "long", "size": "64x64", "steps": svc.LONG}).encode()
    sock = socket.create_connection(("127.0.0.1", s.port), timeout=30)
    sock.sendall(b"POST /v1/images/generations HTTP/1.1\r\nHost: localhost\r\n"
                 b"Authorization: Bearer " + TOKEN.encode() + b"\r\n"
                 b"Content-Type: application/json\r\nContent-Length: " +
                 str(len(body)).encode() + b"\r\n\r\n" + body)
    time.sleep(0.5)
    sock.close()
    svc.wait_until(lambda: cancelled() == before + 1, 30, "the job's cancel")


def test_queue_full():
    """More images than --max-queue allows: 429, openai.RateLimitError."""
    s = svc.Server(["--max-queue", "2"], token=TOKEN, name="small-queue").start()
    try:
        client(s).images.generate(prompt="too many", size="64x64", n=3,
                                  extra_body={"steps": 2})
        raise AssertionError("3 images were queued past --max-queue 2")
    except openai.RateLimitError as e:
        assert e.status_code == 429 and e.body["code"] == "rate_limit_exceeded", e.body
    finally:
        rc = s.stop()
    assert rc == 0, "%s exited %s:\n%s" % (s.name, rc, s.output()[-4000:])


def test_drain_answers():
    """SIGTERM while calls wait: the running job's call and the queued one's
    get 503 (openai.InternalServerError) or a stream error; a clean exit."""
    import threading
    s = svc.Server(["--drain-timeout", "1", "--max-batch", "1"], token=TOKEN,
                   name="drain").start()
    results = {}

    def wait_call(name, **kw):
        try:
            if kw.get("stream"):
                results[name] = [e.type for e in client(s).images.generate(**kw)]
            else:
                client(s).images.generate(**kw)
                results[name] = "answered"
        except openai.APIError as e:
            results[name] = e

    # the running job must outlast 0.5 s + the 1 s drain on the fastest CPU: 64x64 x
    # LONG steps were answered within it on 2 Zen 5 cores; 192x192 is 9x that work
    threads = [threading.Thread(target=wait_call, args=("running",),
                                kwargs=dict(prompt="run", size="192x192",
                                            extra_body={"steps": svc.LONG})),
               threading.Thread(target=wait_call, args=("queued",),
                                kwargs=dict(prompt="queue", size="64x64", stream=True,
                                            extra_body={"steps": svc.LONG}))]
    for t in threads:
        t.start()
        time.sleep(0.5)
    rc = s.stop()
    for t in threads:
        t.join(60)
    assert rc == 0, "%s exited %s:\n%s" % (s.name, rc, s.output()[-4000:])
    assert isinstance(results.get("running"), openai.InternalServerError), results
    assert results["running"].status_code == 503, results
    q = results.get("queued")
    print("  drain: running -> %r, queued stream -> %r" % (results["running"], q))
    # the stream was started: the shutdown ends it with an error event
    assert isinstance(q, openai.APIError) and "shutting down" in str(q), results


if __name__ == "__main__":
    sys.exit(svc.run_tests([test_generate_b64, test_generate_url_n2, test_generate_auto_size,
                            test_stream, test_stream_raw_shape, test_edit, test_edit_stream,
                            test_models, test_auth, test_bad_requests_client, test_hostile_raw,
                            test_spec_raw,
                            test_disconnect_cancels, test_disconnect_cancels_waiting, test_queue_full,
                            test_drain_answers],
                           setup=setup,
                           teardown=teardown))
