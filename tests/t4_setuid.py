"""Setuid and setgid bits through a real mount, as pjdfstest checks them on a
local file system: a write or a truncate by a user without CAP_FSETID clears
them, a chown clears them whoever makes it, root's own write keeps them, a
setgid bit without group execute stays.

The kernel clears them (a setattr of the mode) because webfs does not ask
for FUSE_HANDLE_KILLPRIV or FUSE_HANDLE_KILLPRIV_V2 (libfuse 3.14 and
pyfuse3 leave both off). A mount that asked for either would leave the
clearing to the daemon, which does none: these tests say so at once
(webfs-internals(7), KERNEL REQUESTS PER FILE).
"""
from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

import pytest

from conftest import Mounted, sh

NOBODY = 65534


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """A mount other users may enter (allow_other; pytest's tmp is root-only),
    with a directory that belongs to nobody; one for the module (each test
    has its own file)."""
    m = Mounted(tmp_path_factory.mktemp("setuid"), disks=2, mount=False)
    m.mnt = Path(tempfile.mkdtemp(prefix="webfs-setuid-"))
    os.chmod(m.mnt, 0o755)
    m.mount("allow_other")
    try:
        os.mkdir(m.mnt / "home")
        os.chown(m.mnt / "home", NOBODY, NOBODY)
        yield m
    finally:
        m.umount()
        m.mnt.rmdir()


def _made_by_nobody(m: Mounted, name: str, mode: int) -> Path:
    path = m.mnt / "home" / name
    sh(f"runuser -u nobody -- sh -c 'printf program > {path} && chmod {mode:o} {path}'")
    assert stat.S_IMODE(path.stat().st_mode) == mode
    return path


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_write_by_the_owner_clears_setuid_and_setgid(shared):
    suid = _made_by_nobody(shared, "written", 0o4755)
    sgid = _made_by_nobody(shared, "written-sgid", 0o2775)
    sh(f"runuser -u nobody -- sh -c 'printf more >> {suid}; printf more >> {sgid}'")
    assert _mode(suid) == 0o755 and _mode(sgid) == 0o775
    assert suid.read_bytes() == b"programmore"
    shared.remount("allow_other")
    assert _mode(shared.mnt / "home" / "written") == 0o755
    assert _mode(shared.mnt / "home" / "written-sgid") == 0o775


def test_a_truncate_by_the_owner_clears_setuid(shared):
    path = _made_by_nobody(shared, "truncated", 0o4755)
    sh(f"runuser -u nobody -- truncate -s 3 {path}")
    assert _mode(path) == 0o755 and path.read_bytes() == b"pro"


def test_setgid_without_group_execute_is_kept_by_a_write(shared):
    """S_ISGID without S_IXGRP is not a setgid program (it marked mandatory
    locking): the kernel keeps it on a write, as on a local file system."""
    path = _made_by_nobody(shared, "lock", 0o2664)
    sh(f"runuser -u nobody -- sh -c 'printf more >> {path}'")
    assert _mode(path) == 0o2664


def test_a_chown_clears_setuid_even_by_root(shared):
    path = _made_by_nobody(shared, "chowned", 0o4755)
    os.chown(path, 0, 0)
    assert _mode(path) == 0o755 and path.stat().st_uid == 0


def test_roots_own_write_keeps_setuid(shared):
    """root has CAP_FSETID: its write leaves the bits, as on a local file system."""
    path = _made_by_nobody(shared, "by-root", 0o4755)
    with open(path, "ab") as f:
        f.write(b"by root")
    assert _mode(path) == 0o4755
