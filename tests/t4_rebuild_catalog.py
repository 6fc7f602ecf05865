"""fsck --rebuild-catalog (issue 23 items 2, 3, 8): without --repair it writes
nothing and says what a rebuild would change; with --repair it leaves a sound
catalog alone unless --force; a read-only fsck against an empty or foreign
catalog says so in one line instead of listing every block as an orphan."""
from __future__ import annotations

import hashlib
import os
import shutil
import sqlite3
from pathlib import Path

from conftest import Mounted, sh, webfs
from records_helpers import manifest_file, read_manifest, write_manifest


def _checksums(disks) -> dict:
    """Every file of every disk (catalog, MANIFEST, JOURNAL, lock, blocks, parity): its md5."""
    out = {}
    for d in disks:
        for dirpath, _dirs, files in os.walk(d):
            for name in files:
                p = os.path.join(dirpath, name)
                with open(p, "rb") as f:
                    out[p] = hashlib.md5(f.read()).hexdigest()
    return out


def _archive_with_owners_xattrs_and_links(tmp_path) -> Mounted:
    m = Mounted(tmp_path)
    try:
        sh(f"cp -r {Path(__file__).resolve().parent.parent / 'man'} {m.mnt}/")
        sh(f"setfattr -n user.note -v keep {m.mnt}/man/webfs.1")
        sh(f"setfattr -n user.warc.uri -v http://x/ {m.mnt}/man/webfs-format.5")
        os.setxattr(m.mnt / "man" / "webfs-format.5", "user.binary", b"\0\t\xff")
        os.chown(m.mnt / "man" / "webfs.1", 1234, 4321)
        os.link(m.mnt / "man" / "webfs.1", m.mnt / "hl")
    finally:
        m.umount()
    return m


def _strip_attribute_lines(m: Mounted) -> None:
    """Make the records as webfs wrote them before they kept owners, xattrs and links."""
    for d in m.disks:
        def plain(data: bytes) -> bytes:
            return b"".join(l for l in data.splitlines(keepends=True)
                            if not l.startswith((b"#\towner", b"#\txattr", b"#\tinode")))
        if manifest_file(d / "meta"):
            write_manifest(d / "meta", plain(read_manifest(d / "meta")))
        if (d / "meta" / "JOURNAL").exists():
            (d / "meta" / "JOURNAL").write_bytes(plain((d / "meta" / "JOURNAL").read_bytes()))


def test_rebuild_without_repair_writes_nothing_and_says_what_it_would_change(tmp_path):
    m = _archive_with_owners_xattrs_and_links(tmp_path)
    _strip_attribute_lines(m)           # so that a rebuild would lose them
    before = _checksums(m.disks)
    proc = webfs("fsck", "--rebuild-catalog", m.disks[0], check=False)
    out = proc.stdout.decode()
    assert proc.returncode == 4, out + proc.stderr.decode()
    assert "read-only check: nothing was written" in out, out
    for change in ("would change owner: '/hl', '/man/webfs.1'", "would change xattrs: ",
                   "1 hard link(s) would come apart into copies: '/hl = /man/webfs.1'"):
        assert change in out, (change, out)
    assert _checksums(m.disks) == before
    # A catalog that opens and is this archive's: --repair leaves it alone.
    proc = webfs("fsck", "--rebuild-catalog", "--repair", m.disks[0], check=False)
    err = proc.stderr.decode()
    assert proc.returncode == 8 and "--force" in err and len(err.strip().splitlines()) == 1, err
    assert _checksums(m.disks) == before
    m.mount()
    try:
        st = os.stat(m.mnt / "man" / "webfs.1")
        assert (st.st_uid, st.st_gid, st.st_nlink) == (1234, 4321, 2)
        assert os.getxattr(m.mnt / "hl", "user.note") == b"keep"
    finally:
        m.umount()


