"""webfs export-warc on unmounted archives (DISK:/NAME): the order of the disks,
and the failures that must leave no short file (an unwritable or full OUT, a
capture that cannot be read, a stopped export); an export over a subset, and
one killed and resumed (--resume), with its failures. Through a mount:
t4_warc_export, t4_stream (a subset export killed ten times beside cool);
the daemon killed mid-export: t5_warc."""
from __future__ import annotations

import os
import random
import subprocess
import zlib

import pytest

from conftest import BIN, REPO, make_archive, webfs_here
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
    webfs_here("export-warc", "--order", "disk", f"{disks[0]}:/c", out)
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


def test_a_page_stored_once_is_read_once_for_all_its_captures(tmp_path, monkeypatch):
    """40 captures of 5 pages (stored once each): --order disk puts the captures
    of one stored page together, and their task reads its block once, where each
    capture read it (40 reads); every record is still the source's very member."""
    pages = [(f"http://dup.org/{i % 3}/p{i}.html", b"<html>shared %d</html>" % (i % 5) * 40) for i in range(40)]
    disks, src = _archive(tmp_path, 4, pages)
    out = tmp_path / "out.warc.gz"
    t = tree(disks[0], "/c")
    try:
        reads, real = [], t.store.read
        monkeypatch.setattr(t.store, "read", lambda row: reads.append(row.id) or real(row))
        res = warcexport.export_tree(t, str(out), order="disk")
    finally:
        t.close()
    assert res.figures["gzip_identical"] == res.figures["records"] == len(records_of(src))
    assert sorted(records_of(out), key=lambda r: r["id"]) == sorted(records_of(src), key=lambda r: r["id"])
    assert len(reads) == len(set(reads)) == 5 + 2       # and the kept heads and index of the source


@pytest.mark.parametrize("files,queries", [(3, 1), (4, 2), (5, 2), (8, 3)])
def test_a_directory_is_listed_in_pages_a_short_one_the_last(tmp_path, monkeypatch, files, queries):
    """The export lists every directory of the collection: a query a page of
    entries, a short page the last (not one more that finds none)."""
    from webfs import warc
    monkeypatch.setattr(warc, "LISTING_PAGE", 4)
    disks, _ = _archive(tmp_path, 2, [(f"http://dir.org/d/p{i}.html", b"page %d" % i) for i in range(files)])
    t = tree(disks[0], "/c")
    try:
        asked, real = [], t.ns.entries
        monkeypatch.setattr(t.ns, "entries", lambda *a: asked.append(a) or real(*a))
        listed = t.listdir(b"http/dir.org/d")
    finally:
        t.close()
    assert len(listed) == files and len(asked) == queries


def test_an_unwritable_out_is_one_line_and_nothing_written(tmp_path):
    disks, _ = _archive(tmp_path, 2)
    proc = webfs_here("export-warc", f"{disks[0]}:/c", tmp_path / "no" / "such" / "out.warc.gz", check=False)
    assert "out.warc.gz: cannot write: No such file or directory" in _one_error_line(proc)
    (tmp_path / "dir.warc.gz").mkdir()
    proc = webfs_here("export-warc", f"{disks[0]}:/c", tmp_path / "dir.warc.gz", check=False)
    assert "dir.warc.gz: is a directory" in _one_error_line(proc)
    assert not list(tmp_path.glob("**/*.part"))


def test_a_full_disk_for_out_removes_the_part_file(tmp_path):
    disks, _ = _archive(tmp_path, 2)
    full = tmp_path / "small"
    full.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(full)], check=True)
    try:
        proc = webfs_here("export-warc", "--order", "disk", f"{disks[0]}:/c", full / "out.warc.gz", check=False)
        assert "out.warc.gz: cannot write: No space left on device" in _one_error_line(proc)
        assert list(full.iterdir()) == []
    finally:
        subprocess.run(["umount", "-l", str(full)], check=False)


def test_a_capture_that_cannot_be_read_stops_the_export_and_keeps_the_old_out(tmp_path):
    """One disk, so no parity to read the damaged block from: the export names
    the capture, and the OUT of an earlier export is left as it was."""
    disks, _ = _archive(tmp_path, 1)
    out = tmp_path / "out.warc.gz"
    webfs_here("export-warc", f"{disks[0]}:/c", out)
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
    proc = webfs_here("export-warc", "--force", f"{disks[0]}:/c", out, check=False)
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
    proc = webfs_here("export-warc", f"{disks[0]}:/nope", out, check=False)
    assert "/nope: not in the archive" in _one_error_line(proc)
    proc = webfs_here("export-warc", f"{disks[0]}:/c/http", out, check=False)
    assert "/c/http: not a collection made by import-warc (it has no @warc/)" in _one_error_line(proc)
    assert list(tmp_path.glob("out*")) == []


