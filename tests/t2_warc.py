"""webfs import-warc / export-warc: WARC and ARC in as page trees, faithfully out
again, on archives in temporary directories (DISK:/PATH). Through a mount and
replayed by pywb: t4_warc; an import killed with kill -9: t5_warc."""
from __future__ import annotations

import glob
import gzip
import io
import json
import os
import shutil
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from conftest import BIN, cases, make_archive, tmpfs_disks, webfs, webfs_here
from webfs import urlpath, warc, warcapart, warcread
from webfs.backends import BackendOptions

warcio = pytest.importorskip("warcio")
from warcio.archiveiterator import ArchiveIterator  # noqa: E402
from warcio.statusandheaders import StatusAndHeaders  # noqa: E402
from warcio.warcwriter import WARCWriter  # noqa: E402

SAMPLES = sorted(glob.glob(str(BIN.parent / "sample_archive" / "warcs" / "*")))


# ---------------------------------------------------------------- making WARCs

def _rid(n: int) -> str:
    return f"<urn:uuid:00000000-0000-4000-8000-{n:012d}>"


def write_warc(path: Path, pages, gz: bool = True, date: str = "2024-01-01T12:00:00Z",
               every_type: bool = False, start: int = 1) -> Path:
    """pages: [(url, body)]; with every_type, one record of each WARC type too."""
    n = start
    with open(path, "wb") as f:
        w = WARCWriter(f, gzip=gz)
        info = w.create_warcinfo_record(path.name, {"software": "webfs-tests", "format": "WARC 1.1"})
        info.rec_headers.replace_header("WARC-Record-ID", _rid(n)); n += 1
        w.write_record(info)
        for url, body in pages:
            http = StatusAndHeaders("200 OK", [("Content-Type", "text/html; charset=utf-8"),
                                              ("X-Test", "yes")], protocol="HTTP/1.1")
            rec = w.create_warc_record(url, "response", payload=io.BytesIO(body), http_headers=http,
                                       warc_headers_dict={"WARC-Date": date, "WARC-Record-ID": _rid(n)})
            n += 1
            w.write_record(rec)
            req = w.create_warc_record(url, "request", payload=io.BytesIO(b""),
                                       http_headers=StatusAndHeaders("GET / HTTP/1.1", [("Host", "example.com")],
                                                                     is_http_request=True),
                                       warc_headers_dict={"WARC-Date": date, "WARC-Record-ID": _rid(n)})
            n += 1
            w.write_record(req)
        if every_type:
            url, body = pages[0]
            res = w.create_warc_record("http://example.com/res.txt", "resource", payload=io.BytesIO(b"a resource\n"),
                                       warc_content_type="text/plain",
                                       warc_headers_dict={"WARC-Date": date, "WARC-Record-ID": _rid(n)})
            n += 1
            w.write_record(res)
            meta = w.create_warc_record(url, "metadata", payload=io.BytesIO(b"outlink: http://example.com/x\n"),
                                        warc_content_type="application/warc-fields",
                                        warc_headers_dict={"WARC-Date": date, "WARC-Record-ID": _rid(n)})
            n += 1
            w.write_record(meta)
            conv = w.create_warc_record(url, "conversion", payload=io.BytesIO(b"page 0 as text"),
                                        warc_content_type="text/plain",
                                        warc_headers_dict={"WARC-Date": date, "WARC-Record-ID": _rid(n)})
            n += 1
            w.write_record(conv)
            pd = _digest(body).decode()
            http = StatusAndHeaders("200 OK", [("Content-Type", "text/html; charset=utf-8"), ("X-Test", "yes")],
                                    protocol="HTTP/1.1")
            rev = w.create_revisit_record("http://example.com/copy.html", pd, url, "2024-01-01T12:00:00Z",
                                          http_headers=http)
            rev.rec_headers.replace_header("WARC-Record-ID", _rid(n)); n += 1
            rev.rec_headers.replace_header("WARC-Date", "2024-01-02T12:00:00Z")
            w.write_record(rev)
    return path


def records_of(path) -> list[dict]:
    out = []
    with open(path, "rb") as f:
        for r in ArchiveIterator(f, arc2warc=True):
            h = r.rec_headers
            out.append({"type": r.rec_type, "uri": h.get_header("WARC-Target-URI"),
                        "date": h.get_header("WARC-Date"), "id": h.get_header("WARC-Record-ID"),
                        "http": r.http_headers.to_str() if r.http_headers else None,
                        "payload": r.raw_stream.read()})
    return out


def imp(disk: Path, *warcs, collection="c", check=False, here=True):
    """import-warc --json of ``warcs`` into collection ``collection``: in this
    process (``webfs_here``) unless ``here`` is false (a kill point armed)."""
    run = webfs_here if here else webfs
    proc = run("import-warc", "--json", "--collection", collection, *warcs, f"{disk}:/", check=check)
    return proc, json.loads(proc.stdout)["figures"] if proc.stdout.strip().startswith(b"{") else {}


def tree(disk: Path, path: str = "/") -> warc.DiskTree:
    return warc.DiskTree(str(disk), path, BackendOptions())


# ---------------------------------------------------------------- round trips

@pytest.mark.parametrize("gz", [True, False])
def test_round_trip_every_record_type(tmp_path, gz):
    disks = make_archive(tmp_path, 3)
    pages = [(f"http://example.com/p{i}.html", b"<html>page %d</html>" % i) for i in range(20)]
    src = write_warc(tmp_path / ("a.warc.gz" if gz else "a.warc"), pages, gz=gz, every_type=True)
    proc, fig = imp(disks[0], src, check=True)
    assert fig["records"] == 1 + 40 + 4 and fig["captures"] == 20 + 1 + 1
    assert fig["revisits_resolved"] == 1 and not fig["problems"]
    out = tmp_path / "out.warc.gz"
    res = webfs_here("export-warc", f"{disks[0]}:/c", out)
    assert b"45 records" in res.stdout and b"(100%) byte-identical" in res.stdout
    assert records_of(out) == records_of(src)
    if gz:       # warcio's members made again: the very file, compressed bytes and all
        assert b"45 of them in the very gzip member" in res.stdout
        assert out.read_bytes() == src.read_bytes()
    # every record byte-identical, uncompressed
    got = [r for r in warcread.read_records(str(out))]
    want = [r for r in warcread.read_records(str(src))]
    assert [g.head + g.http + g.payload + g.tail for g in got] == [w.head + w.http + w.payload + w.tail for w in want]


def test_captures_are_files_with_their_fields(tmp_path):
    disks = make_archive(tmp_path, 3)
    pages = [("http://example.com/p0.html", b"<html>zero</html>"), ("http://example.com/a/", b"dir page"),
             ("http://example.com/p0.html", b"<html>zero again</html>")]     # same URL, same second
    src = write_warc(tmp_path / "a.warc.gz", pages, every_type=True)
    imp(disks[0], src, check=True)
    t = tree(disks[0], "/c")
    try:
        stem = urlpath.url_to_path("http://example.com/p0.html").encode()
        assert t.read(stem + b"20240101120000") == b"<html>zero</html>"
        assert t.read(stem + b"20240101120000~2") == b"<html>zero again</html>"
        assert t.read(urlpath.capture_path("http://example.com/a/", "20240101120000").encode()) == b"dir page"
        # the revisit of p0's digest under another URL has p0's bytes, as a reference
        copy = urlpath.capture_path("http://example.com/copy.html", "2024-01-02T12:00:00Z").encode()
        assert t.read(copy) == b"<html>zero</html>"
        ino = t._ino(stem + b"20240101120000")
        x = {n: t.ns.getxattr(ino, n) for n in t.ns.listxattr(ino)}
        assert x[b"user.warc.target-uri"] == b"http://example.com/p0.html"
        assert x[b"user.warc.date"] == b"2024-01-01T12:00:00Z"
        assert x[b"user.warc.record-id"] == _rid(2).encode()
        assert x[b"user.warc.payload-digest"].startswith(b"sha1:")
        assert x[b"user.http.status"] == b"200"
        assert x[b"user.http.content-type"] == b"text/html; charset=utf-8"
        assert [r.sig for r in t.ns.contents(t._ino(copy))] == [r.sig for r in t.ns.contents(ino)]
        assert t.listdir(b"@warc") == [b"a.warc.gz.cdxj", b"a.warc.gz.heads", b"a.warc.gz.index"]
    finally:
        t.close()


def test_rerun_is_a_resume(tmp_path):
    disks = make_archive(tmp_path, 3)
    src = write_warc(tmp_path / "a.warc.gz", [(f"http://e.com/{i}", b"x%d" % i) for i in range(10)])
    imp(disks[0], src, check=True)
    proc, fig = imp(disks[0], src, check=True)
    assert fig["already"] == 10 and fig["files"] == 0
    t = tree(disks[0], "/c")
    try:
        assert t.listdir(b"@warc") == [b"a.warc.gz.cdxj", b"a.warc.gz.heads", b"a.warc.gz.index"]
        assert len(t.listdir(b"http/e.com")) == 10
    finally:
        t.close()


