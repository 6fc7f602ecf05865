"""A real mount killed with kill -9 while cp -r writes into it, and a mount
whose disks fill up: no closed file is lost, nothing is corrupted."""
from __future__ import annotations

import errno
import json
import os
import re
import signal
import subprocess
import time

import pytest

from conftest import REPO, eventually, tmpfs_disks, unmount, webfs


# A copier of its share (PART of PARTS) of a tree that records each file after
# its close has returned.
COPIER = """
import os, sys
src, dst, log, part, parts = sys.argv[1:6]
part, parts = int(part), int(parts)
with open(log, 'w') as out:
    for dirpath, dirs, files in sorted(os.walk(src)):
        rel = os.path.relpath(dirpath, src)
        mine = [n for n in sorted(files) if hash(n) % parts == part]
        for name in mine:
            os.makedirs(os.path.join(dst, rel), exist_ok=True)
            with open(os.path.join(dirpath, name), 'rb') as f:
                data = f.read()
            with open(os.path.join(dst, rel, name), 'wb') as f:
                f.write(data)
            out.write(os.path.join(rel, name) + '\\n')
            out.flush()
"""


def test_kill_9_during_cp_loses_no_closed_file(mounted, corpus, tmp_path):
    src = corpus / "crawl-002"
    log = tmp_path / "closed.txt"
    proc = subprocess.Popen(["python3", "-c", COPIER, str(src), str(mounted.mnt / "c"), str(log), "0", "1"],
                            stderr=subprocess.DEVNULL)
    deadline = time.time() + 60
    while time.time() < deadline and (not log.exists() or len(log.read_text().splitlines()) < 300):
        time.sleep(0.05)
    os.kill(mounted.pid(), signal.SIGKILL)
    proc.wait()
    closed = log.read_text().splitlines()
    assert len(closed) >= 300
    _every_closed_file_reads_back_after_remount(mounted, src, closed)


def _every_closed_file_reads_back_after_remount(mounted, src, closed) -> None:
    """After kill -9: each file whose close returned is there by its name, identical; fsck is clean."""
    unmount(mounted.mnt)
    mounted.mount()
    for rel in closed:
        assert (mounted.mnt / "c" / rel).read_bytes() == (src / rel).read_bytes(), rel
    mounted.umount()
    proc = webfs("fsck", mounted.disks[0], check=False)
    assert proc.returncode == 0, proc.stdout.decode()




def test_kill_9_during_parallel_cp_of_small_pages_keeps_every_closed_file_with_its_name(mounted, tmp_path):
    """Three copiers of small pages at once: their directories and names go to
    the catalog only in the background commit, and closes that arrive together
    share one worker trip (store and commit). A close that returned is kept,
    with its bytes and the path it was written under."""
    src = tmp_path / "pages"
    subprocess.run(["python3", str(REPO / "tools" / "make-corpus"), "--seed", "11", "--small-pages",
                    "--pages", "1200", "--crawls", "1", str(src)], check=True, capture_output=True)
    src = src / "crawl-001"
    logs = [tmp_path / f"closed-{i}.txt" for i in range(3)]
    env = dict(os.environ, PYTHONHASHSEED="0")
    procs = [subprocess.Popen(["python3", "-c", COPIER, str(src), str(mounted.mnt / "c"), str(log), str(i), "3"],
                              stderr=subprocess.DEVNULL, env=env) for i, log in enumerate(logs)]

    def closed() -> list[str]:
        return [rel for log in logs if log.exists() for rel in log.read_text().splitlines()]
    deadline = time.time() + 120
    while time.time() < deadline and len(closed()) < 600:
        time.sleep(0.05)
    before = json.loads(os.getxattr(mounted.mnt, "user.webfs.handoffs"))
    os.kill(mounted.pid(), signal.SIGKILL)
    for proc in procs:
        proc.wait()
    kept = closed()
    assert len(kept) >= 600
    assert before.get("flush", 0) <= len(kept) + 3 * 2, before     # at most one trip per file
    _every_closed_file_reads_back_after_remount(mounted, src, kept)



def _closed_by_strace(trace: str, dst: str) -> list[str]:
    """The files below ``dst`` whose close(2) returned 0, from strace's lines
    of openat and close (one process, so an fd names one file at a time)."""
    open_fds: dict[str, str] = {}
    closed = []
    for line in trace.splitlines():
        m = re.match(r'openat\(AT_FDCWD, "([^"]*)", [^)]*O_WRONLY[^)]*\) += (\d+)$', line)
        if m and m.group(1).startswith(dst + "/"):
            open_fds[m.group(2)] = m.group(1)[len(dst) + 1:]
            continue
        m = re.match(r"close\((\d+)\) += 0$", line)
        if m and m.group(1) in open_fds:
            closed.append(open_fds.pop(m.group(1)))
    return closed


