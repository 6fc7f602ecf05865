"""The CDXJ lines import-warc makes from what it read (webfs.importcdxj), on
archives in temporary directories: the very bytes pywb's indexer makes of the
same virtual file, for the records they cover; None (pywb's indexer then
indexes the source) for the records they do not."""
from __future__ import annotations

import base64
import glob
import hashlib
import io
import os
from multiprocessing.connection import Connection
from pathlib import Path

import pytest

from conftest import BIN, cases, make_archive, webfs_here
from webfs import importcdxj, replay, warc, warcread
from webfs.warcapart import Preparing, _unread, read_records_apart
from webfs.warcread import Record
from webfs.backends import BackendOptions

pytest.importorskip("pywb")
from warcio.statusandheaders import StatusAndHeaders  # noqa: E402
from warcio.warcwriter import WARCWriter  # noqa: E402

SAMPLES = sorted(glob.glob(str(BIN.parent / "sample_archive" / "warcs" / "*")))


def _digest(body: bytes) -> str:
    return "sha1:" + base64.b32encode(hashlib.sha1(body).digest()).decode()


def _crawl(path: Path, gz: bool) -> Path:
    """What a crawler writes: a warcinfo, responses (statuses, types with and
    without parameters, none, an 8-bit header) each with its GET request, a revisit, a resource
    with a payload digest, a metadata record of WARC fields."""
    with open(path, "wb") as f:
        w = WARCWriter(f, gzip=gz)
        w.write_record(w.create_warcinfo_record(path.name, {"software": "webfs-tests"}))
        pages = [("http://example.com/", "200 OK", [("Content-Type", "text/html; charset=utf-8")]),
                 ("https://Example.org:443/a/b?q=1&r=2", "404 Not Found", [("content-type", "text/plain")]),
                 ("http://example.com/moved", "301 Moved Permanently", [("Location", "/")]),
                 ("http://example.com/img.png", "200 OK", [("Content-Type", "image/png"), ("X-A", "b")]),
                 ("http://example.com/cookie", "200 OK", [("Set-Cookie", "n=caf\u00e9"), ("Content-Type", "text/html")])]
        for n, (url, status, headers) in enumerate(pages):
            body = b"page %d" % n
            http = StatusAndHeaders(status, headers, protocol="HTTP/1.1")
            w.write_record(w.create_warc_record(url, "response", payload=io.BytesIO(body), http_headers=http,
                                                warc_headers_dict={"WARC-Date": "2024-01-01T12:00:0%dZ" % n}))
            req = StatusAndHeaders("GET / HTTP/1.1", [("Host", "example.com")], is_http_request=True)
            w.write_record(w.create_warc_record(url, "request", payload=io.BytesIO(b""), http_headers=req))
        http = StatusAndHeaders("200 OK", [("Content-Type", "text/html")], protocol="HTTP/1.1")
        w.write_record(w.create_revisit_record("http://example.com/again", _digest(b"page 0"), "http://example.com/",
                                               "2024-01-01T12:00:00Z", http_headers=http))
        res = w.create_warc_record("http://example.com/res.txt", "resource", payload=io.BytesIO(b"a resource"),
                                   warc_content_type="text/plain; charset=ascii",
                                   warc_headers_dict={"WARC-Payload-Digest": _digest(b"a resource")})
        w.write_record(res)
        w.write_record(w.create_warc_record("http://example.com/", "metadata", payload=io.BytesIO(b"via: x\n"),
                                            warc_content_type="application/warc-fields"))
    return path


def _pywb_lines(vf, name: str) -> list[bytes]:
    """pywb's indexer (wb-manager add's options) over the whole virtual file as read."""
    from pywb.indexer.cdxindexer import write_cdx_index
    out = io.BytesIO()
    write_cdx_index(out, io.BytesIO(vf.read(0, vf.size)), name, append_post=True, cdxj=True, sort=True)
    return out.getvalue().splitlines(keepends=True)


def _lines(disk: Path, sources: list) -> list[tuple[str, object, list]]:
    """(source, the lines made from what the import read or None, pywb's lines)
    of each source imported alone; the lines made with what the import's
    reading process makes of the source (``KeyMaker``) are the same."""
    out = []
    for i, src in enumerate(sources):
        webfs_here("import-warc", "--collection", f"k{i}", src, f"{disk}:/", check=False)
        made: dict = {}
        for _ in read_records_apart(str(src), Preparing(1 << 20, False, "gzip", 1, cdx_keys=True), made):
            pass
        t = warc.DiskTree(str(disk), f"/k{i}", BackendOptions())
        try:
            for name, vf in replay.virtual_files(t).items():
                lines = importcdxj.lines_of(name, vf)
                assert importcdxj.lines_of(name, vf, made) == lines, src
                out.append((os.path.basename(str(src)), lines, _pywb_lines(vf, name)))
        finally:
            t.close()
    return out


def test_the_lines_are_pywbs_for_a_crawlers_records(tmp_path):
    disks = make_archive(tmp_path, 3)
    made = _lines(disks[0], [_crawl(tmp_path / "a.warc.gz", True), _crawl(tmp_path / "b.warc", False)])
    for src, fast, pywb in made:
        assert fast is not None, src
        assert fast == pywb, src
        assert len(fast) == 7, src      # 5 responses, the revisit, the resource


@pytest.mark.skipif(not SAMPLES, reason="pywb's sample archive is not installed")
def test_the_lines_are_pywbs_on_its_sample_files(tmp_path):
    disks = make_archive(tmp_path, 3)
    made = _lines(disks[0], cases(s for s in SAMPLES if "bad" not in os.path.basename(s)))
    for src, fast, pywb in made:
        assert fast is None or fast == pywb, src
    taken = {src for src, fast, _ in made if fast is not None}
    assert len(taken) >= len(made) // 3, taken       # iana, dupes, example.warc.gz, ...


