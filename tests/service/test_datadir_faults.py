#!/usr/bin/env python3
"""tests/service/test_datadir_faults.py - the data directory under faults
(ctest: service_datadir_faults; issue 61, defects 5-8):

- a flipped byte in an early journal record (payload or length) costs that
  record only: the reader resynchronises at the next intact record, every
  later accepted job comes back and runs, the damaged file is kept as
  journal.log.corrupt-<epoch>, and the log says which bytes were skipped;
- a second `tessera serve` on the same --data-dir exits 1 with "data dir X
  is in use by another tessera serve (pid N)" while the first keeps working,
  and kill -9 of the holder never blocks the next start;
- a job whose files cannot be written (jobs/<id> not a directory; ENOSPC
  on a small tmpfs mounted over jobs/ where mounting is allowed) fails with
  its reason and is still failed, with the same reason and parameters,
  after restarts, until garbage collection removes it for good;
- finished jobs' tiles leave RAM past --tile-cache-mb: 50 jobs do not grow
  the server's RSS with the tiles they published, and the final tiles are
  then served from disk with the same bytes, ETag and cache headers;
- the journal is compacted while the server runs (--journal-compact-kb),
  keeping the records of jobs still queued or running;
- the retention defaults (--keep-jobs 10000, 0 = off) are in force and said.

journal.log: records of u32 length | u32 CRC-32 | JSON payload,
little-endian (docs/service-design.md, "Durability")."""
import glob
import json
import os
import re
import shutil
import struct
import subprocess
import time
import zlib

import svc

PROMPT = "a white circle on a red background"
SMALL = dict(prompt=PROMPT, width=64, height=64, steps=2)
ARGS = ["--max-batch", "1", "--threads", "1"]


def journal_path(data_dir):
    return os.path.join(data_dir, "journal.log")


def journal_records(data_dir):
    """[(offset, payload length, payload dict)] of a journal with no damage."""
    with open(journal_path(data_dir), "rb") as f:
        data = f.read()
    pos, recs = 0, []
    while pos < len(data):
        n, crc = struct.unpack("<II", data[pos:pos + 8])
        payload = data[pos + 8:pos + 8 + n]
        assert len(payload) == n and zlib.crc32(payload) & 0xffffffff == crc, \
            "journal.log damaged at byte %d" % pos
        recs.append((pos, n, json.loads(payload)))
        pos += 8 + n
    return recs


def journal_lines(server):
    return [ln for ln in server.all_output().split("\n")
            if re.search(r"(?i)warn", ln) and re.search(r"(?i)journal", ln)]


def queued_behind_long_job(data):
    """A server that accepted a long job (running) and 5 small ones behind
    it, killed -9 before the small ones ran: 6 accept records."""
    s = svc.Server(ARGS, data_dir=data, name="accept-6").start()
    run = s.submit(prompt=PROMPT, width=64, height=64, steps=svc.LONG, seed=50)
    svc.wait_until(lambda: s.job(run["id"])["state"] == "running", 60, "long job running")
    small = [s.submit(seed=51 + i, **SMALL) for i in range(5)]
    assert all(s.job(x["id"])["state"] == "queued" for x in small)
    s.kill9()
    recs = journal_records(data)
    ids = [p["id"] for _, _, p in recs]
    assert ids == [run["id"]] + [x["id"] for x in small], ids
    assert all(p["record"] == "accept" for _, _, p in recs)
    return run, small, recs


