"""A capture record as its page file shows it, decided by the record alone:
the document (the HTTP entity dechunked and decompressed, as a browser
shows it), the file's name stem and date, the xattrs it carries, and what
is said of it. The reading process of an import works this out beside the
parsing (webfs.warcapart), so the importing process only names the file in
its collection and stores it (webfs.warcimport); a record read in that
process is filed there, by the same function.
"""
from __future__ import annotations

import calendar
import functools
import re
import time
import zlib
from dataclasses import dataclass
from typing import Optional

from . import urlpath

CAPTURE_TYPES = ("response", "resource", "revisit")

# HTTP response headers a capture file shows as xattrs (the first of each):
# the encodings say that the file holds the entity as recorded, so encoded.
HTTP_XATTRS = {
    b"content-type": b"user.http.content-type",
    b"content-encoding": b"user.http.content-encoding",
    b"transfer-encoding": b"user.http.transfer-encoding",
}
XATTR_FIELDS = (
    (b"user.warc.target-uri", b"warc-target-uri"),
    (b"user.warc.date", b"warc-date"),
    (b"user.warc.record-id", b"warc-record-id"),
    (b"user.warc.payload-digest", b"warc-payload-digest"),
    (b"user.warc.type", b"warc-type"),
)


# ---------------------------------------------------------------- entities decoded

DECODED_MAX = 64 << 20      # a document decoded larger than this is kept as recorded (a bomb)


def _gunzip(data: bytes) -> bytes:
    out, z = [], zlib.decompressobj(16 + zlib.MAX_WBITS)
    size = 0
    while True:
        out.append(z.decompress(data, DECODED_MAX + 1 - size))
        size += len(out[-1])
        if size > DECODED_MAX:
            raise ValueError(f"larger than {DECODED_MAX >> 20} MiB decoded")
        if z.unconsumed_tail:
            data = z.unconsumed_tail
            continue
        if not z.eof:
            raise ValueError("cut short")
        data = z.unused_data
        if not data:
            return b"".join(out)
        z = zlib.decompressobj(16 + zlib.MAX_WBITS)     # a second member


def _inflate(data: bytes) -> bytes:
    try:                     # RFC 9110's deflate is zlib-wrapped; some servers send it raw
        return zlib.decompress(data)
    except zlib.error:
        return zlib.decompress(data, -zlib.MAX_WBITS)


def _unbrotli(data: bytes) -> bytes:
    import brotli            # pywb's dependency (brotlipy); not always installed
    return brotli.decompress(data)


def _unzstd(data: bytes) -> bytes:
    import zstandard         # an install dependency; a copy without it keeps zstd pages as recorded
    out, size = [], 0
    with zstandard.ZstdDecompressor().stream_reader(data, read_across_frames=True) as reader:
        while piece := reader.read(1 << 20):        # bounded: a bomb stops at DECODED_MAX
            size += len(piece)
            if size > DECODED_MAX:
                raise ValueError(f"larger than {DECODED_MAX >> 20} MiB decoded")
            out.append(piece)
    rest = data                 # the reader ends quietly at a cut frame: every frame must end
    while rest:
        frame = zstandard.ZstdDecompressor().decompressobj()
        frame.decompress(rest)
        if not frame.eof:
            raise ValueError("cut short")
        rest = frame.unused_data
    return b"".join(out)


CONTENT_DECODERS = {b"gzip": _gunzip, b"x-gzip": _gunzip, b"deflate": _inflate, b"br": _unbrotli,
                    b"zstd": _unzstd}


CHUNK_SIZE_LINE = re.compile(rb"[0-9A-Fa-f]+[ \t]*(;[^\r\n]*)?\r?\n")


def dechunk(data: bytes) -> bytes:
    """The body of a ``Transfer-Encoding: chunked`` message (trailers dropped)."""
    out, p = [], 0
    while True:
        eol = data.find(b"\n", p)
        if eol < 0:
            raise ValueError("a chunk size line is cut short")
        size = int(data[p:eol].split(b";")[0].strip() or b"x", 16)
        p = eol + 1
        if size == 0:
            return b"".join(out)
        if p + size > len(data):
            raise ValueError("a chunk is cut short")
        out.append(data[p:p + size])
        p += size
        p += 2 if data[p:p + 2] == b"\r\n" else 1 if data[p:p + 1] == b"\n" else 0


def http_codings(http: bytes) -> tuple[list[bytes], list[bytes]]:
    """(transfer codings, content codings) an HTTP header block names, lowercase, in order."""
    found: dict[bytes, list[bytes]] = {b"transfer-encoding": [], b"content-encoding": []}
    for line in http.split(b"\n")[1:]:
        k, sep, v = line.partition(b":")
        if sep and k.strip().lower() in found:
            found[k.strip().lower()] += [c.strip().lower() for c in v.split(b",") if c.strip()]
    return ([c for c in found[b"transfer-encoding"] if c != b"identity"],
            [c for c in found[b"content-encoding"] if c != b"identity"])