def test_an_import_makes_no_young_collection_of_what_it_keeps(tmp_path):
    """An import keeps each capture's item to its end, so young collections at
    the command's pace (cli.GC_THRESHOLD) walked them again and again (nine an
    import of the bench's WARC, 0.4-0.6 s), and one more after it: an import
    (its modules loaded by one before) makes none, the pace set back after it.
    (With the import's pace at the command's, this import makes two; set back
    without moving what it made to the oldest generation, one.)"""
    import gc
    from webfs import cli, ingest
    disks = make_archive(tmp_path, 3)
    imp(disks[0], write_warc(tmp_path / "first.warc.gz", [("http://example.com/", b"first")]), collection="a",
        check=True)
    pages = [(f"http://example.com/{i}/p.html", b"<html>page %d</html>" % i) for i in range(1500)]
    src = write_warc(tmp_path / "a.warc.gz", pages)
    young = []

    def seen(phase, info):
        if phase == "start" and info["generation"] == 0:
            young.append(ingest.COLLECTOR.imports)
    gc.set_threshold(*cli.GC_THRESHOLD)
    gc.collect()
    gc.callbacks.append(seen)
    try:
        proc, fig = imp(disks[0], src, check=True)
    finally:
        gc.callbacks.remove(seen)
    assert fig["captures"] == 1500 and not fig["problems"]
    assert young == [], f"{len(young)} young collections in the command, {sum(map(bool, young))} during the import"
    assert gc.get_threshold() == cli.GC_THRESHOLD and not ingest.COLLECTOR.imports


def test_two_crawls_store_unchanged_pages_once(tmp_path):
    disks = make_archive(tmp_path, 3)
    pages = [(f"http://site.org/p{i}.html", os.urandom(2000)) for i in range(100)]
    day1 = write_warc(tmp_path / "day1.warc.gz", pages)
    changed = [(u, os.urandom(2000) if i % 50 == 0 else b) for i, (u, b) in enumerate(pages)]
    day2 = write_warc(tmp_path / "day2.warc.gz", changed, date="2024-01-02T12:00:00Z", start=1000)
    _, f1 = imp(disks[0], day1, collection="day1", check=True)
    _, f2 = imp(disks[0], day2, collection="day2", check=True)
    assert f1["captures"] == f2["captures"] == 100
    assert f2["dup_files"] >= 98        # the 98 unchanged pages (request records may add more)
    caps = json.loads(webfs_here("versions", "--json", "http://site.org/p1.html", disks[0]).stdout)
    assert [(c["collection"], c["date"]) for c in caps] == [("day1", "2024-01-01T12:00:00Z"),
                                                            ("day2", "2024-01-02T12:00:00Z")]
    assert caps[0]["same_as"] == caps[1]["same_as"] == 1          # identical
    caps = json.loads(webfs_here("versions", "--json", "http://site.org/p0.html", disks[0]).stdout)
    assert [c["same_as"] for c in caps] == [1, 2]                 # changed
    at = lambda d: webfs_here("url", "--at", d, "http://site.org/p0.html", disks[0]).stdout.decode().strip()
    assert at("2023").startswith("/day1/") and at("2024-01-01T23:59:59Z").startswith("/day1/")
    assert at("20240102").startswith("/day1/")     # a tie: the earlier
    assert at("2024010213").startswith("/day2/") and at("2030").startswith("/day2/")
    assert webfs_here("url", "http://site.org/nothing", disks[0], check=False).returncode == 1


def test_any_spelling_of_a_url_finds_its_page(tmp_path):
    """As pywb: the scheme swapped, :80 added, the host upper-cased, the trailing
    slash added or dropped, www. added or dropped all find the page; the exact
    spelling is chosen first, and the one chosen is said."""
    disks = make_archive(tmp_path, 3)
    src = tmp_path / "a.warc"
    src.write_bytes(_one(b"http://www.iana.org/", b"home") + _one(b"http://example.org/a/", b"a")
                    + _one(b"http://example.org/b", b"b", date=b"2014-01-27T00:00:00Z")
                    + _one(b"https://example.org/b", b"b2", date=b"2015-01-27T00:00:00Z")
                    + _one(b"http://example.net", b"net"))
    imp(disks[0], src, check=True)
    home = "/c/" + urlpath.capture_path("http://www.iana.org/", "20240101120000")
    for spelling in ("http://www.iana.org", "https://www.iana.org/", "http://IANA.org:80/", "http://iana.org",
                     "HTTPS://WWW.IANA.ORG:443"):
        proc = webfs_here("url", spelling, disks[0])
        assert proc.stdout.decode().strip() == home, spelling
        assert f"no capture of {spelling} as written; chose the spelling http://www.iana.org/" in proc.stderr.decode()
    a = "/c/" + urlpath.capture_path("http://example.org/a/", "20240101120000")
    for spelling in ("http://example.org/a", "http://www.example.org/a/", "http://example.org:80/a"):
        assert webfs_here("url", spelling, disks[0]).stdout.decode().strip() == a, spelling
    net = "/c/" + urlpath.capture_path("http://example.net", "20240101120000")
    for spelling in ("http://example.net/", "https://www.example.net/", "http://EXAMPLE.net:80"):
        assert webfs_here("url", spelling, disks[0]).stdout.decode().strip() == net, spelling
    # the exact spelling first, the other one named
    proc = webfs_here("url", "http://example.org/b", disks[0])
    assert proc.stdout.decode().strip().endswith("/c/http/example.org/b@20140127000000")
    assert "besides http://example.org/b: https://example.org/b (1 capture)" in proc.stderr.decode()
    caps = json.loads(webfs_here("versions", "--json", "http://example.org/b", disks[0]).stdout)
    assert [(c["url"], c["exact"]) for c in caps] == [("http://example.org/b", True), ("https://example.org/b", False)]
    proc = webfs_here("url", "http://example.org/nothing", disks[0], check=False)
    assert proc.returncode == 1 and "no capture of http://example.org/nothing, under any spelling" in proc.stderr.decode()


def test_url_at_dates_as_written(tmp_path):
    """--at takes ISO 8601 with a zone and fractions, and WARC timestamps; a bad
    date is refused in one line (exit 2), not a traceback."""
    disks = make_archive(tmp_path, 3)
    src = tmp_path / "a.warc"
    src.write_bytes(_one(b"http://e.org/", b"1", date=b"2014-01-27T00:00:00Z")
                    + _one(b"http://e.org/", b"2", date=b"2014-01-27T10:00:00Z"))
    imp(disks[0], src, check=True)
    at = lambda d: webfs_here("url", "--at", d, "http://e.org/", disks[0]).stdout.decode().strip()[-14:]
    assert at("2014-01-27T04:59:59+05:00") == "20140127000000"     # 23:59:59 the day before, UTC
    assert at("2014-01-27T10:00:00+05:00") == "20140127000000"     # 05:00 UTC: nearer the first
    assert at("2014-01-27T05:00:00.5Z") == "20140127100000"        # half a second past the middle
    assert at("20140127093000") == "20140127100000" and at("2014") == "20140127000000"
    for bad, says in (("2014-13", "month must be in 1..12"), ("2014-01-27T00:00:00+5", "not a date")):
        proc = webfs_here("url", "--at", bad, "http://e.org/", disks[0], check=False)
        assert proc.returncode == 2 and says in proc.stderr.decode() and b"Traceback" not in proc.stderr


@pytest.mark.skipif(not SAMPLES, reason="pywb's sample archive is not installed")
def test_pywb_samples_round_trip(tmp_path, capsys):
    disks = make_archive(tmp_path, 3)
    total = same = same_gz = 0
    for i, src in enumerate(cases(SAMPLES)):
        name = os.path.basename(src)
        proc, fig = imp(disks[0], src, collection=f"s{i}")
        if "bad" in name:
            assert proc.returncode == 4
            continue
        out = tmp_path / f"{i}.warc.gz"
        res = webfs_here("export-warc", f"{disks[0]}:/s{i}", out)
        got, want = records_of(out), records_of(src)
        assert len(got) == len(want), name
        for g, w in zip(got, want):
            if name.endswith((".arc", ".arc.gz")):
                w = dict(w, id=g["id"])              # ARC records have no record ids: made up
                if w["type"] == "warcinfo":          # warcio drops the ARC file header's text; we keep it
                    w = dict(w, payload=g["payload"])
            assert g == w, name
        words = res.stdout.split()
        total += int(words[1])
        same += int(words[words.index(b"byte-identical") - 2].rstrip(b";"))
        same_gz += int(words[words.index(b"very") - 5])
        print(name, res.stdout.decode().strip())
    print(f"pywb samples: {same} of {total} records byte-identical, {same_gz} in the very gzip member")
    assert total > 0


# ---------------------------------------------------------------- hostile input

def _one(url=b"http://example.com/x", body=b"body", date=b"2024-01-01T12:00:00Z", eol=b"\r\n",
         length=None, digest=None) -> bytes:
    http = b"HTTP/1.1 200 OK" + eol + b"Content-Type: text/plain" + eol + eol
    block = http + body
    h = [b"WARC/1.0", b"WARC-Type: response", b"WARC-Target-URI: " + url, b"WARC-Date: " + date,
         b"WARC-Record-ID: <urn:uuid:" + os.urandom(4).hex().encode() + b">",
         b"Content-Type: application/http; msgtype=response",
         b"Content-Length: " + str(len(block) if length is None else length).encode()]
    if digest:
        h.append(b"WARC-Payload-Digest: " + digest)
    return eol.join(h) + eol + eol + block + b"\r\n\r\n"


def _gz(data: bytes) -> bytes:
    return gzip.compress(data, mtime=0)       # the same bytes each time (the good record is looked for)


