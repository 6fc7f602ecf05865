"""The CDXJ lines of a source file being imported, made from what the import
has already read: each record's WARC and HTTP headers (in ``F.heads``) and its
place in the virtual file (``cdxj.VirtualFile.lay_out``).

pywb's indexer (``cdxj.index_one``) parses every record again with warcio,
which was most of the CPU of the CDXJ made at import. The records most
crawls hold make their lines by a few of its rules, which are these: a
response or revisit of a WARC file, with an HTTP header and a payload
digest, gives ``SURT TIMESTAMP {"url", "mime", "status", "digest",
"length", "offset", "filename"}``; a warcinfo record and a GET request give
none, nor does a record of WARC fields; a resource with a payload digest
gives its line too. A source holding anything else (an ARC record, a
metadata or conversion record of another type, a POST, a record without a
payload digest, a URL or a Content-Type that is not plain ASCII, a folded
HTTP header, ...) gets ``None``, and pywb's own indexer indexes it as
before. Either way the lines are the same bytes (tests: t2_importcdxj.py
compares them with pywb's on its sample files and generated crawls).

What a line takes from its record's headers (``record_entry``) and its
SURT key and timestamp (pywb's canonicalize, and its import a third of a
second) are made by the import's reading process as it reads
(``KeyMaker``, which has the cores' spare time) and handed to
``lines_of``, which makes those it was not given: what is left for the
import's end is the layout's part of each line.
"""
from __future__ import annotations

import functools
import re
import threading
import zlib
from typing import Optional

from .warcread import header_fields

_PRINTABLE = re.compile(rb"[!-~]+\Z")       # one ASCII token: no space, no control, no 8-bit byte
_STATUS_LINE = re.compile(rb"HTTP/1\.[01] ([0-9]{3})(?: [ -~]*)?\r?\n")
_HEADER_LINE = re.compile(rb"[!-9;-~]+:[^\r\n]*\r?\n")   # name: value, not folded (pywb reads only the type)
_MIME_END = re.compile(rb"[; ]")             # pywb's MIME_RE: the type before its parameters
_TAIL = b"\r\n\r\n"


def lines_of(name: str, vf, keys: Optional[dict] = None) -> Optional[list[bytes]]:
    """The sorted CDXJ lines of a laid-out virtual file (``name``: the lines'
    filename field), as pywb's indexer with ``wb-manager add``'s options makes
    them; None when a record is one these rules do not cover. ``keys``:
    ``KeyMaker``'s, by the records' offsets in the source (used where the
    record's WARC and HTTP headers are the bytes they were made of)."""
    if not name.isascii() or len(vf.starts) != len(vf.lines):
        return None
    encode = _json_encoder()
    keys = keys or {}
    out = []
    for ln, start, parts in zip(vf.lines, vf.starts, vf.parts):
        head, http = ln.warc_head(vf.heads), ln.http_head(vf.heads)
        made = keys.get(ln.offset)
        if made is not None and made[0] == _identity(head, http):
            entry, key = made[1], made[2]
        else:
            entry, key = record_entry(ln.rtype, head, http, header_fields(head)), None
        if entry == NO_LINE:
            continue                    # a warcinfo record, WARC fields: no line
        # a record shown otherwise has no line of these rules; a record's length
        # is warcio's: up to its tail (the two CRLFs), which is checked
        tail_at = ln.payload_at + (ln.pl if ln.where != "file" else 0)
        if entry is None or any(p[0] == "b" for p in parts) or vf.heads[tail_at:tail_at + ln.tl] != _TAIL:
            return None
        if entry is False:
            continue                    # a GET request: no line
        url, mime, status, digest, date = entry
        if key is None:
            try:
                key = surt_and_stamp(url, date)
            except Exception:           # pywb's indexer would say what: it indexes this source
                return None
        fields = {k: v for k, v in (("url", url), ("mime", mime), ("status", status), ("digest", digest),
                                    ("length", str(sum(p[2] for p in parts) - len(_TAIL))), ("offset", str(start)))
                  if v and v != "-"}        # pywb leaves out what is empty or "-"
        fields["filename"] = name
        out.append(f"{key[0]} {key[1]} {encode(fields)}\n".encode())
    return sorted(out)


