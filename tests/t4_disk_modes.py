"""The disks show nothing the mount hides (issue 23, item 5): mkfs, add-disk
and rebuild make a disk's root mode 0700 and say so; a mount refuses a disk
root that other users can read or search, saying how to fix it. And a
webfs.conf whose every disk has weight 0 (nowhere for a new block) is
refused when read, by every command and the mount."""
from __future__ import annotations

import os
import re
import shutil
import stat
from pathlib import Path

from conftest import Mounted, make_archive, webfs


def mode(p: Path) -> int:
    return stat.S_IMODE(os.stat(p).st_mode)


def test_mkfs_add_disk_and_rebuild_make_private_roots(tmp_path):
    old = os.umask(0o022)
    try:
        (tmp_path / "d1").mkdir(mode=0o755)           # an empty directory given, as made by hand
        disks = [tmp_path / f"d{i}" for i in range(3)]
        out = webfs("mkfs", *disks).stdout.decode()
        assert "mode 0700" in out
        assert [mode(d) for d in disks] == [0o700] * 3
        (tmp_path / "page").write_bytes(b"a page\n" * 100)
        webfs("put", disks[0], tmp_path / "page")
        out = webfs("add-disk", tmp_path / "d3", disks[0]).stdout.decode()
        assert "added disk 3" in out and "mode 0700" in out
        assert mode(tmp_path / "d3") == 0o700
        shutil.rmtree(disks[2])
        out = webfs("rebuild", "--disk", "2", "--to", tmp_path / "new2", disks[0]).stdout.decode()
        assert "mode 0700" in out
        assert mode(tmp_path / "new2") == 0o700
    finally:
        os.umask(old)


def test_a_mount_refuses_a_disk_others_can_read(tmp_path):
    m = Mounted(tmp_path, disks=3, mount=False)
    for bits in (0o755, 0o750, 0o701):
        os.chmod(m.disks[1], bits)
        proc = webfs("mount", m.disks[0], m.mnt, check=False)
        lines = proc.stderr.decode().strip().splitlines()
        assert proc.returncode == 1 and len(lines) == 1, proc.stderr
        assert f"{m.disks[1]}: other users can read this disk directly (mode {bits:04o})" in lines[0]
        assert f"chmod 700 {m.disks[1]}" in lines[0]
        assert not os.path.ismount(m.mnt)
    os.chmod(m.disks[1], 0o700)
    m.mount()
    try:
        assert os.path.ismount(m.mnt)
    finally:
        m.umount()


def _set_weights(disks, weights: dict[int, str]) -> None:
    for d in disks:
        conf = d / "webfs.conf"
        text = conf.read_text()
        for index, w in weights.items():
            text = re.sub(rf"(\[disk {index}\][^\[]*?weight = )\S+", rf"\g<1>{w}", text)
        conf.write_text(text)


def test_every_disk_of_weight_zero_is_refused(tmp_path):
    disks = make_archive(tmp_path, 3)
    _set_weights(disks, {0: "0.0", 1: "0", 2: "0.0"})
    (tmp_path / "mnt").mkdir()
    for cmd in (("status", disks[0]), ("mount", disks[0], tmp_path / "mnt")):
        proc = webfs(*cmd, check=False)
        lines = proc.stderr.decode().strip().splitlines()
        assert proc.returncode == 1 and len(lines) == 1, proc.stderr
        assert "every disk has weight 0" in lines[0] and "give at least one disk a weight above 0" in lines[0]
    assert not os.path.ismount(tmp_path / "mnt")
    # one disk left with a weight: it is the archive's, and removing it is refused
    _set_weights(disks, {1: "1.0"})
    webfs("status", disks[0])
    proc = webfs("remove-disk", "1", disks[0], check=False)
    assert proc.returncode == 1 and b"every other disk has weight 0" in proc.stderr, proc.stderr