GOOD = _one(b"http://example.com/good", b"good page")
HOSTILE = {
    "whole-file-gzip": (_gz(GOOD + _one(b"http://example.com/2")), "whole-file gzip"),
    "gzip-cut": (_gz(GOOD) + _gz(_one(b"http://example.com/cut", b"y" * 5000))[:60], "offset"),
    "plain-cut": (GOOD + _one(b"http://example.com/cut", b"y" * 500)[:300], "offset"),
    "wrong-length": (_one(b"http://example.com/wl", b"0123456789", length=3) + GOOD, "Content-Length"),
    "garbage-first": (b"GARBAGE\n" * 10 + GOOD, "offset 0"),
    "empty": (b"", "empty file"),
    "bad-digest": (_one(digest=b"sha1:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA") + GOOD, "does not match"),
    "angle-uri": (_one(b"<http://example.com/angle>") + GOOD, "written as"),
    "crcrlf": (_one(b"http://example.com/crcr", eol=b"\r\r\n") + GOOD, ""),
    "arc-minus-one": (b"http://example.com/a 1.2.3.4 20240101120000 text/html -1\nHTTP/1.0 200 OK\n\nhi\n"
                      + b"http://example.com/b 1.2.3.4 20240101120000 text/html 2\nhi\n", "offset"),
    "arc-nan": (b"http://example.com/a 1.2.3.4 20240101120000 text/html many\nHTTP/1.0 200 OK\n\nhi\n", "offset"),
    "dots": (_one(b"http://example.com/a/../../../etc/passwd") + _one(b"http://example.com/%2F..%2F/%00")
             + GOOD, ""),
    "long": (_one(b"http://example.com/" + b"a" * 5000) + GOOD, ""),
    "nfc-nfd": (_one("http://example.com/caf\u00e9".encode()) + _one("http://example.com/cafe\u0301".encode())
                + GOOD, ""),
}


# The same, gzipped per record (the usual .warc.gz): read by import-warc's
# reading process (webfs.warcapart.read_records_apart), not in the command.
for _case in ("wrong-length", "bad-digest", "angle-uri", "crcrlf", "dots", "long", "nfc-nfd"):
    _records = {"wrong-length": [_one(b"http://example.com/wl", b"0123456789", length=3), GOOD],
                "bad-digest": [_one(digest=b"sha1:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"), GOOD],
                "angle-uri": [_one(b"<http://example.com/angle>"), GOOD],
                "crcrlf": [_one(b"http://example.com/crcr", eol=b"\r\r\n"), GOOD],
                "dots": [_one(b"http://example.com/a/../../../etc/passwd"), _one(b"http://example.com/%2F..%2F/%00"),
                         GOOD],
                "long": [_one(b"http://example.com/" + b"a" * 5000), GOOD],
                "nfc-nfd": [_one("http://example.com/caf\u00e9".encode()), _one("http://example.com/cafe\u0301".encode()),
                            GOOD]}[_case]
    HOSTILE["gz-" + _case] = (b"".join(_gz(r) for r in _records), HOSTILE[_case][1])
DEEP = b"http://example.com/" + b"a/" * 2000 + b"end"            # 2,000 segments: no recursion on the way
UNENDED = b"WARC/1.0\r\nWARC-Type: response\r\nWARC-Target-URI: http://example.com/u\r\nContent-Length: 5\r\n"
HOSTILE["deep"] = (_one(DEEP) + GOOD, "")
HOSTILE["gz-deep"] = (_gz(_one(DEEP)) + _gz(GOOD), "")
HOSTILE["gz-unended-header"] = (_gz(GOOD) + _gz(UNENDED) + _gz(GOOD.replace(b"/good", b"/after")),
                                "its WARC header never ends")
HOSTILE["no-length"] = (b"WARC/1.0\r\nWARC-Type: response\r\n\r\nabc\r\n\r\n" + GOOD, "its WARC header has no Content-Length")
HOSTILE["gz-garbage-between"] = (_gz(GOOD) + b"GARBAGE\n" * 10 + _gz(_one(b"http://example.com/after")), "offset")


@pytest.fixture(scope="session")
def kept_before(tmp_path_factory) -> list[Path]:
    """A 3-disk archive holding one collection, before, imported once: each
    hostile case imports into its own copy (cp -a of the disks)."""
    root = tmp_path_factory.mktemp("kept-before")
    disks = make_archive(root, 3)
    keep = write_warc(root / "keep.warc.gz", [("http://example.com/kept", b"kept before")])
    imp(disks[0], keep, collection="before", check=True)
    return disks


def test_well_formed_records_are_read_without_warcio(tmp_path):
    """A file of well-formed records, gzipped per record or plain, is read
    without loading warcio (it was loaded before the first record, a seventh
    of an import's reading process's start); a record that is not well-formed
    loads it, and warcio reads on from there (test_hostile_input)."""
    one, two = _one(), _one(b"http://example.com/y")
    (tmp_path / "a.warc.gz").write_bytes(gzip.compress(one) + gzip.compress(two))
    (tmp_path / "b.warc").write_bytes(one + two)
    (tmp_path / "c.warc").write_bytes(one + b"not a record\r\n\r\n" + two)
    code = ("import sys; from webfs.warcread import Record, read_records; "
            "n = sum(isinstance(r, Record) for r in read_records(sys.argv[1])); print(n, 'warcio' in sys.modules)")
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parent.parent))
    said = {name: subprocess.run([sys.executable, "-c", code, str(tmp_path / name)], env=env, check=True,
                                 capture_output=True, text=True).stdout.split()
            for name in ("a.warc.gz", "b.warc", "c.warc")}
    assert said == {"a.warc.gz": ["2", "False"], "b.warc": ["2", "False"], "c.warc": ["2", "True"]}


def test_digest_check_reads_base32_as_b32decode_does():
    """A WARC-Payload-Digest in base32 is read without base64.b32decode where
    it is whole 5-byte groups (warcread._base32_is): the same answer for a
    right, wrong, lower-case, padded or malformed digest, SHA-1 or SHA-256."""
    import base64
    import hashlib
    for n in range(200):
        data = os.urandom(n)
        for algo in ("sha1", "sha256"):
            good = base64.b32encode(hashlib.new(algo, data).digest())
            other = base64.b32encode(hashlib.new(algo, data + b"x").digest())
            for text, want in ((good, True), (good.lower(), True), (good.rstrip(b"="), True), (other, False),
                               (good.rstrip(b"=")[:-1], False), (good[:8] + b"1" + good[9:], False),
                               (good[:8] + b"_" + good[9:], False), (b" " + good[1:], False),
                               (b"0" * len(good), False)):
                check = warcread.DigestCheck(algo.encode() + b":" + text)
                check.update(data)
                assert check.matches() is want, (algo, text)


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_input(tmp_path, case, kept_before):
    disks = [tmp_path / d.name for d in kept_before]
    for pristine, copy in zip(kept_before, disks):
        shutil.copytree(pristine, copy, symlinks=True)
    data, says = HOSTILE[case]
    src = tmp_path / f"{case}.warc"
    src.write_bytes(data)
    proc, fig = imp(disks[0], src, collection="c")
    text = (proc.stdout + proc.stderr).decode()
    assert proc.returncode in (0, 4), text
    if says:
        assert proc.returncode == 4 and says in text, text
        assert str(src) in text
    t = tree(disks[0])
    try:
        assert t.listdir(b"") == [b"before", b"c"]           # nothing outside the collection
        assert t.read(b"before/" + urlpath.capture_path("http://example.com/kept",
                                                        "20240101120000").encode()) == b"kept before"
        if GOOD in data or _gz(GOOD) in data:
            assert t.read(b"c/" + urlpath.capture_path("http://example.com/good",
                                                       "20240101120000").encode()) == b"good page"
    finally:
        t.close()
    assert "internal error" not in text and "Traceback" not in text, text
    if case in ("dots", "long", "nfc-nfd", "gz-dots", "gz-long", "gz-nfc-nfd", "deep", "gz-deep"):
        raw = gzip.decompress(data) if case.startswith("gz-") else data
        assert fig["captures"] == raw.count(b"WARC/1.0")
        out = tmp_path / "out.warc.gz"
        webfs_here("export-warc", f"{disks[0]}:/c", out)
        assert [r["uri"] for r in records_of(out)] == [r["uri"] for r in records_of(src)]


def test_revisits_are_not_counted_as_duplicates(tmp_path):
    """A first import of distinct pages and a revisit: no duplicates (a revisit
    was counted as one, at its original's size), one revisit resolved."""
    disks = make_archive(tmp_path, 3)
    src = write_warc(tmp_path / "a.warc.gz", [("http://example.com/", b"x" * 100_000)], every_type=True)
    proc, fig = imp(disks[0], src, check=True)
    assert (fig["dup_files"], fig["dup_bytes"], fig["revisits_resolved"]) == (0, 0, 1), fig


def test_duplicates_and_new_blocks_are_the_captures_not_the_kept_files(tmp_path):
    """The summary's duplicates and new blocks count captures: not the files
    kept in @warc/ (index, heads, CDXJ), though they go through the same
    store (an empty file's, a copy's under another name: the same bytes)."""
    disks = make_archive(tmp_path, 3)
    src = write_warc(tmp_path / "a.warc.gz", [(f"http://example.com/{i}", os.urandom(500)) for i in range(3)])
    shutil.copy(src, tmp_path / "copy.warc.gz")
    for name in ("empty.warc.gz", "empty2.warc.gz"):
        (tmp_path / name).write_bytes(b"")
    _, first = imp(disks[0], src, collection="a", check=True)
    assert (first["captures"], first["dup_files"], first["dup_bytes"], first["new_blocks"]) == (3, 0, 0, 3), first
    proc, again = imp(disks[0], tmp_path / "copy.warc.gz", collection="b", check=True)
    assert (again["captures"], again["dup_files"], again["dup_bytes"], again["new_blocks"]) == (3, 3, 1500, 0), again
    for name in ("empty.warc.gz", "empty2.warc.gz"):
        proc = webfs_here("import-warc", "--collection", name[:-8], tmp_path / name, f"{disks[0]}:/", check=False)
        out = proc.stdout.decode()
        assert proc.returncode == 4 and "0 captures (0 B) were duplicates" in out, out
        assert "; 0 new blocks of captures" in out, out