def _identity(head: bytes, http: bytes) -> tuple[int, int, int]:
    """What tells a record's WARC and HTTP headers from another's at the same
    offset: their lengths and CRC-32 (made by KeyMaker as it reads, checked by
    lines_of against the headers kept)."""
    return len(head), len(http), zlib.crc32(http, zlib.crc32(head))


def surt_and_stamp(url: str, date: str) -> tuple[str, str]:
    """A line's key (pywb's SURT of the URL) and its 14-digit timestamp."""
    from pywb.utils.canonicalize import canonicalize
    return canonicalize(url), _stamp(date)


@functools.lru_cache(maxsize=4096)
def _stamp(date: str) -> str:
    """warcio's timestamp of a WARC-Date, kept for the dates that come again
    (a crawl writes many records a second): its datetime parsing was a fifth
    of what the keys cost the reading process."""
    from warcio.timeutils import iso_date_to_timestamp
    return iso_date_to_timestamp(date)


class KeyMaker:
    """What the lines of a source's records take from their headers, made by
    the import's reading process: each record's entry (``record_entry``), and
    the SURT key and timestamp of those with a line (pywb's canonicalize,
    imported by a thread of its own). Nothing is made before ``start``,
    which that process calls once it is ahead of the import (the import of
    pywb, a fifth of a second of CPU, slowed the first records the import
    waited for); ``take`` gives what was made since it was last asked,
    {offset: (the headers' identity, entry, (SURT, stamp) or None)}; no key
    when pywb cannot be imported (``lines_of`` then does without, and pywb's
    indexer is not there either)."""

    def __init__(self):
        self.waiting: list[tuple] = []
        self.made: dict[int, tuple] = {}
        self.started = False
        self.usable = False             # pywb imported and working
        self.loaded = threading.Event() # ... or found missing

    def start(self) -> None:
        """Import pywb, in a thread; the records added are made once it is there."""
        if not self.started:
            self.started = True
            threading.Thread(target=self._load, name="cdxj keys", daemon=True).start()

    def _load(self) -> None:
        try:
            surt_and_stamp("http://example.com/", "2024-01-01T00:00:00Z")
            self.usable = True
        except Exception:
            pass                        # no pywb: no keys
        finally:
            self.loaded.set()

    def add(self, rec) -> None:
        """A record read (webfs.warcread.Record), to make its entry, and its key
        if it gets a line. Its ``fields`` are its WARC header's, parsed as
        ``header_fields`` parses them (an ARC record gets no entry either way)."""
        self.waiting.append((rec.offset, rec.rtype or "-", rec.head, rec.http, rec.fields))
        if self.loaded.is_set():
            self._make()

    def _make(self) -> None:
        for offset, rtype, head, http, fields in self.waiting:
            entry, key = record_entry(rtype, head, http, fields), None
            if isinstance(entry, tuple) and self.usable:
                try:
                    key = surt_and_stamp(entry[0], entry[4])
                except Exception:
                    pass                # lines_of tries it again, and leaves the source to pywb
            self.made[offset] = (_identity(head, http), entry, key)
        self.waiting = []

    def take(self, wait: bool = False) -> dict:
        """What was made since the last call; ``wait``: all of it (started now
        if it was not)."""
        if wait:
            self.start()
            self.loaded.wait()
        if self.loaded.is_set():
            self._make()
        made, self.made = self.made, {}
        return made


@functools.lru_cache(maxsize=None)
def _json_encoder():
    """pywb's JSON encoder, chosen as pywb.indexer.cdxindexer chooses it (ujson when
    it is installed and leaves slashes alone, else the standard library's)
    without importing that module, a quarter of a second of the import's start."""
    try:
        from ujson import dumps
        if dumps("http://example.com/", escape_forward_slashes=False) == '"http://example.com/"':
            return functools.partial(dumps, escape_forward_slashes=False)
    except Exception:
        pass
    import json
    return json.dumps


