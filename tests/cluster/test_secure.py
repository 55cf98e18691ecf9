#!/usr/bin/env python3
"""tests/cluster/test_secure.py - Redis with a password, an ACL user and TLS
(ctest: cluster_secure; docs/scale-out.md "Redis with a password and TLS").

Two real redis-servers, started here on free loopback ports:
- `plain`: `requirepass` (the default user's password) and an ACL user
  `tsr` (`user tsr on >PW ~tsr:* +@all -@dangerous`);
- `tls`: TLS only (`--port 0 --tls-port P`) on a certificate this test
  makes with the openssl CLI (a CA, and a server certificate for
  localhost and 127.0.0.1 signed by it), also with `requirepass`.

Cases: a job runs through an api node and a worker node with the password
from --queue-password-file (default user) and from TESSERA_REDIS_PASSWORD
(the ACL user of the URL), and the same over rediss:// with --queue-ca; the
password appears neither on a node's command line nor in its output; the
nodes re-authenticate after Redis restarts; a password changed under
running nodes is logged and retried, and they go on once it is back; and
every wrong configuration stops `tessera serve` with exit 2 and a one-line
reason: a wrong password (default and ACL user), no password (NOAUTH), a
password in the URL (refused, not echoed), an untrusted CA, a certificate
that does not name the host, rediss:// to a plain port and redis:// to a
TLS port."""
import os
import subprocess
import time

import cluster
import svc

PW = "pw-default-7f3a9c"      # requirepass of both servers
ACL_PW = "pw-acl-user-51d2e0"  # the ACL user tsr's
ctx = {}


def openssl(*args, cwd):
    subprocess.run(["openssl"] + list(args), cwd=cwd, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, timeout=60)