def _damaged_early_record(where):
    data = svc.tmpdir("tsr-data-")
    run, small, recs = queued_behind_long_job(data)
    path = journal_path(data)
    with open(path, "rb") as f:
        blob = bytearray(f.read())
    off, n, _ = recs[0]
    if where == "payload":
        blob[off + 8 + n // 2] ^= 0x20             # one bit in the middle of the JSON
    else:
        blob[off] ^= 0x40                          # the length's low byte: points elsewhere
    with open(path, "wb") as f:
        f.write(blob)
    damaged = bytes(blob)

    s2 = svc.Server(ARGS, data_dir=data, name="resync-%s" % where).start()
    warn = journal_lines(s2)
    svc.note("journal: byte flipped in the %s of record 1 of 6" % where,
             "restart ready, %d warning line(s)" % len(warn))
    text = "\n".join(warn)
    assert re.search(r"skipped \d+ bytes \[0, %d\)" % recs[1][0], text), text
    if where == "payload":
        assert run["id"] in text, "the damaged record's job is not named:\n" + text
    copies = glob.glob(path + ".corrupt-*")
    assert len(copies) == 1, copies
    with open(copies[0], "rb") as f:
        assert f.read() == damaged, "the .corrupt copy is not the damaged file"
    assert copies[0] in text, text
    # the damaged record's job cannot be trusted; every intact one is back
    assert s2.get("/v1/jobs/" + run["id"]).status == 404
    for i, x in enumerate(small):
        r = s2.get("/v1/jobs/" + x["id"])
        assert r.status == 200, "%s lost after a damaged first record: %r" % (x["id"], r)
    for i, x in enumerate(small):
        j = s2.wait_job(x["id"], timeout=120)
        assert j["state"] == "done" and j["params"]["seed"] == 51 + i, j
    svc.assert_same_image(s2.image(small[0]["id"]), dict(SMALL, seed=51), "first intact job")
    assert s2.stop() == 0
    # the file was rewritten without the damage: a third start says nothing
    s3 = svc.Server(ARGS, data_dir=data, name="resync-%s-again" % where).start()
    assert not journal_lines(s3), journal_lines(s3)
    for x in small:
        assert s3.job(x["id"])["state"] == "done"
    assert s3.stop() == 0
    svc.figure("journal, flipped byte in the %s of record 1 of 6: 5 of 5 intact jobs kept, "
               "%d bytes skipped" % (where, recs[1][0]))


def test_flipped_byte_early_payload():
    _damaged_early_record("payload")


def test_flipped_byte_early_length():
    _damaged_early_record("length")


def test_second_server_refused():
    data = svc.tmpdir("tsr-data-")
    a = svc.Server(ARGS, data_dir=data, name="first").start()
    t0 = time.time()
    b = svc.Server(ARGS, data_dir=data, name="second")
    started = False
    try:
        b.start(timeout=60)
        started = True
    except AssertionError:
        pass  # exited before printing a port: what should happen
    if started:
        b.kill9()
        raise AssertionError("a second server started on a data dir in use:\n" + b.output())
    rc = b.wait(30)
    out = b.all_output()
    svc.note("second tessera serve on the same --data-dir", "exit %s in %.1fs"
             % (rc, time.time() - t0))
    assert rc == 1, (rc, out)
    want = "data dir %s is in use by another tessera serve (pid %d)" % (data, a.pid)
    assert want in out, "%r not in:\n%s" % (want, out)
    with open(os.path.join(data, "lock")) as f:
        assert f.read().strip() == str(a.pid)
    # the first one never noticed: it accepts, runs and journals as before
    jobs = [a.submit(seed=60 + i, **SMALL) for i in range(3)]
    for x in jobs:
        assert a.wait_job(x["id"])["state"] == "done"
    assert a.alive()
    a.kill9()
    # kill -9 released the lock: the next start is not blocked by the file
    c = svc.Server(ARGS, data_dir=data, name="after-kill").start()
    for i, x in enumerate(jobs):
        # done, or rerun: the final record may not have reached the disk
        # before the kill (docs/service-design.md, "Durability")
        j = c.wait_job(x["id"])
        assert j["state"] == "done" and j["params"]["seed"] == 60 + i, j
    assert c.stop() == 0


def same_failed_job(before, after):
    for k in ("id", "state", "error", "params", "created", "started", "finished", "steps"):
        assert before[k] == after[k], "%s changed across the restart: %r -> %r" % (
            k, before[k], after[k])


def _unwritable_job(data, block, unblock, name):
    """A long job runs while job J waits; block(J's id) makes J's files
    unwritable; the long job is cancelled, J runs and fails.  Returns J's
    view after it failed."""
    s = svc.Server(ARGS, data_dir=data, name=name).start()
    run = s.submit(prompt=PROMPT, width=64, height=64, steps=svc.LONG, seed=70)
    svc.wait_until(lambda: s.job(run["id"])["state"] == "running", 60, "long job running")
    j = s.submit(seed=71, **SMALL)
    block(j["id"])
    assert s.delete("/v1/jobs/" + run["id"]).status == 200
    failed = s.wait_job(j["id"])
    assert failed["state"] == "failed", failed
    assert s.stop() == 0
    unblock(j["id"])
    return failed


def _check_failed_survives(data, failed, reason_rx):
    svc.note("job whose files could not be written (%s)" % failed["error"]["message"][:40],
             failed["state"])
    assert re.search(reason_rx, failed["error"]["message"]), failed["error"]
    s2 = svc.Server(ARGS, data_dir=data, name="failed-restart").start()
    r = s2.get("/v1/jobs/" + failed["id"])
    assert r.status == 200, "the failed job is gone after a restart: %r" % r
    same_failed_job(failed, r.json)
    ev = s2.events("/v1/jobs/%s/events" % failed["id"])
    assert ev and ev[-1].name == "failed", ev
    assert s2.stop() == 0
    # compaction at that start kept the record that carries the job (and
    # only such records: the cancelled long job's too when it hit ENOSPC)
    recs = journal_records(data)
    assert failed["id"] in [p["id"] for _, _, p in recs], recs
    assert all(p["record"] != "accept" and isinstance(p.get("job"), dict)
               for _, _, p in recs), recs
    s3 = svc.Server(ARGS, data_dir=data, name="failed-third").start()
    same_failed_job(failed, s3.job(failed["id"]))
    assert s3.stop() == 0
    # garbage collection removes it for good, journal record included
    s4 = svc.Server(ARGS + ["--keep-jobs", "1"], data_dir=data, name="failed-gc").start()
    x = s4.submit(seed=72, **SMALL)
    assert s4.wait_job(x["id"])["state"] == "done"
    svc.wait_until(lambda: s4.get("/v1/jobs/" + failed["id"]).status == 404, 30,
                   "the failed job collected")
    assert s4.stop() == 0
    s5 = svc.Server(ARGS + ["--keep-jobs", "1"], data_dir=data, name="failed-gone").start()
    assert s5.get("/v1/jobs/" + failed["id"]).status == 404, "collected job came back"
    assert s5.job(x["id"])["state"] == "done"
    assert s5.stop() == 0
    assert not journal_records(data), journal_records(data)


def test_unwritable_job_files_stay_failed():
    data = svc.tmpdir("tsr-data-")
    jobs_dir = os.path.join(data, "jobs")

    def block(jid):
        with open(os.path.join(jobs_dir, jid), "w") as f:   # jobs/<id> is a file
            f.write("not a directory\n")

    def unblock(jid):
        os.unlink(os.path.join(jobs_dir, jid))

    failed = _unwritable_job(data, block, unblock, "notdir")
    _check_failed_survives(data, failed, r"Not a directory")


def _mount_tmpfs(path, size):
    try:
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%s" % size, "tmpfs", path],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return str(e)
    return None if r.returncode == 0 else r.stdout.decode(errors="replace").strip()


def test_enospc_job_files_stay_failed():
    data = svc.tmpdir("tsr-data-")
    jobs_dir = os.path.join(data, "jobs")
    os.makedirs(jobs_dir)
    why = _mount_tmpfs(jobs_dir, "256k")
    if why:
        svc.note("ENOSPC on jobs/ (tmpfs mount)", "skipped: cannot mount (%s)" % why[:60])
        return
    mounted = [True]

    def umount():
        if mounted[0]:
            subprocess.run(["umount", jobs_dir], timeout=30)
            mounted[0] = False

    try:
        def block(jid):
            # fill the tmpfs: the job's .tiles, PNG and job.json get ENOSPC
            fd = os.open(os.path.join(jobs_dir, "filler"), os.O_WRONLY | os.O_CREAT, 0o644)
            try:
                while True:
                    os.write(fd, b"\0" * 4096)
            except OSError:
                pass
            finally:
                os.close(fd)

        def unblock(jid):
            umount()   # "space freed": the server sees the empty jobs/ below

        failed = _unwritable_job(data, block, unblock, "enospc")
    finally:
        umount()
    _check_failed_survives(data, failed, r"No space left on device")


def _final_tiles(s, jid):
    ev = s.events("/v1/jobs/%s/events" % jid)
    assert ev[-1].name == "done", [e.name for e in ev]
    tiles = [e for e in ev if e.name == "tiles"]
    return tiles[-1].data["tiles"], tiles[0].data["tiles"]


def _fetch(s, url):
    r = s.get(url)
    assert r.status == 200, (url, r)
    return (r.body, r.headers["etag"], r.headers["cache-control"], r.headers["content-type"],
            r.headers["content-length"])


def test_tiles_leave_ram():
    # 8 px tiles, every tile re-published at every step: many small JPEGs
    args = ["--tile-size", "8", "--tile-threshold", "0", "--max-batch", "4",
            "--tile-cache-mb", "1"]
    s = svc.Server(args, name="tiles-ram").start()
    first = s.submit(prompt=PROMPT, width=64, height=64, steps=10, seed=80)
    final, early = _final_tiles(s, first["id"])
    history = [(e.id, e.name, e.data) for e in s.events("/v1/jobs/%s/events" % first["id"])]
    before = {t["url"]: _fetch(s, t["url"]) for t in final}
    early_url = early[0]["url"]
    assert s.get(early_url).status == 200      # a preview version, still in RAM
    manifest = s.get("/v1/jobs/%s/images/0/tiles" % first["id"]).json
    rss0, bytes0 = s.settled_rss_kib(), s.metrics().value("tessera_tile_bytes_total")
    jobs = [s.submit(prompt=PROMPT, width=64, height=64, steps=10, seed=81 + i)
            for i in range(50)]
    for x in jobs:
        assert s.wait_job(x["id"], timeout=300)["state"] == "done"
    rss1, bytes1 = s.settled_rss_kib(), s.metrics().value("tessera_tile_bytes_total")
    grew, tiles_kib = rss1 - rss0, (bytes1 - bytes0) / 1024.0
    svc.figure("tiles in RAM: 50 finished jobs published %.0f KiB of tiles; RSS %d -> %d KiB "
               "(%+d KiB) with --tile-cache-mb 1" % (tiles_kib, rss0, rss1, grew))
    assert tiles_kib > 8 * 1024, "too few tile bytes to measure: %.0f KiB" % tiles_kib
    assert grew < 1024 + 0.25 * tiles_kib, \
        "RSS grew %d KiB for %.0f KiB of tiles" % (grew, tiles_kib)
    # the first job's tiles left RAM: previews are gone, finals come from disk
    assert s.get(early_url).status == 404, "the preview version is still in RAM"
    for url, (body, etag, cc, ctype, clen) in before.items():
        assert _fetch(s, url) == (body, etag, cc, ctype, clen), url
        nm = s.get(url, headers={"If-None-Match": etag})
        assert nm.status == 304 and nm.headers["etag"] == etag, nm
    again = s.get("/v1/jobs/%s/images/0/tiles" % first["id"]).json
    assert again == manifest, (again, manifest)
    # a late reader of the event stream still sees every tiles event it had
    replay = [(e.id, e.name, e.data) for e in s.events("/v1/jobs/%s/events" % first["id"])]
    assert replay == history, "event history changed when the tiles left RAM"
    assert s.stop() == 0


def test_journal_compacts_while_running():
    data = svc.tmpdir("tsr-data-")
    args = ["--max-batch", "1", "--threads", "1", "--journal-compact-kb", "4"]
    s = svc.Server(args, data_dir=data, name="compact").start()
    long_a = s.submit(prompt=PROMPT, width=64, height=64, steps=svc.LONG, seed=90)
    svc.wait_until(lambda: s.job(long_a["id"])["state"] == "running", 60, "A running")
    # 60 jobs wait behind A (their accepts are live: nothing to compact),
    # then B, which is to be running when the rest are done
    jobs = [s.submit(seed=91 + i, **SMALL) for i in range(60)]
    long_b = s.submit(prompt=PROMPT, width=64, height=64, steps=svc.LONG, seed=89)
    path = journal_path(data)
    sizes = [os.path.getsize(path)]
    assert s.delete("/v1/jobs/" + long_a["id"]).status == 200
    # until B runs and the storage thread wrote every job's job.json (its
    # final record follows at once)
    files = [os.path.join(data, "jobs", x["id"], "job.json") for x in jobs]
    deadline = time.time() + 120
    while s.job(long_b["id"])["state"] != "running" or not all(map(os.path.exists, files)):
        sizes.append(os.path.getsize(path))
        assert time.time() < deadline, "B never ran, or job.json files missing"
        time.sleep(0.005)
    time.sleep(0.5)
    sizes.append(os.path.getsize(path))
    drops = sum(1 for x, y in zip(sizes, sizes[1:]) if y < x)
    svc.figure("journal while running (--journal-compact-kb 4; 60 jobs queued behind a long "
               "one, then run): %d bytes with them queued, largest %d, now %d; shrank %d "
               "time(s) as they finished" % (sizes[0], max(sizes), sizes[-1], drops))
    assert drops >= 1, "the journal never shrank while running: %s" % sizes
    # 62 accepts and 61 final records were appended (about 25 KiB); what is
    # left is B's live accept plus less than 4 KiB not yet compacted
    assert sizes[-1] < 8 * 1024, sizes
    assert "compacted while running" in s.all_output(), s.output()
    # what compaction kept is what a crash needs: B's accept
    recs = journal_records(data)
    assert long_b["id"] in {p["id"] for _, _, p in recs if p["record"] == "accept"}, recs
    s.kill9()
    s2 = svc.Server(args, data_dir=data, name="compact-restart").start()
    assert not journal_lines(s2), journal_lines(s2)
    assert s2.job(long_b["id"])["state"] in ("queued", "running")
    assert s2.job(long_a["id"])["state"] == "cancelled"
    for i, x in enumerate(jobs):
        j = s2.wait_job(x["id"])   # done, or rerun if its final record missed the kill
        assert j["state"] == "done" and j["params"]["seed"] == 91 + i, j
    assert s2.delete("/v1/jobs/" + long_b["id"]).status == 200
    assert s2.stop() == 0


def test_retention_defaults():
    s = svc.Server(ARGS, name="defaults").start()
    out = s.all_output()
    assert "keeps the newest 10000 finished jobs (--keep-jobs)" in out, out
    assert "tiles in RAM up to 32 MiB" in out and "past 1024 KiB" in out, out
    assert s.stop() == 0
    off = svc.Server(ARGS + ["--keep-jobs", "0", "--tile-cache-mb", "0",
                             "--journal-compact-kb", "0"], name="off").start()
    out = off.all_output()
    assert "keeps every finished job (--keep-jobs 0)" in out, out
    assert "journal compacted at start-up only" in out, out
    jobs = [off.submit(seed=100 + i, **SMALL) for i in range(3)]
    for x in jobs:
        assert off.wait_job(x["id"])["state"] == "done"
    assert all(off.get("/v1/jobs/" + x["id"]).status == 200 for x in jobs)
    assert off.stop() == 0
    h = subprocess.run([svc.TSR_BIN, "serve", "--help"], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=30).stdout.decode()
    assert re.search(r"--keep-jobs[\s\S]*default 10000; 0 = all", h), h


TESTS = [test_flipped_byte_early_payload, test_flipped_byte_early_length,
         test_second_server_refused, test_unwritable_job_files_stay_failed,
         test_enospc_job_files_stay_failed, test_tiles_leave_ram,
         test_journal_compacts_while_running, test_retention_defaults]

if __name__ == "__main__":
    raise SystemExit(svc.run_tests(TESTS))
