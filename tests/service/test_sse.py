#!/usr/bin/env python3
"""tests/service/test_sse.py - the job event streams (ctest: service_sse):
the event sequence queued -> started -> step... -> image -> done with ids
1, 2, ...; queued again when the position changes; Last-Event-ID resume with
no loss and no repeat; 50 concurrent clients; a client connecting after the
end; clients disconnecting mid-stream (FIN and RST) without harm.  One
server with --max-batch 1 so that a long job holds the worker and later
jobs wait in the queue for as long as a test needs."""
import threading
import time

import svc

PROMPT = "a yellow star on a black background"


def setup():
    return svc.Server(["--max-batch", "1", "--threads", "1"], name="sse").start()


def check_job_stream(events, job, n, steps):
    """The whole stream of a finished job, as the contract orders it."""
    names = [e.name for e in events]
    assert [e.id for e in events] == list(range(1, len(events) + 1)), \
        "ids not 1..N: %s" % [e.id for e in events]
    assert names[0] == "queued", names
    assert names.count("started") == 1, names
    st = names.index("started")
    assert set(names[:st]) == {"queued"}, names
    assert names[-1] == "done" and names.count("done") == 1, names
    per_image = {i: [] for i in range(n)}
    image_at = {}
    for k, e in enumerate(events[st + 1:-1], start=st + 1):
        if e.name == "step":
            assert e.data["steps"] == steps and 0 <= e.data["image"] < n, e
            assert e.data["image"] not in image_at, "step after the image event: %s" % e
            per_image[e.data["image"]].append(e.data["step"])
        elif e.name == "image":
            i = e.data["index"]
            assert i not in image_at, "image %d twice" % i
            image_at[i] = k
            assert e.data["url"] == "/v1/jobs/%s/images/%d.png" % (job["id"], i), e
            assert e.data["seed"] == job["seed"] + i, (e, job["seed"])
        elif e.name == "tiles":
            assert 0 <= e.data["image"] < n and e.data["image"] not in image_at, e
        else:
            raise AssertionError("unexpected %s between started and done: %s" % (e.name, names))
    assert sorted(image_at) == list(range(n)), names
    for i, s in per_image.items():
        assert s == sorted(s) and set(s) == set(range(1, steps + 1)), \
            "image %d steps %s (want 1..%d in order)" % (i, s, steps)
    return names


def key(events):
    return [(e.id, e.name, e.raw) for e in events]


def test_sequence(s):
    job = s.submit(prompt=PROMPT, width=64, height=64, steps=4, n=2, seed=77)
    events = s.events("/v1/jobs/%s/events" % job["id"])
    check_job_stream(events, job, 2, 4)
    assert s.job(job["id"])["state"] == "done"
    # after the end: the history, then the stream closes
    t0 = time.time()
    again = s.events("/v1/jobs/%s/events" % job["id"])
    assert time.time() - t0 < 5, "the stream of a finished job did not close"
    assert key(again) == key(events), (key(again), key(events))


def hold_worker(s):
    """A long job that occupies the only batch slot; cancel it to go on."""
    a = s.submit(prompt=PROMPT, width=64, height=64, steps=svc.LONG, seed=1)
    svc.wait_until(lambda: s.job(a["id"])["state"] == "running", 60, "blocker running")
    return a


def test_queued_positions(s):
    a = hold_worker(s)
    b = s.submit(prompt=PROMPT, width=64, height=64, steps=2, seed=2)
    c = s.submit(prompt=PROMPT, width=64, height=64, steps=2, seed=3)
    assert b["position"] == 0 and c["position"] == 1, (b, c)
    assert s.job(c["id"])["position"] == 1
    sse = svc.SSE(s.port, "/v1/jobs/%s/events" % c["id"], s.auth(None))
    first = sse.next()
    assert first.name == "queued" and first.data["position"] == 1, first
    s.delete("/v1/jobs/" + b["id"])
    ev = sse.next()
    assert ev.name == "queued" and ev.data["position"] == 0, ev
    assert s.job(c["id"])["position"] == 0
    s.delete("/v1/jobs/" + a["id"])
    events = [first, ev]
    while True:
        e = sse.next()
        if e is None:
            break
        events.append(e)
    sse.close()
    check_job_stream(events, c, 1, 2)