def make_certs():
    """A CA, a server certificate for localhost/127.0.0.1 signed by it, and
    a second CA that signed nothing of ours."""
    d = svc.tmpdir("tsr-tls-")
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    for name, cn in (("ca", "tessera test CA"), ("other", "another CA")):
        openssl("req", "-x509", *ec, "-keyout", name + ".key", "-out", name + ".crt",
                "-days", "2", "-subj", "/CN=" + cn, cwd=d)
    openssl("req", *ec, "-keyout", "redis.key", "-out", "redis.csr", "-subj", "/CN=localhost",
            cwd=d)
    with open(os.path.join(d, "san.cnf"), "w") as f:
        f.write("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    openssl("x509", "-req", "-in", "redis.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", "redis.crt", "-days", "2", "-extfile", "san.cnf", cwd=d)
    os.chmod(os.path.join(d, "redis.key"), 0o644)  # redis-server may run as another user
    return {k: os.path.join(d, v) for k, v in
            (("dir", ""), ("ca", "ca.crt"), ("other", "other.crt"), ("cert", "redis.crt"),
             ("key", "redis.key"))}


def password_file(text, mode=0o600):
    p = os.path.join(svc.tmpdir("tsr-redis-pw-"), "password")
    with open(p, "w") as f:
        f.write(text + "\n")
    os.chmod(p, mode)
    return p


def setup():
    certs = make_certs()
    # what docs/scale-out.md recommends: the model's keys, no dangerous commands
    acl = ["--user", "tsr", "on", ">" + ACL_PW, "~tsr:*", "+@all", "-@dangerous"]
    plain = cluster.Redis(password=PW, extra=acl).start()
    # 127.0.0.2 too: the certificate does not name it (the host name check)
    tls = cluster.Redis(password=PW, tls=certs, bind="127.0.0.1 127.0.0.2").start()
    ctx.update(certs=certs, plain=plain, tls=tls, pwfile=password_file(PW))
    return ctx


def start_node(url, role, name, extra=(), env=None):
    """A node, with `env` added to its environment (for this start only)."""
    n = cluster.node(url, role, name, list(extra))
    saved = dict(os.environ)
    os.environ.update(env or {})
    try:
        n.start(wait_ready=False)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return n


def run_job(api, i, wait_s=0, size=64):
    """One job through api; wait_s: how long a 503 (Redis away, the node
    reconnecting) is retried.  Returns the PNG's size."""
    p = cluster.spec(i, steps=2)
    p.update(width=size, height=size)
    deadline = time.time() + wait_s
    while True:
        r = api.post("/v1/jobs", p)
        if r.status != 503 or time.time() > deadline:
            break
        time.sleep(0.1)
    assert r.status == 202, (r.status, r.body[:300])
    jid = r.json["id"]
    j = api.wait_job(jid, timeout=120)
    assert j["state"] == "done", j
    png = api.image(jid)
    svc.assert_same_image(png, p, "job %s" % jid)
    return len(png)


def serve_fails(args, env=None, timeout=60):
    """`tessera serve ARGS` that must stop before loading: (exit, output)."""
    e = dict(os.environ)
    e.pop("TESSERA_REDIS_PASSWORD", None)
    e.update(env or {})
    d = svc.tmpdir("tsr-data-")
    p = subprocess.run([svc.TSR_BIN, "serve", "--data-dir", d, "--listen", "127.0.0.1:0"] +
                       list(args), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=e,
                       timeout=timeout)
    return p.returncode, p.stdout.decode("utf-8", "replace")


def assert_no_secret(text, what):
    for secret in (PW, ACL_PW):
        assert secret not in text, "%s shows a password:\n%s" % (what, text)


def stop_all(nodes):
    for n in nodes:
        assert n.stop(60) == 0, n.output()


# ---------------------------------------------------------------- passwords

def test_password_file_and_env(c):
    """api: the default user, password from --queue-password-file; worker:
    the ACL user of the URL, password from TESSERA_REDIS_PASSWORD."""
    r = c["plain"]
    api = start_node(r.url, "api", "api-file", ["--queue-password-file", c["pwfile"]])
    acl_url = "redis://tsr@127.0.0.1:%d" % r.port
    worker = start_node(acl_url, "worker", "worker-env", env={"TESSERA_REDIS_PASSWORD": ACL_PW})
    c["pw_nodes"] = [api, worker]
    api.wait_ready(120)
    worker.wait_ready(120)
    run_job(api, 0)
    assert worker.metrics().value("tessera_cluster_results_total") == 1
    # each node is the user it was given: Redis lists the worker's
    # connections as tsr, the api node's as default (this test's own
    # CLIENT LIST connection, also default, left out)
    clients = [line for line in r.cmd("CLIENT", "LIST").decode().splitlines()
               if "cmd=client|list" not in line]
    users = sorted(line.split(" user=")[1].split()[0] for line in clients)
    assert "tsr" in users and "default" in users, clients
    for n in (api, worker):
        with open("/proc/%d/cmdline" % n.pid, "rb") as f:
            assert_no_secret(f.read().decode("utf-8", "replace"), n.name + "'s command line")
        assert_no_secret(n.all_output(), n.name + "'s output")


def test_reauth_after_redis_restart(c):
    """Redis restarts (same port, AOF): every connection comes back through
    the one connect function, with AUTH, and jobs run again."""
    r = c["plain"]
    api, worker = c["pw_nodes"]
    r.stop()
    time.sleep(1)
    r.start()
    run_job(api, 1, wait_s=30)
    for n in (api, worker):
        assert "connected to redis://" in n.all_output(), n.output()
    assert worker.metrics().value("tessera_cluster_results_total") == 2


def test_password_changed_under_running_nodes(c):
    """The password changes and connections drop: the nodes log the refused
    AUTH and retry (no exit); with the password back, they go on."""
    r = c["plain"]
    api, worker = c["pw_nodes"]
    r.cmd("ACL", "SETUSER", "tsr", "resetpass", ">rotated-" + ACL_PW[::-1])
    r.cmd("CLIENT", "KILL", "USER", "tsr")
    svc.wait_until(lambda: "authentication failed for user 'tsr'" in worker.all_output(), 30,
                   "the worker logging the refused AUTH")
    assert worker.alive(), worker.output()
    r.cmd("ACL", "SETUSER", "tsr", "resetpass", ">" + ACL_PW)
    run_job(api, 2, wait_s=30)
    assert_no_secret(worker.all_output(), "the worker's output")
    stop_all(c.pop("pw_nodes"))


def test_wrong_passwords_stop_the_node(c):
    r = c["plain"]
    port = r.port
    cases = [
        (["--queue", r.url, "--queue-password-file", password_file("not-" + PW)], {},
         "authentication failed for user 'default' at 127.0.0.1:%d (WRONGPASS" % port),
        (["--queue", "redis://tsr@127.0.0.1:%d" % port], {"TESSERA_REDIS_PASSWORD": PW},
         "authentication failed for user 'tsr' at 127.0.0.1:%d (WRONGPASS" % port),
        (["--queue", r.url], {}, "127.0.0.1:%d requires a password (NOAUTH)" % port),
        (["--queue", "redis://tsr@127.0.0.1:%d" % port], {},
         "names the user 'tsr' but no password was given"),
        (["--queue", "redis://:%s@127.0.0.1:%d" % (PW, port)], {},
         "a password in the URL is not accepted"),
        (["--queue", "redis://tsr:%s@127.0.0.1:%d" % (ACL_PW, port)], {},
         "a password in the URL is not accepted"),
        (["--queue", r.url, "--queue-password-file", "/nonexistent/pw"], {},
         "--queue-password-file /nonexistent/pw: No such file or directory"),
        (["--queue", r.url, "--queue-password-file", password_file("")], {},
         "the file is empty"),
        (["--queue-password-file", c["pwfile"]], {}, "need --queue"),
    ]
    for args, env, want in cases:
        rc, out = serve_fails(args, env)
        assert rc == 2 and want in out, (args, rc, want, out)
        assert "listening on" not in out, out
        assert_no_secret(out, "the output for %s" % args)
    svc.figure("%d wrong password set-ups: exit 2, one-line reason each" % len(cases))


def test_readable_password_file_warns(c):
    """A password file others can read works, with a warning (as --token-file)."""
    pw = password_file(PW, mode=0o644)
    n = start_node(c["plain"].url, "both", "both-644", ["--queue-password-file", pw])
    n.wait_ready(120)
    assert "can be read by group or others (mode 644); chmod 600 it" in n.all_output(), \
        n.output()
    stop_all([n])


# ---------------------------------------------------------------- TLS

def test_job_over_tls(c):
    """rediss:// with --queue-ca (and the password from the environment):
    one node by IP address, one by host name (SNI and the name check)."""
    r, ca = c["tls"], c["certs"]["ca"]
    env = {"TESSERA_REDIS_PASSWORD": PW}
    api = start_node(r.url, "api", "api-tls", ["--queue-ca", ca], env=env)
    worker = start_node("rediss://localhost:%d" % r.port, "worker", "worker-tls",
                        ["--queue-ca", ca], env=env)
    api.wait_ready(120)
    worker.wait_ready(120)
    t0 = time.time()
    run_job(api, 3)
    # a PNG and tile sets of many TLS records (16 KB each) through the bridge
    big = run_job(api, 4, size=256)
    svc.figure("2 jobs over rediss:// (api by IP, worker by name; a %d-byte PNG): %.2f s"
               % (big, time.time() - t0))
    assert big > 16384, big
    assert worker.metrics().value("tessera_cluster_results_total") == 2
    # every connection of both nodes is a TLS one: Redis has no plain port
    assert r.cmd("CONFIG", "GET", "port")[1] == b"0"
    # a restart: the TLS connections are made again (handshake + AUTH)
    r.stop()
    time.sleep(1)
    r.start()
    run_job(api, 5, wait_s=30)
    for n in (api, worker):
        assert "connected to rediss://" in n.all_output(), n.output()
    for n in (api, worker):
        assert_no_secret(n.all_output(), n.name + "'s output")
    stop_all([api, worker])


def test_tls_misconfigurations_stop_the_node(c):
    r, certs = c["tls"], c["certs"]
    env = {"TESSERA_REDIS_PASSWORD": PW}
    plain_port, tls_port = c["plain"].port, r.port
    cases = [
        (["--queue", r.url, "--queue-ca", certs["other"]],
         "the TLS certificate of 127.0.0.1:%d is not trusted" % tls_port),
        (["--queue", r.url],  # the system's trust store does not know the test CA
         "not signed by a CA of the system's trust store; give --queue-ca"),
        (["--queue", "rediss://127.0.0.2:%d" % tls_port, "--queue-ca", certs["ca"]],
         "does not name '127.0.0.2'"),
        (["--queue", "rediss://127.0.0.1:%d" % plain_port, "--queue-ca", certs["ca"]],
         "is it a plain, non-TLS port? that needs redis://"),
        (["--queue", "redis://127.0.0.1:%d" % tls_port],
         "closed the connection at the first command (a TLS port? then use rediss://)"),
        (["--queue", "redis://127.0.0.1:%d" % tls_port, "--queue-ca", certs["ca"]],
         "--queue-ca needs a rediss://"),
        (["--queue", r.url, "--queue-ca", certs["dir"] + "/san.cnf"],
         "cannot load it as PEM certificates"),
    ]
    for args, want in cases:
        rc, out = serve_fails(args, env)
        assert rc == 2 and want in out, (args, rc, want, out)
        assert len([line for line in out.splitlines() if line.strip()]) == 1, out
    svc.figure("%d TLS mistakes: exit 2, one-line reason each" % len(cases))


def teardown(c):
    for n in c.get("pw_nodes", []):
        n.stop(60)
    for k in ("plain", "tls"):
        if k in c:
            c[k].stop()


TESTS = [test_password_file_and_env, test_reauth_after_redis_restart,
         test_password_changed_under_running_nodes, test_wrong_passwords_stop_the_node,
         test_readable_password_file_warns, test_job_over_tls,
         test_tls_misconfigurations_stop_the_node]

if __name__ == "__main__":
    raise SystemExit(svc.run_tests(TESTS, setup=setup, teardown=teardown))
