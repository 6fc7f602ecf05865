"""fsck against hostile or damaged input (issue 11): names from MANIFEST and
JOURNAL get the namespace's own checks, a check without --repair writes
nothing, a lost disk's blocks are degraded (not lost) when parity gives them
back, and an unreadable catalog is one line and exit 8."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import Mounted, eventually, sh, unmount, wait_dead, webfs
from records_helpers import append_manifest, manifest_file, read_manifest

HOSTILE_JOURNAL = [
    b"+\t-\t0\t100644\t1.000000000\t/.",
    b"+\t-\t0\t100644\t1.000000000\t/..",
    b"+\t-\t0\t40755\t1.000000000\t/d/..",
    b"+\t-\t0\t100644\t1.000000000\t/" + b"n" * 5000,
    b"+\t-\t0\t100644\t1.000000000\t/s/child",
    b"+\t-\t0\t40755\t1.000000000\t/a/inside-a-file",
    b">\t/a\t/../../x",
    b">\t/a\t/d/../../y",
    b">\t/a\t/s/z",
    b"<>\t/a\t/..",
    b">\t/d\t/d/inner",
    b"+\t-\t0\t100644\t1.000000000\t/nul\0name",
    b"+\t-\t0\t100644\t1.000000000\trelative",
    b"+\t-\t0\t100644\t1.000000000\t/bad-mode\\",
    b"+\txyz\t3\t100644\t1.000000000\t/bad-sig",
    b"-\t/",
    b"-\t/d/../a",
    b"+\t-\t0\t100644\t1.000000000\t/d",
]
HOSTILE_MANIFEST = [b"-\t0\t100644\t1.000000000\t/..", b"-\t0\t100644\t1.000000000\t/d/./f2",
                    b"-\t0\t100644\t1.000000000\t/a/unlisted/below-a-file"]


def _archive_with_a_tree(tmp_path) -> Mounted:
    m = Mounted(tmp_path)
    try:
        (m.mnt / "a").write_bytes(b"file a\n" * 100)
        (m.mnt / "d").mkdir()
        (m.mnt / "d" / "f").write_bytes(b"file d/f\n" * 50)
        os.symlink("d", m.mnt / "s")
    finally:
        m.umount()
    return m


def _rebuild_with_problems(m: Mounted) -> str:
    """fsck --rebuild-catalog --repair that reports skipped records (exit 4)
    and raises nothing: what it said."""
    proc = webfs("fsck", "--rebuild-catalog", "--repair", m.disks[0], check=False)
    out = proc.stdout.decode(errors="replace") + proc.stderr.decode(errors="replace")
    assert "Traceback" not in out and proc.returncode == 4, out
    return out


def _mounts_the_tree(m: Mounted) -> None:
    """The tree of _archive_with_a_tree, whole, in a mount of the rebuilt catalog."""
    webfs("mount", m.disks[0], m.mnt)
    try:
        assert sorted(os.listdir(m.mnt)) == ["a", "d", "s"]
        assert (m.mnt / "d" / "f").read_bytes() == b"file d/f\n" * 50
    finally:
        unmount(m.mnt)


def _append(path: Path, lines) -> int:
    old = path.read_bytes() if path.exists() else b""
    path.write_bytes(old + b"".join(l + b"\n" for l in lines))
    return old.count(b"\n") + 1


def _append_to_manifest(meta: Path, lines) -> int:
    """Lines appended to the MANIFEST of meta/ (a gzip member more on a gzip'd one):
    the number of the first."""
    first = read_manifest(meta).count(b"\n") + 1
    append_manifest(meta, b"".join(l + b"\n" for l in lines))
    return first


def test_rebuild_catalog_skips_hostile_records_and_keeps_the_rest(tmp_path):
    m = _archive_with_a_tree(tmp_path)
    for d in m.disks:
        for p in (d / "meta").glob("catalog.db*"):
            p.unlink()
        if not manifest_file(d / "meta"):
            continue            # not a record disk (meta/RECORDS names the two)
        mfirst = _append_to_manifest(d / "meta", HOSTILE_MANIFEST)
        jfirst = _append(d / "meta" / "JOURNAL", HOSTILE_JOURNAL)
    proc = webfs("fsck", "--rebuild-catalog", "--repair", m.disks[0], check=False)
    out = proc.stdout.decode(errors="replace")
    assert proc.returncode == 4, out + proc.stderr.decode(errors="replace")
    assert " 0 problem(s)" not in out
    for n in range(jfirst, jfirst + len(HOSTILE_JOURNAL)):
        assert f"meta/JOURNAL line {n}: " in out, (n, out)
    for n in range(mfirst, mfirst + len(HOSTILE_MANIFEST)):
        assert f"meta/MANIFEST.gz line {n}: " in out, (n, out)
    webfs("mount", m.disks[0], m.mnt)
    try:
        assert sorted(os.listdir(m.mnt)) == ["a", "d", "s"]
        assert sorted(os.listdir(m.mnt / "d")) == ["f"]
        assert (m.mnt / "a").read_bytes() == b"file a\n" * 100
        assert (m.mnt / "d" / "f").read_bytes() == b"file d/f\n" * 50
        assert os.readlink(m.mnt / "s") == "d"
        sh(f"find '{m.mnt}' >/dev/null && ls -laR '{m.mnt}' >/dev/null")
    finally:
        unmount(m.mnt)
    assert not (tmp_path / "x").exists() and not (tmp_path.parent / "x").exists()


WRITER = r"""
import os, sys, itertools
root = sys.argv[1]
for i in itertools.count():
    d = os.path.join(root, "w%d" % (i // 50))
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "f%d" % i), "wb") as f:
        f.write(os.urandom(2000 + 37 * (i % 300)) * 3)
    if i % 7 == 0:
        os.rename(os.path.join(d, "f%d" % i), os.path.join(d, "g%d" % i))
"""


def _snapshot(roots) -> dict:
    snap = {}
    for root in roots:
        for dirpath, dirnames, filenames in os.walk(root):
            for name in dirnames + filenames:
                p = os.path.join(dirpath, name)
                st = os.lstat(p)
                data = open(p, "rb").read() if os.path.isfile(p) and not os.path.islink(p) else None
                snap[p] = (st.st_mode, st.st_size, st.st_mtime_ns, data)
    return snap


def test_fsck_without_repair_writes_nothing_after_a_kill(tmp_path):
    m = Mounted(tmp_path)
    writer = None
    try:
        writer = subprocess.Popen([sys.executable, "-c", WRITER, str(m.mnt)],
                                  stderr=subprocess.DEVNULL)
        eventually(lambda: (m.mnt / "w2").exists(), "the writer's first 100 files")
        pid = m.pid()
        os.kill(pid, signal.SIGKILL)            # mid-writes: intents, WAL, journal left as they are
        wait_dead(pid)
    finally:
        if writer is not None:
            writer.kill()
            writer.wait()
        unmount(m.mnt)
    before = _snapshot(m.disks)
    proc = webfs("fsck", m.disks[0], check=False)
    out = proc.stdout.decode(errors="replace") + proc.stderr.decode(errors="replace")
    after = _snapshot(m.disks)
    changed = sorted(p for p in set(before) | set(after) if before.get(p) != after.get(p))
    assert not changed, (changed[:20], out[-2000:])
    assert "read-only check: nothing was written" in out, out[-2000:]
    # a kill mid-writes leaves work for --repair: found, said, and the exit status says so
    assert proc.returncode == 4 and "--repair would mend it" in out, out[-2000:]
    repaired = webfs("fsck", "--repair", m.disks[0], check=False)
    assert repaired.returncode in (0, 1), repaired.stdout.decode(errors="replace")[-2000:]


def test_fsck_of_a_catalog_of_random_bytes_is_one_line_and_exit_8(tmp_path):
    m = _archive_with_a_tree(tmp_path)
    cat = m.disks[0] / "meta" / "catalog.db"
    for p in (m.disks[0] / "meta").glob("catalog.db-*"):
        p.unlink()
    cat.write_bytes(os.urandom(64 * 1024))
    for args in ([], ["--repair"]):
        proc = webfs("fsck", *args, m.disks[0], check=False)
        err = proc.stderr.decode(errors="replace")
        assert proc.returncode == 8, err
        assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
        assert str(cat) in err and "--rebuild-catalog" in err, err


def test_lost_catalog_disk_blocks_are_degraded_not_lost(tmp_path):
    m = Mounted(tmp_path)
    try:
        for i in range(40):
            (m.mnt / f"f{i}").write_bytes(os.urandom(3000) * (i % 5 + 1))
        webfs("sync", m.mnt)
    finally:
        m.umount()
    shutil.rmtree(m.disks[0])                   # the catalog's disk
    proc = webfs("fsck", "--rebuild-catalog", "--repair", m.disks[1], check=False)
    out = proc.stdout.decode(errors="replace")
    assert "rebuilt the catalog" in out, out
    assert "unavailable" not in out and "lost:" not in out, out
    assert "degraded (read back through parity), none of them lost" in out, out
    assert "1 problem(s), 0 repaired, 1 left" in out, out       # the missing disk, once
    assert proc.returncode == 4, out


def _block_file(m: Mounted, name: str) -> Path:
    disk = int(os.getxattr(m.mnt / name, "user.webfs.disk"))
    sig = os.getxattr(m.mnt / name, "user.webfs.signature").decode()
    return m.disks[disk] / "blocks" / sig[:2] / sig[2:4] / sig[4:]


def test_edited_size_line_is_found_by_scrub_and_reported_once_by_fsck(tmp_path):
    m = Mounted(tmp_path)
    try:
        (m.mnt / "f").write_bytes(b"<p>some page</p>\n" * 700)
        (m.mnt / "g").write_bytes(b"<p>another page</p>\n" * 500)
        webfs("sync", m.mnt)
        block = _block_file(m, "f")
    finally:
        m.umount()
    raw = block.read_bytes()
    size = str(len(b"<p>some page</p>\n" * 700)).encode()
    block.write_bytes(raw.replace(b"Size: " + size, b"Size: " + str(int(size) + 1).encode(), 1))
    proc = webfs("scrub", m.disks[0], check=False)
    out = proc.stdout.decode(errors="replace")
    assert proc.returncode == 4 and "Size " in out, out
    proc = webfs("fsck", m.disks[0], check=False)
    out = proc.stdout.decode(errors="replace")
    assert proc.returncode == 4 and "1 problem(s)" in out and "Size" in out, out
    proc = webfs("fsck", "--repair", m.disks[0], check=False)
    assert proc.returncode == 1, proc.stdout.decode(errors="replace")
    assert block.read_bytes() == raw
    assert webfs("scrub", m.disks[0], check=False).returncode == 0


def test_status_forgets_damage_once_a_block_is_proven_good(tmp_path):
    m = Mounted(tmp_path)
    try:
        data = os.urandom(20000)
        (m.mnt / "f").write_bytes(data)
        webfs("sync", m.mnt)
        block = _block_file(m, "f")
        m.remount()
        raw = block.read_bytes()
        block.write_bytes(raw[:600] + bytes(b ^ 0xFF for b in raw[600:700]) + raw[700:])
        assert (m.mnt / "f").read_bytes() == data           # read through parity
        st = __import__("json").loads(webfs("status", "--json", m.mnt).stdout)
        assert st["damaged"], st
        webfs("scrub", "--repair", m.mnt, check=False)
        assert block.read_bytes() == raw
        st = __import__("json").loads(webfs("status", "--json", m.mnt).stdout)
        assert not st["damaged"], st
        # and a clean scrub clears what an earlier read found
        block.write_bytes(raw[:600] + bytes(b ^ 0xFF for b in raw[600:700]) + raw[700:])
        m.remount()
        assert (m.mnt / "f").read_bytes() == data
        assert __import__("json").loads(webfs("status", "--json", m.mnt).stdout)["damaged"]
        block.write_bytes(raw)                               # put right by hand
        assert webfs("scrub", m.mnt, check=False).returncode == 0
        st = __import__("json").loads(webfs("status", "--json", m.mnt).stdout)
        assert not st["damaged"], st
    finally:
        m.umount()


def test_rebuild_catalog_with_a_hostile_parity_header(tmp_path):
    """A Member line naming a disk the archive does not have (and whose block
    is gone) made --rebuild-catalog die of an OverflowError."""
    import re
    m = _archive_with_a_tree(tmp_path)
    parity = sorted(p for d in m.disks for p in (d / "parity").rglob("*") if p.is_file())[0]
    raw = parity.read_bytes()
    n = int(re.search(rb"Header-Bytes: (\d+)", raw).group(1))
    lines = raw[:n].decode().split("\n")
    i = next(i for i, l in enumerate(lines) if l.startswith("Member: "))
    fields = lines[i].split(" ")
    sig, fields[2] = fields[1], str(10**30)
    lines[i] = " ".join(fields)
    head = "\n".join(lines).rstrip(" \n") + "\n"
    parity.write_bytes((head + " " * (n - 1 - len(head)) + "\n").encode() + raw[n:])
    for d in m.disks:
        block = d / "blocks" / sig[:2] / sig[2:4] / sig[4:]
        if block.exists():
            block.unlink()
        for p in (d / "meta").glob("catalog.db*"):
            p.unlink()
    out = _rebuild_with_problems(m)
    assert "not a disk of the archive" in out, out
    _mounts_the_tree(m)


def test_rebuild_catalog_skips_numbers_past_sqlite_and_leaves_no_rebuild_file(tmp_path):
    """Issue 23 item 3: one MANIFEST line with an mtime or size past an SQLite
    INTEGER gave an OverflowError traceback and a leftover catalog.db.rebuild."""
    m = _archive_with_a_tree(tmp_path)
    hostile = [b"-\t0\t100644\t-99999999999999999999.000000000\t/old",
               b"-\t99999999999999999999999\t100644\t1.000000000\t/big"]
    for d in m.disks:
        for p in (d / "meta").glob("catalog.db*"):
            p.unlink()
        if manifest_file(d / "meta"):
            first = _append_to_manifest(d / "meta", hostile)
    proc = webfs("fsck", "--rebuild-catalog", "--repair", m.disks[0], check=False)
    out = proc.stdout.decode(errors="replace") + proc.stderr.decode(errors="replace")
    assert "Traceback" not in out and proc.returncode == 4, out
    for n in (first, first + 1):
        assert f"meta/MANIFEST.gz line {n}: " in out, out
    assert not list((m.disks[0] / "meta").glob("catalog.db.rebuild*"))
    webfs("mount", m.disks[0], m.mnt)
    try:
        assert sorted(os.listdir(m.mnt)) == ["a", "d", "s"]
    finally:
        unmount(m.mnt)


def test_rebuild_catalog_reads_a_damaged_gzipped_manifest_up_to_the_damage(tmp_path):
    """A MANIFEST.gz whose stream breaks after its records: one problem line
    naming the file, every name before the damage kept, nothing raised."""
    m = _archive_with_a_tree(tmp_path)
    for d in m.disks:
        for p in (d / "meta").glob("catalog.db*"):
            p.unlink()
        if manifest_file(d / "meta"):
            assert manifest_file(d / "meta").name == "MANIFEST.gz"
            append_manifest(d / "meta", b"")
            with open(manifest_file(d / "meta"), "ab") as f:
                f.write(b"\x1f\x8b\x08\x00 a member cut by a bad sector")
    out = _rebuild_with_problems(m)
    assert "meta/MANIFEST.gz: not a whole gzip stream (" in out, out
    _mounts_the_tree(m)