def test_damage_is_said_in_words_without_binary(tmp_path):
    """A damaged record is said in words, with its file and offset: a
    Content-Length past the end of the file (warcio failed on the record, a
    response without WARC-Target-URI, with an AttributeError), a gzip member
    that does not inflate (warcio quoted hundreds of its bytes); never an
    exception's name, never raw binary; the records after it are read."""
    disks = make_archive(tmp_path, 3)
    huge = tmp_path / "huge.warc"
    huge.write_bytes(b"WARC/1.0\r\nWARC-Type: response\r\nContent-Length: 99999999999\r\n\r\nabc")
    members = [_gz(_one(b"http://example.com/a", b"a" * 400)), _gz(_one(b"http://example.com/b", b"b" * 400)), _gz(GOOD)]
    flipped = bytearray(b"".join(members))
    flipped[len(members[0]) + 10] |= 0x06            # the second member's first deflate block: of no type
    damaged = tmp_path / "damaged.warc.gz"
    damaged.write_bytes(flipped)
    for src, offset, says in ((huge, 0, "Content-Length 99999999999 runs past the end of the file"),
                              (damaged, len(members[0]), "not a WARC or ARC record (its gzip member is damaged")):
        proc = webfs_here("import-warc", "--collection", src.name.split(".")[0], src, f"{disks[0]}:/", check=False)
        err = proc.stderr.decode("utf-8", "replace")
        assert proc.returncode == 4 and f"{src}: offset {offset}: " in err and says in err, err
        for line in err.splitlines():
            assert line.isprintable() and line.isascii() and len(line) < 300, line
            assert not any(word in line for word in ("Error", "ArchiveLoadFailed", "NoneType", "first line: [")), line
    t = tree(disks[0])
    try:
        assert t.read(b"damaged/" + urlpath.capture_path("http://example.com/good",
                                                         "20240101120000").encode()) == b"good page"
    finally:
        t.close()


def test_problems_are_said_once_on_stderr(tmp_path):
    """Each problem is said once, on stderr as it is met; the summary (stdout)
    counts them."""
    disks = make_archive(tmp_path, 3)
    src = tmp_path / "a.warc"
    src.write_bytes(_one(digest=b"sha1:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA") + GOOD)
    proc = webfs_here("import-warc", "--collection", "c", src, f"{disks[0]}:/", check=False)
    said = "does not match the payload; imported as read"
    assert proc.returncode == 4 and proc.stderr.decode().count(said) == 1, proc.stderr
    assert said not in proc.stdout.decode() and "1 problem(s), each said on stderr above" in proc.stdout.decode()


# ---------------------------------------------------------------- without webfs

def test_records_come_back_without_webfs(tmp_path):
    """webfs-recover gets the collection's files back; webfs-warc-rebuild (sh,
    coreutils, gzip) writes the source's records from them, byte for byte."""
    import subprocess
    from conftest import REPO
    disks = make_archive(tmp_path, 3)
    pages = [(f"http://example.com/p{i}.html", b"<html>page %d</html>" % i) for i in range(5)]
    src = write_warc(tmp_path / "a.warc.gz", pages, every_type=True)
    imp(disks[0], src, check=True)
    arc = SAMPLES and [s for s in SAMPLES if s.endswith("example.arc.gz")]
    if arc:
        imp(disks[0], arc[0], check=True)
    out = tmp_path / "recovered"
    subprocess.run(["sh", str(REPO / "tools" / "webfs-recover"), *map(str, disks), str(out)],
                   check=True, capture_output=True, env={"PATH": "/usr/bin:/bin"})
    for name, source in [("a.warc.gz", src)] + ([("example.arc.gz", arc[0])] if arc else []):
        for ext in ("warc", "warc.gz"):
            rebuilt = tmp_path / f"rebuilt-{name}.{ext}"
            subprocess.run(["sh", str(REPO / "tools" / "webfs-warc-rebuild"), str(out / "c"), name, str(rebuilt)],
                           check=True, capture_output=True, env={"PATH": "/usr/bin:/bin"})
            got = [r.head + r.http + r.payload + r.tail for r in warcread.read_records(str(rebuilt))]
            want = [r.head + r.http + r.payload + r.tail for r in warcread.read_records(str(source))]
            assert got == want and len(got) > 1, name
    # a capture that cannot be read: said, exit 1, not a short record and exit 0
    (out / "c" / urlpath.capture_path(pages[1][0], "20240101120000")).unlink()
    proc = subprocess.run(["sh", str(REPO / "tools" / "webfs-warc-rebuild"), str(out / "c"), "a.warc.gz",
                           str(tmp_path / "short.warc")], capture_output=True, env={"PATH": "/usr/bin:/bin"})
    assert proc.returncode == 1 and b"cannot be read" in proc.stderr and b"is incomplete" in proc.stderr
    assert not (tmp_path / "short.warc").exists() and list(tmp_path.glob("short.warc.*")) == []


def test_duplicates_full_writes_revisits_as_responses(tmp_path):
    disks = make_archive(tmp_path, 3)
    pages = [("http://example.com/p0.html", b"<html>zero</html>")]
    src = write_warc(tmp_path / "a.warc.gz", pages, every_type=True)
    imp(disks[0], src, check=True)
    out = tmp_path / "full.warc.gz"
    res = webfs_here("export-warc", "--duplicates", "full", f"{disks[0]}:/c", out)
    assert b"byte-identical" in res.stdout
    got = {r["uri"]: r for r in records_of(out) if r["type"] == "response"}
    copy = got["http://example.com/copy.html"]
    assert copy["payload"] == b"<html>zero</html>" and copy["id"] == _rid(7)
    assert [r["type"] for r in records_of(out)].count("revisit") == 0


# ---------------------------------------------------------------- revisits and long records

def test_revisit_before_its_original_is_resolved_at_the_end(tmp_path):
    import base64
    import hashlib
    disks = make_archive(tmp_path, 3)
    body = b"<html>the original</html>"
    digest = "sha1:" + base64.b32encode(hashlib.sha1(body).digest()).decode()
    http = StatusAndHeaders("200 OK", [("Content-Type", "text/html")], protocol="HTTP/1.1")
    src = tmp_path / "a.warc.gz"
    with open(src, "wb") as f:
        w = WARCWriter(f, gzip=True)
        rev = w.create_revisit_record("http://example.com/again.html", digest, "http://example.com/orig.html",
                                      "2024-01-03T12:00:00Z", http_headers=http)
        rev.rec_headers.replace_header("WARC-Date", "2024-01-02T12:00:00Z")
        w.write_record(rev)
        w.write_record(w.create_warc_record("http://example.com/orig.html", "response", payload=io.BytesIO(body),
                                            http_headers=http, warc_headers_dict={"WARC-Date": "2024-01-03T12:00:00Z"}))
    _, fig = imp(disks[0], src, check=True)
    assert (fig["revisits_resolved"], fig["revisits_unresolved"], fig["problems"]) == (1, 0, [])
    t = tree(disks[0], "/c")
    try:
        again = urlpath.capture_path("http://example.com/again.html", "2024-01-02T12:00:00Z").encode()
        orig = urlpath.capture_path("http://example.com/orig.html", "2024-01-03T12:00:00Z").encode()
        assert t.read(again) == body
        assert [r.sig for r in t.ns.contents(t._ino(again))] == [r.sig for r in t.ns.contents(t._ino(orig))]
    finally:
        t.close()
    out = tmp_path / "out.warc.gz"
    assert b"(100%) byte-identical" in webfs_here("export-warc", f"{disks[0]}:/c", out).stdout


@pytest.mark.parametrize("gz", [True, False])
def test_a_record_longer_than_memory_allows_is_streamed(tmp_path, gz):
    """A 48 MiB record (pieces of 64 KiB) is imported without being held in
    memory: the import's peak RSS stays far below the record, and it comes back."""
    import subprocess
    disks = make_archive(tmp_path, 3, max_block=65536)
    chunk = os.urandom(1 << 20)
    body = chunk * 48
    src = write_warc(tmp_path / ("big.warc.gz" if gz else "big.warc"), [("http://example.com/big.bin", body),
                                                                       ("http://example.com/after", b"after")], gz=gz)
    small = write_warc(tmp_path / "small.warc", [("http://example.com/small", b"small")], gz=gz)

    def peak_kib(warc_file, collection):
        proc = subprocess.run(["/usr/bin/time", "-f", "maxrss %M", str(BIN / "webfs"), "import-warc",
                               "--collection", collection, str(warc_file), f"{disks[0]}:/"],
                              capture_output=True, check=True)
        return int(proc.stderr.decode().rsplit("maxrss ", 1)[1].split()[0])
    base, peak = peak_kib(small, "small"), peak_kib(src, "c")
    assert peak - base < 24 * 1024, f"peak RSS {peak} KiB for a 48 MiB record, {base} KiB for a small one"
    t = tree(disks[0], "/c")
    try:
        stem = urlpath.capture_path("http://example.com/big.bin", "20240101120000").encode()
        assert len(t.ns.contents(t._ino(stem))) == 48 * 16
        assert t.read(stem) == body
    finally:
        t.close()