def test_resume(s):
    a = hold_worker(s)
    job = s.submit(prompt=PROMPT, width=64, height=64, steps=12, seed=5)
    path = "/v1/jobs/%s/events" % job["id"]
    part1 = s.events(path, until=lambda e: e.id == 1)
    s.delete("/v1/jobs/" + a["id"])
    # live: read through the first steps, drop the connection, resume
    part2 = s.events(path, headers={"Last-Event-ID": "1"}, until=lambda e: e.name == "step"
                     and e.data["step"] == 3)
    assert part2[0].id == 2, key(part2)
    last = part2[-1].id
    part3 = s.events(path, headers={"Last-Event-ID": str(last)})
    assert part3 and part3[0].id == last + 1, (last, key(part3)[:2])
    got = part1 + part2 + part3
    full = s.events(path)
    assert key(got) == key(full), "resume lost or repeated events:\n%s\n%s" % (key(got), key(full))
    check_job_stream(full, job, 1, 12)
    # after the end: resume from the middle, from the last event, from 0
    mid = len(full) // 2
    assert key(s.events(path, headers={"Last-Event-ID": str(mid)})) == key(full[mid:])
    t0 = time.time()
    assert s.events(path, headers={"Last-Event-ID": str(len(full))}) == []
    assert time.time() - t0 < 5
    assert key(s.events(path, headers={"Last-Event-ID": "0"})) == key(full)
    # a Last-Event-ID beyond the end or not a number: reported
    for v in (str(len(full) + 10), "abc", "-1"):
        r = svc.SSE(s.port, path, dict(s.auth(None), **{"Last-Event-ID": v}), timeout=10)
        evs = []
        if r.status == 200:
            while True:
                e = r.next()
                if e is None:
                    break
                evs.append(e)
        r.close()
        svc.note("events Last-Event-ID: %s after the end" % v,
                 "%d, %d events" % (r.status, len(evs)))
        assert r.status in (200, 400), r.status


def test_many_clients(s):
    base_fds = s.fds()
    a = hold_worker(s)
    job = s.submit(prompt=PROMPT, width=64, height=64, steps=6, n=2, seed=9)
    path = "/v1/jobs/%s/events" % job["id"]
    n_clients = 50
    results = [None] * n_clients
    connected = threading.Barrier(n_clients + 1, timeout=60)
    errors = []

    def client(i):
        try:
            sse = svc.SSE(s.port, path, s.auth(None), timeout=120)
            evs = [sse.next()]
            connected.wait()
            while True:
                e = sse.next()
                if e is None:
                    break
                evs.append(e)
            sse.close()
            results[i] = evs
        except Exception as e:  # noqa: BLE001
            errors.append("client %d: %r" % (i, e))
            try:
                connected.abort()
            except Exception:
                pass
    ts = [threading.Thread(target=client, args=(i,)) for i in range(n_clients)]
    for t in ts:
        t.start()
    connected.wait()
    peak_fds = s.fds()
    s.delete("/v1/jobs/" + a["id"])
    for t in ts:
        t.join(180)
    assert not errors, errors[:3]
    full = s.events(path)
    check_job_stream(full, job, 2, 6)
    for i, evs in enumerate(results):
        assert key(evs) == key(full), "client %d saw %s" % (i, [e.name for e in evs])
    svc.figure("50 SSE clients: server fds %d idle, %d with the clients connected"
               % (base_fds, peak_fds))
    assert peak_fds >= base_fds + n_clients - 5, (base_fds, peak_fds)
    svc.wait_until(lambda: s.fds() <= base_fds + 3, 15,
                   "fds back to %d after the clients left (now %d)" % (base_fds, s.fds()))


def test_disconnect_mid_stream(s):
    base_fds = s.fds()
    job = s.submit(prompt=PROMPT, width=64, height=64, steps=40, seed=11)
    path = "/v1/jobs/%s/events" % job["id"]
    rude = svc.SSE(s.port, path, s.auth(None))
    polite = svc.SSE(s.port, path, s.auth(None))
    silent = svc.SSE(s.port, path, s.auth(None))  # never reads again
    for sse in (rude, polite):
        while True:
            e = sse.next()
            if e.name == "step" and e.data["step"] >= 3:
                break
    rude.close(abort=True)     # RST
    polite.close()             # FIN
    # the server goes on answering and the job goes on
    for _ in range(5):
        assert s.get("/healthz").status == 200
    j = s.wait_job(job["id"], timeout=120)
    assert j["state"] == "done", j
    silent.close(abort=True)
    full = s.events(path)
    check_job_stream(full, job, 1, 40)
    svc.wait_until(lambda: s.fds() <= base_fds + 2, 15,
                   "fds back to %d after the disconnects (now %d)" % (base_fds, s.fds()))
    # a client that disconnects right after sending the request
    for _ in range(20):
        sock = svc.socket.create_connection(("127.0.0.1", s.port))
        sock.sendall(("GET %s HTTP/1.1\r\nHost: localhost\r\n%s\r\n" % (
            path, "".join("%s: %s\r\n" % kv for kv in s.auth(None).items()))).encode())
        sock.close()
    assert s.get("/healthz").status == 200
    svc.wait_until(lambda: s.fds() <= base_fds + 2, 15,
                   "fds back to %d after 20 hit-and-run clients (now %d)" % (base_fds, s.fds()))


def test_cancel_ends_streams(s):
    a = hold_worker(s)
    path = "/v1/jobs/%s/events" % a["id"]
    sse = svc.SSE(s.port, path, s.auth(None))
    e = sse.next()
    assert e.name == "queued", e
    s.delete("/v1/jobs/" + a["id"])
    names = [e.name]
    while True:
        e = sse.next()
        if e is None:
            break
        names.append(e.name)
    sse.close()
    assert names[-1] == "cancelled" and names.count("cancelled") == 1, names[-5:]
    assert "image" not in names and "done" not in names, names


TESTS = [test_sequence, test_queued_positions, test_resume, test_many_clients,
         test_disconnect_mid_stream, test_cancel_ends_streams]

if __name__ == "__main__":
    raise SystemExit(svc.run_tests(TESTS, setup=setup))
