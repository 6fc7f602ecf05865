"""The JOURNAL on an archive in temporary directories: a line a crash cut short
does not swallow the next one appended."""
from __future__ import annotations

from conftest import make_archive
from webfs.assembly import open_archive
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
