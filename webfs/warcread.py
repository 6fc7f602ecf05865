"""Reading web archive files: every record of a WARC (0.17 to 1.1) or ARC file,
gzipped per record or plain, cut into its raw parts, and every damage met
said with its offset.

Well-formed records are cut directly (one decompression, no Python per
line); from the first record that is not, warcio reads the rest and says
what is wrong, and the raw bytes of each record it found are read back from
the file by offset and length, so nothing warcio rewrites is lost
(``read_records``).

This module imports no catalog, placement nor codec: it reads. An import's
reading process, which also prepares the captures, is webfs.warcapart's.
"""
from __future__ import annotations

import base64
import errno
import hashlib
import os
import re
import shutil
import tempfile
import zlib
from dataclasses import dataclass, field
from typing import Iterator, Optional

from zlib_ng import zlib_ng


_BLANK_LINE = re.compile(rb"\n\r*\n")     # the end of a header block (\r\n, \n, \r\r\n lines)
_ARC_LINE = re.compile(rb"\n([^ \r\n]+) ([0-9.]+|-) ([0-9]{14}) ")

SPILL_AT = 8 << 20          # a record longer than this is not held in memory (see Payload)
READ_CHUNK = 1 << 20
# The longest header block warcio is let read (a run of lines without a blank
# one): a header line that never ends, in a gzip member inflating to gigabytes,
# is reported at this length instead of filling memory. warcio has no bound;
# 64 KiB is 16 times the longest URL browsers keep, and 10 times any header
# block of the pywb samples and of our test corpora.
HEADER_MAX = 64 << 10
FEED = 1 << 16             # bytes of a per-record gzip file given to zlib at a time


class Payload:
    """A payload kept out of memory: ``length`` bytes at ``offset`` of a file (the
    source itself for a plain WARC, a temporary file for a gzipped record)."""

    def __init__(self, fd: int, offset: int, length: int):
        self.fd = os.dup(fd)           # its own: the reader closes the source before the store reads
        self.offset = offset
        self.length = length

    def __len__(self) -> int:
        return self.length

    def pieces(self, size: int) -> Iterator[bytes]:
        """The payload in pieces of ``size`` bytes (the last one shorter)."""
        done = 0
        while done < self.length:
            want = min(size, self.length - done)
            parts, got = [], 0
            while got < want:
                data = os.pread(self.fd, want - got, self.offset + done + got)
                if not data:
                    raise OSError(errno.EIO, "the source file got shorter while it was read")
                parts.append(data)
                got += len(data)
            done += want
            yield parts[0] if len(parts) == 1 else b"".join(parts)

    def __del__(self):
        try:
            os.close(self.fd)
        except (OSError, AttributeError):
            pass


def payload_pieces(payload, size: int) -> Iterator[bytes]:
    """A payload (bytes or Payload) in pieces of at most ``size`` bytes; none when empty."""
    if isinstance(payload, Payload):
        yield from payload.pieces(size)
        return
    mv = memoryview(payload)
    for i in range(0, len(payload), size):
        yield bytes(mv[i:i + size])


@dataclass
class Record:
    """One record, raw: what the file holds, cut into its parts."""
    offset: int                  # in the source file (the uncompressed stream for a whole-file gzip)
    length: int                  # bytes in the source file (the gzip member for per-record gzip)
    gz: bool
    rtype: str
    head: bytes                  # the WARC header block (with its blank line), or the ARC header line
    http: bytes                  # the HTTP header block (with its blank line), or b""
    payload: object              # bytes, or a Payload when the record is longer than SPILL_AT
    tail: bytes                  # what follows the block (the two CRLFs), as written
    fields: dict = field(default_factory=dict)   # lowercase header name -> raw value (bytes)
    arc: bool = False
    gzip: bytes = b""            # the index's gz column: how to make the gzip member again (gzip_recipe)
    prepared: Optional[tuple] = None   # (signature, digest verdict, encoded): read_records_apart
    filed: Optional[object] = None     # capture.Filed, the reading process's (read_records_apart)
    document: Optional[bytes] = None   # the entity decoded, and why it is not: capture.file_record
    undecoded: Optional[str] = None

    @property
    def shown(self):
        """What its capture file holds: the document decoded, else the payload as recorded."""
        return self.payload if self.document is None else self.document


