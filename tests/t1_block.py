import gzip
import subprocess

import pytest
from hypothesis import given, strategies as st

from webfs import codecs
from webfs.block import (HEADER_SIZE, BlockHeader, percent_decode, percent_encode,
                         refs_offset, encode_refs)
from webfs.errors import CorruptBlock, UnknownCodec

SIG = "0f1e2d3c4b5a69788796a5b4c3d2e1f0"


def header(**kw):
    base = dict(signature=SIG, size=10512, stored=4012, codec="gzip", refs=3,
                created="2026-11-25T21:00:00Z", name=percent_encode(b"/crawl/example.org/index.html"))
    base.update(kw)
    return BlockHeader(**base)


def test_header_layout_is_the_designed_one():
    raw = header().encode()
    assert len(raw) == HEADER_SIZE
    assert raw.startswith(b"WEBFS-BLOCK 1\nSignature: xxh128:" + SIG.encode() + b"\nSize: 10512\n"
                          b"Stored: 4012\nCodec: gzip\nRefs: 0000000003\nCreated: 2026-11-25T21:00:00Z\n"
                          b"Name: /crawl/example.org/index.html\n")
    assert raw.endswith(b" \n")
    raw.decode("ascii")


@given(st.binary(max_size=2000), st.integers(0, 10**10 - 1), st.integers(0, 2**40), st.integers(0, 2**40))
def test_header_round_trip(name, refs, size, stored):
    h = header(name=percent_encode(name), refs=refs, size=size, stored=stored)
    raw = h.encode()
    assert len(raw) == HEADER_SIZE
    back = BlockHeader.parse(raw)
    assert back.with_refs(0) == BlockHeader.parse(h.with_refs(0).encode())
    assert back.refs == refs and back.size == size and back.stored == stored
    # The name is cut to fit, never inside an escape, and stays a prefix of the original.
    assert name.startswith(percent_decode(back.name))


def test_refs_rewritten_in_place():
    raw = bytearray(header().encode())
    off = refs_offset(bytes(raw))
    raw[off:off + 10] = encode_refs(1234)
    assert BlockHeader.parse(bytes(raw)).refs == 1234


@given(st.binary(max_size=300))
def test_percent_encoding_is_ascii_and_reversible(name):
    enc = percent_encode(name)
    assert all(0x21 <= ord(c) <= 0x7e for c in enc)
    assert percent_decode(enc) == name


@pytest.mark.parametrize("raw,msg", [
    (b"", "truncated"),
    (b"WEBFS-BLOCK 1\n" + b" " * 100, "truncated"),
    (b"NOT-A-BLOCK 1\n".ljust(512), "not a webfs block"),
    (b"WEBFS-BLOCK 1\nSignature: xxh128:" + SIG.encode() + b"\n".ljust(512 - 48), "lacks"),
    (header().encode().replace(b"Size: 10512", b"Size: 10x12"), "not a number"),
    (header().encode().replace(b"xxh128:0f", b"xxh128:zz"), "bad Signature"),
])
def test_bad_headers_are_refused(raw, msg):
    with pytest.raises(CorruptBlock, match=msg):
        BlockHeader.parse(raw)


def test_unknown_codec_is_an_error():
    with pytest.raises(UnknownCodec):
        codecs.get("lzma")


@pytest.mark.parametrize("data,codec", [
    (b"<html>" + b"hello web archive " * 500 + b"</html>", "gzip"),
    (b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 40, "identity"),        # magic: already compressed
    (gzip.compress(b"x" * 10000, mtime=0), "identity"),           # mtime=0: the same test id every run
    (bytes(__import__("random").Random(1).randbytes(5000)), "identity"),  # saves under 5 %
    (b"", "identity"),
])
def test_codec_choice(data, codec):
    name, payload = codecs.encode(data, "gzip", 3)
    assert name == codec
    assert codecs.get(name).decode(payload) == data


def test_corrupt_gzip_payload_is_corrupt_block():
    _, payload = codecs.encode(b"abc " * 1000, "gzip", 3)
    with pytest.raises(CorruptBlock):
        codecs.get("gzip").decode(payload[:-9])


def test_dd_gunzip_prints_the_document(tmp_path):
    doc = b"<html><body>" + b"a page of the web, " * 300 + b"</body></html>\n"
    codec, payload = codecs.encode(doc, "gzip", 3)
    assert codec == "gzip"
    path = tmp_path / "block"
    path.write_bytes(header(size=len(doc), stored=len(payload)).encode() + payload)
    out = subprocess.run(f"dd if={path} bs=512 skip=1 2>/dev/null | gunzip", shell=True,
                         capture_output=True, check=True).stdout
    assert out == doc