def test_a_revisit_whose_original_never_comes_is_kept_and_reported(tmp_path):
    disks = make_archive(tmp_path, 3)
    http = StatusAndHeaders("200 OK", [("Content-Type", "text/html")], protocol="HTTP/1.1")
    src = tmp_path / "a.warc.gz"
    with open(src, "wb") as f:
        w = WARCWriter(f, gzip=True)
        w.write_record(w.create_revisit_record("http://example.com/gone.html", "sha1:" + "A" * 32,
                                               "http://example.com/gone.html", "2024-01-01T12:00:00Z",
                                               http_headers=http))
    proc, fig = imp(disks[0], src)
    assert proc.returncode == 4 and (fig["revisits_resolved"], fig["revisits_unresolved"]) == (0, 1)
    assert any("is not here" in p for p in fig["problems"])
    t = tree(disks[0], "/c")
    try:
        [name] = t.listdir(b"http/example.com")
        assert t.ns.getxattr(t._ino(b"http/example.com/" + name), b"user.warc.revisit") == b"unresolved"
    finally:
        t.close()


def test_disks_full_mid_import_then_room_made_and_run_again(tmp_path):
    """Captures that find no room are each reported; those stored read back
    whole; with room made (tmpfs grown), the same import finishes the rest."""
    pages = [(f"http://example.com/big{i}.bin", os.urandom(150_000)) for i in range(40)]
    src = write_warc(tmp_path / "big.warc.gz", pages)
    (tmp_path / "disks").mkdir()
    with tmpfs_disks(tmp_path / "disks", 3, "2m") as disks:
        proc, fig = imp(disks[0], src)
        text = (proc.stdout + proc.stderr).decode()
        assert proc.returncode == 4, text
        full = [p for p in fig["problems"] if "no disk has room" in p]
        assert full and fig["files"] < 40, text
        t = tree(disks[0], "/c")
        try:
            names = t.listdir(b"http/example.com")
            bodies = dict(pages)
            for name in names:
                path = b"http/example.com/" + name
                assert t.read(path) == bodies[urlpath.path_to_url(os.fsdecode(path))]
        finally:
            t.close()
        assert 0 < len(names) < 40
        for d in disks:
            subprocess.run(["mount", "-o", "remount,size=16m", str(d)], check=True)
        proc, fig = imp(disks[0], src)
        assert proc.returncode == 0, (proc.stdout + proc.stderr).decode()
        out = tmp_path / "out.warc.gz"
        res = webfs_here("export-warc", f"{disks[0]}:/c", out)
        assert b"(100%) byte-identical" in res.stdout
        assert records_of(out) == records_of(src)


def test_a_payload_whose_source_got_shorter_is_an_error(tmp_path):
    f = tmp_path / "source.warc"
    f.write_bytes(b"a" * 100)
    fd = os.open(f, os.O_RDONLY)
    payload = warcread.Payload(fd, 10, 80)
    os.close(fd)
    f.write_bytes(b"a" * 50)
    with pytest.raises(OSError, match="shorter"):
        list(payload.pieces(32))


# ---------------------------------------------------------------- the reading process

def _digest(body: bytes) -> bytes:
    import base64
    import hashlib
    return b"sha1:" + base64.b32encode(hashlib.sha1(body).digest())


def _per_record_gzip(path: Path, count: int) -> tuple[Path, dict]:
    """A per-record gzip WARC of ``count`` small captures, one longer than the reading
    process keeps in memory (SPILL_AT), one with a wrong digest, one with a wrong
    Content-Length (warcio reads from there on); and the digest verdict of each URL."""
    records, verdicts = [], {}
    for i in range(count):
        url, body = b"http://example.com/%d" % i, b"page %d " % i * 40
        digest, verdict = _digest(body), True
        if i == 2:
            body = b"x" * (warcread.SPILL_AT + 100)
            digest = _digest(body)
        if i == 5:
            digest, verdict = b"sha1:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", False
        records.append(_one(url, body, digest=digest, length=3 if i == count - 10 else None))
        verdicts[url] = verdict
    path.write_bytes(b"".join(_gz(r) for r in records))
    return path, verdicts


def _as_read(rec) -> tuple:
    if isinstance(rec, warcread.Problem):
        return ("problem", rec.offset, rec.text)
    return (rec.offset, rec.length, rec.rtype, rec.head, rec.http, b"".join(warcread.payload_pieces(rec.payload, 1 << 20)),
            rec.tail, rec.gzip, rec.fields)


def _preparing(sign=True, catalog=None) -> warcapart.Preparing:
    return warcapart.Preparing(1 << 20, sign, "gzip", 3, catalog)


def test_the_reading_process_gives_the_records_prepared(tmp_path):
    """read_records_apart (a process of its own) gives what read_records gives, in
    order: the long record read again here; each capture of at most a block signed,
    its digest checked (the wrong one said to be wrong) and encoded as the store
    would, once per signature, and not when a block in the catalog has it."""
    from webfs import codecs
    from webfs.signature import signature
    src, verdicts = _per_record_gzip(tmp_path / "a.warc.gz", 150)
    want = [_as_read(r) for r in warcread.read_records(str(src))]
    got = list(warcapart.read_records_apart(str(src), _preparing()))
    assert [_as_read(r) for r in got] == want
    long = [r for r in got if isinstance(r, warcread.Record) and isinstance(r.payload, warcread.Payload)]
    assert len(long) == 1 and long[0].prepared is None
    prepared = [r for r in got if isinstance(r, warcread.Record) and r is not long[0]]
    assert len(prepared) == 148        # and the one with a wrong Content-Length is unreadable
    for r in prepared:
        assert r.prepared == (signature(r.payload), verdicts[r.fields[b"warc-target-uri"]],
                              codecs.encode(r.payload, "gzip", 3))
    unsigned = list(warcapart.read_records_apart(str(src), _preparing(sign=False)))
    assert {r.prepared[0] for r in unsigned if isinstance(r, warcread.Record) and r.prepared} == {None}

    # Twice the same page, and a page whose block is in the catalog: encoded once, and not at all.
    import sqlite3
    cat = tmp_path / "catalog.db"
    db = sqlite3.connect(cat)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("CREATE TABLE blocks (sig BLOB)")         # 16 bytes, as the catalog keeps it
    db.execute("INSERT INTO blocks VALUES (?)", (bytes.fromhex(signature(b"stored before")),))
    db.commit()
    twice = tmp_path / "b.warc.gz"
    twice.write_bytes(b"".join(_gz(_one(b"http://example.com/%d" % i, body))
                               for i, body in enumerate([b"same", b"same", b"stored before"])))
    got = [r.prepared for r in warcapart.read_records_apart(str(twice), _preparing(catalog=str(cat)))]
    assert [p[2] is not None for p in got] == [True, False, False]
    db.close()
    # A catalog it cannot read: every new signature is encoded (the import would do it otherwise).
    got = [r.prepared for r in warcapart.read_records_apart(str(twice), _preparing(catalog=str(tmp_path / "none.db")))]
    assert [p[2] is not None for p in got] == [True, False, True]


def test_the_reading_process_files_captures_and_prepares_their_documents(tmp_path):
    """Each capture comes filed by the reading process (capture.file_record:
    the same as the importing process would file it), and an encoded page
    prepared as its file shows it: its document signed and encoded, its
    digest checked over the entity as recorded; a page that does not decode
    prepared as recorded."""
    from webfs import capture, codecs
    from webfs.signature import signature
    doc = b"<html>the page itself</html>" * 20

    def encoded(url: bytes, coding: bytes, entity: bytes) -> bytes:
        http = b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n" + coding + b"\r\n\r\n"
        block = http + entity
        head = [b"WARC/1.0", b"WARC-Type: response", b"WARC-Target-URI: " + url,
                b"WARC-Date: 2024-01-01T12:00:00Z", b"WARC-Record-ID: <urn:uuid:%s>" % url[-2:].hex().encode(),
                b"WARC-Payload-Digest: " + _digest(entity), b"Content-Length: %d" % len(block)]
        return b"\r\n".join(head) + b"\r\n\r\n" + block + b"\r\n\r\n"
    docs = [doc + b"%d" % i for i in range(4)]             # each its own signature: each encoded
    chunked = b"%x\r\n" % len(docs[1]) + docs[1] + b"\r\n0\r\n\r\n"
    src = tmp_path / "a.warc.gz"
    src.write_bytes(b"".join(_gz(r) for r in [
        encoded(b"http://example.com/gz", b"Content-Encoding: gzip", gzip.compress(docs[0])),
        encoded(b"http://example.com/ch", b"Transfer-Encoding: chunked", chunked),
        encoded(b"http://example.com/bad", b"Content-Encoding: gzip", gzip.compress(docs[2])[:40]),
        encoded(b"<http://example.com/plain>", b"X-Plain: yes", docs[3])]))
    got = list(warcapart.read_records_apart(str(src), _preparing()))
    here = list(warcread.read_records(str(src)))
    assert len(got) == len(here) == 4
    for r, h in zip(got, here):
        assert r.filed == capture.file_record(h) and r.filed.unfiled is None
        assert (r.document, r.undecoded) == (h.document, h.undecoded)
        shown = r.payload if r.document is None else r.document
        assert r.prepared == (signature(shown), True, codecs.encode(shown, "gzip", 3))
    assert [r.document for r in got] == [docs[0], docs[1], None, None]
    assert "does not decode" in got[2].undecoded
    assert got[3].filed.uri == b"http://example.com/plain"


