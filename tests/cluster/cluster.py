"""tests/cluster/cluster.py - a Redis server and `tessera serve` nodes for
the cluster tests, on top of tests/service/svc.py (Server, requests, SSE,
PNG comparison with `tessera generate`).

- Redis: redis-server on a free 127.0.0.1 port, a temporary --dir, AOF on
  (appendfsync always), no RDB snapshots; restartable on the same port and
  directory; killed at exit.
- node(queue_url, role, ...): an svc.Server with --queue/--role and
  --threads 1.
"""
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "service"))
import svc  # noqa: E402

REDIS_SERVER = os.environ.get("TSR_REDIS_SERVER") or shutil.which("redis-server")
PROMPT = "an orange square in the top left corner"


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Redis:
    """password: requirepass (AUTH as the default user); extra: more
    redis-server arguments (an ACL `--user ...`); tls: {cert, key, ca} to
    serve TLS only (--port 0 --tls-port), the test's own client trusting ca."""

    def __init__(self, password=None, extra=(), tls=None, bind="127.0.0.1"):
        self.port = free_port()
        self.dir = svc.tmpdir("tsr-redis-")
        self.proc = None
        self.password = password
        self.extra = list(extra)
        self.tls = tls
        self.bind = bind

    @property
    def url(self):
        return "%s://127.0.0.1:%d" % ("rediss" if self.tls else "redis", self.port)

    def start(self):
        ports = ["--port", str(self.port)]
        if self.tls:
            ports = ["--port", "0", "--tls-port", str(self.port),
                     "--tls-cert-file", self.tls["cert"], "--tls-key-file", self.tls["key"],
                     "--tls-ca-cert-file", self.tls["ca"], "--tls-auth-clients", "no"]
        if self.password:
            ports += ["--requirepass", self.password]
        argv = [REDIS_SERVER] + ports + ["--bind"] + self.bind.split() + ["--dir", self.dir,
                "--appendonly", "yes", "--appendfsync", "always", "--save", "",
                "--logfile", os.path.join(self.dir, "redis.log")] + self.extra
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, preexec_fn=svc._die_with_parent)
        svc.wait_until(self.ping, 20, "redis-server on port %d" % self.port)
        return self

    def ping(self):
        try:
            return self.cmd("PING") == "PONG"
        except OSError:
            return False

    def stop(self, sig=signal.SIGTERM):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(30)

    def cmd(self, *args):
        """One command over RESP (after AUTH, over TLS when the server
        wants them); the decoded reply."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=10) as raw:
            s = raw
            if self.tls:
                import ssl
                ctx = ssl.create_default_context(cafile=self.tls["ca"])
                s = ctx.wrap_socket(raw, server_hostname="127.0.0.1")
            f = s.makefile("rb")
            if self.password:
                s.sendall(_encode(("AUTH", self.password)))
                r = _resp(f)
                if r != "OK":
                    raise OSError("AUTH: %r" % (r,))
            s.sendall(_encode(args))
            return _resp(f)


def _encode(args):
    out = b"*%d\r\n" % len(args)
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out += b"$%d\r\n%s\r\n" % (len(a), a)
    return out


def _resp(f):
    line = f.readline()
    if not line:
        raise OSError("redis closed the connection")
    kind, rest = line[:1], line[1:-2]
    if kind == b"+":
        return rest.decode()
    if kind == b"-":
        return RuntimeError(rest.decode())
    if kind == b":":
        return int(rest)
    if kind == b"$":
        n = int(rest)
        if n < 0:
            return None
        data = f.read(n + 2)[:-2]
        return data
    if kind == b"*":
        n = int(rest)
        return None if n < 0 else [_resp(f) for _ in range(n)]
    raise OSError("unexpected reply %r" % line)


def node(queue_url, role, name, extra=()):
    return svc.Server(["--queue", queue_url, "--role", role, "--threads", "1"] + list(extra),
                      name=name)


def start_all(nodes):
    """Start nodes without waiting, then wait for each to be ready (they
    load the model at the same time)."""
    for n in nodes:
        n.start(wait_ready=False)
    for n in nodes:
        n.wait_ready(180)
    return nodes


def spec(i, steps=3):
    return dict(prompt=PROMPT, width=64, height=64, steps=steps, seed=1000 + i)