def gzip_recipe(member: bytes, crc: int) -> bytes:
    """The index's gz column for a gzip member: ``gz:LEVEL:HEADER:CRC`` (zlib's
    level its header's XFL names, the member's 10 header bytes in hex, the CRC-32
    of the whole member), from which export-warc tries to make the very member
    again; plain ``gz`` when the header has optional fields (a name, a comment)."""
    if len(member) < 10 or member[3] != 0:
        return b"gz"
    level = {2: 9, 4: 1}.get(member[8], 6)
    return b"gz:%d:%s:%08x" % (level, member[:10].hex().encode(), crc)


@dataclass
class Problem:
    offset: int
    text: str


class Unreadable(ValueError):
    """What is wrong with a record, in words (said as it is: ``_say``)."""


def header_fields(head: bytes) -> dict:
    out: dict[bytes, bytes] = {}
    for line in head.split(b"\n")[1:]:
        name, sep, value = line.partition(b":")
        if sep and name.strip():
            out.setdefault(name.strip().lower(), value.strip(b" \t\r"))
    return out


def arc_fields(line: bytes) -> dict:
    parts = line.strip(b" \r\n").split(b" ")
    d = parts[2] if len(parts) > 2 else b""
    date = (d[0:4] + b"-" + d[4:6] + b"-" + d[6:8] + b"T" + d[8:10] + b":" + d[10:12] + b":"
            + d[12:14] + b"Z") if len(d) == 14 and d.isdigit() else d
    return {b"warc-target-uri": parts[0] if parts else b"", b"warc-date": date, b"arc-date": d,
            b"content-type": parts[3] if len(parts) > 3 else b""}


def _split_http(block: bytes) -> tuple[bytes, bytes]:
    """(HTTP header block with its blank line, payload) of a block that starts with HTTP headers."""
    m = _BLANK_LINE.search(block)
    if m:
        return block[:m.end()], block[m.end():]
    return block, b""


def _has_http(rtype: str, fields: dict, block: bytes) -> bool:
    ct = fields.get(b"content-type", b"").lower()
    if rtype in ("response", "request", "revisit") and b"application/http" in ct:
        return True
    return rtype in ("response", "revisit") and block[:5] == b"HTTP/" and not ct


def _cut(raw: bytes, gz: bool, offset: int, length: int, rtype: str, warcio_rec) -> Record:
    """A record's raw bytes cut into head, HTTP headers, payload and tail."""
    if raw.startswith(b"WARC/"):
        m = _BLANK_LINE.search(raw)
        if not m:
            raise Unreadable("its WARC header never ends (no blank line after it)")
        head = raw[:m.end()]
        fields = header_fields(head)
        try:
            n = int(fields.get(b"content-length", b""))
        except ValueError:
            raise Unreadable(f"its Content-Length {_excerpt(fields.get(b'content-length', b''))} "
                             "is not a number") from None
        block = raw[m.end():m.end() + n]
        tail = raw[m.end() + n:]
        arc = False
        if len(block) < n:
            fields[b"x-problem"] = (f"Content-Length {n} runs past the end of the "
                                    f"{'gzip member' if gz else 'file'}: the record is cut short, "
                                    f"{len(block)} of its {n} bytes are there").encode()
    else:                                   # ARC: one header line, then the block
        i = raw.find(b"\n")
        head = raw[:i + 1]
        fields = arc_fields(head)
        parts = head.split()
        n = int(parts[-1]) if parts and parts[-1].isdigit() else len(raw) - len(head)
        block = raw[i + 1:i + 1 + n]
        tail = raw[i + 1 + n:]
        arc = True
    http, payload = b"", block
    if (not arc and _has_http(rtype, fields, block)) or (arc and rtype == "response" and block[:5] == b"HTTP/"):
        http, payload = _split_http(block)
    return Record(offset, length, gz, rtype, head, http, payload, tail, fields, arc)


