"""kill -9 at chosen points inside commit, parity write-behind and checkpoint
(WEBFS_TEST_KILL_AT, webfs.testkill), then remount: every file closed before
the kill reads back identical, no exchange is applied twice by any reader of
MANIFEST + JOURNAL, and fsck is clean (issue 11, item 10). The replay rule
alone is in t1_journal."""
from __future__ import annotations

import ctypes
import errno
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import REPO, Mounted, wait_dead, webfs
from webfs import testkill
from webfs.archive import Archive
from webfs.commands.records import read_namespace

libc = ctypes.CDLL(None, use_errno=True)


def exchange(a: Path, b: Path) -> None:
    if libc.renameat2(-100, os.fsencode(a), -100, os.fsencode(b), 2) != 0:   # RENAME_EXCHANGE
        raise OSError(ctypes.get_errno(), "renameat2")


def after_kill(m: Mounted, pid: int) -> None:
    wait_dead(pid, "the daemon dying at the kill point")
    subprocess.run(["fusermount3", "-uz", str(m.mnt)], check=False)


def content(i: int) -> bytes:
    return (f"file {i} ".encode() * (300 + 97 * i))[: 1000 + 5000 * i % 70000]


def write_until_dead(m: Mounted, pid: int, n: int = 40) -> dict[str, bytes]:
    """Write files one by one; those whose close returned are what must survive."""
    closed = {}
    for i in range(n):
        name = f"f{i:03d}"
        try:
            with open(m.mnt / name, "wb") as f:
                f.write(content(i))
        except OSError:
            break
        closed[name] = content(i)
        if not os.path.exists(f"/proc/{pid}"):
            break
    return closed


def check_survivors(m: Mounted, closed: dict[str, bytes]) -> None:
    for name, data in closed.items():
        assert (m.mnt / name).read_bytes() == data, name


def fsck_clean(m: Mounted) -> None:
    proc = webfs("fsck", m.disks[0], check=False)
    assert proc.returncode == 0, proc.stdout.decode() + proc.stderr.decode()


def killed_while_writing(tmp_path, monkeypatch, point: str) -> tuple[Mounted, dict[str, bytes]]:
    """A mount armed to die at a kill point, written to until it did, then
    mounted again (recovery at open); it and the files whose close returned."""
    monkeypatch.setenv(testkill.ENV, point)
    m = Mounted(tmp_path)
    monkeypatch.delenv(testkill.ENV)
    pid = m.pid()
    closed = write_until_dead(m, pid)
    after_kill(m, pid)              # (at a parity point: when the write-behind flush comes)
    assert closed
    m.mount()
    return m, closed


@pytest.mark.parametrize("point", ["commit-after-catalog:6", "commit-after-journal:6",
                                   "parity-before-write", "parity-after-write"])
def test_kill_inside_commit_and_parity_write_behind(tmp_path, monkeypatch, point):
    m, closed = killed_while_writing(tmp_path, monkeypatch, point)
    try:
        check_survivors(m, closed)
        # Everything is protected again after recovery: no block waits for parity.
        st = webfs("status", "--json", m.mnt)
        assert b'"unprotected_blocks": 0' in st.stdout, st.stdout.decode()
    finally:
        m.umount()
    fsck_clean(m)


@pytest.mark.parametrize("point", ["parity-full-before-write:3", "parity-full-after-write:3"])
def test_kill_while_the_parity_writer_holds_full_stripes(tmp_path, monkeypatch, point):
    """A full stripe's parity file is written by the parity writer thread,
    after the storing thread has gone on (and often after the commit that
    names the stripe), or by a small file's close on the loop before its commit. Killed there, the stripe is still in
    meta/parity-intent: the next mount recomputes its parity, so a disk lost
    after that loses no file closed before the kill."""
    m, closed = killed_while_writing(tmp_path, monkeypatch, point)
    try:
        check_survivors(m, closed)
        m.umount()
        fsck_clean(m)
        shutil.rmtree(m.disks[2])       # a disk dies: its blocks are read through parity
        m.mount()
        check_survivors(m, closed)
    finally:
        m.umount()


