"""What the kernel sends per file through a real mount, counted in
user.webfs.requests: the budget webfs-internals(7), KERNEL REQUESTS PER FILE,
reads its decisions from. A change that makes the kernel send more per file
(or less: a reply flag that starts to work) shows here first."""
from __future__ import annotations

import json
import os

from conftest import sh

FILES = 60


def requests(mnt) -> dict:
    return json.loads(os.getxattr(mnt, "user.webfs.requests"))


def sent(mnt, before: dict) -> dict:
    after = requests(mnt)
    return {k: after[k] - before.get(k, 0) for k in after
            if after[k] != before.get(k, 0) and "-" not in k}   # "lookup-miss" etc. are not requests


def test_cp_sends_eight_requests_a_small_file(mounted, tmp_path):
    """lookup (a miss), create, getattr (of the directory: the create made the
    kernel drop its attributes, default_permissions asks again), getxattr
    (security.capability before the write), write, setattr (the writeback
    cache's times), flush, release."""
    src = tmp_path / "src"
    src.mkdir()
    for i in range(FILES):
        (src / f"p{i}.html").write_bytes(b"x" * (100 + i))
    before = requests(mounted.mnt)
    sh(f"cp -r '{src}' '{mounted.mnt}/c'")
    got = sent(mounted.mnt, before)
    for kind in ("create", "write", "setattr", "flush", "release"):
        assert got.get(kind) == FILES, (kind, got)
    for kind in ("lookup", "getattr", "getxattr"):
        assert FILES <= got.get(kind, 0) <= FILES + 3, (kind, got)
    assert set(got) <= {"create", "write", "setattr", "flush", "release", "lookup", "getattr",
                        "getxattr", "mkdir"}, got


def test_a_read_only_close_still_sends_its_flush(mounted, tmp_path):
    """FOPEN_NOFLUSH would not help: the kernel ignores it when the writeback
    cache is on (fuse_flush), and sends a flush at every close."""
    (mounted.mnt / "page.html").write_bytes(b"<p>page</p>")
    before = requests(mounted.mnt)
    for _ in range(5):
        assert (mounted.mnt / "page.html").read_bytes() == b"<p>page</p>"
    got = sent(mounted.mnt, before)
    assert got.get("open") == 5 and got.get("flush") == 5 and got.get("release") == 5, got


def test_every_write_call_asks_for_security_capability(mounted, tmp_path):
    """Without FUSE_HANDLE_KILLPRIV_V2 (which libfuse 3.14 cannot ask for) the
    kernel never marks a file S_NOSEC: each write(2) asks the daemon for
    security.capability, though the writeback cache sends the data in one
    write request. With it, only a file's first write would ask."""
    sh(f"head -c 65536 /dev/zero > '{tmp_path}/zeros'")
    before = requests(mounted.mnt)
    sh(f"dd if='{tmp_path}/zeros' of='{mounted.mnt}/dd' bs=4096 count=16 status=none")
    got = sent(mounted.mnt, before)
    assert got.get("write") == 1 and 16 <= got.get("getxattr", 0) <= 18, got
    assert (mounted.mnt / "dd").stat().st_size == 65536