def test_kill_9_during_cp_r_of_small_pages_keeps_every_file_whose_close_returned(mounted, tmp_path):
    """The real cp -r, traced (strace -e openat,close): its directories and
    names reach the catalog in the background commit; every file whose close
    returned before the kill reads back identical under its name."""
    src = tmp_path / "pages"
    subprocess.run(["python3", str(REPO / "tools" / "make-corpus"), "--seed", "12", "--small-pages",
                    "--pages", "1500", "--crawls", "1", str(src)], check=True, capture_output=True)
    src = src / "crawl-001"
    dst, trace = str(mounted.mnt / "c"), tmp_path / "trace.txt"
    proc = subprocess.Popen(["strace", "-qq", "-s", "4096", "-e", "trace=openat,close", "-o", str(trace),
                             "cp", "-r", str(src), dst], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    eventually(lambda: trace.exists() and len(_closed_by_strace(trace.read_text(), dst)) >= 400,
               "400 files closed by cp -r", every=0.02)
    os.kill(mounted.pid(), signal.SIGKILL)
    proc.wait()
    closed = _closed_by_strace(trace.read_text(), dst)
    assert len(closed) >= 400 and len(closed) < sum(len(f) for _, _, f in os.walk(src)), len(closed)
    _every_closed_file_reads_back_after_remount(mounted, src, closed)


def test_a_rename_after_close_is_committed_behind_and_loses_no_file(mounted):
    """rename, unlink and rmdir answer with no trip to a worker (their rows go
    with the next commit): killed at once after them, the renamed file is
    found by one of its names, identical, and the unlinked one may be back;
    an fsync of the directory first makes them durable."""
    mnt = mounted.mnt
    (mnt / "d").mkdir()
    pages = {name: os.urandom(3000) for name in ("a", "b", "c", "gone")}
    for name, data in pages.items():
        (mnt / "d" / name).write_bytes(data)        # each close commits what came before it
    hops = json.loads(os.getxattr(mnt, "user.webfs.handoffs"))
    os.rename(mnt / "d" / "a", mnt / "d" / "a2")
    os.rename(mnt / "d" / "b", mnt / "d" / "b2")
    fd = os.open(mnt / "d", os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)                                # a and b: durable by their new names
    finally:
        os.close(fd)
    os.rename(mnt / "d" / "c", mnt / "d" / "c2")
    os.unlink(mnt / "d" / "gone")
    after = json.loads(os.getxattr(mnt, "user.webfs.handoffs"))
    assert after.get("rename", 0) == hops.get("rename", 0) and after.get("unlink", 0) == hops.get("unlink", 0)
    assert after.get("fsyncdir", 0) > hops.get("fsyncdir", 0), after       # its commit, in a worker
    os.kill(mounted.pid(), signal.SIGKILL)
    unmount(mnt)
    mounted.mount()
    names = sorted(os.listdir(mnt / "d"))
    assert {"a2", "b2"} <= set(names) and not {"a", "b"} & set(names), names
    assert len({"c", "c2"} & set(names)) == 1, names
    for name in names:
        assert (mnt / "d" / name).read_bytes() == pages[name.rstrip("2")], name
    mounted.umount()
    proc = webfs("fsck", mounted.disks[0], check=False)
    assert proc.returncode == 0, proc.stdout.decode()


@pytest.fixture
def tiny(tmp_path):
    """An archive on two 40 MiB tmpfs disks, mounted."""
    with tmpfs_disks(tmp_path, 2, "40m") as disks:
        mnt = tmp_path / "mnt"
        mnt.mkdir()
        webfs("mount", disks[0], mnt)
        try:
            yield disks, mnt
        finally:
            unmount(mnt)


def test_a_full_disk_gives_enospc_and_corrupts_nothing(tiny):
    disks, mnt = tiny
    kept = {}
    with pytest.raises(OSError) as exc:
        for i in range(200):
            data = os.urandom(1024 * 1024)
            (mnt / f"f{i}").write_bytes(data)
            kept[f"f{i}"] = data
    assert exc.value.errno == errno.ENOSPC
    assert len(kept) > 20
    for name, data in kept.items():
        assert (mnt / name).read_bytes() == data
    unmount(mnt)
    proc = webfs("fsck", disks[0], check=False)
    assert proc.returncode == 0, proc.stdout.decode()
    webfs("mount", disks[0], mnt)
    for name, data in kept.items():
        assert (mnt / name).read_bytes() == data