# The MANIFEST and JOURNAL are on two disks (webfs.manifest.record_disks), so
# the third pass of a point is on the first disk of checkpoint 2, the fourth on the second.
@pytest.mark.parametrize("point", ["checkpoint-after-marker:2", "checkpoint-after-manifest:3",
                                   "checkpoint-after-journal:3", "checkpoint-after-manifest:4"])
def test_kill_inside_checkpoint_never_replays_an_exchange_twice(tmp_path, monkeypatch, point):
    monkeypatch.setenv(testkill.ENV, point)
    m = Mounted(tmp_path, options="manifest_interval=0")
    monkeypatch.delenv(testkill.ENV)
    try:
        pid = m.pid()
        for d, name, data in (("a", "x", b"AAAA" * 1000), ("b", "y", b"BBBB" * 2000)):
            (m.mnt / d).mkdir()
            (m.mnt / d / name).write_bytes(data)
        webfs("sync", m.mnt)                       # checkpoint 1 (2 disks), whole: a and b in it
        exchange(m.mnt / "a", m.mnt / "b")         # only in the JOURNAL: <> /a /b
        (m.mnt / "c").write_bytes(b"CCCC" * 300)
        webfs("sync", m.mnt, check=False)          # checkpoint 2; the daemon dies in it
        after_kill(m, pid)
        # Every reader of the disks as the crash left them sees the exchange once.
        entries, _ = read_namespace(Archive.open(str(m.disks[0])))
        assert b"/a/y" in entries and b"/b/x" in entries, sorted(entries)
        assert b"/a/x" not in entries and b"/b/y" not in entries, sorted(entries)
        out = tmp_path / "out"
        proc = subprocess.run(["sh", str(REPO / "tools" / "webfs-recover"), *map(str, m.disks), out],
                              capture_output=True)
        report = proc.stderr.decode()
        assert b"unknown operation" not in proc.stderr and b"no MANIFEST" not in proc.stderr, report
        assert (out / "a" / "y").read_bytes() == b"BBBB" * 2000, report
        assert (out / "b" / "x").read_bytes() == b"AAAA" * 1000, report
        m.mount()
        assert (m.mnt / "a" / "y").read_bytes() == b"BBBB" * 2000
        assert (m.mnt / "b" / "x").read_bytes() == b"AAAA" * 1000
        assert (m.mnt / "c").read_bytes() == b"CCCC" * 300
    finally:
        m.umount()
    fsck_clean(m)


def test_a_bad_kill_point_name_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv(testkill.ENV, "nowhere")
    with pytest.raises(AssertionError, match="no such point"):
        Mounted(tmp_path)


def test_recovery_at_mount_is_summed_up_in_one_or_two_lines(tmp_path, monkeypatch):
    """Item 8: recovery printed lines per stripe; now counts, details in webfs.log."""
    monkeypatch.setenv(testkill.ENV, "parity-before-write")
    m = Mounted(tmp_path)
    monkeypatch.delenv(testkill.ENV)
    try:
        pid = m.pid()
        pages = [os.urandom(2000 + 500 * (i % 9)) for i in range(60)]
        for i, page in enumerate(pages):    # many small files: many open stripes ...
            try:
                (m.mnt / f"p{i}").write_bytes(page)
            except OSError as exc:      # ... until the flush, a second after the first: on
                # a busy machine, before the 60th file); a request
                # under way when it died ends in ECONNABORTED, a later one ENOTCONN
                if exc.errno not in (errno.ENOTCONN, errno.ECONNABORTED):
                    raise
                break
        after_kill(m, pid)              # when the write-behind flush comes
        proc = webfs("mount", m.disks[0], m.mnt)
        err = proc.stderr.decode().strip().splitlines()
        assert 1 <= len(err) <= 2, err
        assert "details in" in err[-1] and "webfs.log" in err[-1], err
        assert "stripe(s)" in err[-1], err
        log = (m.disks[0] / "meta" / "webfs.log").read_text()
        assert log.count("recovery: stripe") >= 1, log[-3000:]
    finally:
        m.umount()
    fsck_clean(m)
