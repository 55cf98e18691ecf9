"""tools/bench/serve_client.py - what the `tessera serve` benchmarks
(bench_serve.py, bench_comfy.py) share: starting a server of their own on a
free loopback port with a temporary data dir, one JSON call to it, and
stopping it.  Standard library only; imported from the scripts' folder."""
import http.client
import json
import os
import re
import subprocess
import tempfile
import time


def start(binary, model, args, name):
    """`tessera serve` with `args` after the model, listening on 127.0.0.1:0;
    returns (process, port) once the port is printed and /readyz says 200.
    Raises SystemExit("<name>: ...") when no port is printed in 120 s or the
    server is not ready 600 s later."""
    tmp = tempfile.mkdtemp(prefix="tessera-%s-" % name)
    srv = subprocess.Popen([binary, "serve", "--model", model, "--listen", "127.0.0.1:0",
                            "--data-dir", os.path.join(tmp, "data"), "--log-level", "warn"]
                           + list(args),
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    port = None
    deadline = time.time() + 120
    while port is None and time.time() < deadline:
        line = srv.stdout.readline()
        if not line:
            break
        m = re.search(r"127\.0\.0\.1:(\d+)", line)
        if m:
            port = int(m.group(1))
    ready = port is not None
    deadline = time.time() + 600  # a large model may still be loading
    while ready and call(port, "GET", "/readyz")[0] != 200:
        ready = time.time() < deadline
        time.sleep(0.1)
    if not ready:
        stop(srv)
        raise SystemExit("%s: the server did not start" % name)
    return srv, port


def call(port, method, path, body=None):
    """One request with a JSON body (or none): (status, the JSON answer or None)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    try:
        data = json.dumps(body).encode() if body is not None else None
        c.request(method, path, body=data,
                  headers={"Content-Type": "application/json"} if data else {})
        r = c.getresponse()
        return r.status, json.loads(r.read() or b"null")
    finally:
        c.close()


def stop(srv):
    """SIGTERM (the server drains), then SIGKILL after 60 s."""
    srv.terminate()
    try:
        srv.wait(timeout=60)
    except subprocess.TimeoutExpired:
        srv.kill()
        srv.wait()
