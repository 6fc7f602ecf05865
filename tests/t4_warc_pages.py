"""Capture files of encoded responses through a real mount: a gzip-encoded
and a chunked page keep the entity as recorded, their xattrs say how it is
encoded, and export-warc gives their records back byte for byte."""
from __future__ import annotations

import gzip
import io
import os

import pytest

from conftest import Mounted, webfs

warcio = pytest.importorskip("warcio")
from warcio.statusandheaders import StatusAndHeaders  # noqa: E402
from warcio.warcwriter import WARCWriter  # noqa: E402

PAGE = b"<html><body>the findable text of an encoded page</body></html>"
GZIPPED = gzip.compress(PAGE, mtime=0)
CHUNKED = b"20\r\n" + PAGE[:32] + b"\r\n" + f"{len(PAGE) - 32:x}".encode() + b"\r\n" + PAGE[32:] + b"\r\n0\r\n\r\n"
ENCODED = [  # (url, extra headers, entity as recorded)
    ("http://example.com/gz.html", [("Content-Encoding", "gzip")], GZIPPED),
    ("http://example.com/chunked.html", [("Transfer-Encoding", "chunked")], CHUNKED),
    ("http://example.com/both.html", [("Content-Encoding", "gzip"), ("Transfer-Encoding", "chunked")],
     b"%x\r\n" % len(GZIPPED) + GZIPPED + b"\r\n0\r\n\r\n"),
]


def encoded_warc(path) -> bytes:
    with open(path, "wb") as f:
        w = WARCWriter(f, gzip=True)
        for url, extra, entity in ENCODED:
            http = StatusAndHeaders("200 OK", [("Content-Type", "text/html")] + extra, protocol="HTTP/1.1")
            w.write_record(w.create_warc_record(url, "response", payload=io.BytesIO(entity), http_headers=http,
                                                warc_headers_dict={"WARC-Date": "2024-01-01T12:00:00Z"}))
    return path


def test_encoded_pages_say_so_and_export_byte_for_byte(tmp_path):
    src = encoded_warc(tmp_path / "enc.warc.gz")
    m = Mounted(tmp_path, disks=3)
    try:
        webfs("import-warc", src, m.mnt)
        host = m.mnt / "enc" / "http" / "example.com"
        for url, extra, entity in ENCODED:
            page = host / (url.rsplit("/", 1)[1] + "@20240101120000")
            assert page.read_bytes() == entity
            shown = {k: os.getxattr(page, k) for k in os.listxattr(page) if k.startswith("user.http.")}
            want = {"user.http." + k.lower(): v.encode() for k, v in extra}
            assert {k: v for k, v in shown.items() if k in ("user.http.content-encoding",
                                                           "user.http.transfer-encoding")} == want
        out = tmp_path / "out.warc.gz"
        res = webfs("export-warc", m.mnt / "enc", out)
        assert b"(100%) byte-identical" in res.stdout
        assert out.read_bytes() == src.read_bytes()
    finally:
        m.umount()