def _owners_xattrs_and_links_are_back(m: Mounted) -> None:
    m.mount()
    try:
        st, hl = os.stat(m.mnt / "man" / "webfs.1"), os.stat(m.mnt / "hl")
        assert (st.st_uid, st.st_gid, st.st_nlink) == (1234, 4321, 2)
        assert (hl.st_ino, hl.st_dev) == (st.st_ino, st.st_dev)
        assert sh(f"getfattr --only-values -n user.note {m.mnt}/hl").stdout == b"keep"
        assert sh(f"getfattr --only-values -n user.warc.uri {m.mnt}/man/webfs-format.5").stdout == b"http://x/"
        assert os.stat(m.mnt / "man" / "webfs-format.5").st_nlink == 1
        assert os.getxattr(m.mnt / "man" / "webfs-format.5", "user.binary") == b"\0\t\xff"
    finally:
        m.umount()


def test_a_rebuilt_catalog_loses_no_owner_xattr_or_hard_link(tmp_path):
    """Issue 23 item 2: the plain-text records carry owners, xattrs and which
    names are one inode (# lines old readers skip), so --force on a sound
    catalog, or a rebuild after losing it, changes nothing."""
    m = _archive_with_owners_xattrs_and_links(tmp_path)
    proc = webfs("fsck", "--rebuild-catalog", m.disks[0], check=False)
    assert proc.returncode == 0 and "a rebuild would change nothing" in proc.stdout.decode(), proc.stdout
    proc = webfs("fsck", "--rebuild-catalog", "--repair", "--force", m.disks[0], check=False)
    assert proc.returncode in (0, 1), proc.stdout.decode() + proc.stderr.decode()
    assert "rebuilt the catalog" in proc.stdout.decode()
    _owners_xattrs_and_links_are_back(m)
    for p in (m.disks[0] / "meta").glob("catalog.db*"):
        p.unlink()
    proc = webfs("fsck", "--rebuild-catalog", "--repair", m.disks[0], check=False)
    assert proc.returncode in (0, 1), proc.stdout.decode() + proc.stderr.decode()
    _owners_xattrs_and_links_are_back(m)


def test_records_written_before_they_kept_owners_still_rebuild(tmp_path):
    """A disk written before the # owner, xattr and inode lines (strip them):
    names, sizes, modes and mtimes come back; owners are the rebuilder's."""
    m = _archive_with_owners_xattrs_and_links(tmp_path)
    _strip_attribute_lines(m)
    for d in m.disks:
        for p in (d / "meta").glob("catalog.db*"):
            p.unlink()
    proc = webfs("fsck", "--rebuild-catalog", "--repair", m.disks[0], check=False)
    out = proc.stdout.decode()
    assert proc.returncode in (0, 1) and "records written before webfs kept owners" in out, out
    m.mount()
    try:
        st = os.stat(m.mnt / "man" / "webfs.1")
        assert (st.st_uid, st.st_nlink) == (os.getuid(), 1)
        assert (m.mnt / "hl").read_bytes() == (m.mnt / "man" / "webfs.1").read_bytes()
    finally:
        m.umount()


def test_a_lost_catalog_is_described_then_rebuilt_with_repair(tmp_path):
    m = _archive_with_owners_xattrs_and_links(tmp_path)
    for p in (m.disks[0] / "meta").glob("catalog.db*"):
        p.unlink()
    before = _checksums(m.disks)
    proc = webfs("fsck", "--rebuild-catalog", m.disks[0], check=False)
    out = proc.stdout.decode()
    assert proc.returncode == 4 and "catalog.db: missing" in out and "--repair" in out, out
    assert _checksums(m.disks) == before
    proc = webfs("fsck", "--rebuild-catalog", "--repair", m.disks[0], check=False)
    assert proc.returncode in (0, 1), proc.stdout.decode() + proc.stderr.decode()
    m.mount()
    try:
        assert sorted(os.listdir(m.mnt)) == ["hl", "man"]
    finally:
        m.umount()