def test_a_tree_webfs_recover_rebuilt_exports_as_the_archive_did(tmp_path):
    """Without webfs: the disks rebuilt into a plain tree by tools/webfs-recover;
    export-warc reads its files and writes the same records. Sixty pages are
    every size and directory PAGES has; webfs-recover, a shell script, takes
    a tenth of a second a page."""
    disks, src = _archive(tmp_path, 2, PAGES[:60])
    webfs_here("export-warc", f"{disks[0]}:/c", tmp_path / "from-disks.warc.gz")
    rebuilt = tmp_path / "rebuilt"
    subprocess.run(["sh", str(REPO / "tools" / "webfs-recover"), *map(str, disks), str(rebuilt)],
                   check=True, capture_output=True)
    out = tmp_path / "from-tree.warc.gz"
    res = webfs_here("export-warc", rebuilt / "c", out)
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
    webfs_here("export-warc", f"{disks[0]}:/c", plain)
    webfs_here("export-warc", f"{disks[0]}:/c", gz)
    assert plain.read_bytes().startswith(b"WARC/1") and gz.read_bytes()[:2] == b"\x1f\x8b"
    assert records_of(plain) == records_of(gz) == records_of(b) + records_of(a)
    webfs_here("export-warc", "--split", "1K", f"{disks[0]}:/c", tmp_path / "part.warc")
    parts = sorted(tmp_path.glob("part-*.warc"))
    assert len(parts) > 1 and all(p.read_bytes().startswith(b"WARC/1") for p in parts)


def _same_name_twice(tmp_path, disks):
    """Two files both named a.warc.gz imported into collection c, one after the
    other: the second is kept as @warc/a.warc.gz.index~2 (and .heads~2)."""
    (tmp_path / "1").mkdir()
    (tmp_path / "2").mkdir()
    first = write_warc(tmp_path / "1" / "a.warc.gz", [("http://example.com/one", b"the first file")], every_type=True)
    second = write_warc(tmp_path / "2" / "a.warc.gz", [(f"http://example.com/two{i}", b"the second file %d" % i)
                                                      for i in range(3)], start=100)
    imp(disks[0], first, check=True)
    imp(disks[0], second, check=True)
    return first, second


def test_a_second_source_of_the_same_name_is_exported_too(tmp_path):
    """Each source file kept is exported, the second of a name (a.warc.gz.index~2)
    too: in import order, byte for byte, in the source's order, disk by disk
    and as a stream (export-warc took only the names ending in .index: the
    second file's records were missing, and the summary said 100 %)."""
    disks = make_archive(tmp_path, 3)
    first, second = _same_name_twice(tmp_path, disks)
    t = tree(disks[0], "/c")
    try:
        assert {b"a.warc.gz.index", b"a.warc.gz.index~2", b"a.warc.gz.heads~2"} <= set(t.listdir(b"@warc"))
    finally:
        t.close()
    out = tmp_path / "out.warc.gz"
    res = webfs_here("export-warc", f"{disks[0]}:/c", out)
    assert out.read_bytes() == first.read_bytes() + second.read_bytes()
    assert b"exported 14 records" in res.stdout and b"(100%) byte-identical" in res.stdout
    want = sorted(r["id"] for r in records_of(first) + records_of(second))
    for options in (["--order", "disk"], ["--resumable"]):
        again = tmp_path / "again.warc.gz"
        webfs_here("export-warc", *options, f"{disks[0]}:/c", again)
        assert sorted(r["id"] for r in records_of(again)) == want, options
        again.unlink()


