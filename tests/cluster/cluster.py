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
    def __init__(self):
        self.port = free_port()
        self.dir = svc.tmpdir("tsr-redis-")
        self.proc = None

    @property
    def url(self):
        return "redis://127.0.0.1:%d" % self.port

    def start(self):
        argv = [REDIS_SERVER, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", self.dir,
                "--appendonly", "yes", "--appendfsync", "always", "--save", "",
                "--logfile", os.path.join(self.dir, "redis.log")]
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
        """One command over RESP; the decoded reply."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=10) as s:
            out = b"*%d\r\n" % len(args)
            for a in args:
                a = a if isinstance(a, bytes) else str(a).encode()
                out += b"$%d\r\n%s\r\n" % (len(a), a)
            s.sendall(out)
            f = s.makefile("rb")
            return _resp(f)


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