def test_the_reading_process_makes_new_blocks_directories_where_they_go(tmp_path):
    """The reading process makes the placement group directory of each new
    capture's block ahead of the import, on the disk the store then writes it
    to: a group mapped away from its home (as cooling leaves one) on the disk
    it is mapped to, no directory left empty, and a disk whose root is gone
    not made again."""
    import shutil
    import sqlite3
    from webfs.assembly import open_archive
    from webfs.placement import home_disk, ranked_disks
    from webfs.signature import group_of, signature
    disks = make_archive(tmp_path, 4)
    pages = [(f"http://site.org/p{i}.html", os.urandom(1500)) for i in range(200)]
    store = open_archive(str(disks[0]))
    depth, conf_disks = store.conf.depth, [(d.index, d.uuid, d.weight) for d in store.conf.disks]
    store.close()
    moved = group_of(signature(pages[7][1]), depth)
    home = home_disk(moved, conf_disks)
    there = next(d for d in (1, 2, 0) if d != home)
    db = sqlite3.connect(disks[0] / "meta" / "catalog.db")
    db.execute("INSERT INTO groups (grp, disk, home) VALUES (?, ?, ?)", (moved, there, home))
    db.commit()
    db.close()
    shutil.rmtree(disks[3])
    src = write_warc(tmp_path / "a.warc.gz", pages)

    def leaves() -> dict[str, Path]:
        found = {}
        for disk in disks[:3]:
            for leaf in (disk / "blocks").glob("/".join(["*"] * (depth - 1))):
                found["".join(leaf.relative_to(disk / "blocks").parts)] = leaf
        return found

    # The reading process alone, disk 3 gone since the import began: a directory
    # for every page, on its disk, but for those whose disk is the one gone.
    preparing = warcapart.Preparing(1 << 20, True, "gzip", 3, str(disks[0] / "meta" / "catalog.db"), depth,
                                   [[i, u, w, True, str(disks[i] / "blocks")] for i, u, w in conf_disks])
    assert len(list(warcapart.read_records_apart(str(src), preparing))) == 401   # with the requests
    made = leaves()
    for _, body in pages:
        grp = group_of(signature(body), depth)
        disk = there if grp == moved else ranked_disks(grp, conf_disks)[0]
        assert (made[grp].parent.parent == disks[disk] / "blocks") if disk != 3 else grp not in made
    assert not disks[3].exists()
    # The import puts every block in the directory made for it: none is left empty.
    _, figures = imp(disks[0], src, check=True)
    assert figures["captures"] == 200 and figures["new_blocks"] >= 200      # (and the index, the heads)
    for leaf in leaves().values():
        assert any(leaf.iterdir()), f"{leaf} was made and left empty"
    assert not disks[3].exists()


def test_the_reading_process_makes_no_directory_for_a_block_bound_for_an_object_store(tmp_path):
    """A group whose disk is an S3 one (present, not a local directory) gets
    no directory on a local disk: its block goes to the bucket."""
    from webfs.placement import ranked_disks
    from webfs.signature import group_of, signature
    pages = [(f"http://site.org/p{i}.html", os.urandom(100)) for i in range(60)]
    src = write_warc(tmp_path / "a.warc.gz", pages)
    local = tmp_path / "disk0"
    local.mkdir()
    disks = [(0, "a" * 32, 1.0), (1, "b" * 32, 1.0)]
    preparing = warcapart.Preparing(1 << 20, True, "gzip", 3, None, 3,
                                   [[0, "a" * 32, 1.0, True, str(local / "blocks")], [1, "b" * 32, 1.0, True, None]])
    list(warcapart.read_records_apart(str(src), preparing))
    made = {"".join(p.relative_to(local / "blocks").parts) for p in (local / "blocks").glob("*/*")}
    homes = {group_of(signature(body), 3): ranked_disks(group_of(signature(body), 3), disks)[0]
             for _, body in pages}
    assert made == {g for g, d in homes.items() if d == 0} and 1 in homes.values()


def test_a_killed_reading_process_is_said_and_the_file_read_on(tmp_path, monkeypatch):
    """The reading process killed (kill -9) after its second batch: the importing
    process says so and reads the rest itself; no record is lost or given twice."""
    src, _ = _per_record_gzip(tmp_path / "a.warc.gz", 300)
    want = [_as_read(r) for r in warcread.read_records(str(src))]
    monkeypatch.setenv("WEBFS_TEST_KILL_AT", "warc-reader-after-batch:2")
    got = [_as_read(r) for r in warcapart.read_records_apart(str(src), _preparing())]
    said = [r for r in got if r[0] == "problem" and "ended early" in r[2]]
    assert len(said) == 1 and "killed by signal 9" in said[0][2]
    assert said[0][1] == want[3 * warcapart.FIRST_BATCH][0]      # where the third batch starts
    assert [r for r in got if r not in said] == want

    disks = make_archive(tmp_path, 3)
    src = write_warc(tmp_path / "b.warc.gz", [(f"http://example.com/{i}", b"page %d" % i) for i in range(150)])
    proc, fig = imp(disks[0], src, here=False)
    assert proc.returncode == 4 and "ended early (killed by signal 9); read on from here" in proc.stderr.decode()
    assert fig["captures"] == 150 and fig["records"] == 301
    out = tmp_path / "out.warc.gz"
    assert b"(100%) byte-identical" in webfs("export-warc", f"{disks[0]}:/c", out).stdout
    assert records_of(out) == records_of(src)


