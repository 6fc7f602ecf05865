"""Cold reads of small pages through a mount: what a walker of the tree (find
| cat, grep -r) costs the daemon a file (webfs-internals(7), COLD READS OF
SMALL PAGES)."""
from __future__ import annotations

import json
import os
import random

from conftest import sh


def requests(mnt) -> dict:
    """The request counts, and the hand-offs to workers as "handoff:REQUEST"."""
    handoffs = json.loads(os.getxattr(mnt, "user.webfs.handoffs"))
    return dict(json.loads(os.getxattr(mnt, "user.webfs.requests")),
                **{"handoff:" + name: n for name, n in handoffs.items()})


def counted(mnt, before: dict, name: str) -> int:
    return requests(mnt).get(name, 0) - before.get(name, 0)


def small_tree(src, rng):
    """Two levels of directories of small pages, files and subdirectories mixed."""
    files = 0
    for d in range(4):
        for s in range(3):
            where = src / f"d{d}" / f"s{s}"
            where.mkdir(parents=True)
            for i in range(5):
                (where / f"p{i}.html").write_bytes(rng.randbytes(rng.randrange(1, 9_000)))
                files += 1
        (src / f"d{d}" / "index.html").write_bytes(rng.randbytes(3_000))
        files += 1
    return files


def test_a_walk_of_listed_directories_asks_the_catalog_nothing_for_its_read_ahead(mounted, tmp_path):
    """find lists every directory before cat opens the files: the read-ahead
    takes each directory's next files (and their blocks) from what readdir
    listed, not from a query of its own, fetches them several to a worker's
    trip (one trip a file before), and every byte reads back."""
    src = tmp_path / "src"
    files = small_tree(src, random.Random(5))
    sh(f"cp -r '{src}/.' '{mounted.mnt}'")
    mounted.remount()
    before = requests(mounted.mnt)
    walk = "find . -type f -exec sha256sum {} + | sort"       # files opened in find's order
    assert sh(walk, cwd=mounted.mnt).stdout == sh(walk, cwd=src).stdout
    assert counted(mounted.mnt, before, "open") == files
    assert counted(mounted.mnt, before, "read-ahead-lookup") == 0
    assert counted(mounted.mnt, before, "handoff:open") <= files // 3
    assert counted(mounted.mnt, before, "kernel-store") >= files // 2


def test_grep_r_lists_ahead_only_the_directories_it_has_not_listed_yet(mounted, tmp_path):
    """grep -r lists a directory as it gets there: the read-ahead lists ahead
    into the next ones it has not listed yet (a query each, and one more past
    each subdirectory), never one grep listed already: fewer queries than
    the 32 this tree cost without the kept listings."""
    src = tmp_path / "src"
    small_tree(src, random.Random(6))
    (src / "d2" / "s1" / "p3.html").write_bytes(b"<p>zyzzogeton</p>\n")
    sh(f"cp -r '{src}/.' '{mounted.mnt}'")
    mounted.remount()
    before = requests(mounted.mnt)
    assert sh("grep -rl zyzzogeton .", cwd=mounted.mnt).stdout == b"./d2/s1/p3.html\n"
    assert 0 < counted(mounted.mnt, before, "read-ahead-lookup") < 32


def test_a_readers_close_takes_no_lock_a_writers_still_stores(mounted, tmp_path):
    """The flush and release of a file with nothing to store are answered
    without its lock (close-settled, one each); a close while another handle
    has written still stores, and what was written is what reads back after a
    remount."""
    src = tmp_path / "src"
    files = small_tree(src, random.Random(7))
    sh(f"cp -r '{src}/.' '{mounted.mnt}'")
    mounted.remount()
    before = requests(mounted.mnt)
    walk = "find . -type f -exec sha256sum {} + | sort"
    assert sh(walk, cwd=mounted.mnt).stdout == sh(walk, cwd=src).stdout
    assert counted(mounted.mnt, before, "close-settled") == 2 * files

    path = os.path.join(mounted.mnt, "d1", "written.html")
    before = requests(mounted.mnt)
    with open(path, "wb") as writer:
        writer.write(b"<p>first</p>\n")
        writer.flush()
        with open(path, "rb") as reader:
            assert reader.read() == b"<p>first</p>\n"
        # The reader's flush stored the writer's bytes; its release had nothing left.
        assert counted(mounted.mnt, before, "close-settled") == 1
        writer.write(b"<p>second</p>\n")
    # The writer's flush stored the rest; its release, again, nothing.
    assert counted(mounted.mnt, before, "close-settled") == 2
    mounted.remount()
    with open(path, "rb") as f:
        assert f.read() == b"<p>first</p>\n<p>second</p>\n"
