"""HTTP entities decoded for the page files (capture.decode_entity): chunked,
gzip (several members), deflate (zlib-wrapped and raw), and what is kept
as recorded: damaged data, unknown codings, a bomb."""
from __future__ import annotations

import gzip
import zlib

from webfs import capture

DOC = b"<html>" + b"some text " * 50 + b"</html>"


def http(*headers: str) -> bytes:
    return ("HTTP/1.1 200 OK\r\n" + "".join(h + "\r\n" for h in headers) + "\r\n").encode()


def test_not_encoded_is_left_alone():
    assert capture.decode_entity(http("Content-Type: text/html"), DOC) == (None, None)
    assert capture.decode_entity(http("Content-Encoding: identity"), DOC) == (None, None)


def test_chunked_with_extensions_and_trailers():
    body = b"10;ext=1\r\n" + DOC[:16] + b"\r\n" + b"%X\r\n" % len(DOC[16:]) + DOC[16:] + b"\r\n0\r\nX-T: 1\r\n\r\n"
    assert capture.decode_entity(http("Transfer-Encoding: chunked"), body) == (DOC, None)


def test_gzip_of_two_members_and_deflate_either_way():
    two = gzip.compress(DOC[:100]) + gzip.compress(DOC[100:])
    assert capture.decode_entity(http("Content-Encoding: gzip"), two) == (DOC, None)
    assert capture.decode_entity(http("content-encoding: DEFLATE"), zlib.compress(DOC)) == (DOC, None)
    raw = zlib.compressobj(wbits=-15)
    assert capture.decode_entity(http("Content-Encoding: deflate"), raw.compress(DOC) + raw.flush()) == (DOC, None)


def test_zstd_frames_decoded_and_a_cut_one_refused():
    import zstandard
    frame = zstandard.ZstdCompressor().compress(DOC)
    assert capture.decode_entity(http("Content-Encoding: zstd"), frame + frame) == (DOC + DOC, None)
    doc, why = capture.decode_entity(http("Content-Encoding: zstd"), frame[:-4])
    assert doc is None and "cut short" in why
    bomb = zstandard.ZstdCompressor().compress(bytes(capture.DECODED_MAX + 1))
    doc, why = capture.decode_entity(http("Content-Encoding: zstd"), bomb)
    assert doc is None and "MiB decoded" in why


def test_an_empty_body_is_the_empty_document_whatever_its_coding():
    """A 304, a 204 or a HEAD's response names the coding of a body it does not
    send (common in crawls): nothing to decode, nothing damaged."""
    for coding in ("gzip", "br", "deflate, gzip", "zstd", "x-unknown"):
        assert capture.decode_entity(http(f"Content-Encoding: {coding}"), b"") == (None, None), coding
    assert capture.decode_entity(http("Transfer-Encoding: chunked", "Content-Encoding: gzip"),
                                 b"0\r\n\r\n") == (b"", None)


def test_codings_undone_in_reverse_order():
    body = gzip.compress(zlib.compress(DOC))
    assert capture.decode_entity(http("Content-Encoding: deflate, gzip"), body) == (DOC, None)


def test_what_does_not_decode_says_why():
    doc, why = capture.decode_entity(http("Content-Encoding: gzip"), gzip.compress(DOC)[:30])
    assert doc is None and "does not decode" in why and "cut short" in why
    assert capture.decode_entity(http("Content-Encoding: x-zip"), b"x") == (None, "content coding x-zip unknown")
    doc, why = capture.decode_entity(http("Content-Encoding: zstd"), b"x")
    assert doc is None and why.startswith("zstd does not decode")
    assert capture.decode_entity(http("Transfer-Encoding: gzip, chunked"), b"0\r\n\r\n")[1] == \
        "transfer coding gzip unknown"
    doc, why = capture.decode_entity(http("Transfer-Encoding: chunked"), b"5\r\nabc")
    assert doc is None and "does not decode" in why and "cut short" in why


def test_a_body_recorded_dechunked_is_taken_as_it_is():
    """Many crawlers keep 'Transfer-Encoding: chunked' in the header and record
    the body dechunked (pywb's iana.warc.gz does): no chunk size line, so the
    body is the entity as warcio reads it, not a problem."""
    assert capture.decode_entity(http("Transfer-Encoding: chunked"), DOC) == (None, None)
    assert capture.decode_entity(http("Transfer-Encoding: chunked"), b"zz\r\nabc") == (None, None)
    both = http("Transfer-Encoding: chunked\r\nContent-Encoding: gzip")
    assert capture.decode_entity(both, gzip.compress(DOC)) == (DOC, None)


def test_a_bomb_is_kept_as_recorded():
    bomb = gzip.compress(b"\0" * (capture.DECODED_MAX + 1))
    doc, why = capture.decode_entity(http("Content-Encoding: gzip"), bomb)
    assert doc is None and "larger than" in why
