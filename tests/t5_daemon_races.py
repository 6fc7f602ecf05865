"""Races inside the daemon that the concurrency soak found, each on its own.

- fsync while other files are created: the WAL checkpoint of ``Store.sync``
  ran outside the catalog lock, another thread's transaction was open on the
  shared connection, SQLite said "database table is locked" and the daemon
  died of it (the mount gone: ENOTCONN).
- the same document stored by one writer while another file holding it is
  overwritten or deleted: ``Namespace`` released references (which take the
  block's signature lock) while holding the catalog lock; a store in a worker
  thread holds the signature lock and waits for the catalog lock: deadlock,
  the whole mount hangs.
"""
from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from conftest import eventually, webfs
from fault_helpers import LONG, daemon_alive, log_problems

DURATION = 60.0 if LONG else 8.0
pytestmark = pytest.mark.soak                 # longer under make test-long


def run_threads(pid, workers, duration, enough):
    """Run workers(stop, errors) until the time is up and ``enough()`` (the
    races that make the test mean something, however slow the machine: at
    most 120 s more), or until one fails; a hung daemon (pid) is killed and
    reported."""
    stop = threading.Event()
    errors: list[str] = []
    threads = [threading.Thread(target=w, args=(stop, errors), daemon=True) for w in workers]
    started = time.monotonic()
    for t in threads:
        t.start()
    try:
        eventually(lambda: stop.is_set() or (time.monotonic() - started >= duration and enough()),
                   "enough races", duration + 120, every=0.1)
    finally:
        stop.set()
    deadline = time.monotonic() + 120
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    hung = sum(t.is_alive() for t in threads)
    if hung:
        os.kill(pid, signal.SIGKILL)
        errors.insert(0, f"{hung} threads still in a request 120 s after the stop: the daemon hangs")
    return errors


def test_fsync_while_files_are_created_and_deleted(mounted):
    m = mounted.mnt
    pid = mounted.pid()
    counts = {"fsync": 0, "create": 0}

    def fsyncer(i):
        def work(stop, errors):
            while not stop.is_set():
                try:
                    fd = os.open(m / f"s{i}", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                    os.write(fd, os.urandom(2000))
                    os.fsync(fd)
                    os.close(fd)
                    counts["fsync"] += 1
                except OSError as exc:
                    errors.append(f"fsync writer: {exc}")
                    stop.set()
        return work

    def creator(i):
        def work(stop, errors):
            k = 0
            while not stop.is_set():
                k += 1
                try:
                    (m / f"c{i}-{k % 50}").write_bytes(b"x%d" % k * 500)
                    if k % 3 == 0:
                        os.unlink(m / f"c{i}-{k % 50}")
                    counts["create"] += 1
                except OSError as exc:
                    errors.append(f"creator: {exc}")
                    stop.set()
        return work

    errors = run_threads(pid, [fsyncer(0), fsyncer(1), creator(0), creator(1), creator(2)], DURATION,
                         lambda: counts["fsync"] > 100)
    assert not errors, errors[:5]
    assert counts["fsync"] > 100, counts
    assert daemon_alive(pid)
    assert not log_problems(mounted.disks[0] / "meta" / "webfs.log")


def test_storing_a_document_while_another_copy_is_released(mounted):
    m = mounted.mnt
    pid = mounted.pid()
    shared = [bytes([65 + k]) * (3000 + 1000 * k) for k in range(3)]    # the same few documents
    counts = {"write": 0, "drop": 0}

    def writer(i):
        def work(stop, errors):
            k = 0
            while not stop.is_set():
                k += 1
                try:
                    (m / f"w{i}-{k % 8}").write_bytes(shared[k % 3])
                    counts["write"] += 1
                except OSError as exc:
                    errors.append(f"writer: {exc}")
                    stop.set()
        return work

    def dropper(stop, errors):
        k = 0
        while not stop.is_set():
            k += 1
            p = m / f"d-{k % 8}"
            try:
                p.write_bytes(shared[k % 3])
                p.write_bytes(b"unique %d" % k)      # overwrite: the shared block loses a reference
                os.unlink(p)
                counts["drop"] += 1
            except OSError as exc:
                errors.append(f"dropper: {exc}")
                stop.set()

    errors = run_threads(pid, [writer(0), writer(1), writer(2), dropper], DURATION,
                         lambda: counts["write"] > 100 and counts["drop"] > 30)
    assert not errors, errors[:5]
    assert counts["write"] > 100 and counts["drop"] > 30, counts
    assert daemon_alive(pid)
    for name in os.listdir(m):
        data = (m / name).read_bytes()
        assert data in shared, name
    mounted.umount()
    proc = webfs("fsck", mounted.disks[0], check=False)
    assert proc.returncode == 0, proc.stdout.decode() + proc.stderr.decode()
    assert not log_problems(mounted.disks[0] / "meta" / "webfs.log")
