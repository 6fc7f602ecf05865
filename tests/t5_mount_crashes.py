"""A real mount killed with kill -9 while cp -r writes into it, and a mount
whose disks fill up: no closed file is lost, nothing is corrupted."""
from __future__ import annotations

import errno
import os
import signal
import subprocess
import time

import pytest

from conftest import tmpfs_disks, unmount, webfs


def test_kill_9_during_cp_loses_no_closed_file(mounted, corpus, tmp_path):
    src = corpus / "crawl-002"
    log = tmp_path / "closed.txt"
    # A copier that records each file after its close has returned.
    script = f"""
import os, sys
src, dst, log = sys.argv[1:4]
with open(log, 'w') as out:
    for dirpath, dirs, files in os.walk(src):
        rel = os.path.relpath(dirpath, src)
        os.makedirs(os.path.join(dst, rel), exist_ok=True)
        for name in sorted(files):
            with open(os.path.join(dirpath, name), 'rb') as f:
                data = f.read()
            with open(os.path.join(dst, rel, name), 'wb') as f:
                f.write(data)
            out.write(os.path.join(rel, name) + '\\n')
            out.flush()
"""
    proc = subprocess.Popen(["python3", "-c", script, str(src), str(mounted.mnt / "c"), str(log)],
                            stderr=subprocess.DEVNULL)
    deadline = time.time() + 60
    while time.time() < deadline and (not log.exists() or len(log.read_text().splitlines()) < 300):
        time.sleep(0.05)
    os.kill(mounted.pid(), signal.SIGKILL)
    proc.wait()
    closed = log.read_text().splitlines()
    assert len(closed) >= 300
    unmount(mounted.mnt)
    mounted.mount()
    for rel in closed:
        assert (mounted.mnt / "c" / rel).read_bytes() == (src / rel).read_bytes(), rel
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
