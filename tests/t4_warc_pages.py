"""Capture files of encoded responses through a real mount: a gzip-, a br-,
a deflate-encoded, a chunked and a chunked+gzip page show the decoded
document (grep finds its text), their xattrs say how the record encoded
it, and export-warc and tools/webfs-warc-rebuild (without webfs) give their
records back byte for byte; one that does not decode is kept as recorded,
and said so."""
from __future__ import annotations

import gzip
import io
import os
import subprocess
import zlib

import pytest

from conftest import REPO, Mounted, webfs

warcio = pytest.importorskip("warcio")
from warcio.statusandheaders import StatusAndHeaders  # noqa: E402
from warcio.warcwriter import WARCWriter  # noqa: E402

PAGE = b"<html><body>the findable text of an encoded page</body></html>"
GZIPPED = gzip.compress(PAGE, mtime=0)


def chunked(data: bytes) -> bytes:
    return b"20\r\n" + data[:32] + b"\r\n" + b"%x\r\n" % len(data[32:]) + data[32:] + b"\r\n0\r\n\r\n"


ENCODED = [  # (name, extra headers, entity as recorded)
    ("gz.html", [("Content-Encoding", "gzip")], GZIPPED),
    ("deflate.html", [("Content-Encoding", "deflate")], zlib.compress(PAGE)),
    ("chunked.html", [("Transfer-Encoding", "chunked")], chunked(PAGE)),
    ("both.html", [("Content-Encoding", "gzip"), ("Transfer-Encoding", "chunked")], chunked(GZIPPED)),
]
try:
    import brotli
    ENCODED.append(("br.html", [("Content-Encoding", "br")], brotli.compress(PAGE)))
except ImportError:
    pass
import zstandard  # noqa: E402  (an install dependency)
ENCODED.append(("zstd.html", [("Content-Encoding", "zstd")], zstandard.ZstdCompressor().compress(PAGE)))
BROKEN = [("broken.html", [("Content-Encoding", "gzip")], GZIPPED[:20] + b"not gzip at all"),
          ("odd.html", [("Content-Encoding", "x-unheard-of")], b"whatever")]


def encoded_warc(path, pages) -> bytes:
    with open(path, "wb") as f:
        w = WARCWriter(f, gzip=True)
        for name, extra, entity in pages:
            http = StatusAndHeaders("200 OK", [("Content-Type", "text/html")] + extra, protocol="HTTP/1.1")
            w.write_record(w.create_warc_record("http://example.com/" + name, "response",
                                                payload=io.BytesIO(entity), http_headers=http,
                                                warc_headers_dict={"WARC-Date": "2024-01-01T12:00:00Z"}))
    return path


def encodings(page) -> dict:
    return {k: os.getxattr(page, k) for k in os.listxattr(page)
            if k in ("user.http.content-encoding", "user.http.transfer-encoding")}


def test_encoded_pages_show_the_document_and_export_byte_for_byte(tmp_path):
    src = encoded_warc(tmp_path / "enc.warc.gz", ENCODED + BROKEN)
    m = Mounted(tmp_path, disks=3)
    try:
        res = webfs("import-warc", src, m.mnt, check=False)
        assert res.returncode == 4, res.stdout           # the two that do not decode are problems
        host = m.mnt / "enc" / "http" / "example.com"
        for name, extra, entity in ENCODED:
            page = host / (name + "@20240101120000")
            assert page.read_bytes() == PAGE, name
            assert encodings(page) == {"user.http." + k.lower(): v.encode() for k, v in extra}
            assert os.getxattr(page, "user.http.decoded") == b"yes"
        found = subprocess.run(["grep", "-rl", "findable text", str(host)], capture_output=True).stdout
        assert sorted(found.decode().split()) == sorted(str(host / (n + "@20240101120000")) for n, _, _ in ENCODED)
        for name, extra, entity in BROKEN:
            page = host / (name + "@20240101120000")
            assert page.read_bytes() == entity
            assert os.getxattr(page, "user.http.decoded").startswith(b"no: ")
        assert res.stderr.count(b"the capture file holds the entity as recorded") == 2     # each problem said once, on stderr
        assert b"x-unheard-of unknown" in res.stderr and b"does not decode" in res.stderr
        # the records as recorded: export-warc, and the sh tool over the mount's files
        out = tmp_path / "out.warc.gz"
        res = webfs("export-warc", m.mnt / "enc", out)
        assert b"(100%) byte-identical" in res.stdout
        assert out.read_bytes() == src.read_bytes()
        rebuilt = tmp_path / "rebuilt.warc.gz"
        subprocess.run(["sh", str(REPO / "tools" / "webfs-warc-rebuild"), str(m.mnt / "enc"), "enc.warc.gz",
                        str(rebuilt)], check=True, capture_output=True, env={"PATH": "/usr/bin:/bin"})
        assert gzip.decompress(rebuilt.read_bytes()) == gzip.decompress(src.read_bytes())
    finally:
        m.umount()