class _Sink:
    """The uncompressed bytes of one gzip member: in memory up to SPILL_AT, then
    in a temporary file (a multi-GB record is imported with bounded memory)."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []
        self.length = 0
        self.file = None
        self.checked = False

    def write(self, data: bytes) -> None:
        if not data:
            return
        self.length += len(data)
        if self.file is not None:
            self.file.write(data)
            return
        self.parts.append(data)
        if self.length > SPILL_AT:
            self.file = tempfile.TemporaryFile(prefix="webfs-warc-")
            for part in self.parts:
                self.file.write(part)
            self.parts = []

    def headless(self) -> bool:
        """Whether a READ_CHUNK has come in without the blank line ending a header
        (``_strict_record`` would not cut it: a gzip bomb stops here)."""
        if self.length < READ_CHUNK or self.checked:
            return False
        self.checked = True
        return not _BLANK_LINE.search(self.prefix()[:READ_CHUNK])

    def prefix(self) -> bytes:
        """All of it, or (spilled) its first READ_CHUNK bytes."""
        if self.file is None:
            return b"".join(self.parts)
        self.file.flush()
        return os.pread(self.file.fileno(), READ_CHUNK, 0)


def _strict_record(prefix: bytes, total: int, fd: Optional[int], base: int, gz: bool,
                   offset: int, length: int) -> Optional[Record]:
    """A well-formed WARC record (header, Content-Length, block, CRLF CRLF) cut into
    its parts, or None for anything else (then warcio reads it). ``prefix`` is the
    record's first bytes, all of them when ``total`` is its length; the rest is
    at ``base`` of ``fd``, from where a long payload is read when it is stored."""
    if not prefix.startswith(b"WARC/"):
        return None
    m = _BLANK_LINE.search(prefix)
    if not m:
        return None
    head = prefix[:m.end()]
    fields = header_fields(head)
    rtype = fields.get(b"warc-type")
    try:
        n = int(fields.get(b"content-length", b""))
    except ValueError:
        return None
    if rtype is None or n < 0 or m.end() + n + 4 != total:
        return None
    rtype = rtype.decode("utf-8", "replace")
    if total == len(prefix):
        block, tail = prefix[m.end():m.end() + n], prefix[m.end() + n:]
        if tail != b"\r\n\r\n":
            return None
        http, payload = b"", block
        if _has_http(rtype, fields, block):
            http, payload = _split_http(block)
        return Record(offset, length, gz, rtype, head, http, payload, tail, fields)
    if fd is None or os.pread(fd, 4, base + m.end() + n) != b"\r\n\r\n":
        return None
    start = prefix[m.end():]
    http = b""
    if _has_http(rtype, fields, start):
        hm = _BLANK_LINE.search(start)
        if not hm:
            return None            # an HTTP header block of more than READ_CHUNK: warcio's
        http = start[:hm.end()]
    payload = Payload(fd, base + m.end() + len(http), n - len(http))
    return Record(offset, length, gz, rtype, head, http, payload, b"\r\n\r\n", fields)


def _strict_gz(fh, start: int, size: int) -> Iterator[object]:
    """Well-formed records of a per-record gzip file from ``start``, read without
    warcio (one decompression, no Python per line); returns where it stopped."""
    pos = start
    fh.seek(pos)
    buf, at = b"", 0            # read ahead, and where in it the next member starts
    while pos < size:
        if len(buf) - at < FEED:
            buf = buf[at:] + fh.read(READ_CHUNK)
            at = 0
        if buf[at:at + 3] != b"\x1f\x8b\x08":
            return pos
        d = zlib_ng.decompressobj(31)     # zlib-ng's inflate and crc32: 0.6x zlib's CPU here
        sink = _Sink()
        # Fed FEED bytes at a time: zlib copies what follows a member's end into
        # unused_data, which for the whole read-ahead cost a copy of up to a MiB per record.
        view = memoryview(buf)
        length, crc, head = 0, 0, buf[at:at + 10]
        try:
            while True:
                data = view[at:at + FEED]
                if not data:
                    buf = fh.read(READ_CHUNK)
                    if not buf:
                        return pos               # cut short: warcio says so
                    view, at = memoryview(buf), 0
                    continue
                sink.write(d.decompress(data, 1 << 22))
                while d.unconsumed_tail and not d.eof:
                    sink.write(d.decompress(d.unconsumed_tail, 1 << 22))
                if sink.headless():
                    return pos           # not a record this reader cuts: not inflated to its end
                used = len(data) - len(d.unused_data)
                crc = zlib_ng.crc32(data[:used], crc)
                length += used
                at += used
                if d.eof:
                    break
        except zlib_ng.error:
            return pos
        prefix = sink.prefix()
        spill = sink.file
        rec = _strict_record(prefix, sink.length, spill.fileno() if spill else None, 0, True, pos, length)
        if rec is None:
            return pos
        rec.gzip = gzip_recipe(head, crc)
        yield rec
        pos += length
    return pos


def _strict_plain(fh, start: int, size: int) -> Iterator[object]:
    """Well-formed records of a plain WARC file from ``start``, each followed by the
    next record or the end of the file; returns where it stopped."""
    fd = fh.fileno()
    pos = start
    while pos < size:
        prefix = os.pread(fd, min(READ_CHUNK, size - pos), pos)
        m = _BLANK_LINE.search(prefix) if prefix.startswith(b"WARC/") else None
        if not m:
            return pos
        try:
            n = int(header_fields(prefix[:m.end()]).get(b"content-length", b""))
        except ValueError:
            return pos
        total = m.end() + n + 4
        if n < 0 or pos + total > size or (pos + total < size and os.pread(fd, 5, pos + total) != b"WARC/"):
            return pos
        if total <= SPILL_AT and total > len(prefix):
            prefix = os.pread(fd, total, pos)
        rec = _strict_record(prefix[:total], total, fd, pos, False, pos, total)
        if rec is None:
            return pos
        yield rec
        pos += total
    return pos


def _resync(fh, start: int, gz: bool, arc: bool) -> Optional[int]:
    """The offset of the next thing that looks like a record after ``start``."""
    fh.seek(start)
    data = fh.read(1 << 24)
    if gz:
        i = data.find(b"\x1f\x8b\x08")
        return None if i < 0 else start + i
    found = []
    m = re.search(rb"(?:^|\n)WARC/[0-9]", data)
    if m:
        found.append(m.start() + (data[m.start():m.start() + 1] == b"\n"))
    m = _ARC_LINE.search(b"\n" + data)
    if m:
        found.append(m.start())
    return start + min(found) if found else None


def read_records(path: str, start: int = 0) -> Iterator[object]:
    """Every record of a WARC or ARC file, as Record, and every damage met, as
    Problem; from ``start``, the offset of a record (not in a whole-file gzip)."""
    try:
        size = os.path.getsize(path)
        fh = open(path, "rb")
    except OSError as exc:
        yield Problem(0, f"{exc.strerror}")
        return
    with fh:
        if size == 0:
            yield Problem(0, "empty file: no records")
            return
        magic = fh.read(3)
        gz = magic[:2] == b"\x1f\x8b"
        if gz and not start and whole_file_gzip(fh):
            yield Problem(0, "a whole-file gzip (one gzip stream, not one per record): read as one "
                          "stream; offsets are in the uncompressed stream")
            with tempfile.TemporaryFile() as tmp:
                fh.seek(0)
                try:
                    import gzip
                    with gzip.GzipFile(fileobj=fh) as g:
                        shutil.copyfileobj(g, tmp)
                except (OSError, EOFError, zlib.error) as exc:
                    yield Problem(tmp.tell(), f"the gzip stream is damaged ({exc}); what came before is read")
                tmp.flush()
                yield from _records(tmp, os.fstat(tmp.fileno()).st_size, False)
            return
        yield from _records(fh, size, gz, start)


def record_at(path: str, offset: int) -> object:
    """The well-formed record of a per-record gzip file at an offset."""
    with open(path, "rb") as fh:
        rec = next(_strict_gz(fh, offset, os.fstat(fh.fileno()).st_size), None)
    return rec if rec is not None else Problem(offset, "the record could not be read again")


def whole_file_gzip(fh) -> bool:
    """Whether the first gzip member holds more than one record."""
    fh.seek(0)
    d = zlib.decompressobj(31)
    out = b""
    while not d.eof:
        chunk = fh.read(1 << 16)
        if not chunk:
            break
        try:
            out += d.decompress(chunk, 1 << 20)
        except zlib.error:
            return False
        if len(out) >= 1 << 20:
            break
    heads = len(re.findall(rb"(?:^|\n)WARC/[0-9]", out[:1 << 20]))
    arcs = len(_ARC_LINE.findall(out[:1 << 20]))
    return heads > 1 or (heads == 0 and arcs > 1 and d.eof is False)


def _records(fh, size: int, gz: bool, start: int = 0) -> Iterator[object]:
    """Well-formed records are read directly; from the first that is not (or an
    ARC), warcio reads the rest and says what is wrong."""
    with open(f"/proc/self/fd/{fh.fileno()}", "rb") as raw_fh:   # our own offset: warcio reads fh
        start = yield from (_strict_gz(raw_fh, start, size) if gz else _strict_plain(raw_fh, start, size))
        if start < size:
            yield from _records_of(fh, raw_fh, size, gz, start)


def _records_of(fh, raw_fh, size: int, gz: bool, start: int) -> Iterator[object]:
    # warcio is loaded here, where a record is not well-formed (or an ARC): a
    # file of well-formed records is read without it (a tenth of a second of
    # an import's reading process starting, a seventh of it warcio's import)
    from warcio.archiveiterator import ArchiveIterator
    arc = False
    while start < size:
        fh.seek(start)
        head = fh.read(16)
        if not gz:
            arc = not head.startswith(b"WARC/")
        fh.seek(start)
        it = ArchiveIterator(fh, arc2warc=False, ensure_http_headers=False)
        it.loader.load_http_headers = _without_uri(it.loader.load_http_headers)
        it.reader.readline = _bounded_readline(it.reader.readline)
        offset = start
        prev = None
        try:
            for rec in it:
                offset = it.offset
                rtype = rec.rec_type or ""
                while rec.raw_stream.read(READ_CHUNK):
                    pass                  # to the end, so the length is known
                length = it.get_record_length()
                offset = it.get_record_offset()
                if prev is not None:
                    yield _raw(raw_fh, prev, offset)
                prev = (offset, length, rtype, it.err_count)
                it.err_count = 0
        except Exception as exc:             # warcio says what it could not read
            if prev is not None:
                yield _raw(raw_fh, prev, None)
                offset = prev[0] + prev[1]
                prev = None
            offset = max(offset, start)
            yield Problem(offset, f"unreadable record: {_header_problem(raw_fh, offset) or _say(exc)}")
            nxt = _resync(raw_fh, offset + 1, gz, arc)
            if nxt is None:
                return
            yield Problem(offset, f"skipped {nxt - offset} bytes to the next record at offset {nxt}")
            start = nxt
            continue
        if prev is not None:
            yield _raw(raw_fh, prev, None if gz else size)
            end = prev[0] + prev[1]
            if gz and end < size:
                raw_fh.seek(end)
                rest = raw_fh.read(size - end)
                if rest.strip(b"\0\r\n "):
                    yield Problem(end, f"{size - end} bytes after the last record are not a whole "
                                  "record (a gzip member cut short?); not imported")
        elif start == 0 or start < size:
            raw_fh.seek(start)
            if raw_fh.read(size - start).strip(b"\0\r\n "):
                yield Problem(start, "no record could be read here")
        return


def _without_uri(load_http_headers):
    """warcio's HTTP header parsing, for a record without WARC-Target-URI too
    (warcio's failed: an AttributeError); one without Content-Length is refused
    (warcio would read on to the end of the file, the records after it too)."""
    def load(rec_type, uri, stream, length):
        if length is None:
            raise Unreadable("its WARC header has no Content-Length")
        return load_http_headers(rec_type, uri or "", stream, length)
    return load


def _bounded_readline(readline):
    """warcio's readline, refusing a header block (lines up to a blank one) of
    more than HEADER_MAX bytes rather than reading it all into memory."""
    run = 0

    def bounded(length=None):
        nonlocal run
        room = HEADER_MAX + 1 - run
        line = readline(room if length is None or length > room else length)
        run = 0 if not line.strip(b"\r\n") else run + len(line)
        if run > HEADER_MAX:
            raise Unreadable(f"a header of more than {HEADER_MAX >> 10} KiB without the blank line that ends it")
        return line
    return bounded


def _header_problem(fh, offset: int) -> Optional[str]:
    """What is wrong with the WARC header of the record at ``offset``, in words
    (warcio's own error there can be an AttributeError), or None if it looks
    whole; at most HEADER_MAX + READ_CHUNK bytes are inflated to tell."""
    fh.seek(offset)
    raw = fh.read(FEED)
    gz, whole = raw[:2] == b"\x1f\x8b", False      # whole: all of the record is in raw
    if gz:
        d, out = zlib.decompressobj(31), b""
        try:
            while len(out) <= HEADER_MAX and raw and not d.eof:
                out += d.decompress(raw, HEADER_MAX + 1 - len(out))
                raw = d.unconsumed_tail or fh.read(FEED)
        except zlib.error as exc:
            if not out.startswith(b"WARC/") and not _ARC_LINE.match(b"\n" + out):
                return "not a WARC or ARC record (its gzip member is damaged and does not start with WARC/)"
            return f"its gzip member is damaged after {len(out)} bytes ({_zlib_words(exc)})"
        raw, whole = out, d.eof
    else:
        whole = fh.seek(0, os.SEEK_END) - offset <= len(raw)
    if not raw.startswith(b"WARC/"):
        if gz and not _ARC_LINE.match(b"\n" + raw):
            return f"not a WARC or ARC record (its gzip member does not start with WARC/ but {_excerpt(raw)})"
        return None
    m = _BLANK_LINE.search(raw[:HEADER_MAX + 1])
    if m:
        fields = header_fields(raw[:m.end()])
        if b"content-length" not in fields:
            return "its WARC header has no Content-Length"
        n = fields[b"content-length"]
        if not n.isdigit():
            return f"its Content-Length {_excerpt(n)} is not a number"
        if whole and m.end() + int(n) > len(raw):
            return (f"Content-Length {int(n)} runs past the end of the {'gzip member' if gz else 'file'} "
                    f"({len(raw) - m.end()} bytes follow its header)")
        return None
    if len(raw) > HEADER_MAX:
        return (f"its WARC header runs on past {HEADER_MAX >> 10} KiB without the blank line that ends "
                "a header (a header line that never ends?)")
    return f"its WARC header never ends: the record stops after {len(raw)} bytes, before the blank line that ends a header"


_WARCIO_SAYS = {     # warcio's ArchiveLoadFailed -> what is wrong, in words
    "Unknown archive format": "not a WARC or ARC record (it starts with {})",
    "Invalid WARC record": ("no WARC record starts here (a line {} where its WARC/ line should be: "
                            "the Content-Length of the record before is wrong?)"),
    "Invalid ARC record": ("no ARC record starts here (a line {} where its header line should be: "
                           "the length of the record before is wrong?)"),
}


def _excerpt(data, n: int = 40) -> str:
    """At most ``n`` characters, quoted and escaped: a message never holds raw binary."""
    if isinstance(data, bytes):
        data = data.decode("latin-1")
    shown = "".join(c if " " <= c <= "~" and c not in "\\'" else
                    (c.encode("unicode_escape").decode("ascii") if c != "'" else "\\'") for c in data[:n])
    return "'" + shown + "'" + ("..." if len(data) > n else "")


def _zlib_words(exc: BaseException) -> str:
    return "the compressed data is invalid: " + str(exc).split(": ", 1)[-1]


def _say(exc: BaseException) -> str:
    """What is wrong with a record, in words (others: by name, and a short excerpt)."""
    if isinstance(exc, Unreadable):
        return str(exc)
    if isinstance(exc, zlib.error):
        return f"its gzip member is damaged ({_zlib_words(exc)})"
    if isinstance(exc, OSError) and exc.strerror:
        return f"it could not be read ({exc.strerror})"
    text = str(exc)
    if type(exc).__name__ == "ArchiveLoadFailed":
        for start, words in _WARCIO_SAYS.items():
            said = start + ", first line: "
            if text.startswith(said):
                line = text[len(said):]
                return words.format(_excerpt(line[2:-2] if line[:2] == "['" and line[-2:] == "']" else line))
    return f"a record that cannot be read ({type(exc).__name__}: {_excerpt(text, 80)})"


def _raw(fh, prev, end: Optional[int]) -> object:
    """The raw bytes of a record warcio found at offset, cut into parts (or a Problem)."""
    offset, length, rtype, errs = prev
    cut = False
    try:
        fh.seek(offset)
        if end is not None and end > offset and not _is_gz(fh, offset):
            data = fh.read(end - offset)          # plain: to the next record, blank lines included
            gz = False
        else:
            data = fh.read(length)
            gz = data[:2] == b"\x1f\x8b"
        member = data
        if gz:
            d = zlib.decompressobj(31)
            data = d.decompress(member)
            while not d.eof and len(member) < length + SPILL_AT:
                more = fh.read(FEED)        # warcio's length ends in the member (a wrong Content-Length)
                if not more:
                    break
                data += d.decompress(more)
                member += more[:len(more) - len(d.unused_data)]
                length = len(member)
            cut = not d.eof
        rec = _cut(data, gz, offset, len(data) if not gz else length, rtype, None)
        if gz and not cut:
            rec.gzip = gzip_recipe(member, zlib.crc32(member))
    except (ValueError, zlib.error, OSError) as exc:
        return Problem(offset, f"unreadable record: {_header_problem(fh, offset) or _say(exc)}")
    if cut:
        rec.fields[b"x-problem"] = b"its gzip member is cut short"
    elif errs and b"x-problem" not in rec.fields:
        rec.fields[b"x-problem"] = b"the block is not followed by a blank line: its Content-Length is wrong"
    return rec


def _is_gz(fh, offset: int) -> bool:
    here = fh.tell()
    fh.seek(offset)
    m = fh.read(2)
    fh.seek(here)
    return m == b"\x1f\x8b"


_DIGESTS = {b"sha1": "sha1", b"sha256": "sha256", b"sha-256": "sha256", b"md5": "md5", b"sha512": "sha512"}


class DigestCheck:
    """A WARC digest (``sha1:BASE32``, ``sha256:HEX``, ...) checked over data fed
    in pieces; with none (None) or an unknown algorithm, nothing is checked."""

    def __init__(self, value: Optional[bytes]):
        algo, sep, want = (value or b"").partition(b":")
        name = _DIGESTS.get(algo.strip().lower()) if sep else None
        self.want = want.strip()
        self.hash = hashlib.new(name) if name else None

    def update(self, data: bytes) -> None:
        if self.hash is not None:
            self.hash.update(data)

    def matches(self) -> Optional[bool]:
        """Whether it matches; None if it cannot tell (no digest, an unknown algorithm)."""
        if self.hash is None:
            return None
        digest, want = self.hash.digest(), self.want
        try:
            if len(want) == len(digest) * 2:
                return bytes.fromhex(want.decode()) == digest
            return _base32_is(want.upper(), digest)
        except (ValueError, UnicodeDecodeError):
            return False


# A base32 digest of whole 5-byte groups (SHA-1's 20 bytes: 32 letters, the
# WARCs' usual) read by int() as base 32, whose digits 0-9a-v this maps
# RFC 4648's A-Z2-7 to: base64.b32decode is Python, 13 us a record of an
# import's reading process; int() is C.
_BASE32_AS_INT = bytes.maketrans(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", b"0123456789abcdefghijklmnopqrstuv")
_BASE32_GROUPS = re.compile(rb"(?:[A-Z2-7]{8})+")


def _base32_is(want: bytes, digest: bytes) -> bool:
    """Whether upper-case base32 ``want`` decodes to ``digest`` (ValueError if it does not decode)."""
    if len(want) * 5 == len(digest) * 8 and _BASE32_GROUPS.fullmatch(want):
        return int(want.translate(_BASE32_AS_INT), 32) == int.from_bytes(digest, "big")
    return base64.b32decode(want + b"=" * (-len(want) % 8)) == digest