def test_fsck_on_an_empty_or_foreign_catalog_says_so_in_one_line(tmp_path):
    m = _archive_with_owners_xattrs_and_links(tmp_path)
    other = [tmp_path / f"other{i}" for i in range(3)]
    webfs("mkfs", *other)
    webfs("import", Path(__file__).resolve().parent / "t1_tiers.py", f"{other[0]}:/x")
    foreign, empty, anonymous = tmp_path / "foreign.db", tmp_path / "empty.db", tmp_path / "anonymous.db"
    shutil.copyfile(other[0] / "meta" / "catalog.db", foreign)
    webfs("mkfs", *[tmp_path / f"e{i}" for i in range(3)])
    shutil.copyfile(tmp_path / "e0" / "meta" / "catalog.db", empty)
    shutil.copyfile(empty, anonymous)
    for db in (foreign, anonymous):     # as catalogs written before the uuid was kept in them
        with sqlite3.connect(db) as conn:
            conn.execute("DELETE FROM meta WHERE key='archive'")
        conn.close()
    for planted, why in ((empty, "another archive"), (foreign, "knows none of the blocks"),
                         (anonymous, "an empty catalog")):
        for suffix in ("-wal", "-shm"):
            (m.disks[0] / "meta" / f"catalog.db{suffix}").unlink(missing_ok=True)
        shutil.copyfile(planted, m.disks[0] / "meta" / "catalog.db")
        before = _checksums(m.disks)
        for args in ((), ("--repair",)):
            proc = webfs("fsck", *args, m.disks[0], check=False)
            err = proc.stderr.decode()
            assert proc.returncode == 8 and len(err.strip().splitlines()) == 1, (args, err, proc.stdout)
            assert why in err and "--rebuild-catalog" in err and "orphan" not in proc.stdout.decode(), err
            after = _checksums(m.disks)
            if args:        # --repair takes the lock for writing: its holder text is written
                after = {p: v for p, v in after.items() if not p.endswith("/meta/lock")}
            assert after == {p: v for p, v in before.items() if p in after}


def test_fsck_that_cannot_take_the_archive_exits_8(tmp_path):
    """A mounted archive (S3: another machine's lease, t4_s3_commands) is
    held: fsck --repair could not run, which is exit 8, not 1 ("all repaired")."""
    m = Mounted(tmp_path)
    try:
        (m.mnt / "f").write_bytes(b"x" * 1000)
        for args in (("--repair",), ("--rebuild-catalog", "--repair"), ("--rebuild-catalog",)):
            proc = webfs("fsck", *args, m.disks[0], check=False)
            err = proc.stderr.decode()
            assert proc.returncode == 8 and len(err.strip().splitlines()) == 1, (args, proc.returncode, err)
            assert "Traceback" not in err, err
    finally:
        m.umount()


def test_blocks_no_record_names_come_back_at_their_name_hint(tmp_path):
    """Issue 23 item 6: records lost (a machine lost with uploads staged, a
    MANIFEST line gone): a block's Name: hint names its file, as in
    webfs-recover, unless a recorded name holds that path (then it stays pinned)."""
    m = Mounted(tmp_path)
    try:
        (m.mnt / "keep.html").write_bytes(b"<p>kept</p>" * 50)
        (m.mnt / "d").mkdir()
        (m.mnt / "d" / "lost page.html").write_bytes(b"<p>records lost</p>" * 50)
        (m.mnt / "x").write_bytes(b"<p>first x</p>" * 50)
        os.rename(m.mnt / "x", m.mnt / "y")         # its hint stays /x ...
        (m.mnt / "x").write_bytes(b"<p>second x</p>" * 50)      # ... which another file now holds
    finally:
        m.umount()
    for d in m.disks:
        for p in (d / "meta").glob("catalog.db*"):
            p.unlink()
        if manifest_file(d / "meta"):
            lines = read_manifest(d / "meta").split(b"\n")
            kept = [l for l in lines if not l.endswith((b"\t/d/lost page.html", b"\t/y"))]
            assert len(kept) == len(lines) - 2
            write_manifest(d / "meta", b"\n".join(kept))
            assert b"lost" not in (d / "meta" / "JOURNAL").read_bytes()
    proc = webfs("fsck", "--rebuild-catalog", "--repair", m.disks[0], check=False)
    out = proc.stdout.decode()
    assert proc.returncode in (0, 1), out + proc.stderr.decode()
    assert "1 block(s) no record names made files at their header's Name: hint" in out, out
    assert "1 Name: hint(s) of blocks no record names not used" in out, out
    m.mount()
    try:
        assert (m.mnt / "d" / "lost page.html").read_bytes() == b"<p>records lost</p>" * 50
        assert (m.mnt / "x").read_bytes() == b"<p>second x</p>" * 50
        assert (m.mnt / "keep.html").read_bytes() == b"<p>kept</p>" * 50
        assert not (m.mnt / "y").exists()
    finally:
        m.umount()
    import json
    assert json.loads(webfs("status", "--json", m.disks[0]).stdout)["blocks"] == 4   # first x kept, pinned


