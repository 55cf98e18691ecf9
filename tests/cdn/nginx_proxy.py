"""tests/cdn/nginx_proxy.py - run deploy/nginx/tessera.conf in front of a
tessera server, as the current user, in a temporary prefix (config, cache,
pid, logs), on a free loopback port.  Used by tests/cdn and tests/browser.
"""
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.environ.get("TSR_SOURCE_DIR") or os.path.normpath(os.path.join(HERE, "..", ".."))
CONF = os.path.join(ROOT, "deploy", "nginx", "tessera.conf")


def find_nginx():
    for p in (shutil.which("nginx"), "/usr/sbin/nginx"):
        if p and os.path.exists(p):
            return p
    return None


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Nginx:
    def __init__(self, upstream_port, secret_snippet=None):
        """secret_snippet: keys on, the server's <data-dir>/url-secret.nginx,
        included where deploy/nginx/tessera.conf says (signed URLs)."""
        self.upstream_port = upstream_port
        self.secret_snippet = secret_snippet
        self.dir = tempfile.mkdtemp(prefix="tsr-nginx-")
        self.port = None
        self.proc = None

    def start(self, timeout=20):
        site = open(CONF).read()
        cache = os.path.join(self.dir, "cache")
        os.makedirs(cache)
        site = site.replace("/var/cache/nginx/tessera", cache)
        site = site.replace("server 127.0.0.1:8080;", "server 127.0.0.1:%d;" % self.upstream_port)
        if self.secret_snippet:
            line = "# include /var/lib/tessera/url-secret.nginx;"
            assert line in site, "deploy/nginx/tessera.conf lost its url-secret include line"
            site = site.replace(line, "include %s;" % self.secret_snippet)
        last = None
        for _ in range(5):  # a free port can be taken between the probe and the bind
            self.port = free_port()
            body = re.sub(r"listen 80;", "listen 127.0.0.1:%d;" % self.port, site)
            user = "user root;\n" if os.geteuid() == 0 else ""
            conf = (user + "worker_processes 1;\npid %(d)s/nginx.pid;\nerror_log %(d)s/error.log info;\n"
                    "events { worker_connections 256; }\n"
                    "http {\n"
                    "  access_log %(d)s/access.log;\n"
                    "  client_body_temp_path %(d)s/body; proxy_temp_path %(d)s/proxy;\n"
                    "  fastcgi_temp_path %(d)s/fcgi; uwsgi_temp_path %(d)s/uwsgi;\n"
                    "  scgi_temp_path %(d)s/scgi;\n%(site)s\n}\n") % {"d": self.dir, "site": body}
            path = os.path.join(self.dir, "nginx.conf")
            with open(path, "w") as f:
                f.write(conf)
            self.proc = subprocess.Popen([find_nginx(), "-p", self.dir, "-c", path, "-g",
                                          "daemon off;"], stdin=subprocess.DEVNULL,
                                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                         start_new_session=True)
            deadline = time.time() + timeout
            while time.time() < deadline:
                if self.proc.poll() is not None:
                    break
                try:
                    socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                    return self
                except OSError:
                    time.sleep(0.05)
            last = self.proc.stderr.read().decode() if self.proc.poll() is not None else "timeout"
            self.stop(keep_dir=True)
        raise AssertionError("nginx did not start: %s" % last)

    def access_log(self):
        try:
            return open(os.path.join(self.dir, "access.log")).read()
        except OSError:
            return ""

    def stop(self, keep_dir=False):
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGQUIT)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        self.proc = None
        if not keep_dir:
            shutil.rmtree(self.dir, ignore_errors=True)