def test_the_reading_process_sends_batches_bounded_in_bytes(tmp_path, monkeypatch):
    """Batches end at BATCH_BYTES of payload (what is received ahead is bounded), not only
    at a count: killed after its second batch, the reading process had sent
    the records of two batches of 300 KB pages, which the rest follows once."""
    pages = [(b"http://example.com/%d" % i, b"%06d" % i * 50_000) for i in range(40)]
    src = tmp_path / "big.warc.gz"
    src.write_bytes(b"".join(_gz(_one(url, body)) for url, body in pages))
    want = [_as_read(r) for r in warcread.read_records(str(src))]
    monkeypatch.setenv("WEBFS_TEST_KILL_AT", "warc-reader-after-batch:2")
    got = [_as_read(r) for r in warcapart.read_records_apart(str(src), _preparing())]
    said = [r for r in got if r[0] == "problem"]
    per_batch = -(-warcapart.BATCH_BYTES // len(pages[0][1]))        # records to reach the bound
    assert per_batch < warcapart.FIRST_BATCH
    assert len(said) == 1 and said[0][1] == want[2 * per_batch][0]
    assert [r for r in got if r not in said] == want


def test_a_walk_stopped_early_ends_the_reading_process_and_its_receiver(tmp_path):
    """The walk stops after one record (Ctrl-C, a failed import): the reading
    process, blocked on a full pipe and a full queue of received batches, is
    ended, and so is the thread that received them; nothing is left running."""
    import threading
    src, _ = _per_record_gzip(tmp_path / "a.warc.gz", 2000)
    before = set(os.listdir("/proc/self/task"))
    already = _children()
    walk = warcapart.read_records_apart(str(src), _preparing())
    next(walk)
    children = _children() - already
    assert children
    walk.close()
    assert not children & _children()
    assert not [t for t in threading.enumerate() if t.name == "warc-receiver"]
    assert set(os.listdir("/proc/self/task")) <= before


def _children() -> set[str]:
    """This process's children now (a test's own and the warm process of
    tests/warmstart.py among them: compare with those before)."""
    return {p for p in os.listdir("/proc") if p.isdigit() and _parent_of(p) == os.getpid()}


def _parent_of(pid: str) -> int:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return int(fh.read().rpartition(")")[2].split()[1])
    except (OSError, IndexError, ValueError):
        return -1


def _gzip_bomb(mb: int) -> bytes:
    """A gzip member holding a WARC header line that never ends: ``mb`` MiB of 'a'
    inflated from a few hundred KiB."""
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    out = [c.compress(b"WARC/1.0\r\nWARC-Type: response\r\nWARC-Target-URI: http://example.com/")]
    chunk = b"a" * (1 << 20)
    out += [c.compress(chunk) for _ in range(mb)]
    return b"".join(out) + c.flush()


def test_a_gzip_bomb_in_a_header_is_reported_in_bounded_memory(tmp_path):
    """A 300 MiB header line in one gzip member (was: the reading process grew
    to 970 MB and the records after it were lost): reported at HEADER_MAX, the
    records after it imported, every process of the import under 200 MB."""
    import resource
    disks = make_archive(tmp_path, 3)
    src = tmp_path / "bomb.warc.gz"
    src.write_bytes(_gz(GOOD) + _gzip_bomb(300) + _gz(GOOD.replace(b"/good", b"/after")))
    run = ("import resource, subprocess, sys; p = subprocess.run(sys.argv[1:], capture_output=True); "
           "sys.stdout.buffer.write(p.stderr); print(p.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
    proc = subprocess.run([sys.executable, "-c", run, str(BIN / "webfs"), "import-warc", "--collection", "c",
                           str(src), f"{disks[0]}:/"], capture_output=True, check=True)
    text = proc.stdout.decode()
    rc, maxrss_kb = map(int, text.split()[-2:])
    assert rc == 4 and "runs on past 64 KiB without the blank line that ends a header" in text, text
    assert maxrss_kb < 200_000, text
    t = tree(disks[0], "/c")
    try:
        assert t.read(urlpath.capture_path("http://example.com/after", "20240101120000").encode()) == b"good page"
    finally:
        t.close()


def test_replay_indexes_the_same_lines_without_reading_captures(tmp_path):
    """Replay's indexer reads zeros for the captures of records that name their
    payload digest: the lines are those of a full read (pywb takes the digest
    from the header), and a record without the digest, or with an empty one,
    is still read (pywb computes its digest)."""
    from webfs import cdxj, replay
    disks = make_archive(tmp_path, 3)
    src = tmp_path / "a.warc"
    src.write_bytes(_one(b"http://example.com/named", b"named body", digest=_digest(b"named body"))
                    + _one(b"http://example.com/none", b"no digest")
                    + _one(b"http://example.com/empty", b"empty digest").replace(
                        b"Content-Length:", b"WARC-Payload-Digest: \r\nContent-Length:", 1))
    imp(disks[0], src, check=True)
    t = tree(disks[0], "/c")
    try:
        [(name, vf)] = replay.virtual_files(t).items()
        assert len(vf.digested) == 1
        lean = cdxj.index_one(name, vf)
        full = io.BytesIO()
        from pywb.indexer.cdxindexer import write_cdx_index
        write_cdx_index(full, io.BytesIO(vf.read(0, vf.size)), name, append_post=True, cdxj=True, sort=True)
        assert b"".join(lean) == full.getvalue() and len(lean) == 3
        assert _digest(b"no digest")[5:] in full.getvalue() and _digest(b"empty digest")[5:] in full.getvalue()
    finally:
        t.close()


def _index_of_read(vf, name: str) -> bytes:
    """pywb's indexer (wb-manager add's options) over the whole virtual file as read."""
    from pywb.indexer.cdxindexer import write_cdx_index
    out = io.BytesIO()
    write_cdx_index(out, io.BytesIO(vf.read(0, vf.size)), name, append_post=True, cdxj=True, sort=True)
    return out.getvalue()


def test_replay_indexes_only_the_layout_the_daemon_laid_out(tmp_path):
    """A source to index again whose key from the mount's daemon is not the one
    of replay's own layout (the collection changed between the two): replay
    says so and writes no lines under that key."""
    from webfs import cdxj, replay
    from webfs.errors import WebfsError
    disks = make_archive(tmp_path, 3)
    (tmp_path / "a.warc").write_bytes(_one(b"http://example.com/a", b"a"))
    imp(disks[0], tmp_path / "a.warc", check=True)
    t = tree(disks[0], "/c")
    try:
        (name, vf), = replay.virtual_files(t).items()
        pw = tmp_path / "pywb"
        pw.mkdir()
        with pytest.raises(WebfsError, match="the collection changed while replay started; run it again"):
            replay.current("c", lambda: {name: vf}, str(pw), t, {name: (vf.src, b"another layout " + name.encode())})
        assert not (pw / "webfs-cdxj" / "c" / (name + ".cdxj")).exists()
        good = replay.current("c", lambda: {name: vf}, str(pw), t, {name: (vf.src, cdxj.key_of(name, vf))})[1]
        assert "0 of 1 source file(s) indexed now, 1 as import-warc" in good
    finally:
        t.close()


def test_import_keeps_the_cdxj_pywb_makes(tmp_path):
    """import-warc keeps @warc/F.cdxj: byte for byte the lines pywb's indexer makes
    of the virtual file replay serves (pywb's sample files, each alone, and
    generated records with and without a payload digest, a POST, a revisit); replay
    takes them without indexing (a capture deleted: t4_replay)."""
    from webfs import cdxj, replay
    disks = make_archive(tmp_path, 3)
    gen = tmp_path / "gen.warc"
    block = b"POST /form HTTP/1.1\r\nContent-Type: application/x-www-form-urlencoded\r\n\r\na=1&b=2"
    post = (b"WARC/1.0\r\nWARC-Type: request\r\nWARC-Target-URI: http://example.com/form\r\n"
            b"WARC-Date: 2024-01-01T12:00:00Z\r\nWARC-Record-ID: <urn:uuid:post>\r\n"
            b"Content-Type: application/http; msgtype=request\r\nContent-Length: %d\r\n\r\n" % len(block)
            + block + b"\r\n\r\n")
    gen.write_bytes(_one(b"http://example.com/named", b"named", digest=_digest(b"named"))
                    + _one(b"http://example.com/none", b"no digest") + post
                    + _one(b"http://example.com/form", b"answer", digest=_digest(b"answer")))
    sources = [str(gen)] + cases(s for s in SAMPLES if "bad" not in os.path.basename(s))
    (tmp_path / "pywb").mkdir()
    checked = 0
    for i, src in enumerate(sources):
        imp(disks[0], src, collection=f"k{i}")
        t = tree(disks[0], f"/k{i}")
        try:
            stale = 0
            for name, vf in replay.virtual_files(t).items():
                kept = cdxj.kept_lines(t, vf.src, cdxj.key_of(name, vf))
                if kept is None:     # only a revisit whose original is not in the collection
                    assert any(p[0] == "b" and p[1] != cdxj.SEPARATOR for ps in vf.parts for p in ps), src
                    stale += 1
                    continue
                assert b"".join(kept) == _index_of_read(vf, name), src
                checked += 1
            said = replay.current(f"k{i}", replay.virtual_files(t), str(tmp_path / "pywb"))[1]
            assert f" {stale} of " in said, said
        finally:
            t.close()
    assert checked >= len(sources) - 2


def test_a_batch_of_names_that_cannot_be_written_gives_its_blocks_back(tmp_path, store, monkeypatch):
    """The batch's new files are written in one statement a table: when that
    fails (here the catalog's disk full at that moment), the import fails
    saying so, and the blocks its files took are given back (a mount's store
    goes on and commits: no block is left referenced by no file)."""
    import functools
    from webfs import admin
    from webfs.errors import NoSpace
    from webfs.ingest import Importer
    from webfs.namespace import NamespaceRows
    from webfs.recovery import close_namespace, open_namespace
    from webfs.warcimport import WarcSource
    src = write_warc(tmp_path / "a.warc.gz", [(f"http://example.com/{i}", b"page %d" % i) for i in range(40)])

    real = NamespaceRows.add_many

    def full(self, nodes, names, contents):
        if contents:                    # a batch with files (the first may hold directories only)
            raise NoSpace("the catalog's disk is full")
        real(self, nodes, names, contents)
    monkeypatch.setattr(NamespaceRows, "add_many", full)
    ns, journal, _ = open_namespace(store)
    importer = Importer(store, ns, admin.Progress(), source=functools.partial(WarcSource, collection=b"c"))
    with pytest.raises(NoSpace, match="the catalog's disk is full"):
        importer.run([bytes(src)], b"/c")
    store.commit()
    close_namespace(store, ns, journal)
    refs = store.catalog.query("SELECT coalesce(sum(refs), 0) FROM blocks")[0][0]
    assert refs == store.catalog.query("SELECT count(*) FROM contents")[0][0]


def test_the_journal_says_each_capture_s_xattrs_as_the_catalog_holds_them(tmp_path, store):
    """An import hands each new file's xattrs to its JOURNAL line instead of
    the commit asking the catalog for them again: the lines say what the
    catalog holds, name by name (the recovery tools rebuild xattrs from them)."""
    import functools
    from webfs import admin
    from webfs.ingest import Importer
    from webfs.manifest import attribute_lines, escape_path
    from webfs.recovery import close_namespace, open_namespace
    from webfs.warcimport import WarcSource
    src = write_warc(tmp_path / "a.warc.gz", [(f"http://example.com/{i}", b"page %d" % i) for i in range(5)])
    ns, journal, _ = open_namespace(store)
    try:
        Importer(store, ns, admin.Progress(), source=functools.partial(WarcSource, collection=b"c")).run(
            [bytes(src)], b"/")
        store.commit()
        said = b"".join((Path(d.root) / "meta" / "JOURNAL").read_bytes() for d in store.archive.volumes.values()
                        if (Path(d.root) / "meta" / "JOURNAL").exists())
        captures = [(p, node) for p, node in ns.walk() if b"example.com/" in p and not node.is_dir]
        assert len(captures) == 5
        for path, node in captures:
            lines = attribute_lines(node, ns.xattrs_of([node.id])[node.id])
            assert b"\t" + escape_path(path) + b"\n" + lines in said, path
    finally:
        close_namespace(store, ns, journal)


def test_a_path_in_a_message_is_one_line_whatever_its_bytes():
    # show_path (webfs.importsource), asked at every record of an import-warc:
    # a printable path as it is, control characters and non-UTF-8 bytes escaped.
    from webfs.importsource import show_path
    assert show_path(b"/srv/crawl/2024 one.warc.gz") == "/srv/crawl/2024 one.warc.gz"
    assert show_path("/é/ü".encode()) == "/é/ü"
    assert show_path(b"a\nb\tc\xff\x7f") == "a\\nb\\tc\\xff\\x7f"


def test_a_walk_failing_while_block_files_are_written_fails_the_import(tmp_path, store, monkeypatch):
    """The walk runs on while a chunk's block files are written
    (``Store.store_many``'s walk_on): a walk that fails there fails the import
    with its own error, once that chunk is stored, as a walk failing between
    chunks does; not the chunk's captures (each would carry the walk's error
    as its problem and the import end as if done). What was stored and not
    named is given back, the reading process ends, no signature lock is left
    held (the same pages store again)."""
    import errno
    import functools
    from webfs import admin
    from webfs.ingest import Importer
    from webfs.recovery import close_namespace, open_namespace
    from webfs.store import Piece
    from webfs.warcimport import WarcSource
    pages = [(f"http://example.com/{i}", b"page %d " % i * 20) for i in range(400)]
    src = write_warc(tmp_path / "a.warc.gz", pages)
    real, real_many = WarcSource._drain_dirs, store.store_many
    storing, broke_storing = [], []

    def drain_dirs(self):
        if not broke_storing and self.wc.records == 400:
            broke_storing.append(bool(storing))
            raise OSError(errno.EIO, "the walk broke")
        return real(self)

    def store_many(pieces, names, *a, **kw):
        storing.append(True)
        try:
            return real_many(pieces, names, *a, **kw)
        finally:
            storing.pop()
    monkeypatch.setattr(WarcSource, "_drain_dirs", drain_dirs)
    monkeypatch.setattr(store, "store_many", store_many)
    already = _children()
    ns, journal, _ = open_namespace(store)
    try:
        with pytest.raises(OSError, match="the walk broke"):
            Importer(store, ns, admin.Progress(), source=functools.partial(WarcSource, collection=b"c")).run(
                [bytes(src)], b"/c")
        store.commit()
        assert broke_storing == [True]         # inside a chunk's store, as its files were written
        refs = store.catalog.query("SELECT coalesce(sum(refs), 0) FROM blocks")[0][0]
        assert refs == store.catalog.query("SELECT count(*) FROM contents")[0][0]
        assert not _children() - already
        again = real_many([Piece(body) for _, body in pages[:64]], [b"/again"] * 64)
        assert all(not isinstance(o, Exception) for o in again)
    finally:
        store.commit()
        close_namespace(store, ns, journal)


def _import_repeats(tmp_path, store, monkeypatch, first_store_fails: bool):
    """An import of 64 pages, then the same 64 again at other URLs (the next
    chunk), each chunk prepared as if its twins were not stored yet (as when
    it is prepared while the chunk before it is still being stored); with
    ``first_store_fails`` the first chunk's store fails. Returns the
    pages Store.encode was called with (in the importing process), the
    sizes of the chunks stored, and the pages kept in blocks."""
    import functools
    from webfs import admin
    from webfs.ingest import Importer
    from webfs.recovery import close_namespace, open_namespace
    from webfs.store import Store
    from webfs.warcimport import WarcSource
    bodies = [b"page %d " % i * 40 for i in range(64)]
    src = write_warc(tmp_path / "a.warc.gz", [(f"http://example.com/a{i}", b) for i, b in enumerate(bodies)]
                     + [(f"http://example.com/b{i}", b) for i, b in enumerate(bodies)])
    real_encode, real_many, encoded, chunks = Store.encode, store.store_many, [], []

    def store_many(pieces, names, *a, **kw):
        chunks.append(len(pieces))
        if first_store_fails and len(chunks) == 1:
            raise OSError("the first chunk's disk broke")
        return real_many(pieces, names, *a, **kw)
    monkeypatch.setattr(Store, "encode", lambda self, data: encoded.append(data) or real_encode(self, data))
    monkeypatch.setattr(store, "twins", lambda pieces: [(None, False)] * len(pieces))
    monkeypatch.setattr(store, "store_many", store_many)
    ns, journal, _ = open_namespace(store)
    try:
        Importer(store, ns, admin.Progress(), source=functools.partial(WarcSource, collection=b"c")).run(
            [bytes(src)], b"/c")
        store.commit()
        kept = {bytes(store.read(row)) for (row,) in
                ([r] for r in (store.catalog.block_by_id(i) for (i,) in store.catalog.query("SELECT id FROM blocks")))}
    finally:
        close_namespace(store, ns, journal)
    return [d for d in encoded if d in bodies], chunks, kept & set(bodies), set(bodies)


def test_a_repeat_of_a_block_encoded_earlier_in_the_import_is_not_encoded_again(tmp_path, store, monkeypatch):
    """Preparation.encoded: a capture whose signature was encoded for a new
    block in an earlier chunk is not encoded again while its chunk is
    prepared, even if that block is not stored yet: it will be its duplicate
    (fails without: the daemon's pool compressed each such repeat, to throw
    it away)."""
    encoded, chunks, kept, bodies = _import_repeats(tmp_path, store, monkeypatch, first_store_fails=False)
    assert len(chunks) >= 2 and encoded == [] and kept == bodies


def test_a_repeat_whose_first_was_not_stored_is_encoded_by_the_store(tmp_path, store, monkeypatch):
    """The repeat's first failed to store after all: the repeat, not encoded
    ahead, is encoded by the store (store_many) and kept."""
    encoded, chunks, kept, bodies = _import_repeats(tmp_path, store, monkeypatch, first_store_fails=True)
    assert len(chunks) >= 2 and sorted(encoded) == sorted(bodies) and kept == bodies


def test_url_takes_pywb_s_pick_in_one_second_when_records_name_no_digest(tmp_path):
    """Records without WARC-Payload-Digest (ARC, older crawlers), one URL, one
    second: pywb's indexer orders them by the SHA-1 of their payload, which it
    computes; webfs url takes the same one (not the first imported)."""
    from pywb.indexer.cdxindexer import write_cdx_index
    disks = make_archive(tmp_path, 3)
    records = [_one(b"http://tie.example/", b"page %d" % i) for i in range(6)]
    src = tmp_path / "t.warc"
    src.write_bytes(b"".join(records))
    imp(disks[0], src, collection="t", check=True)
    out = io.BytesIO()
    with open(src, "rb") as f:
        write_cdx_index(out, f, "t.warc", append_post=True, cdxj=True, sort=True)
    first = json.loads(out.getvalue().splitlines()[0].split(b" ", 2)[2])
    starts = [sum(map(len, records[:i])) for i in range(len(records))]
    want = b"page %d" % starts.index(int(first["offset"]))
    assert want != b"page 0"            # else this case would not tell
    path = webfs_here("url", "http://tie.example/", disks[0]).stdout.decode().strip()
    assert tree(disks[0]).read(path.lstrip("/").encode()) == want, path


def test_any_spelling_pywb_s_surt_finds_is_found(tmp_path):
    """Every capture whose SURT is the asked URL's, wherever its spelling files
    it: IDN and punycode, dot segments, user info, a space and %20, no scheme;
    the spelling chosen is said."""
    disks = make_archive(tmp_path, 3)
    src = tmp_path / "s.warc"
    src.write_bytes(b"".join(_one(u, b"page") for u in (
        "http://bücher.de/".encode(), b"http://xn--caf-dma.fr/", b"http://dots.example/a/../b",
        b"http://u:pw@auth.example/", b"http://sp.example/a b/%20c", b"http://example.com/")))
    imp(disks[0], src, collection="s", check=True)
    for asked, found in (("http://xn--bcher-kva.de/", "http://bücher.de/"), ("http://café.fr/", "http://xn--caf-dma.fr/"),
                         ("http://dots.example/b", "http://dots.example/a/../b"),
                         ("http://auth.example/", "http://u:pw@auth.example/"),
                         ("http://sp.example/a%20b/%20c", "http://sp.example/a b/%20c"),
                         ("example.com", "http://example.com/")):
        proc = webfs_here("url", asked, disks[0], check=False)
        assert proc.returncode == 0, (asked, proc.stderr)
        assert proc.stdout.decode().strip() == "/s/" + urlpath.capture_path(found, "20240101120000"), asked
        assert f"no capture of {asked} as written; chose the spelling {found}" in proc.stderr.decode(), asked
    caps = json.loads(webfs_here("versions", "--json", "http://u:pw@auth.example/", disks[0]).stdout)
    assert [(c["url"], c["exact"]) for c in caps] == [("http://u:pw@auth.example/", True)]


def test_a_target_of_versions_and_url_is_an_archive_or_a_collection(tmp_path):
    """DISK:/NAME is a collection (as export-warc and replay take it); a
    directory that is no archive, or a directory inside a collection, is a
    usage error (exit 2) saying what TARGET must be; a collection imported
    into a collection's directory is looked up with the others."""
    disks = make_archive(tmp_path, 3)
    imp(disks[0], write_warc(tmp_path / "a.warc.gz", [("http://example.com/", b"home")]), collection="c", check=True)
    webfs_here("import-warc", "--collection", "nested", write_warc(tmp_path / "n.warc.gz", [("http://example.com/", b"n")],
                                                                   date="2025-01-01T12:00:00Z"), f"{disks[0]}:/c/")
    home = "/c/" + urlpath.capture_path("http://example.com/", "20240101120000")
    assert webfs_here("url", "--at", "2024", "http://example.com/", f"{disks[0]}:/c").stdout.decode().strip() == home
    caps = json.loads(webfs_here("versions", "--json", "http://example.com/", f"{disks[0]}:/c").stdout)
    assert len(caps) == 2, caps
    caps = json.loads(webfs_here("versions", "--json", "http://example.com/", disks[0]).stdout)
    assert sorted(c["collection"] for c in caps) == ["c", "c/nested"], caps
    plain = tmp_path / "plain"
    plain.mkdir()
    for command in ("url", "versions"):
        for target in (plain, f"{disks[0]}:/c/http"):
            proc = webfs_here(command, "http://example.com/", target, check=False)
            assert proc.returncode == 2 and "TARGET is a mount point, a disk of an archive" in proc.stderr.decode()
            assert "under any spelling" not in proc.stderr.decode(), proc.stderr


def test_export_warc_split_must_be_a_size_of_a_byte_or_more(tmp_path):
    disks = make_archive(tmp_path, 3)
    imp(disks[0], write_warc(tmp_path / "a.warc.gz", [("http://example.com/", b"home")]), collection="c", check=True)
    for split in ("abc", "0"):
        proc = webfs_here("export-warc", "--split", split, f"{disks[0]}:/c", tmp_path / "o.warc.gz", check=False)
        assert proc.returncode == 2 and "--split" in proc.stderr.decode(), proc.stderr
        assert not list(tmp_path.glob("o*")), split
