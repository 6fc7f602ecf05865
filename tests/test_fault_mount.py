"""Faults found by hostile testing (issue 11), each driven through a real
mount with real shell tools: stale cached pieces, requests that used to kill
the daemon, the .webfs tree and other users, a full disk at close, and the
daemon's memory on one large file."""
from __future__ import annotations

import os
import subprocess

import pytest

from conftest import Mounted, sh, unmount, webfs


@pytest.fixture
def m(tmp_path):
    mounted = Mounted(tmp_path)
    yield mounted
    mounted.umount()


def alive(m: Mounted) -> bool:
    """The daemon still answers (and the mount is still there)."""
    return os.path.ismount(m.mnt) and sh(f"ls {m.mnt}", check=False).returncode == 0


DROP = "python3 -c \"import os,sys;fd=os.open(sys.argv[1],0);os.posix_fadvise(fd,0,0,4)\""


# -- item 1: a deleted file's bytes must never be read back as another file's ----

def test_stale_piece_after_delete_fadvise(m):
    """The issue's repro: page cache dropped with posix_fadvise(DONTNEED)."""
    M = m.mnt
    sh(f"python3 -c \"open('{M}/a','wb').write(b'OLD-SECRET-'*1000)\"")
    sh(f"{DROP} {M}/a; cat {M}/a >/dev/null")
    sh(f"rm {M}/a")
    sh(f"python3 -c \"open('{M}/b','wb').write(b'new-content-'*2000)\"")
    sh(f"{DROP} {M}/b")
    assert sh(f"head -c 24 {M}/b").stdout == b"new-content-new-content-"
    assert open(M / "b", "rb").read() == b"new-content-" * 2000
    assert alive(m)


def test_stale_piece_after_delete_drop_caches(m):
    """The same with every page cache dropped (echo 3 > drop_caches), a few rounds."""
    M = m.mnt
    for i in range(5):
        old, new = f"OLD-{i}-SECRET-".encode(), f"new-{i}-content-".encode()
        (M / "a").write_bytes(old * 1000)
        sh(f"echo 3 > /proc/sys/vm/drop_caches; cat {M}/a >/dev/null; rm {M}/a")
        (M / "b").write_bytes(new * 2000)
        sh("echo 3 > /proc/sys/vm/drop_caches")
        assert sh(f"cat {M}/b").stdout == new * 2000, f"round {i}"
        sh(f"rm {M}/b")
