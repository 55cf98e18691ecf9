"""tests/compat/test_comfy_ui_routes.py - the routes ComfyUI's web UI needs
besides its API (issue 59, docs/compat-comfyui.md "The web UI"), over HTTP
with no browser: `serve --comfy-ui DIR` on a folder this test makes.

- static: /comfy -> 301 /comfy/, index.html, Content-Types, a hashed asset
  cached as immutable and another revalidated (ETag -> 304), /assets/ for
  the frontend's absolute URLs; "..", %2e%2e, hidden files, a folder and a
  symbolic link out of the folder are 404; POST is 405; without --comfy-ui
  /comfy/ is a 404 that says how to turn it on; a DIR without index.html
  stops `serve` (exit 2).
- rewrite: /comfy/api/<route> is /api/<route> is /<route>.
- settings: a fresh server answers {} and null, POST /settings merges,
  POST /settings/{id} sets any JSON value, the frontend's text/plain body
  is taken with Comfy-User and refused (415) without it, bad JSON is 400,
  and the file is <data-dir>/comfy/user/default/comfy.settings.json.
- userdata: as a fresh ComfyUI: /users (migrated), 404 for an unknown
  folder, POST (?overwrite=false -> 409, ?full_info), GET (attachment,
  nosniff), listing (recurse, full_info, split), /v2/userdata, move, DELETE;
  hostile names (.., %2e%2e, hidden, \\, control bytes, too deep, too long,
  a raw '/' in {file}) never leave the user's folder and get 403/404.
- keys: each key has its own settings and user data (key_<name>), and the
  UI's routes take the key.
- login (keys on): /comfy/ redirects to /comfy/login; POST /comfy/login with
  a good key sets the session cookie (HttpOnly, SameSite=Strict,
  Path=/comfy/, Secure behind an https proxy); the cookie signs in
  /comfy/api/... and /comfy/ws as the key would, and nothing else (/v1/,
  /sdapi/, /prompt, /settings); two keys' sessions see only their own
  prompts and user data; another site's request with the cookie is 403;
  logout and expiry end a session; a bad key is 401, and the 11th failure
  in a minute from one address is 429 (a good key too).
- jobs: /jobs and /jobs/{id} list a prompt as ComfyUI's jobs API does
  (pending -> completed, outputs, preview_output, pagination, status filter),
  and /jobs/{id}/cancel, /jobs/cancel cancel prompts.
- preview_metadata: a websocket client that sends feature_flags with
  supports_preview_metadata gets the server's flags and type-4 previews
  naming the KSampler and the prompt; a plain client gets type 1.
"""
import json
import os
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "service"))
import svc  # noqa: E402

CU = {"Comfy-User": ""}  # what the frontend's fetchApi always sends


def ui_dir():
    """A folder shaped like the frontend's static folder, and a secret beside it."""
    d = svc.tmpdir("tsr-comfy-ui-")
    ui = os.path.join(d, "static")
    os.makedirs(os.path.join(ui, "assets", "images"))
    os.makedirs(os.path.join(ui, "extensions", "core"))
    files = {
        "index.html": b"<!doctype html><title>ComfyUI</title>",
        "assets/index-B2rHQ9Sn.js": b"console.log(1)",
        "assets/index-B2rHQ9Sn.js.map": b"{}",
        "assets/api-BA-sjSl5.css": b"body{}",
        "assets/images/comfy-icon-192.png": b"\x89PNG\r\n\x1a\nfake",
        "extensions/core/groupNode.js": b"export {}",
        "materialdesignicons.min.css": b".x{}",
        "fonts.woff2": b"wOF2",
        "icon.svg": b"<svg/>",
        ".hidden": b"hidden-content",
    }
    for name, data in files.items():
        with open(os.path.join(ui, name), "wb") as f:
            f.write(data)
    with open(os.path.join(d, "secret.txt"), "w") as f:
        f.write("outside")
    os.symlink(os.path.join(d, "secret.txt"), os.path.join(ui, "link.txt"))
    os.symlink(d, os.path.join(ui, "up"))
    return ui


def raw_get(s, path):
    """GET with the path exactly as written (no client-side normalisation)."""
    c = socket.create_connection(("127.0.0.1", s.port), timeout=10)
    c.sendall(("GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n" % path)
              .encode())
    data = b""
    while True:
        b = c.recv(65536)
        if not b:
            break
        data += b
    c.close()
    return svc.parse_raw_response(data, "GET", path)


