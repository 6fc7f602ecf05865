"""A mount and the commands run with the lock order checked
(WEBFS_LOCK_ORDER=1, webfs.lockorder): copies, links, renames, removals,
an import, a scrub and a sync through the mount, from several processes at
once, and no thread took two locks in both orders (the daemon logs an
inversion in DISK/meta/webfs.log and fails the operation)."""
from __future__ import annotations

import os

from conftest import Mounted, sh, webfs


def make_tree(root, files: int, salt: str) -> None:
    for i in range(files):
        d = root / f"d{i % 5}"
        d.mkdir(parents=True, exist_ok=True)
        # Some documents repeat (dedup), some are new.
        (d / f"f{i}.html").write_bytes((f"<p>{salt if i % 3 else 'same'} {i % 17}</p>\n" * (40 + i)).encode())


def test_a_busy_mount_takes_its_locks_in_one_order(tmp_path, monkeypatch):
    monkeypatch.setenv("WEBFS_LOCK_ORDER", "1")
    src, more = tmp_path / "src", tmp_path / "more"
    make_tree(src, 120, "a")
    make_tree(more, 60, "b")
    (tmp_path / "arch").mkdir()
    m = Mounted(tmp_path / "arch")
    try:
        mnt = m.mnt
        sh(f"cp -r {src} {mnt}/one & cp -r {src} {mnt}/two & rsync -a {src}/ {mnt}/three/ & wait")
        sh(f"cd {mnt} && ln -s one/d1 link && ln one/d0/f0.html hard.html && mv two moved "
           f"&& ln -s 'same 0' same-target")
        webfs("import", more, f"{mnt}/imported")
        sh(f"rm -r {mnt}/three & cat {mnt}/one/d*/* > /dev/null & wait")
        webfs("scrub", mnt)
        webfs("sync", mnt)
        assert sh(f"diff -r {src} {mnt}/one && diff -r {more} {mnt}/imported/more").returncode == 0
    finally:
        m.umount()
    with open(os.path.join(m.disks[0], "meta", "webfs.log"), encoding="utf-8", errors="replace") as f:
        log = f.read()
    assert "take locks is checked" in log
    assert "lock order" not in log, log[log.index("lock order") - 200:][:3000]