# record_entry: a record pywb gives no line, however it is laid out (compared
# by ==: the reading process sends it pickled)
NO_LINE = "no line"


def record_entry(rtype: str, head: bytes, http: bytes, fields: dict):
    """(url, mime, status, digest, WARC-Date) of a record's line, from its type
    (as the index holds it), WARC header (``fields``: parsed) and HTTP header;
    NO_LINE for a record pywb gives no line (a warcinfo, WARC fields); False
    for one it gives none when shown as recorded (a GET request); None for
    one these rules do not cover."""
    if not head.startswith(b"WARC/"):
        return None                     # an ARC record
    if rtype == "warcinfo" or fields.get(b"content-type") == b"application/warc-fields":
        return NO_LINE
    if rtype == "request":
        return False if http.startswith(b"GET ") else None     # another method changes the key
    if rtype == "resource":
        return _resource(fields, http)
    if rtype not in ("response", "revisit"):
        return None
    url, date = fields.get(b"warc-target-uri", b""), fields.get(b"warc-date", b"")
    digest = fields.get(b"warc-payload-digest", b"")
    if (not fields.get(b"content-type", b"").lower().startswith(b"application/http")
            or not _PRINTABLE.match(url) or url.startswith(b"<") or b"WB_wombat_" in url
            or not _PRINTABLE.match(date) or not _PRINTABLE.match(digest)
            or b"warc-json-metadata" in fields or b"warc-identified-payload-type" in fields):
        return None
    m = _STATUS_LINE.match(http)
    if m is None or m.group(1) == b"204":          # pywb makes some 204s '-'
        return None
    mime = b"warc/revisit" if rtype == "revisit" else _http_mime(http[m.end():])
    if mime is None:
        return None
    status = m.group(1).decode() if rtype == "response" else "-"
    digest = digest[5:] if digest.startswith(b"sha1:") else digest
    return url.decode(), mime.decode(), status, digest.decode(), date.decode()


def _resource(fields: dict, http: bytes):
    """A resource record's entry: warcio gives it an HTTP header of its WARC
    Content-Type, so that type is its mime; no status."""
    url, date = fields.get(b"warc-target-uri", b""), fields.get(b"warc-date", b"")
    digest, ctype = fields.get(b"warc-payload-digest", b""), fields.get(b"content-type", b"")
    if (http or not _PRINTABLE.match(url) or url.startswith(b"<") or b"WB_wombat_" in url
            or not _PRINTABLE.match(date) or not _PRINTABLE.match(digest) or not re.match(rb"[ -~]+\Z", ctype)
            or b"warc-json-metadata" in fields or b"warc-identified-payload-type" in fields):
        return None
    mime = _MIME_END.split(ctype.strip(), 1)[0]
    if not mime:
        return None
    digest = digest[5:] if digest.startswith(b"sha1:") else digest
    return url.decode(), mime.decode(), "-", digest.decode(), date.decode()


def _http_mime(lines: bytes) -> Optional[bytes]:
    """The type of an HTTP header block's first Content-Type (b"unk" without
    one), as pywb takes it; None when a line is not a header of its own (folded,
    no name) or the type is not plain ASCII."""
    mime = b"unk"
    found = False
    pos = 0
    while True:
        if lines.startswith(b"\r\n", pos) or lines.startswith(b"\n", pos):
            return mime
        m = _HEADER_LINE.match(lines, pos)
        if m is None:
            return None
        if not found and lines[pos:pos + 13].lower() == b"content-type:":
            found = True
            mime = _MIME_END.split(lines[pos + 13:m.end()].strip(), 1)[0]
            if not _PRINTABLE.match(mime):
                return None             # empty, or not ASCII: as warcio decodes it is not checked here
        pos = m.end()
