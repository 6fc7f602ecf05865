"""webfs export-warc on unmounted archives (DISK:/NAME): the order of the disks,
and the failures that must leave no short file (an unwritable or full OUT, a
capture that cannot be read, a stopped export). Through a mount: t4_warc_export;
the daemon killed mid-export: t5_warc."""
from __future__ import annotations

import subprocess

import pytest

from conftest import REPO, make_archive, webfs
from t2_warc import imp, records_of, tree, write_warc
from webfs import admin, urlpath, warcexport
from webfs.assembly import OpenArchive, open_archive
from webfs.errors import WebfsError

PAGES = [(f"http://site.org/{i % 7}/p{i}.html", b"<html>page %d</html>" % i * (1 + i % 40)) for i in range(300)]


def _archive(tmp_path, disks: int = 4, pages=PAGES):
    d = make_archive(tmp_path, disks)
    src = write_warc(tmp_path / "a.warc.gz", pages)
    imp(d[0], src, check=True)
    return d, src


def _one_error_line(proc, warnings: int = 0) -> str:
    """The error, one line (after the store's warnings, if any), exit status 1."""
    lines = proc.stderr.decode().strip().splitlines()
    assert proc.returncode == 1 and len(lines) == 1 + warnings, proc.stderr
    return lines[-1]


def test_order_disk_reads_every_disk_in_turn_each_in_its_order(tmp_path):
    disks, src = _archive(tmp_path)
    out = tmp_path / "out.warc.gz"
    webfs("export-warc", "--order", "disk", f"{disks[0]}:/c", out)
    got = records_of(out)
    assert sorted(got, key=lambda r: r["id"]) == sorted(records_of(src), key=lambda r: r["id"])
    t = tree(disks[0], "/c")
    try:
        where = {}
        for url, _ in PAGES:
            path = urlpath.capture_path(url, "20240101120000", 1).encode()
            row = t.ns.contents(t._ino(path))[0]
            where[url] = (row.disk, row.sig)
    finally:
        t.close()
    caps = [where[r["uri"]] for r in got if r["type"] == "response"]
    assert len(caps) == len(PAGES)
    on_disk = {}
    for disk, sig in caps:
        on_disk.setdefault(disk, []).append(sig)
    assert len(on_disk) == 4
    for sigs in on_disk.values():               # each disk in the order of its signature tree
        assert sigs == sorted(sigs)
    first = [disk for disk, _ in caps[:len(caps) // 4]]
    assert len(set(first)) == 4                 # the disks taken in turn, not one after the other


def test_an_unwritable_out_is_one_line_and_nothing_written(tmp_path):
    disks, _ = _archive(tmp_path, 2)
    proc = webfs("export-warc", f"{disks[0]}:/c", tmp_path / "no" / "such" / "out.warc.gz", check=False)
    assert "out.warc.gz: cannot write: No such file or directory" in _one_error_line(proc)
    (tmp_path / "dir.warc.gz").mkdir()
    proc = webfs("export-warc", f"{disks[0]}:/c", tmp_path / "dir.warc.gz", check=False)
    assert "dir.warc.gz: is a directory" in _one_error_line(proc)
    assert not list(tmp_path.glob("**/*.part"))


def test_a_full_disk_for_out_removes_the_part_file(tmp_path):
    disks, _ = _archive(tmp_path, 2)
    full = tmp_path / "small"
    full.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(full)], check=True)
    try:
        proc = webfs("export-warc", "--order", "disk", f"{disks[0]}:/c", full / "out.warc.gz", check=False)
        assert "out.warc.gz: cannot write: No space left on device" in _one_error_line(proc)
        assert list(full.iterdir()) == []
    finally:
        subprocess.run(["umount", "-l", str(full)], check=False)