def decode_entity(http: bytes, entity) -> tuple[Optional[bytes], Optional[str]]:
    """(the document a browser shows: dechunked, decompressed; or None, why not).
    (None, None) when the entity is not encoded."""
    transfer, content = http_codings(http)
    if not transfer and not content:
        return None, None
    if not isinstance(entity, bytes):
        return None, "longer than a record held in memory"
    data = entity
    try:
        for coding in reversed(transfer):
            if coding != b"chunked":
                return None, f"transfer coding {coding.decode('ascii', 'replace')} unknown"
            if CHUNK_SIZE_LINE.match(data):
                data = dechunk(data)
            # else the crawler recorded the body dechunked, as many do (warcio reads it so)
        for coding in reversed(content):
            if not data:
                break           # no body (a HEAD's, a 204 or 304's) names the coding of what it did not send
            decoder = CONTENT_DECODERS.get(coding)
            if decoder is None:
                return None, f"content coding {coding.decode('ascii', 'replace')} unknown"
            data = decoder(data)
    except ImportError as exc:
        return None, f"{b', '.join(content).decode('ascii', 'replace')}: the {exc.name} package is not installed"
    except Exception as exc:        # zlib.error, brotli.error, ValueError: damaged data
        return None, f"{b', '.join(transfer + content).decode('ascii', 'replace')} does not decode ({exc})"
    return (data, None) if data is not entity else (None, None)


# ---------------------------------------------------------------- a record filed

@dataclass
class Filed:
    """Where and how a capture record is filed (``file_record``), or why not:
    ``unfiled`` names the header it lacks ("WARC-Target-URI", or "date": none
    usable), and it is kept in the heads only."""
    uri: bytes = b""                # WARC-Target-URI, without the <> and blanks some crawlers write
    date: str = ""                  # its ARC or WARC date, as written
    stem: bytes = b""               # its file's path below the collection, but the stamp
    stamp: bytes = b""              # the stamp of the URL's first capture at that date
    mtime_ns: int = 0
    xattrs: tuple = ()              # (name, value), but user.warc.source (the importing process's)
    unfiled: Optional[str] = None


def file_record(rec) -> Filed:
    """How a capture record (warcread.Record: response, resource or revisit) is
    filed; its document and what kept it from decoding are set on it
    (``rec.document``, ``rec.undecoded``). Raises ValueError (or
    RecursionError) where its URL cannot be a path."""
    f = rec.fields
    rec.document, rec.undecoded = None, None
    if rec.rtype != "revisit" and rec.http:
        rec.document, rec.undecoded = decode_entity(rec.http, rec.payload)
    uri = f.get(b"warc-target-uri", b"")
    if not uri:
        return Filed(unfiled="WARC-Target-URI")
    clean = uri.strip(b" \t")
    if clean.startswith(b"<") and clean.endswith(b">"):
        clean = clean[1:-1].strip(b" \t")
    date = f.get(b"arc-date") or f.get(b"warc-date", b"")
    try:
        date_text = date.decode("ascii")
        stamp = urlpath.stamp(date_text).encode()
    except (ValueError, UnicodeDecodeError):
        return Filed(uri=clean, unfiled="date")
    stem = urlpath.url_to_path(clean).encode("utf-8", "surrogateescape")
    found: dict = {}
    for xname, key in XATTR_FIELDS:
        if key in f:
            found[xname] = f[key]
    if rec.arc:
        found[b"user.warc.type"] = rec.rtype.encode()
    if rec.http:
        first = rec.http.split(b"\n", 1)[0].split()
        if len(first) >= 2:
            found[b"user.http.status"] = first[1]
        for line in rec.http.split(b"\n")[1:]:
            k, sep, v = line.partition(b":")
            xname = HTTP_XATTRS.get(k.strip().lower()) if sep else None
            if xname is not None and xname not in found:
                found[xname] = v.strip(b" \t\r")
    elif f.get(b"content-type") and rec.rtype == "resource":
        found[b"user.http.content-type"] = f[b"content-type"]
    return Filed(clean, date_text, stem, stamp, _date_ns(date), tuple(found.items()))


@functools.lru_cache(maxsize=4096)
def _date_ns(date: bytes) -> int:
    try:
        s = date.decode("ascii")
        if len(s) == 14 and s.isdigit():
            t = time.strptime(s, "%Y%m%d%H%M%S")
        else:
            t = time.strptime(s[:19], "%Y-%m-%dT%H:%M:%S")
        return calendar.timegm(t) * 1_000_000_000
    except (ValueError, UnicodeDecodeError):
        return time.time_ns()