def test_a_record_at_the_same_place_of_another_file_of_the_same_name_is_not_taken_for_it(tmp_path):
    """A capture already imported is known by its source's name and offset;
    another file of the same name with a record at that offset, of the same
    URL and second (a crawler's files named by the hour, a rerun), was taken
    for it: its payload was not stored, and the export wrote the first
    file's payload in its record. The record id and payload digest tell them
    apart; a second import of the very same file is still 'already there'."""
    disks = make_archive(tmp_path, 3)
    (tmp_path / "1").mkdir()
    (tmp_path / "2").mkdir()
    first = write_warc(tmp_path / "1" / "a.warc", [("http://example.com/x", b"AAAA first")], gz=False)
    second = write_warc(tmp_path / "2" / "a.warc", [("http://example.com/x", b"BBBB other")], gz=False, start=100)
    assert len(first.read_bytes()) == len(second.read_bytes())         # each record at the same offset
    _, fig = imp(disks[0], first, check=True)
    _, fig = imp(disks[0], second, check=True)
    assert fig["already"] == 0 and fig["captures"] == 1, fig
    out = tmp_path / "out.warc"
    assert b"(100%) byte-identical" in webfs_here("export-warc", f"{disks[0]}:/c", out).stdout
    assert out.read_bytes() == first.read_bytes() + second.read_bytes()
    _, fig = imp(disks[0], second, check=True)
    assert fig["already"] == 1 and fig["captures"] == 0, fig


# ---------------------------------------------------------------- over a subset, resumed

def run_until(args, kill_after, out=subprocess.DEVNULL, command="stream") -> tuple[str, int] | None:
    """Run webfs stream (or export-warc as a stream); have it SIGKILL itself
    right after its ``kill_after``-th token (the kill point stream-after-token;
    None: run to the end). The last (token, bytes) it printed, None if it
    finished."""
    env = dict(os.environ, WEBFS_TEST_KILL_AT=f"stream-after-token:{kill_after}") if kill_after else None
    proc = subprocess.run([str(BIN / "webfs"), command, *map(str, args)], stdout=out, stderr=subprocess.PIPE,
                          env=env)
    said = proc.stderr.splitlines()
    tokens = [line.split()[1:] for line in said if line.startswith(b"resume ")]
    if kill_after is None or len(tokens) < kill_after:
        assert proc.returncode == 0, b"\n".join(said[-3:])
        return None
    assert proc.returncode == -9 and len(tokens) == kill_after, said[-3:]
    return tokens[-1][0].decode(), int(tokens[-1][1])


def gzip_members(data: bytes) -> list[bytes]:
    """A file of gzip members, member by member."""
    out = []
    while data:
        d = zlib.decompressobj(31)
        d.decompress(data)
        assert d.eof, "a gzip member cut short"
        end = len(data) - len(d.unused_data)
        out.append(data[:end])
        data = data[end:]
    return out



def _two_crawls(tmp_path, disks: int = 3):
    """A collection of two WARCs, a month apart, of four hosts (one record of each
    other type too); the disks, and each WARC's records by id."""
    d = make_archive(tmp_path, disks)
    jan = write_warc(tmp_path / "jan.warc.gz", [(f"http://site{i % 4}.org/p{i}", b"<title>jan %d</title>" % i
                                                 + (b" zebra" if i == 7 else b"")) for i in range(40)],
                     every_type=True)
    feb = write_warc(tmp_path / "feb.warc.gz", [(f"http://site{i % 4}.org/p{i}", b"<title>feb %d</title>" % i)
                                                for i in range(40)], date="2024-02-01T12:00:00Z", start=500)
    imp(d[0], jan, check=True)
    imp(d[0], feb, check=True)
    return d, {r["id"]: r for src in (jan, feb) for r in records_of(src)}


def test_a_subset_export_has_the_records_of_the_captures_chosen(tmp_path):
    disks, by_id = _two_crawls(tmp_path)
    for options, chosen in [(["--host", "site2.org"], lambda r: "//site2.org/" in r["uri"]),
                            (["--since", "202402"], lambda r: r["date"].startswith("2024-02")),
                            (["--until", "20240131", "--host", "site3.org"],
                             lambda r: r["date"].startswith("2024-01") and "//site3.org/" in r["uri"]),
                            (["--query", "zebra"], lambda r: r["uri"] == "http://site3.org/p7" and "-01-" in r["date"])]:
        out = tmp_path / "out.warc.gz"
        proc = webfs_here("export-warc", *options, f"{disks[0]}:/c", out)
        got = records_of(out)
        want = [r for r in by_id.values() if r["type"] in ("response", "resource", "revisit") and r["uri"]
                and chosen(r)]
        assert sorted(r["id"] for r in got) == sorted(r["id"] for r in want) and got, options
        assert all(r == by_id[r["id"]] for r in got)
        assert proc.stderr.count(b"resume ") == len(got)
        out.unlink()


