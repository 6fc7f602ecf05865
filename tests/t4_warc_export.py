"""webfs export-warc of a collection in a mount: it runs in the mount's daemon
(no capture read through FUSE), and its failures are one line, leave no
short file and leave the daemon serving. Unmounted: t2_warc_export."""
from __future__ import annotations

import json
import os
import subprocess

from conftest import Mounted, webfs
from t2_warc import records_of, tree, write_warc

PAGES = [(f"http://site.org/{i % 5}/p{i}.html", b"<html>page %d</html>" % i * (1 + i % 30)) for i in range(200)]


def _requests(mnt) -> dict:
    return json.loads(os.getxattr(mnt, "user.webfs.requests"))


def test_export_in_a_mount_runs_in_the_daemon(tmp_path):
    m = Mounted(tmp_path, disks=3)
    try:
        src = write_warc(tmp_path / "a.warc.gz", PAGES)
        webfs("import-warc", "--collection", "c", src, m.mnt)
        m.remount()
        out = tmp_path / "out.warc.gz"
        res = webfs("export-warc", "--order", "disk", "--split", "8K", m.mnt / "c", out)
        assert b"(100%) byte-identical" in res.stdout
        parts = sorted(tmp_path.glob("out-*.warc.gz"))
        assert len(parts) > 1 and not list(tmp_path.glob("*.part"))
        key = lambda r: r["id"]
        assert sorted(sum((records_of(p) for p in parts), []), key=key) == sorted(records_of(src), key=key)
        reads = _requests(m.mnt)
        assert reads.get("open", 0) == 0 and reads.get("read", 0) == 0, reads
        # OUT in the mount itself: the command reads the files (the daemon does not write into its mount)
        res = webfs("export-warc", m.mnt / "c", m.mnt / "again.warc.gz")
        assert b"(100%) byte-identical" in res.stdout
        assert _requests(m.mnt).get("open", 0) > len(PAGES)
        assert records_of(m.mnt / "again.warc.gz") == records_of(src)
    finally:
        m.umount()


def test_export_failures_in_a_mount_are_one_line_and_leave_no_file(tmp_path):
    m = Mounted(tmp_path, disks=3)
    full = tmp_path / "small"
    full.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(full)], check=True)
    try:
        webfs("import-warc", "--collection", "c", write_warc(tmp_path / "a.warc.gz", PAGES), m.mnt)
        for out, said in [(tmp_path / "no" / "out.warc.gz", "cannot write: No such file or directory"),
                          (full / "out.warc.gz", "cannot write: No space left on device")]:
            proc = webfs("export-warc", m.mnt / "c", out, check=False)
            lines = proc.stderr.decode().strip().splitlines()
            assert proc.returncode == 1 and len(lines) == 1 and said in lines[0], proc.stderr
        assert list(full.iterdir()) == []
        proc = webfs("export-warc", m.mnt / "nothing-here", tmp_path / "x.warc.gz", check=False)
        assert proc.returncode == 1 and b"nothing-here: not a directory" in proc.stderr
        # the daemon is still serving
        assert webfs("status", m.mnt).returncode == 0
        assert len(os.listdir(m.mnt / "c" / "http" / "site.org" / "0")) == 40
    finally:
        subprocess.run(["umount", "-l", str(full)], check=False)
        m.umount()


def test_an_out_already_there_is_refused_without_force(tmp_path):
    """An archivist's earlier export (a file, a symlink, one part of a split
    export) is not overwritten: one line, exit 1, the file as it was; --force
    replaces the name (a symlink's target is left as it was)."""
    m = Mounted(tmp_path, disks=3)
    try:
        src = write_warc(tmp_path / "a.warc.gz", PAGES[:20])
        webfs("import-warc", "--collection", "c", src, m.mnt)
        target = tmp_path / "elsewhere"
        target.write_bytes(b"not an export")
        (tmp_path / "link.warc.gz").symlink_to(target)
        (tmp_path / "old.warc.gz").write_bytes(b"an earlier export")
        (tmp_path / "split-00002.warc.gz").write_bytes(b"an earlier part")
        for out in ("old.warc.gz", "link.warc.gz", "split.warc.gz"):
            args = ["--split", "1K"] if out == "split.warc.gz" else []
            proc = webfs("export-warc", *args, m.mnt / "c", tmp_path / out, check=False)
            lines = proc.stderr.decode().strip().splitlines()
            assert proc.returncode == 1 and len(lines) == 1 and "refusing to overwrite it (give --force)" in lines[0]
        assert (tmp_path / "old.warc.gz").read_bytes() == b"an earlier export"
        assert (tmp_path / "split-00002.warc.gz").read_bytes() == b"an earlier part"
        assert not (tmp_path / "split-00001.warc.gz").exists() and not list(tmp_path.glob("*.part"))
        for out in ("old.warc.gz", "link.warc.gz"):
            webfs("export-warc", "--force", m.mnt / "c", tmp_path / out)
            assert records_of(tmp_path / out) == records_of(src)
        assert not (tmp_path / "link.warc.gz").is_symlink() and target.read_bytes() == b"not an export"
    finally:
        m.umount()


