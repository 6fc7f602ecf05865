"""Files a mount writes in its disk's meta/ directory are never written
through a symlink planted at their names (the daemon's log)."""
from __future__ import annotations

import os

from conftest import webfs


def test_a_mount_refuses_a_symlink_at_its_log_and_writes_nothing_through_it(tmp_path):
    """webfs mkfs; ln -s VICTIM DISK/meta/webfs.log; webfs mount: the mount is
    refused with one line naming the log, and the victim is left as it was;
    once the link is gone, the mount starts a new log of its own."""
    disks = [tmp_path / "l0", tmp_path / "l1"]
    webfs("mkfs", *disks)
    victim = tmp_path / "victim"
    victim.write_text("VICTIM\n")
    log = disks[0] / "meta" / "webfs.log"
    log.symlink_to(victim)
    mnt = tmp_path / "ml"
    mnt.mkdir()
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