def test_a_resumable_export_killed_again_and_again_is_the_whole_export(tmp_path):
    """Killed (SIGKILL after a token) among the records without a capture file
    and among the captures, across --split files: the files, finished, hold the
    members of an uninterrupted export, each once."""
    disks, _ = _two_crawls(tmp_path)
    webfs_here("export-warc", "--resumable", "--split", "4K", f"{disks[0]}:/c", tmp_path / "whole.warc.gz")
    whole = sorted(sum((gzip_members(p.read_bytes()) for p in tmp_path.glob("whole-*.warc.gz")), []))
    token, rng = None, random.Random(26)
    for kill_after in [1, 3, 40, 2, 17, 25, 1, None]:   # 84 records without a capture file, 82 with
        args = ["--resume", token[0]] if token else ["--resumable", "--split", "4K"]
        token = run_until(args + [f"{disks[0]}:/c", tmp_path / "out.warc.gz"], kill_after, command="export-warc")
        if token:                   # what the killed run wrote past its last token is cut off again
            last = sorted(tmp_path.glob("out-*.warc.gz.part"))[-1]
            with open(last, "ab") as f:
                f.write(bytes(rng.randrange(256) for _ in range(100)))
    parts = sorted(tmp_path.glob("out-*.warc.gz"))
    got = sorted(sum((gzip_members(p.read_bytes()) for p in parts), []))
    assert len(parts) > 3 and not list(tmp_path.glob("*.part"))
    assert len(got) == len(whole) == (1 + 80 + 4) + (1 + 80) and got == whole


def test_what_resume_refuses(tmp_path):
    disks, _ = _two_crawls(tmp_path, 2)
    coll, out = f"{disks[0]}:/c", tmp_path / "out.warc.gz"
    token, size = run_until(["--host", "site1.org", coll, out], 3, command="export-warc")
    stream_token = run_until([disks[0]], 1)[0]
    for args, said in [(["--resume", stream_token, coll, out], "a token of webfs stream, not of export-warc"),
                       (["--resume", token, coll, tmp_path / "other.warc.gz"],
                        "the token is of an export of /c into out.warc.gz, not of /c into other.warc.gz"),
                       (["--resume", "bm90IGEgdG9rZW4", coll, out], "not a token printed by export-warc")]:
        assert said in _one_error_line(webfs_here("export-warc", *args, check=False))
    proc = webfs_here("stream", "--resume", token, disks[0], check=False)
    assert "a token of export-warc, not of webfs stream" in _one_error_line(proc)
    for args in (["--resume", token, "--host", "x.org"], ["--order", "source", "--host", "x.org"]):
        assert webfs_here("export-warc", *args, coll, out, check=False).returncode == 2
    part = tmp_path / "out.warc.gz.part"
    part.write_bytes(part.read_bytes()[:100])
    proc = webfs_here("export-warc", "--resume", token, coll, out, check=False)
    assert f"out.warc.gz.part: 100 bytes, fewer than the {size} the token says were written" in \
        _one_error_line(proc)
    part.unlink()
    proc = webfs_here("export-warc", "--resume", token, coll, out, check=False)
    assert "out.warc.gz.part: not there (or not a file)" in _one_error_line(proc)
    assert not out.exists()


def test_a_subset_export_that_fails_keeps_its_part_to_resume(tmp_path):
    """OUT's disk full: the export says so in one line and keeps OUT.part; with
    room again, --resume finishes it as an export that never failed."""
    disks, _ = _two_crawls(tmp_path, 2)
    coll = f"{disks[0]}:/c"
    webfs_here("export-warc", "--since", "2024", coll, tmp_path / "whole.warc.gz")
    small = tmp_path / "small"
    small.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8k", "tmpfs", str(small)], check=True)
    try:
        proc = webfs_here("export-warc", "--since", "2024", coll, small / "out.warc.gz", check=False)
        line = _one_error_line(proc, warnings=sum(ln.startswith(b"resume ") for ln in proc.stderr.splitlines()))
        assert "cannot write: No space left on device; kept" in line and "out.warc.gz.part" in line
        token = proc.stderr.decode().splitlines()[-2].split()[1]
        subprocess.run(["mount", "-o", "remount,size=1m", str(small)], check=True)
        webfs_here("export-warc", "--resume", token, coll, small / "out.warc.gz")
        assert sorted(gzip_members((small / "out.warc.gz").read_bytes())) == \
            sorted(gzip_members((tmp_path / "whole.warc.gz").read_bytes()))
    finally:
        subprocess.run(["umount", "-l", str(small)], check=False)
