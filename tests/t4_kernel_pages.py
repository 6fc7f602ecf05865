"""Small files given to the kernel's page cache at their open (webfs/kernelpages.py):
their readers' reads ask the daemon nothing, and no writer's pages are ever
overwritten by what the archive held before."""
from __future__ import annotations

import json
import os
import random

from conftest import sh
from fault_helpers import drop_caches


def requests(mnt) -> dict:
    return json.loads(os.getxattr(mnt, "user.webfs.requests"))


def test_a_cold_cat_of_small_files_sends_almost_no_reads(mounted, tmp_path):
    """cat of every file after a remount: the small ones come from the page
    cache the opens filled (kernel-store), identical; a file larger than
    1 MiB, and one of several pieces, are read as before."""
    src = tmp_path / "src"
    rng = random.Random(7)
    small = 0
    for d in range(3):
        (src / f"d{d}").mkdir(parents=True)
        for i in range(40):
            (src / f"d{d}" / f"p{i}.html").write_bytes(rng.randbytes(rng.randrange(1, 20_000)))
            small += 1
    (src / "empty").write_bytes(b"")
    (src / "over-a-mib.bin").write_bytes(rng.randbytes((1 << 20) + 1))
    (src / "pieces.bin").write_bytes(rng.randbytes(9 << 20))
    sh(f"cp -r '{src}' '{mounted.mnt}/c'")
    mounted.remount()
    before = requests(mounted.mnt)
    sh(f"diff -r '{src}' '{mounted.mnt}/c'")
    after = requests(mounted.mnt)
    stored = after.get("kernel-store", 0) - before.get("kernel-store", 0)
    reads = after.get("read", 0) - before.get("read", 0)
    assert small // 2 <= stored <= small, (stored, after)
    assert reads >= 2 + (small - stored), (reads, stored)   # the two large files are read
    assert reads < small, (reads, stored)


def test_a_file_being_written_is_never_stored_over(mounted):
    """With the writeback cache a writer's bytes sit in the kernel's pages
    until its close: a second open to read (the writer still open) must see
    them, not the stored content, and the new content after the close."""
    path = mounted.mnt / "page.html"
    path.write_bytes(b"old content " * 100)
    mounted.remount()
    writer = os.open(path, os.O_RDWR)
    try:
        os.pwrite(writer, b"NEW", 0)
        before = requests(mounted.mnt).get("kernel-store", 0)
        with open(path, "rb") as f:
            assert f.read(15) == b"NEW content old"
        assert requests(mounted.mnt).get("kernel-store", 0) == before
    finally:
        os.close(writer)
    assert path.read_bytes() == b"NEW" + (b"old content " * 100)[3:]
    # changed since it was stored: the kernel is given the new bytes, and
    # a truncation (no open) and a rewrite by cp are what the next reader sees
    sh(f"truncate -s 5 '{path}'")
    assert sh(f"cat '{path}'").stdout == b"NEW c"
    (mounted.mnt / "other").write_bytes(b"replacement")
    sh(f"cp '{mounted.mnt}/other' '{path}'")
    assert sh(f"cat '{path}'").stdout == b"replacement"
    mounted.remount()
    assert sh(f"cat '{path}'").stdout == b"replacement"


def test_a_file_written_here_is_reopened_with_no_block_read(mounted, tmp_path):
    """rsync -a opens each temporary file it has just written again (O_RDONLY,
    to fchmod it): the kernel holds those pages already, so the open reads no
    block, stores nothing in the kernel and lists no next files to fetch
    ahead; the copy reads back identical. Once the kernel has forgotten the
    inodes (drop_caches), an open stores their pages again."""
    src = tmp_path / "src"
    src.mkdir()
    rng = random.Random(3)
    for i in range(30):
        (src / f"p{i:02}.html").write_bytes(rng.randbytes(rng.randrange(1, 20_000)))
    before = requests(mounted.mnt)
    sh(f"rsync -a '{src}/' '{mounted.mnt}/c/'")
    after = requests(mounted.mnt)
    assert after.get("open", 0) - before.get("open", 0) >= 30, after     # rsync's reopens
    for what in ("kernel-store", "piece-miss", "piece-hit", "read-ahead-lookup"):
        assert after.get(what, 0) == before.get(what, 0), (what, after)
    sh(f"diff -r '{src}' '{mounted.mnt}/c'")
    drop_caches()
    before = requests(mounted.mnt)
    sh(f"diff -r '{src}' '{mounted.mnt}/c'")
    stored = requests(mounted.mnt).get("kernel-store", 0) - before.get("kernel-store", 0)
    assert stored >= 15, stored


def test_pages_read_again_at_random_ask_for_nothing_but_their_opens(mounted, tmp_path):
    """A random reader's popular pages (the bench's Zipf reads): once given to
    the kernel, each is read again from its page cache (no READ, no store)
    and its open neither lists its directory nor fetches anything ahead
    (webfs-internals(7), ZIPF READS)."""
    src = tmp_path / "src"
    src.mkdir()
    rng = random.Random(3)
    for i in range(12):
        (src / f"p{i:02d}.html").write_bytes(rng.randbytes(rng.randrange(100, 20_000)))
    sh(f"cp -r '{src}' '{mounted.mnt}/c'")
    mounted.remount()
    popular = [f"{mounted.mnt}/c/p{i:02d}.html" for i in (7, 2, 9, 4)]
    for p in popular:                       # first reads, out of order: stored
        sh(f"cat '{p}' > /dev/null")
    before = requests(mounted.mnt)
    handoffs = json.loads(os.getxattr(mounted.mnt, "user.webfs.handoffs"))
    for _ in range(5):
        for p in popular:
            assert sh(f"cat '{p}'").stdout == (src / os.path.basename(p)).read_bytes()
    after = requests(mounted.mnt)
    grown = {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}
    assert grown.get("open") == 20, grown
    for quiet in ("read", "kernel-store", "read-ahead-lookup", "piece-miss"):
        assert quiet not in grown, grown
    assert json.loads(os.getxattr(mounted.mnt, "user.webfs.handoffs")) == handoffs
