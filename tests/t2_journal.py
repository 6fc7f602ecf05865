"""The JOURNAL on an archive in temporary directories: a line a crash cut short
does not swallow the next one appended; an import into an unmounted archive
appends to it without rewriting the MANIFEST."""
from __future__ import annotations

import gzip
import subprocess

from conftest import REPO, make_archive, webfs_here
from records_helpers import manifest_file
from webfs.archive import Archive
from webfs.assembly import open_archive
from webfs.commands.records import read_namespace
from webfs.manifest import (MANIFEST, MANIFEST_GZ, Journal, checkpoint_line, manifest_on, plain_size,
                            record_disks)


def test_a_journal_line_cut_short_by_a_crash_does_not_swallow_the_next(tmp_path):
    disks = make_archive(tmp_path)
    for d in disks:
        (d / "meta" / "JOURNAL").write_bytes(b"+\tabc\t12\t100644\t1.0")     # no newline: cut short
    store = open_archive(str(disks[0]), holder="test")
    try:
        appended_to = record_disks(store.archive)
        j = Journal(store.archive)
        j.record("-", None, b"/gone")
        j.flush()
        j.close()
    finally:
        store.close()
    assert len(appended_to) == 2
    for d in (disks[i] for i in appended_to):
        assert (d / "meta" / "JOURNAL").read_bytes().endswith(b"1.0\n-\t/gone\n")


def test_an_import_into_a_disk_appends_to_the_journal_and_leaves_the_manifest(tmp_path):
    """An import into an unmounted archive costs what it imports: its names go
    to the JOURNAL, the MANIFEST is not rewritten (that grows with the
    archive), and both imports are there for webfs and for the recovery tool."""
    disks = make_archive(tmp_path, 3)
    for name, body in (("a", b"first " * 100), ("b", b"second " * 100)):
        src = tmp_path / "src" / name
        (src / "d").mkdir(parents=True)
        (src / "d" / "page.html").write_bytes(body)
        webfs_here("import", src, f"{disks[0]}:/")
        if name == "a":
            before = {d: manifest_file(d / "meta").read_bytes()
                      for d in disks if manifest_file(d / "meta")}
    assert before and all(manifest_file(d / "meta").read_bytes() == m for d, m in before.items())
    assert any(b"/b/d/page.html" in (d / "meta" / "JOURNAL").read_bytes() for d in before)
    entries, _ = read_namespace(Archive.open(str(disks[0])))
    assert {b"/a/d/page.html", b"/b/d/page.html"} <= set(entries), sorted(entries)
    out = tmp_path / "out"
    proc = subprocess.run(["sh", str(REPO / "tools" / "webfs-recover"), *map(str, disks), str(out)],
                          capture_output=True)
    assert proc.returncode == 0, proc.stderr.decode()
    assert (out / "a" / "d" / "page.html").read_bytes() == b"first " * 100
    assert (out / "b" / "d" / "page.html").read_bytes() == b"second " * 100


def test_the_manifest_of_a_disk_is_the_form_with_the_higher_checkpoint(tmp_path):
    """meta/MANIFEST.gz and a plain meta/MANIFEST side by side (a crash inside
    the first checkpoint of this version): the higher number is the disk's;
    a plain one written before numbering counts 0; a gzip'd one whose head
    does not decompress counts 0 too (the plain one wins the tie), and never raises."""
    (tmp_path / "meta").mkdir()
    assert manifest_on(str(tmp_path)) is None
    lines = b"-\t0\t40755\t1.000000000\t/\n"
    (tmp_path / MANIFEST).write_bytes(lines)
    assert manifest_on(str(tmp_path)) == (MANIFEST, 0)
    (tmp_path / MANIFEST_GZ).write_bytes(gzip.compress(checkpoint_line(5) + lines))
    assert manifest_on(str(tmp_path)) == (MANIFEST_GZ, 5)
    assert plain_size(str(tmp_path), MANIFEST_GZ) == len(checkpoint_line(5) + lines)
    (tmp_path / MANIFEST).write_bytes(checkpoint_line(6) + lines)    # an older webfs wrote after
    assert manifest_on(str(tmp_path)) == (MANIFEST, 6)
    (tmp_path / MANIFEST_GZ).write_bytes(b"\x1f\x8b\x08\x00 not deflate at all")
    (tmp_path / MANIFEST).write_bytes(lines)
    assert manifest_on(str(tmp_path)) == (MANIFEST, 0)


def test_an_import_leaves_the_journal_bound_to_its_end(tmp_path):
    """While an import runs, passing the JOURNAL's bound starts no checkpoint
    (a checkpoint in its middle rewrote the whole MANIFEST, and the one
    after rewrote it again); at IMPORT_SLACK times the bound one starts all
    the same, and the bound passed is acted on once, when the import ends."""
    from webfs.manifest import IMPORT_SLACK
    disks = make_archive(tmp_path)
    store = open_archive(str(disks[0]), holder="test")
    try:
        j = Journal(store.archive, limit=1000)
        asked = []
        j.on_full = lambda: asked.append(j.grown)
        line = b"-\t/" + b"x" * 98 + b"\n"          # 102 bytes
        with j.importing():
            for _ in range(20):
                j.append(line)
            assert asked == []                      # past the bound, not past IMPORT_SLACK times it
        assert asked == [j.grown]                   # at the import's end, once
        j._asked = False                            # (a checkpoint would reset it)
        j.grown, asked[:] = 0, []
        with j.importing():
            while j.grown <= IMPORT_SLACK * 1000:
                j.append(line)
            assert asked == [j.grown]               # a JOURNAL that would grow without bound does not
        assert len(asked) == 1                      # asked already: not twice
        j._asked, j.grown, asked[:] = False, 0, []
        for _ in range(10):
            j.append(line)
        assert asked == [1020]                      # no import: the plain bound, as before
        j.close()
    finally:
        store.close()


def test_a_disk_that_comes_while_a_checkpoint_is_staged_gets_the_records_from_the_next(tmp_path):
    """Disk 1 missing: a checkpoint is staged for disks 0 and 2. Disk 1 comes
    back rebuilt (no records) before it is installed: the records stay on 0
    and 2 (not taken off 2, which would leave one copy), and the journal
    wants another checkpoint, which puts them on 0 and 1."""
    disks = make_archive(tmp_path, 3)
    store = open_archive(str(disks[0]), holder="test")
    try:
        archive = store.archive
        j = Journal(archive)
        gone = archive.volumes.pop(1)
        staged = j.stage(b"/\t1\t40755\n", 7)
        archive.volumes[1] = gone
        for form in (MANIFEST, MANIFEST_GZ, "JOURNAL"):
            (disks[1] / "meta" / form).unlink(missing_ok=True)
        j.install(staged, {}, 7)
        assert [manifest_on(str(d)) is not None for d in disks] == [True, False, True]
        assert j.wants_checkpoint()
        j.replace(b"/\t1\t40755\n", {0: 0}, 8)
        assert [manifest_on(str(d)) is not None for d in disks] == [True, True, False]
        assert not j.wants_checkpoint()
        j.close()
    finally:
        store.close()