def test_an_export_after_rm_leaves_the_deleted_captures_out(tmp_path):
    """rm of a plain page, of an encoded page (its entity kept in the heads) and
    of a revisit's original through the mount, then export-warc, run in the
    daemon (OUT outside) and by the command (OUT in the mount): the records of
    the deleted captures are left out and counted, every other record is the
    input's, byte-identical; the revisit is kept as the revisit it is."""
    from t4_warc_pages import ENCODED, encoded_warc
    m = Mounted(tmp_path, disks=3)
    try:
        page = b"<html>the original page</html>"
        a = write_warc(tmp_path / "a.warc.gz", [("http://example.com/", page)] + PAGES[:3], every_type=True)
        enc = encoded_warc(tmp_path / "enc.warc.gz", ENCODED[:2])
        webfs("import-warc", "--collection", "c", a, m.mnt)
        webfs("import-warc", "--collection", "c", enc, m.mnt)
        host = m.mnt / "c" / "http" / "example.com"
        gone = [host / "@20240101120000", host / "gz.html@20240101120000",
                next((m.mnt / "c" / "http" / "site.org" / "1").iterdir())]
        for f in gone:
            f.unlink()
        left = [r for r in records_of(a) + records_of(enc)
                if r["uri"] not in ("http://example.com/", "http://example.com/gz.html", "http://site.org/1/p1.html")
                or r["type"] not in ("response", "resource")]
        assert any(r["type"] == "revisit" for r in left)
        for out in (tmp_path / "out.warc.gz", m.mnt / "again.warc.gz"):
            res = webfs("export-warc", m.mnt / "c", out)
            assert b"(100%) byte-identical" in res.stdout and b"; 3 left out: their captures were deleted" in res.stdout
            assert records_of(out) == left
    finally:
        m.umount()


def test_an_unreadable_capture_in_a_mount_still_fails_the_export(tmp_path):
    """A block damaged on the only disk (no parity to mend it from): the export,
    in the daemon and by the command, stops naming the capture (not left out as
    if it were deleted), exit 1, no OUT."""
    m = Mounted(tmp_path, disks=1)
    try:
        webfs("import-warc", "--collection", "c", write_warc(tmp_path / "a.warc.gz", PAGES[:20]), m.mnt)
        victim = next((m.mnt / "c" / "http" / "site.org" / "2").iterdir())
        m.umount()
        t = tree(m.disks[0], "/c")
        try:
            row = t.ns.contents(t.inode(b"http/site.org/2/" + os.fsencode(victim.name)))[0]
            block = m.disks[0] / t.store.archive.volumes[row.disk].block_path(row.sig)
        finally:
            t.close()
        raw = bytearray(block.read_bytes())
        raw[-3] ^= 0xFF
        block.write_bytes(bytes(raw))
        m.mount()
        for out in (tmp_path / "out.warc.gz", m.mnt / "again.warc.gz"):
            proc = webfs("export-warc", m.mnt / "c", out, check=False)
            assert proc.returncode == 1 and f"{victim.name}: cannot be read".encode() in proc.stderr, proc.stderr
            assert not os.path.lexists(out) and not os.path.lexists(str(out) + ".part")
    finally:
        m.umount()


def test_a_second_source_of_the_same_name_comes_back_from_a_mount(tmp_path):
    """Two files named a.warc.gz imported into one collection in a mount (the
    second kept as @warc/a.warc.gz.index~2): export-warc, in the daemon and by
    the command, writes both, byte for byte, in import order; the tool
    webfs-warc-rebuild, without webfs, writes either (a.warc.gz, a.warc.gz~2)."""
    from conftest import REPO
    from t2_warc_export import _same_name_twice
    m = Mounted(tmp_path, disks=3, mount=False)
    try:
        first, second = _same_name_twice(tmp_path, m.disks)
        m.mount()
        for out in (tmp_path / "out.warc.gz", m.mnt / "again.warc.gz"):
            res = webfs("export-warc", m.mnt / "c", out)
            assert b"(100%) byte-identical" in res.stdout
            assert out.read_bytes() == first.read_bytes() + second.read_bytes()
        for name, source in (("a.warc.gz", first), ("a.warc.gz~2", second)):
            rebuilt = tmp_path / f"rebuilt-{name}.warc"
            subprocess.run(["sh", str(REPO / "tools" / "webfs-warc-rebuild"), str(m.mnt / "c"), name, str(rebuilt)],
                           check=True, capture_output=True, env={"PATH": "/usr/bin:/bin"})
            assert records_of(rebuilt) == records_of(source), name
    finally:
        m.umount()