def _record(rtype: bytes, url: bytes, block: bytes, digest: bool = True, msgtype: bytes = b"response") -> bytes:
    h = [b"WARC/1.0", b"WARC-Type: " + rtype, b"WARC-Target-URI: " + url, b"WARC-Date: 2024-01-01T12:00:00Z",
         b"WARC-Record-ID: <urn:uuid:" + os.urandom(4).hex().encode() + b">",
         b"Content-Type: application/http; msgtype=" + msgtype, b"Content-Length: %d" % len(block)]
    if digest:
        h.append(b"WARC-Payload-Digest: " + _digest(block.partition(b"\r\n\r\n")[2]).encode())
    return b"\r\n".join(h) + b"\r\n\r\n" + block + b"\r\n\r\n"


OK = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nbody"


@pytest.mark.parametrize("odd", [
    _record(b"request", b"http://example.com/form", b"POST /form HTTP/1.1\r\nContent-Type: "
            b"application/x-www-form-urlencoded\r\n\r\na=1", msgtype=b"request"),   # its body joins the key
    _record(b"response", b"http://example.com/none", OK, digest=False),            # pywb computes the digest
    _record(b"response", "http://example.com/\u00e9".encode(), OK),                 # not ASCII
    _record(b"response", b"http://example.com/empty", b"HTTP/1.1 204 No Content\r\n\r\n"),
    _record(b"response", b"http://example.com/folded", b"HTTP/1.1 200 OK\r\nX-A: a\r\n b\r\n\r\nbody"),
], ids=["post", "no-digest", "non-ascii", "204", "folded-header"])
def test_records_the_rules_do_not_cover_are_left_to_pywb(tmp_path, odd):
    disks = make_archive(tmp_path, 3)
    src = tmp_path / "a.warc"
    src.write_bytes(_record(b"response", b"http://example.com/ok", OK) + odd)
    [(_, fast, pywb)] = _lines(disks[0], [src])
    assert fast is None
    t = warc.DiskTree(str(disks[0]), "/k0", BackendOptions())
    try:
        kept = t.read(warc.KEEP_DIR + b"/a.warc.cdxj").split(b"\n", 1)[1]
    finally:
        t.close()
    assert kept.splitlines(keepends=True) == pywb      # made by pywb's indexer at import


def test_the_reading_process_makes_the_entries_and_keys_and_lines_of_checks_them(tmp_path):
    """What each record's line takes from its headers, and the SURT keys and
    timestamps, made by the import's reading process: an entry for every
    record, the one lines_of would make, and pywb's key for each record with a
    line. lines_of uses them only where the record's WARC and HTTP headers are
    the bytes they were made of (a file changed under the import: the record
    read again at that offset is another)."""
    src = _crawl(tmp_path / "a.warc.gz", True)
    keys: dict = {}
    recs = [r for r in read_records_apart(str(src), Preparing(1 << 20, False, "gzip", 1, cdx_keys=True), keys)
            if isinstance(r, Record)]
    assert sorted(keys) == [r.offset for r in recs] and len(recs) == 14
    for r in recs:
        identity, entry, key = keys[r.offset]
        assert entry == importcdxj.record_entry(r.rtype, r.head, r.http, warcread.header_fields(r.head))
        if r.rtype in ("response", "revisit", "resource"):
            url, date = r.fields[b"warc-target-uri"].decode(), r.fields[b"warc-date"].decode()
            assert entry[0] == url and entry[4] == date
            assert key == importcdxj.surt_and_stamp(url, date)
        else:
            assert entry in (importcdxj.NO_LINE, False) and key is None
    disks = make_archive(tmp_path, 3)
    [(_, fast, pywb)] = _lines(disks[0], [src])
    assert fast == pywb
    t = warc.DiskTree(str(disks[0]), "/k0", BackendOptions())
    try:
        [(name, vf)] = replay.virtual_files(t).items()
        assert importcdxj.lines_of(name, vf, keys) == pywb
        first = next(r for r in recs if r.rtype == "response").offset
        identity, entry, _ = keys[first]
        made = (entry[0] + "x",) + entry[1:], ("made,here)/", "20240101120000")
        used = importcdxj.lines_of(name, vf, {first: (identity,) + made})
        other = importcdxj.lines_of(name, vf, {first: ((identity[0], identity[1], identity[2] ^ 1),) + made})
    finally:
        t.close()
    assert sum(line.startswith(b"made,here)/ ") for line in used) == 1
    assert other == pywb


def test_the_reading_process_makes_nothing_before_it_is_ahead(tmp_path):
    """KeyMaker makes no entry nor key (nor imports pywb) before ``start``: the
    reading process starts it once a batch waits in its pipe (the import is
    behind it), after KEYS_AFTER records, or at its end, where ``take(wait=True)``
    gives every record's."""
    src = _crawl(tmp_path / "a.warc.gz", True)
    keys = importcdxj.KeyMaker()
    recs = [r for r in warcread.read_records(str(src)) if isinstance(r, Record)]
    for r in recs:
        keys.add(r)
    assert keys.take() == {} and not keys.started
    assert sorted(keys.take(wait=True)) == [r.offset for r in recs]
    r, w = os.pipe()
    conn = Connection(w)
    try:
        assert not _unread(conn)
        os.write(w, b"a batch")
        assert _unread(conn)
        os.read(r, 100)
        assert not _unread(conn)
    finally:
        conn.close()
        os.close(r)