def test_warc_xattrs_journalled_by_an_import_come_back_after_a_kill(tmp_path):
    """An import sets a batch's user.warc.* xattrs after journalling its names:
    the JOURNAL still carries them (made at commit), so a daemon killed before
    any checkpoint and a lost catalog lose none."""
    import signal
    from t2_warc import write_warc
    from conftest import unmount
    warc = write_warc(tmp_path / "c.warc.gz", [("http://example.com/", b"<html>home</html>"),
                                                ("http://example.com/a.html", b"<html>a</html>")])
    m = Mounted(tmp_path)
    try:
        webfs("import-warc", warc, m.mnt / "c")
        found = sh(f"getfattr -R -d -m user.warc.target-uri {m.mnt}/c").stdout
        assert found.count(b"user.warc.target-uri=") >= 2, found
        os.kill(m.pid(), signal.SIGKILL)
    finally:
        unmount(m.mnt)
    for d in m.disks:
        for p in (d / "meta").glob("catalog.db*"):
            p.unlink()
    proc = webfs("fsck", "--rebuild-catalog", "--repair", m.disks[1], check=False)
    assert proc.returncode in (0, 1), proc.stdout.decode() + proc.stderr.decode()
    webfs("mount", m.disks[1], m.mnt)
    try:
        assert sh(f"getfattr -R -d -m user.warc.target-uri {m.mnt}/c").stdout == found
    finally:
        unmount(m.mnt)


def test_symlinks_compare_by_target_and_the_first_mount_of_a_rebuilt_catalog_says_so(tmp_path):
    """A symlink is compared by its target whichever way the catalog holds it:
    in ``symlinks`` (made by import or symlink(2), or read once), or by its
    block only (a rebuilt catalog until the first readlink). So a healthy
    archive's dry run changes nothing, before a --force rebuild and after one
    with some of the links read. The first mount of a rebuilt catalog says
    so, not that it recovered from an unclean stop (there was none)."""
    m = Mounted(tmp_path, mount=False)
    src = tmp_path / "src"
    src.mkdir()
    os.symlink("target", src / "sl")
    os.symlink("../x/y", src / "sl2")
    (src / "f").write_bytes(b"<p>f</p>")
    webfs("import", f"{src}/", f"{m.disks[0]}:/")

    def dry_run_changes_nothing() -> None:
        proc = webfs("fsck", "--rebuild-catalog", m.disks[0], check=False)
        out = proc.stdout.decode()
        assert proc.returncode == 0 and "a rebuild would change nothing" in out, out + proc.stderr.decode()

    dry_run_changes_nothing()
    proc = webfs("fsck", "--rebuild-catalog", "--repair", "--force", m.disks[0], check=False)
    assert proc.returncode in (0, 1), proc.stdout.decode() + proc.stderr.decode()
    dry_run_changes_nothing()
    proc = webfs("mount", m.disks[0], m.mnt)
    try:
        assert os.readlink(m.mnt / "sl") == "target"     # kept in symlinks from now on; sl2 is not read
    finally:
        m.umount()
    said = proc.stderr.decode() + (m.disks[0] / "meta" / "webfs.log").read_text()
    assert "first mount after a rebuilt catalog: nothing to mend" in said and "unclean stop" not in said, said
    dry_run_changes_nothing()
    logged = len((m.disks[0] / "meta" / "webfs.log").read_bytes())
    m.mount()
    try:
        assert [os.readlink(m.mnt / n) for n in ("sl", "sl2")] == ["target", "../x/y"]
    finally:
        m.umount()
    later = (m.disks[0] / "meta" / "webfs.log").read_bytes()[logged:]
    assert b"first mount after" not in later and b"unclean stop" not in later, later   # the mark is gone
