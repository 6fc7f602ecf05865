"""Files a mount writes in its disk's meta/ directory are never written
through a symlink planted at their names (the daemon's log, the lock, the
intent files)."""
from __future__ import annotations

import os

from conftest import webfs


def _archive_and_victim(tmp_path):
    """A new archive of two disks, a file elsewhere a link may point to, a mount point."""
    disks = [tmp_path / "l0", tmp_path / "l1"]
    webfs("mkfs", *disks)
    victim = tmp_path / "victim"
    victim.write_text("VICTIM\n")
    mnt = tmp_path / "ml"
    mnt.mkdir()
    return disks, victim, mnt


def test_a_mount_refuses_a_symlink_at_its_log_and_writes_nothing_through_it(tmp_path):
    """webfs mkfs; ln -s VICTIM DISK/meta/webfs.log; webfs mount: the mount is
    refused with one line naming the log, and the victim is left as it was;
    once the link is gone, the mount starts a new log of its own."""
    disks, victim, mnt = _archive_and_victim(tmp_path)
    log = disks[0] / "meta" / "webfs.log"
    log.symlink_to(victim)
    proc = webfs("mount", disks[0], mnt, check=False)
    said = proc.stderr.decode()
    if proc.returncode == 0:
        webfs("umount", mnt)
    assert proc.returncode == 1 and not os.path.ismount(mnt), said
    assert said == (f"webfs: {log}: a symlink where the mount writes its log; refusing to write "
                    "through it (remove it, and the mount starts a new log)\n"), said
    assert victim.read_text() == "VICTIM\n"
    assert log.is_symlink()
    log.unlink()
    webfs("mount", disks[0], mnt)
    try:
        (mnt / "page.html").write_text("<p>hello</p>")
    finally:
        webfs("umount", mnt)
    assert victim.read_text() == "VICTIM\n"
    assert log.is_file() and not log.is_symlink() and log.stat().st_size > 0


def test_a_symlink_at_the_lock_or_an_intent_file_is_never_written_through(tmp_path):
    """The lock (the holder's line was written into the victim) and the
    intent files (the victim was truncated, and read as intents): the lock
    refuses the mount, an intent file the first use of it (the mount's
    recovery, a write, the unmount), in one line naming the file; the victim
    is left as it was."""
    disks, victim, mnt = _archive_and_victim(tmp_path)
    for name in ("lock", "intents", "parity-intent"):
        planted = disks[0] / "meta" / name
        planted.unlink(missing_ok=True)
        planted.symlink_to(victim)
        proc = webfs("mount", disks[0], mnt, check=False)
        said = proc.stderr.decode()
        if proc.returncode == 0:
            try:
                (mnt / f"{name}.html").write_bytes(b"<p>hello</p>" * 1000)
            except OSError:
                pass
            proc = webfs("umount", mnt, check=False)
            said += proc.stderr.decode()
        assert proc.returncode != 0 and not os.path.ismount(mnt), (name, said)
        assert f"{planted}: a symlink where webfs keeps a file of its own" in said, (name, said)
        assert "Traceback" not in said, said
        assert victim.read_text() == "VICTIM\n", name
        planted.unlink()
    webfs("mount", disks[0], mnt)
    try:
        (mnt / "page.html").write_bytes(b"<p>hello</p>" * 1000)
    finally:
        webfs("umount", mnt)
    assert victim.read_text() == "VICTIM\n"


def test_a_symlink_at_the_catalog_or_the_index_or_beside_them_is_never_written_through(tmp_path):
    """SQLite follows a symlink at its database's name; at the -wal, -shm and
    -journal files beside it, it fails to open, which the mount took for a
    damaged catalog (and advised rebuilding it). The mount (the catalog) and
    the first use of the query index (search) refuse in one line naming the
    link, the victim untouched."""
    disks, victim, mnt = _archive_and_victim(tmp_path)
    webfs("mount", disks[0], mnt)
    try:
        (mnt / "crawl").mkdir()
        (mnt / "crawl" / "page.html").write_bytes(b"<p>hello webfs</p>" * 100)
    finally:
        webfs("umount", mnt)
    meta = disks[0] / "meta"
    for name in ("catalog.db-wal", "catalog.db-shm", "catalog.db-journal", "catalog.db"):
        planted = meta / name
        kept = meta / (name + ".kept")
        if planted.exists():
            planted.rename(kept)
        planted.symlink_to(victim)
        proc = webfs("mount", disks[0], mnt, check=False)
        if proc.returncode == 0:
            webfs("umount", mnt)
        said = proc.stderr.decode()
        assert proc.returncode == 1 and not os.path.ismount(mnt), (name, said)
        assert said == f"webfs: {planted}: a symlink where webfs keeps a file of its own; refusing to " \
                       "read or write through it (remove it)\n", said
        assert victim.read_text() == "VICTIM\n", name
        planted.unlink()
        if kept.exists():
            kept.rename(planted)
    assert b"page.html" in webfs("search", "hello", disks[0]).stdout
    for name in ("index.db-wal", "index.db-shm"):
        planted = meta / name
        planted.unlink(missing_ok=True)
        planted.symlink_to(victim)
        proc = webfs("search", "hello", disks[0], check=False)
        said = proc.stderr.decode()
        assert proc.returncode != 0 and f"{planted}: a symlink where webfs keeps a file of its own" in said, said
        assert "Traceback" not in said, said
        assert victim.read_text() == "VICTIM\n", name
        planted.unlink()