def test_a_capture_that_cannot_be_read_stops_the_export_and_keeps_the_old_out(tmp_path):
    """One disk, so no parity to read the damaged block from: the export names
    the capture, and the OUT of an earlier export is left as it was."""
    disks, _ = _archive(tmp_path, 1)
    out = tmp_path / "out.warc.gz"
    webfs("export-warc", f"{disks[0]}:/c", out)
    before = out.read_bytes()
    t = tree(disks[0], "/c")
    try:
        path = urlpath.capture_path(PAGES[5][0], "20240101120000", 1).encode()
        row = t.ns.contents(t._ino(path))[0]
        block = disks[0] / t.store.archive.volumes[row.disk].block_path(row.sig)
    finally:
        t.close()
    raw = bytearray(block.read_bytes())
    raw[-3] ^= 0xFF
    block.write_bytes(bytes(raw))
    proc = webfs("export-warc", "--force", f"{disks[0]}:/c", out, check=False)
    assert f"{path.decode()}: cannot be read" in _one_error_line(proc, warnings=1)
    assert out.read_bytes() == before
    assert not list(tmp_path.glob("*.part"))


def test_a_stopped_export_writes_nothing(tmp_path):
    """Ctrl-C (the progress asked to stop) ends the export at the next record, and
    removes what it wrote."""
    disks, _ = _archive(tmp_path, 2)
    out = tmp_path / "out.warc.gz"
    store = open_archive(str(disks[0]), holder="test")
    try:
        progress = admin.Progress()
        progress.stop_requested.set()
        with pytest.raises(WebfsError, match="stopped before the end"):
            warcexport.export_warc(OpenArchive(store), progress, "/c", str(out), split=10_000)
    finally:
        store.close()
    assert list(tmp_path.glob("out*")) == []


def test_what_is_not_a_collection_is_refused(tmp_path):
    disks, _ = _archive(tmp_path, 2)
    out = tmp_path / "out.warc.gz"
    proc = webfs("export-warc", f"{disks[0]}:/nope", out, check=False)
    assert "/nope: not in the archive" in _one_error_line(proc)
    proc = webfs("export-warc", f"{disks[0]}:/c/http", out, check=False)
    assert "/c/http: not a collection made by import-warc (it has no @warc/)" in _one_error_line(proc)
    assert list(tmp_path.glob("out*")) == []


def test_a_tree_webfs_recover_rebuilt_exports_as_the_archive_did(tmp_path):
    """Without webfs: the disks rebuilt into a plain tree by tools/webfs-recover;
    export-warc reads its files and writes the same records. Sixty pages are
    every size and directory PAGES has; webfs-recover, a shell script, takes
    a tenth of a second a page."""
    disks, src = _archive(tmp_path, 2, PAGES[:60])
    webfs("export-warc", f"{disks[0]}:/c", tmp_path / "from-disks.warc.gz")
    rebuilt = tmp_path / "rebuilt"
    subprocess.run(["sh", str(REPO / "tools" / "webfs-recover"), *map(str, disks), str(rebuilt)],
                   check=True, capture_output=True)
    out = tmp_path / "from-tree.warc.gz"
    res = webfs("export-warc", rebuilt / "c", out)
    assert b"(100%) byte-identical" in res.stdout
    assert out.read_bytes() == (tmp_path / "from-disks.warc.gz").read_bytes()


def test_export_keeps_the_import_order_and_writes_plain_warc_for_dot_warc(tmp_path):
    """Sources come out in the order they were imported (b before a here, not
    by name); OUT.warc is a plain WARC file, OUT.warc.gz gzip per record."""
    disks = make_archive(tmp_path, 3)
    b = write_warc(tmp_path / "b.warc.gz", [("http://example.com/b", b"page b")])
    a = write_warc(tmp_path / "a.warc.gz", [("http://example.com/a", b"page a")], start=100)
    imp(disks[0], b, check=True)
    imp(disks[0], a, check=True)
    plain, gz = tmp_path / "out.warc", tmp_path / "out.warc.gz"
    webfs("export-warc", f"{disks[0]}:/c", plain)
    webfs("export-warc", f"{disks[0]}:/c", gz)
    assert plain.read_bytes().startswith(b"WARC/1") and gz.read_bytes()[:2] == b"\x1f\x8b"
    assert records_of(plain) == records_of(gz) == records_of(b) + records_of(a)
    webfs("export-warc", "--split", "1K", f"{disks[0]}:/c", tmp_path / "part.warc")
    parts = sorted(tmp_path.glob("part-*.warc"))
    assert len(parts) > 1 and all(p.read_bytes().startswith(b"WARC/1") for p in parts)
