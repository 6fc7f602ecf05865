"""rsync -a into a real mount, then kill -9 of the daemon: every file rsync
copied is there after a remount, byte-identical, with its mode, times and
owner; and again from the plain-text records alone (the catalog lost too),
whose JOURNAL holds each file in about four records, not one for each of
the eight changes rsync makes (webfs-internals(7), RSYNC INTO THE MOUNT)."""
from __future__ import annotations

import os
import random
import signal
import stat
from pathlib import Path

from conftest import Mounted, sh, unmount, wait_dead, webfs

OWNERS = [(0, 0), (1234, 4321), (4321, 1234)]
MODES = [0o644, 0o600, 0o755, 0o640]


def _source(root: Path) -> None:
    """Three directories of small files of several modes, owners and times
    (rsync -a as root sets each with chmod, lchown and utimensat)."""
    rng = random.Random(22)
    for d in range(3):
        sub = root / f"d{d}"
        sub.mkdir(parents=True)
        for i in range(40):
            f = sub / f"p{i}.html"
            f.write_bytes(rng.randbytes(rng.randrange(1, 6000)))
            os.chown(f, *OWNERS[i % len(OWNERS)])
            os.chmod(f, MODES[i % len(MODES)])
            t = 1_600_000_000_000_000_000 + (d * 100 + i) * 7_000_000_123
            os.utime(f, ns=(t, t))
        os.chmod(sub, 0o750)
        os.utime(sub, ns=(1_500_000_000_000_000_000 + d, 1_500_000_000_000_000_000 + d))


def _tree(root: Path) -> dict:
    """Every name below root: its mode, owner, mtime and bytes (None for a directory)."""
    out = {}
    for dirpath, dirs, files in os.walk(root):
        for name in dirs + files:
            p = Path(dirpath) / name
            st = os.lstat(p)
            out[str(p.relative_to(root))] = (st.st_mode, st.st_uid, st.st_gid, st.st_mtime_ns,
                                             None if stat.S_ISDIR(st.st_mode) else p.read_bytes())
    return out


def _rsync_then_kill(m: Mounted, src: Path, top: str) -> None:
    sh(f"rsync -a '{src}/' '{m.mnt}/{top}/'")
    # rsync's chmod, utimens and rename of its last files go with the next
    # commit (within a second); an fsync of a directory is that commit now
    # (webfs sync would also write a MANIFEST, and leave the JOURNAL empty).
    fd = os.open(m.mnt / top, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    pid = m.pid()
    os.kill(pid, signal.SIGKILL)
    wait_dead(pid)
    unmount(m.mnt)


def _journal_records(m: Mounted) -> list[bytes]:
    """The JOURNAL's records (not its # attribute lines) on a disk that holds them."""
    journal = max((d / "meta" / "JOURNAL" for d in m.disks if (d / "meta" / "JOURNAL").exists()),
                  key=lambda p: p.stat().st_size)
    return [line for line in journal.read_bytes().splitlines() if not line.startswith(b"#")]


def test_rsync_then_kill_9_keeps_every_file_with_its_attributes_in_the_catalog_and_the_records(tmp_path):
    src = tmp_path / "src"
    _source(src)
    want = _tree(src)
    files = sum(1 for v in want.values() if v[4] is not None)
    m = Mounted(tmp_path)
    try:
        _rsync_then_kill(m, src, "r")
        records = _journal_records(m)
        # Each file: its temporary name's + (made and closed), its + after
        # rsync's lchown, utimensat and chmod, the rename, its directory's +
        # (4.15 a file with the directories' own; 7.6 when each change wrote one).
        assert files <= len(records) <= 5 * files, b"\n".join(records[-20:])
        for p in (m.disks[0] / "meta").glob("catalog.db*"):
            p.unlink()
        proc = webfs("fsck", "--rebuild-catalog", "--repair", m.disks[0], check=False)
        assert proc.returncode == 0, proc.stdout.decode()
        m.mount()
        assert _tree(m.mnt / "r") == want           # from the MANIFEST and JOURNAL alone
        _rsync_then_kill(m, src, "again")
        m.mount()
        assert _tree(m.mnt / "again") == want       # from the catalog the killed daemon left
        assert _tree(m.mnt / "r") == want
    finally:
        m.umount()