def get(s, path, **kw):
    """GET, the answer checked against docs/openapi.yaml (the spec has the
    routes without their /api/ and /comfy/api/ spellings, and no static files)."""
    kw.setdefault("validate_spec", not path.startswith(("/comfy", "/assets", "/api/")))
    return s.get(path, **kw)


def post(s, path, body, **kw):
    kw.setdefault("validate_spec", not path.startswith(("/comfy", "/api/")))
    return s.post(path, body, **kw)


def test_static():
    ui = ui_dir()
    s = svc.Server(["--comfy-ui", ui]).start()
    r = get(s, "/comfy")
    assert r.status == 301 and r.headers["location"] == "/comfy/", r
    r = get(s, "/comfy/")
    assert r.status == 200 and r.body.startswith(b"<!doctype html>"), r
    assert r.headers["content-type"] == "text/html; charset=utf-8", r.headers
    assert r.headers["cache-control"] == "no-cache", r.headers
    types = {"/comfy/assets/index-B2rHQ9Sn.js": "text/javascript; charset=utf-8",
             "/comfy/assets/index-B2rHQ9Sn.js.map": "application/json",
             "/comfy/assets/api-BA-sjSl5.css": "text/css; charset=utf-8",
             "/comfy/materialdesignicons.min.css": "text/css; charset=utf-8",
             "/comfy/fonts.woff2": "font/woff2", "/comfy/icon.svg": "image/svg+xml",
             "/comfy/assets/images/comfy-icon-192.png": "image/png",
             "/comfy/extensions/core/groupNode.js": "text/javascript; charset=utf-8"}
    for path, ct in types.items():
        r = get(s, path)
        assert r.status == 200 and r.headers["content-type"] == ct, (path, r, r.headers)
        assert r.headers["x-content-type-options"] == "nosniff", r.headers
    # hashed assets are immutable; other files revalidate with their ETag
    r = get(s, "/comfy/assets/index-B2rHQ9Sn.js")
    assert r.headers["cache-control"] == "public, max-age=31536000, immutable", r.headers
    r = get(s, "/comfy/materialdesignicons.min.css")
    assert r.headers["cache-control"] == "no-cache", r.headers
    r2 = get(s, "/comfy/materialdesignicons.min.css", headers={"If-None-Match": r.headers["etag"]})
    assert r2.status == 304 and r2.body == b"", r2
    # the frontend's absolute URLs
    r = get(s, "/assets/images/comfy-icon-192.png")
    assert r.status == 200 and r.headers["content-type"] == "image/png", r
    # never out of the folder, never a hidden file, a folder or a link
    for p in ["/comfy/../secret.txt", "/comfy/%2e%2e/secret.txt",
              "/comfy/assets/..%2f..%2fsecret.txt", "/comfy/.hidden", "/comfy/link.txt", "/comfy/up/secret.txt", "/comfy/assets",
              "/comfy/assets/", "/comfy//index.html", "/comfy/a%5cb", "/comfy/%00",
              "/comfy/nope.js", "/assets/../comfy/index.html", "/comfy/" + "a/" * 40 + "x"]:
        r = raw_get(s, p)
        assert r.status in (400, 404), (p, r)
        assert b"outside" not in r.body and b"hidden-content" not in r.body, (p, r)
    r = post(s, "/comfy/index.html", {})
    assert r.status == 405, r
    s.stop()
    # off by default: a 404 that says how to turn it on
    s = svc.Server().start()
    r = get(s, "/comfy/")
    assert r.status == 404 and "--comfy-ui" in r.error["message"], r
    s.stop()
    # a folder that is not the frontend's stops serve
    p = subprocess.run([svc.TSR_BIN, "serve", "--comfy-ui", svc.tmpdir("tsr-empty-"),
                        "--model", svc.MODEL, "--port", "0"], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 2 and "index.html" in p.stderr, (p.returncode, p.stderr)


def test_settings():
    ui = ui_dir()
    s = svc.Server(["--comfy-ui", ui]).start()
    for prefix in ["", "/api", "/comfy/api"]:
        r = get(s, prefix + "/settings")
        assert r.status == 200 and r.json == {}, (prefix, r)
    r = get(s, "/settings/Comfy.Foo")
    assert r.status == 200 and r.json is None, r
    r = get(s, "/users")
    assert r.json == {"storage": "server", "migrated": False}, r
    # the frontend's bodies: text/plain with Comfy-User
    r = post(s, "/comfy/api/settings/Comfy.Execution.PreviewMethod", b'"auto"',
             headers=dict(CU, **{"Content-Type": "text/plain;charset=UTF-8"}))
    assert r.status == 200, r
    r = post(s, "/api/settings", {"A.b": 1, "Comfy.Execution.PreviewMethod": "none"})
    assert r.status == 200, r
    r = post(s, "/settings/List", [1, {"x": None}])
    assert r.status == 200, r
    r = get(s, "/settings")
    assert r.json == {"Comfy.Execution.PreviewMethod": "none", "A.b": 1,
                      "List": [1, {"x": None}]}, r
    assert get(s, "/settings/A.b").json == 1
    assert get(s, "/users").json["migrated"] is True
    path = os.path.join(s.data_dir, "comfy", "user", "default", "comfy.settings.json")
    with open(path) as f:
        assert json.load(f)["List"] == [1, {"x": None}]
    # text/plain without Comfy-User is what a page on another site can send: 415
    r = post(s, "/settings/X", b"1", headers={"Content-Type": "text/plain"})
    assert r.status == 415, r
    # bad bodies
    for body, what in [(b"{", "not JSON"), (b"[1]", "not an object")]:
        r = post(s, "/settings", body, headers=CU)
        assert r.status == 400 and r.error["type"] == "invalid_json", (what, r)
    r = post(s, "/settings/Y", b"nope", headers=CU)
    assert r.status == 400, r
    r = get(s, "/settings/" + "x" * 300)
    assert r.status == 400, r
    r = post(s, "/users", {"username": "bob"})
    assert r.status == 400 and "user" in r.error["message"], r
    s.stop()


def test_userdata():
    ui = ui_dir()
    s = svc.Server(["--comfy-ui", ui]).start()
    root = os.path.join(s.data_dir, "comfy", "user", "default")
    r = get(s, "/userdata?dir=workflows&recurse=true&split=false&full_info=true")
    assert r.status == 404, r  # a fresh ComfyUI: no such folder yet
    assert get(s, "/userdata").status == 400
    wf = {"nodes": [], "links": [], "version": 0.4}
    r = post(s, "/api/userdata/workflows%2Fmy%20flow%20(2).json?overwrite=true&full_info=true",
             json.dumps(wf).encode(), headers=dict(CU, **{"Content-Type": "text/plain"}))
    assert r.status == 200, r
    assert r.json["path"] == "workflows/my flow (2).json" and r.json["size"] > 0, r.json
    assert isinstance(r.json["modified"], int) and r.json["modified"] > 1e12, r.json
    assert os.path.isfile(os.path.join(root, "workflows", "my flow (2).json"))
    r = post(s, "/userdata/workflows%2Fmy%20flow%20(2).json?overwrite=false", b"{}", headers=CU)
    assert r.status == 409, r
    r = post(s, "/userdata/workflows%2Fsub%2Fb.json", b"{}", headers=CU)
    assert r.status == 200 and r.json == "workflows/sub/b.json", r
    r = get(s, "/comfy/api/userdata/workflows%2Fmy%20flow%20(2).json")
    assert r.status == 200 and json.loads(r.body) == wf, r
    assert r.headers["content-type"] == "application/json", r.headers
    assert r.headers["content-disposition"] == "attachment", r.headers
    assert r.headers["x-content-type-options"] == "nosniff", r.headers
    # a stored page never renders inline
    post(s, "/userdata/x.html", b"<script>alert(1)</script>", headers=CU)
    r = get(s, "/userdata/x.html")
    assert r.headers["content-type"] == "application/octet-stream", r.headers
    post(s, "/userdata/user.css", b"body{}", headers=CU)
    r = get(s, "/userdata/user.css")
    assert r.headers["content-type"].startswith("text/css"), r.headers
    assert r.headers["content-disposition"] == "inline", r.headers
    # listings
    r = get(s, "/userdata?dir=workflows")
    assert r.json == ["my flow (2).json"], r
    r = get(s, "/userdata?dir=workflows&recurse=true")
    assert r.json == ["my flow (2).json", "sub/b.json"], r
    r = get(s, "/userdata?dir=workflows/&recurse=true&split=true")
    assert r.json == [["my flow (2).json", "my flow (2).json"], ["sub/b.json", "sub", "b.json"]], r
    r = get(s, "/userdata?dir=workflows&recurse=true&full_info=true")
    assert [e["path"] for e in r.json] == ["my flow (2).json", "sub/b.json"], r
    r = get(s, "/v2/userdata?path=workflows")
    assert [(e["name"], e["type"], e["path"]) for e in r.json] == [
        ("sub", "directory", "workflows/sub"), ("b.json", "file", "workflows/sub/b.json"),
        ("my flow (2).json", "file", "workflows/my flow (2).json")], r.json
    assert get(s, "/v2/userdata").status == 200
    assert get(s, "/v2/userdata?path=nothere").status == 404
    assert get(s, "/v2/userdata?path=user.css").status == 400
    # move and delete
    r = post(s, "/userdata/workflows%2Fsub%2Fb.json/move/workflows%2Fc.json?full_info=true",
             b"", headers=CU)
    assert r.status == 200 and r.json["path"] == "workflows/c.json", r
    r = post(s, "/userdata/workflows%2Fc.json/move/workflows%2Fmy%20flow%20(2).json"
                "?overwrite=false", b"", headers=CU)
    assert r.status == 409, r
    r = post(s, "/userdata/nothere.json/move/x.json", b"", headers=CU)
    assert r.status == 404, r
    r = s.delete("/userdata/workflows%2Fc.json")
    assert r.status == 204, r
    assert s.delete("/userdata/workflows%2Fc.json").status == 404
    assert get(s, "/userdata/workflows%2Fc.json").status == 404
    # hostile names: never outside the user's folder
    secret = os.path.join(s.data_dir, "comfy", "user", "secret.json")
    with open(secret, "w") as f:
        f.write('"other user"')
    hostile = ["..%2Fsecret.json", "%2E%2E%2Fsecret.json", "workflows%2F..%2F..%2Fsecret.json",
               ".hidden", "workflows%2F.x", "a%5Cb", "a%3Ab", "a%00b", "a%0Ab", "%2Fetc%2Fpasswd",
               "a%2F%2Fb", "x" * 300, "%2F".join(["d"] * 20) + "%2Fx", "%2F".join(["y" * 200] * 3)]
    for name in hostile:
        for method in ("GET", "POST", "DELETE"):
            # (a NUL is the router's 404, in the native shape, before any route)
            r = s.request(method, "/userdata/" + name, b"{}" if method == "POST" else None,
                          headers=CU, validate_spec="%00" not in name)
            assert r.status in (403, 404, 414), (method, name, r)
        r = post(s, "/userdata/ok.json/move/" + name, b"", headers=CU,
                 validate_spec="%00" not in name)
        assert r.status in (403, 404, 414), (name, r)
        r = get(s, "/userdata?dir=" + name)
        assert r.status in (400, 403, 404, 414), (name, r)
    # a raw '/' in {file} is not ComfyUI's route shape
    assert get(s, "/userdata/workflows/x.json").status == 404
    with open(secret) as f:
        assert f.read() == '"other user"'
    assert sorted(os.listdir(os.path.join(s.data_dir, "comfy", "user"))) == ["default",
                                                                            "secret.json"]
    s.stop()


def test_keys():
    d = svc.tmpdir("tsr-comfy-ui-keys-")
    path = os.path.join(d, "keys")
    A = {"Authorization": "Bearer " + svc.new_key(path, "alice")}
    B = {"Authorization": "Bearer " + svc.new_key(path, "bob")}
    s = svc.Server(["--keys", path, "--comfy-ui", ui_dir()]).start()
    for p in ["/settings", "/api/userdata?dir=x", "/comfy/api/users", "/jobs", "/features",
              "/v2/userdata"]:
        r = get(s, p)
        assert r.status == 401, (p, r)
    # the UI's own files need no key (a browser cannot send one for them);
    # its page sends a browser without a session to the sign-in page
    r = get(s, "/comfy/")
    assert r.status == 302 and r.headers["location"] == "/comfy/login", r
    assert get(s, "/comfy/assets/index-B2rHQ9Sn.js").status == 200
    assert post(s, "/settings/X", b'"alice\'s"', headers=A).status == 200
    assert post(s, "/userdata/w.json", b'{"a": 1}', headers=dict(A, **CU)).status == 200
    assert get(s, "/settings/X", headers=A).json == "alice's"
    assert get(s, "/settings/X", headers=B).json is None
    assert get(s, "/userdata/w.json", headers=B).status == 404
    assert get(s, "/userdata/w.json", headers=A).status == 200
    assert os.path.isfile(os.path.join(s.data_dir, "comfy", "user", "key_alice", "w.json"))
    s.stop()


def login(s, key, headers=None):
    """POST /comfy/login: (the answer, the cookie's token or None)."""
    r = post(s, "/comfy/login", {"key": key}, headers=headers, validate_spec=True)
    c = r.headers.get("set-cookie", "")
    tok = c.split(";")[0].split("=", 1)[1] if c.startswith("tessera_comfy=") else None
    return r, tok


def ws_status(s, headers):
    """The status of a websocket handshake on /comfy/ws."""
    c = socket.create_connection(("127.0.0.1", s.port), timeout=30)
    extra = "".join("%s: %s\r\n" % kv for kv in headers.items())
    c.sendall(("GET /comfy/ws?clientId=t HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
               "Upgrade: websocket\r\nConnection: Upgrade\r\n"
               "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
               "%s\r\n" % (s.port, extra)).encode())
    buf = b""
    while b"\r\n" not in buf:
        b = c.recv(4096)
        if not b:
            break
        buf += b
    c.close()
    return int(buf.split(b" ")[1])


def test_login():
    d = svc.tmpdir("tsr-comfy-ui-login-")
    path = os.path.join(d, "keys")
    ka, kb = svc.new_key(path, "alice"), svc.new_key(path, "bob")
    s = svc.Server(["--keys", path, "--comfy-ui", ui_dir(), "--max-batch", "1"]).start()
    origin = {"Origin": "http://127.0.0.1:%d" % s.port}
    for p in ("/comfy/", "/comfy/index.html"):
        r = get(s, p)
        assert r.status == 302 and r.headers["location"] == "/comfy/login", (p, r)
    r = get(s, "/comfy/login", validate_spec=True)
    assert r.status == 200 and r.headers["content-type"].startswith("text/html"), r
    assert b"<form" in r.body and b'type="password"' in r.body, r
    assert "frame-ancestors 'none'" in r.headers["content-security-policy"], r.headers
    # a good key: the cookie, with its attributes
    r, ta = login(s, ka)
    assert r.status == 200 and r.json["name"] == "alice", r
    attrs = [a.strip() for a in r.headers["set-cookie"].split(";")]
    assert len(ta) == 64 and int(ta, 16) >= 0 and ka not in r.headers["set-cookie"], attrs
    assert {"HttpOnly", "SameSite=Strict", "Path=/comfy/", "Max-Age=43200"} <= set(attrs), attrs
    assert "Secure" not in attrs, attrs
    r, tb = login(s, kb, headers={"X-Forwarded-Proto": "https"})
    assert r.status == 200 and r.json["name"] == "bob" and "Secure" in r.headers["set-cookie"], r
    assert ta != tb
    A = dict(origin, Cookie="theme=dark; tessera_comfy=" + ta)
    B = dict(origin, Cookie="tessera_comfy=" + tb)
    assert get(s, "/comfy/", headers=A).status == 200
    # the cookie signs in the UI's API as the key would
    assert post(s, "/comfy/api/settings/X", b'"alice\'s"', headers=A).status == 200
    assert get(s, "/settings/X", headers={"Authorization": "Bearer " + ka}).json == "alice's"
    assert get(s, "/comfy/api/settings/X", headers=B).json is None
    assert post(s, "/comfy/api/userdata/w.json", b'{"a": 1}', headers=dict(A, **CU)).status == 200
    assert get(s, "/comfy/api/userdata/w.json", headers=A).status == 200
    assert get(s, "/comfy/api/userdata/w.json", headers=B).status == 404
    ck = get(s, "/comfy/api/models/checkpoints", headers=A).json[0]
    r = post(s, "/comfy/api/prompt", {"prompt": workflow(ck, steps=2), "client_id": "a"},
             headers=A)
    assert r.status == 200, r
    pid = r.json["prompt_id"]
    assert [j["id"] for j in get(s, "/comfy/api/jobs", headers=A).json["jobs"]] == [pid]
    assert get(s, "/comfy/api/jobs", headers=B).json["jobs"] == []
    assert get(s, "/comfy/api/jobs/" + pid, headers=B).status == 404
    svc.wait_until(lambda: get(s, "/comfy/api/jobs/" + pid, headers=A).json["status"] ==
                   "completed", 120, "alice's prompt completed")
    assert ws_status(s, A) == 101 and ws_status(s, {}) == 401
    # ... and nothing else: not the same routes without /comfy, nor /v1/, /sdapi/
    for method, p in [("GET", "/v1/jobs/j_0000000000000001"), ("POST", "/v1/jobs"),
                      ("POST", "/sdapi/v1/txt2img"), ("GET", "/sdapi/v1/options"),
                      ("POST", "/prompt"), ("POST", "/api/prompt"), ("GET", "/settings"),
                      ("GET", "/api/jobs"), ("GET", "/history")]:
        body = {"prompt": "x"} if method == "POST" else None
        r = s.request(method, p, body, headers=A, validate_spec=False)
        assert r.status == 401, (method, p, r)
    # another site cannot drive it (CSRF): its Origin, Sec-Fetch-Site, or neither on a change
    bad = [dict(A, Origin="http://evil.example"),
           {"Cookie": A["Cookie"], "Sec-Fetch-Site": "cross-site"},
           {"Cookie": A["Cookie"], "Sec-Fetch-Site": "same-site"},
           {"Cookie": A["Cookie"]}]
    for h in bad:
        r = post(s, "/comfy/api/settings/Y", b"1", headers=h)
        assert r.status == 403, (h, r)
    assert get(s, "/comfy/api/settings/Y", headers=A).json is None
    assert post(s, "/comfy/api/settings/Y", b"2", headers={
        "Cookie": A["Cookie"], "Sec-Fetch-Site": "same-origin"}).status == 200
    assert get(s, "/comfy/api/settings", headers={"Cookie": A["Cookie"],
                                                  "Sec-Fetch-Site": "cross-site"}).status == 403
    assert ws_status(s, dict(A, Origin="http://evil.example")) == 403
    # forged, malformed or foreign tokens are nothing
    for c in ["tessera_comfy=" + "0" * 64, "tessera_comfy=" + ta.upper(), "tessera_comfy=" + ta
              + "0", "tessera_comfy=" + ka, "x_tessera_comfy=" + ta]:
        r = get(s, "/comfy/api/settings", headers=dict(origin, Cookie=c))
        assert r.status == 401, (c, r)
    # a bad key: 401, no cookie
    r, t = login(s, "not-a-key-" + "x" * 30)
    assert r.status == 401 and t is None and r.json["error"]["code"] == "unauthorized", r
    for body in [b"", b"{}", b'{"key": 5}', b"[", b'{"key": ""}']:
        assert post(s, "/comfy/login", body).status == 400, body
    assert post(s, "/comfy/login", b"key=x", headers={
        "Content-Type": "application/x-www-form-urlencoded"}).status == 415
    # logout ends the session (only its own: bob's still works)
    r = post(s, "/comfy/logout", None, headers=A, validate_spec=True)
    assert r.status == 204 and "Max-Age=0" in r.headers["set-cookie"], r
    assert get(s, "/comfy/api/settings", headers=A).status == 401
    assert get(s, "/comfy/", headers=A).status == 302
    assert get(s, "/comfy/api/settings", headers=B).status == 200
    assert post(s, "/comfy/logout", None, headers=dict(B, Origin="http://evil.example")
                ).status == 403
    assert get(s, "/comfy/api/settings", headers=B).status == 200
    assert s.stop() == 0
    # expiry, and the limit on failed sign-ins
    s = svc.Server(["--keys", path, "--comfy-ui", ui_dir(), "--comfy-session-ttl", "2"]).start()
    origin = {"Origin": "http://127.0.0.1:%d" % s.port}
    r, t = login(s, ka)
    assert "Max-Age=2" in r.headers["set-cookie"], r.headers
    C = dict(origin, Cookie="tessera_comfy=" + t)
    assert get(s, "/comfy/api/settings", headers=C).status == 200
    time.sleep(2.5)
    assert get(s, "/comfy/api/settings", headers=C).status == 401
    assert get(s, "/comfy/", headers=C).status == 302
    for i in range(10):
        assert login(s, "wrong-key-%02d-xxxxxxxxxxxxxxxx" % i)[0].status == 401, i
    r, t = login(s, ka)
    assert r.status == 429 and t is None and int(r.headers["retry-after"]) > 0, r
    assert login(s, "wrong")[0].status == 429
    assert s.stop() == 0
    p = subprocess.run([svc.TSR_BIN, "serve", "--comfy-session-ttl", "0"], capture_output=True,
                       text=True, timeout=30)
    assert p.returncode == 2 and "comfy-session-ttl" in p.stderr, (p.returncode, p.stderr)


def ckpt(s):
    return get(s, "/models/checkpoints").json[0]


def workflow(ck, steps=4, size=64):
    return {
        "4": {"class_type": "CheckpointLoaderSimple", "inputs": {"ckpt_name": ck}},
        "5": {"class_type": "EmptyLatentImage",
              "inputs": {"width": size, "height": size, "batch_size": 1}},
        "6": {"class_type": "CLIPTextEncode", "inputs": {"text": "a red circle", "clip": ["4", 1]}},
        "7": {"class_type": "CLIPTextEncode", "inputs": {"text": "", "clip": ["4", 1]}},
        "3": {"class_type": "KSampler", "inputs": {
            "seed": 5, "steps": steps, "cfg": 7.5, "sampler_name": "euler",
            "scheduler": "normal", "denoise": 1, "model": ["4", 0], "positive": ["6", 0],
            "negative": ["7", 0], "latent_image": ["5", 0]}},
        "8": {"class_type": "VAEDecode", "inputs": {"samples": ["3", 0], "vae": ["4", 2]}},
        "9": {"class_type": "SaveImage", "inputs": {"filename_prefix": "t", "images": ["8", 0]}},
    }


def test_jobs():
    s = svc.Server(["--max-batch", "1"]).start()
    r = get(s, "/api/jobs?status=in_progress,pending&limit=200&offset=0")
    assert r.status == 200 and r.json == {"jobs": [], "pagination": {
        "offset": 0, "limit": 200, "total": 0, "has_more": False}}, r
    ck = ckpt(s)
    long_one = post(s, "/prompt", {"prompt": workflow(ck, steps=150, size=256)}).json["prompt_id"]
    short = post(s, "/prompt", {"prompt": workflow(ck)}).json["prompt_id"]
    r = get(s, "/jobs?status=pending")
    assert [j["id"] for j in r.json["jobs"]] == [short], r
    j = r.json["jobs"][0]
    assert j["status"] == "pending" and j["execution_start_time"] is None, j
    assert j["outputs_count"] == 0 and j["preview_output"] is None, j
    svc.wait_until(lambda: all(get(s, "/jobs/" + p).json["status"] == "completed"
                               for p in (long_one, short)), 240, "both prompts completed")
    r = get(s, "/api/jobs?status=completed,failed,cancelled&limit=64&offset=0")
    assert [j["id"] for j in r.json["jobs"]] == [short, long_one], r  # newest first
    assert r.json["pagination"] == {"offset": 0, "limit": 64, "total": 2, "has_more": False}
    j = r.json["jobs"][0]
    assert j["outputs_count"] == 1 and j["preview_output"] == {
        "filename": short + "_00000_.png", "subfolder": "", "type": "output", "nodeId": "9",
        "mediaType": "images"}, j
    assert j["create_time"] <= j["execution_start_time"] <= j["execution_end_time"], j
    assert get(s, "/jobs?limit=1&offset=1").json["jobs"][0]["id"] == long_one
    assert get(s, "/jobs?limit=1").json["pagination"]["has_more"] is True
    assert [x["id"] for x in get(s, "/jobs?sort_order=asc").json["jobs"]] == [long_one, short]
    d = get(s, "/comfy/api/jobs/" + short)
    assert d.status == 404, d  # /comfy/ is the UI's only with --comfy-ui
    d = get(s, "/api/jobs/" + short).json
    assert d["outputs"] == {"9": {"images": [{"filename": short + "_00000_.png",
                                              "subfolder": "", "type": "output"}]}}, d
    assert d["workflow"]["prompt"]["3"]["class_type"] == "KSampler", d
    png = get(s, "/view?filename=%s_00000_.png&type=output" % short).body
    assert png.startswith(b"\x89PNG"), png[:8]
    for bad in ["/jobs?status=running", "/jobs?limit=-1", "/jobs?limit=x", "/jobs?offset=-3",
                "/jobs?sort_order=up"]:
        r = get(s, bad)
        assert r.status == 400, (bad, r)
    assert get(s, "/jobs/j_0000000000000001").status == 404
    # cancel: one by its path (the running one), two by job_ids (one waiting)
    a = post(s, "/prompt", {"prompt": workflow(ck, steps=400, size=256)}).json["prompt_id"]
    b = post(s, "/prompt", {"prompt": workflow(ck, steps=400, size=256)}).json["prompt_id"]
    c = post(s, "/prompt", {"prompt": workflow(ck, steps=400, size=256)}).json["prompt_id"]
    svc.wait_until(lambda: get(s, "/jobs/" + a).json["status"] == "in_progress", 60,
                   "the first prompt running")
    r = post(s, "/api/jobs/%s/cancel" % a, None)
    assert r.status == 200 and r.json["id"] == a, r
    r = post(s, "/api/jobs/cancel", {"job_ids": [b, c, "j_0000000000000001"]})
    assert r.status == 200 and sorted(r.json["cancelled"]) == sorted([b, c]), r
    svc.wait_until(lambda: [get(s, "/jobs/" + p).json["status"] for p in (a, b, c)] ==
                   ["cancelled"] * 3, 60, "the three prompts cancelled")
    r = get(s, "/jobs?status=cancelled")
    assert {j["id"] for j in r.json["jobs"]} == {a, b, c}, r
    assert post(s, "/jobs/j_0000000000000001/cancel", None).status == 404
    for body in [{"job_ids": "x"}, {"job_ids": [1]}, {}]:
        assert post(s, "/jobs/cancel", body).status == 400, body
    s.stop()


def test_preview_metadata():
    """The websocket as the web UI uses it: its feature_flags message gets the
    server's flags back, and its previews come as ComfyUI's type 4 (a JSON
    head naming the KSampler and the prompt, then the JPEG); a plain client
    on the same server still gets type 1."""
    import struct
    from test_comfy_api import WS
    s = svc.Server().start()
    ui, plain = WS(s.port, "ui-client"), WS(s.port, "plain-client")
    for w in (ui, plain):
        assert w.message()["type"] == "status"
    ui.send(1, json.dumps({"type": "feature_flags",
                           "data": {"supports_preview_metadata": True}}).encode())
    m = ui.message()
    assert m["type"] == "feature_flags" and m["data"]["supports_preview_metadata"] is True, m
    ck = ckpt(s)
    pids = {}
    for name, w in (("ui-client", ui), ("plain-client", plain)):
        r = post(s, "/prompt", {"prompt": workflow(ck, steps=8, size=128), "client_id": name,
                                "extra_data": {"preview_method": "auto"}})
        pids[name] = r.json["prompt_id"]
        while True:
            m = w.message()
            if m["type"] in ("execution_success", "execution_error"):
                break
        assert m["type"] == "execution_success", m
    assert ui.binary and plain.binary, (len(ui.binary), len(plain.binary))
    for f in ui.binary:
        kind, hl = struct.unpack(">II", f[:8])
        assert kind == 4, kind
        head = json.loads(f[8:8 + hl])
        assert head == {"node_id": "3", "display_node_id": "3", "real_node_id": "3",
                        "prompt_id": pids["ui-client"], "parent_node_id": None,
                        "image_type": "image/jpeg"}, head
        assert f[8 + hl:8 + hl + 2] == b"\xff\xd8", f[8 + hl:8 + hl + 4]
    for f in plain.binary:
        assert struct.unpack(">II", f[:8]) == (1, 1) and f[8:10] == b"\xff\xd8", f[:12]
    ui.close()
    plain.close()
    assert s.stop() == 0


def test_features():
    s = svc.Server().start()
    r = get(s, "/api/features")
    assert r.json["supports_preview_metadata"] is True and r.json["max_upload_size"] > 0, r
    assert get(s, "/api/i18n").json == {}
    assert get(s, "/api/workflow_templates").json == {}
    assert get(s, "/api/global_subgraphs").json == {}
    assert get(s, "/api/prompt").json == {"exec_info": {"queue_remaining": 0}}
    r = get(s, "/api/experiment/models")
    assert [m["name"] for m in r.json] == ["checkpoints", "loras"], r
    r = get(s, "/api/experiment/models/checkpoints")
    assert r.json == [{"name": ckpt(s), "pathIndex": 0}], r
    assert get(s, "/api/experiment/models/nothing").status == 404
    assert get(s, "/api/experiment/other").status == 404
    s.stop()


if __name__ == "__main__":
    sys.exit(svc.run_tests([test_static, test_settings, test_userdata, test_keys, test_login,
                            test_jobs, test_preview_metadata, test_features]))
