"""The JOURNAL on an archive in temporary directories: a line a crash cut short
does not swallow the next one appended; an import into an unmounted archive
appends to it without rewriting the MANIFEST."""
from __future__ import annotations

import subprocess

from conftest import REPO, make_archive, webfs_here
from webfs.archive import Archive
from webfs.assembly import open_archive
from webfs.commands.records import read_namespace
from webfs.manifest import Journal, record_disks


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
            before = {d: (d / "meta" / "MANIFEST").read_bytes()
                      for d in disks if (d / "meta" / "MANIFEST").exists()}
    assert before and all((d / "meta" / "MANIFEST").read_bytes() == m for d, m in before.items())
    assert any(b"/b/d/page.html" in (d / "meta" / "JOURNAL").read_bytes() for d in before)
    entries, _ = read_namespace(Archive.open(str(disks[0])))
    assert {b"/a/d/page.html", b"/b/d/page.html"} <= set(entries), sorted(entries)
    out = tmp_path / "out"
    proc = subprocess.run(["sh", str(REPO / "tools" / "webfs-recover"), *map(str, disks), str(out)],
                          capture_output=True)
    assert proc.returncode == 0, proc.stderr.decode()
    assert (out / "a" / "d" / "page.html").read_bytes() == b"first " * 100
    assert (out / "b" / "d" / "page.html").read_bytes() == b"second " * 100
