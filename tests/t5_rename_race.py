"""rename(2) over an existing file is atomic: the target name never goes missing.

Found by the concurrency soak: readers opening a name that another thread
keeps replacing with rename() got ENOENT, which ext4 never gives. The kernel
had looked the old inode up and was about to open it when the daemon freed
it (its last name had gone and no handle was open), ignoring the kernel's
lookup count. An inode freed while the kernel still knows its number can
also be reused for a new file under that number.
"""
from __future__ import annotations

import os
import sqlite3
import threading
import time

import pytest

from conftest import eventually, webfs
from fault_helpers import LONG, daemon_alive, log_problems

DURATION = 60.0 if LONG else 4.0
pytestmark = pytest.mark.soak                 # longer under make test-long


def test_open_racing_a_rename_over_the_target_never_misses_it(mounted):
    m = mounted.mnt
    (m / "dst").write_bytes(b"v00000000" * 100)
    stop = threading.Event()
    counts = {"opens": 0, "renames": 0}
    errors = []

    def renamer():
        i = 0
        while not stop.is_set():
            i += 1
            (m / "src").write_bytes(b"v%08d" % i * 100)
            os.rename(m / "src", m / "dst")
            counts["renames"] += 1

    def reader():
        while not stop.is_set():
            try:
                with open(m / "dst", "rb") as f:
                    data = f.read()
            except OSError as exc:
                errors.append(f"open of dst while it is renamed over: {exc}")
                continue
            counts["opens"] += 1
            if len(data) != 900 or data != data[:9] * 100:
                errors.append(f"dst read back as {data[:30]!r}... ({len(data)} bytes)")

    threads = [threading.Thread(target=renamer)] + [threading.Thread(target=reader) for _ in range(2)]
    started = time.monotonic()
    enough = lambda: counts["opens"] > 500 and counts["renames"] > 100 and \
        time.monotonic() - started >= DURATION
    for t in threads:
        t.start()
    try:                # races enough to mean something, however slow the machine
        eventually(lambda: errors or enough(), f"500 opens and 100 renames ({counts})",
                   DURATION + 120, every=0.1)
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert not errors, f"{len(errors)} of {counts['opens'] + len(errors)} opens failed: {errors[:5]}"
    assert daemon_alive(mounted.pid())
    mounted.umount()
    # The inodes kept for the kernel are freed by the unmount at the latest.
    db = sqlite3.connect(mounted.disks[0] / "meta" / "catalog.db")
    assert db.execute("SELECT count(*) FROM inodes WHERE nlink <= 0").fetchone()[0] == 0
    db.close()
    proc = webfs("fsck", mounted.disks[0], check=False)
    assert proc.returncode == 0, proc.stdout.decode() + proc.stderr.decode()
    assert not log_problems(mounted.disks[0] / "meta" / "webfs.log")
