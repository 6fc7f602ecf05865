"""Where a web capture lives in a collection: the mapping between a URL and a path.

This module owns one rule, written down in webfs-format(5) (URL PATHS) so that
anyone can invert it without webfs: every capture of a URL is a file at a
path below its collection that is readable in the common case, never shared
with another URL, never a directory of another URL, and names exactly one URL:

    http://example.com/             http/example.com/@20240101120000
    http://example.com/a/b.html     http/example.com/a/b.html@20240101120000
    http://example.com/a/?q=1       http/example.com/a/?q=1@20240101120000
    dns:example.com                 dns:/example.com@20240101120000

In brief:

- The mapping works on the URL exactly as the WARC wrote it, never on a
  normalised form: case, ports, punycode or Unicode hosts, percent-escapes
  (``%2F`` stays ``%2F``), dot segments, fragments all stay as written, so
  ``path_to_url(url_to_path(u)) == u`` for every URL. A URL is the WARC's
  bytes: as text, those bytes decoded as UTF-8 with ``surrogateescape``
  (invalid bytes become U+DC80..U+DCFF); ``bytes`` are accepted too.
- The URL is cut into *segments*: the scheme (``http``; ``dns:`` for a URL
  without ``//``; ``:`` for text without a scheme), then the rest split at
  every ``/`` that comes before the first ``?`` or ``#``; the query and the
  fragment stay on the last segment.
- Every segment but the last is a directory; the last one, followed by
  ``@``, is the URL's *stem*; a capture is the file ``stem + stamp``, the
  stamp being the capture's date (``20240101120000``, ``~2``, ``~3``... for
  more captures with the same date). Directory names never contain ``@``,
  file names always do, so a file never needs the name of a directory.
- ``^`` escapes: ``^XX`` (two uppercase hex digits) is one byte of the URL.
  It writes ``^``, ``@``, ``/``, controls, space and a fixed list of
  invisible characters. A directory named ``^`` is an empty segment; a
  segment that is ``.`` or ``..`` starts with ``^2E``; a segment longer than
  200 bytes is cut into names of at most 200 bytes, each but the last ending
  in ``^+``.

Only what this module produces is accepted back: ``path_to_url`` raises
ValueError for any other path, so paths and URLs are in one-to-one
correspondence.
"""
from __future__ import annotations

import logging
import re
from typing import Union

log = logging.getLogger(__name__)

ESC = "^"                 # starts every escape
MARK = "@"                # ends a URL's last segment; a capture's stamp follows
CONT = "^+"               # ends a name whose segment continues in the next name
EMPTY = "^"               # the whole name of a directory for an empty segment
NO_SCHEME = ":"           # the first name of a URL without a scheme
CHUNK_BYTES = 200         # at most this many bytes of a segment in one name
NAME_MAX = 255
STAMP_MAX_BYTES = NAME_MAX - CHUNK_BYTES - len(MARK)   # 54: room left for a stamp

# Characters written as escapes (each byte of their UTF-8 form as ^XX): the
# escape and the mark, '/', C0 controls, space, DEL, C1 controls, no-break
# space, soft hyphen, and invisible Unicode spaces, joiners, marks and bidi
# controls; U+DC80..U+DCFF are the surrogateescape'd bytes of invalid UTF-8,
# written as the byte they stand for. A fixed list, not Unicode categories,
# so the mapping is the same under every Python and Unicode version.
_ESCAPED = ("\x00-\x20\x7f^@/\x80-\xa0\xad\u061c\u1680\u180e\u2000-\u200f"
            "\u2028-\u202f\u205f-\u206f\u3000\ufeff\ufff9-\ufffb\udc80-\udcff")
_ESCAPE_RE = re.compile(f"[{_ESCAPED}]")
_SCHEME_RE = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*")
_SURROGATE_RE = re.compile("[\ud800-\udfff]")
_HEX = "0123456789ABCDEF"
_STAMP_RE = re.compile(r"([0-9]{14})(\.[0-9]{1,9})?(?:~([2-9]|[1-9][0-9]+))?")
_WARC_DATE_RE = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})"
                           r"(?:\.([0-9]{1,9}))?Z")

Url = Union[str, bytes]


def _text(url: Url) -> str:
    if isinstance(url, bytes):
        return url.decode("utf-8", "surrogateescape")
    if _SURROGATE_RE.search(url):
        # only U+DC80..U+DCFF standing for bytes of invalid UTF-8 can come from
        # bytes: "\udcc3\udca9" would be the bytes C3 A9, whose text is "é"
        try:
            ok = url.encode("utf-8", "surrogateescape").decode("utf-8", "surrogateescape") == url
        except UnicodeEncodeError:
            ok = False
        if not ok:
            raise ValueError(f"not the UTF-8 (surrogateescape) text of any bytes: {url!r}")
    return url


def segments(url: Url) -> list[str]:
    """The URL cut into segments: scheme part, then the rest at each '/' before '?' or '#'."""
    url = _text(url)
    m = _SCHEME_RE.match(url)
    if m and url.startswith(":", m.end()):
        after = url[m.end() + 1:]
        if after.startswith("//"):
            first, after = m.group(), after[2:]
        else:
            first = m.group() + ":"
    else:
        first, after = NO_SCHEME, url
    cut = len(after)
    for ch in "?#":
        i = after.find(ch)
        if 0 <= i < cut:
            cut = i
    segs = after[:cut].split("/")
    segs[-1] += after[cut:]
    return [first] + segs


def _escape_char(m: re.Match) -> str:
    return "".join(f"^{b:02X}" for b in m.group().encode("utf-8", "surrogateescape"))


def _chunks(seg: str) -> list[str]:
    """One segment as the contents of one or more names (without CONT)."""
    if not _ESCAPE_RE.search(seg) and len(seg.encode("utf-8")) <= CHUNK_BYTES:
        chunks = [seg]                               # the common case, fast
    else:
        chunks, cur, size = [], [], 0
        for ch in seg:
            unit = _ESCAPE_RE.sub(_escape_char, ch)
            n = len(unit.encode("utf-8"))
            if size + n > CHUNK_BYTES:
                chunks.append("".join(cur))
                cur, size = [], 0
            cur.append(unit)
            size += n
        chunks.append("".join(cur))
    return ["^2E" + c[1:] if c in (".", "..") else c for c in chunks]


def url_to_path(url: Url) -> str:
    """The URL's stem: a relative path whose last name ends in '@'.

    A capture of the URL is the file ``stem + stamp`` (see capture_path); the
    stem itself is reserved for the URL's latest capture.
    """
    segs = segments(url)
    names: list[str] = []
    for i, seg in enumerate(segs):
        chunks = _chunks(seg)
        names.extend(c + CONT for c in chunks[:-1])
        if i < len(segs) - 1:
            names.append(chunks[-1] or EMPTY)
        else:
            names.append(chunks[-1] + MARK)
    return "/".join(names)


def _unescape(content: str) -> bytes:
    parts = content.split(ESC)
    out = [parts[0].encode("utf-8")]
    for p in parts[1:]:
        if len(p) < 2 or p[0] not in _HEX or p[1] not in _HEX:
            raise ValueError(f"bad escape in {content!r}")
        out.append(bytes([int(p[:2], 16)]))
        out.append(p[2:].encode("utf-8"))
    return b"".join(out)


def split_capture_path(path: str) -> tuple[str, str]:
    """A path made by url_to_path or capture_path -> (URL, stamp); '' for a stem.

    Raises ValueError for any path the mapping does not produce.
    """
    names = path.split("/")
    stem_name, mark, stamp = names[-1].partition(MARK)
    if not mark:
        raise ValueError(f"not a capture path (no '@' in its last name): {path!r}")
    if stamp and not _STAMP_RE.fullmatch(stamp):
        raise ValueError(f"not a capture stamp: {stamp!r} in {path!r}")
    names[-1] = stem_name
    segs: list[bytes] = []
    cur: list[bytes] = []
    for i, name in enumerate(names):
        last = i == len(names) - 1
        if name.endswith(CONT) and not last:
            cur.append(_unescape(name[:-len(CONT)]))
            continue
        cur.append(b"" if name == EMPTY and not cur and not last else _unescape(name))
        segs.append(b"".join(cur))
        cur = []
    if cur or len(segs) < 2:
        raise ValueError(f"not a capture path: {path!r}")
    first = segs[0].decode("utf-8", "surrogateescape")
    rest = b"/".join(segs[1:]).decode("utf-8", "surrogateescape")
    if first == NO_SCHEME:
        url = rest
    elif first.endswith(":"):
        url = first + rest
    else:
        url = first + "://" + rest
    if url_to_path(url) != path[:len(path) - len(stamp)]:
        raise ValueError(f"not a path the URL mapping makes: {path!r}")
    return url, stamp


def path_to_url(path: str) -> str:
    """The one URL whose stem or capture this path is (ValueError if none)."""
    return split_capture_path(path)[0]


def stamp(date: str, n: int = 1) -> str:
    """The stamp of the n-th capture (1, 2, ...) of a URL with this date.

    ``date`` is a WARC-Date (``2024-01-01T12:00:00Z``, optionally with a
    fraction of a second, kept as written) or an ARC date (14 digits).
    """
    m = _WARC_DATE_RE.fullmatch(date)
    if m:
        digits = "".join(m.groups()[:6]) + (f".{m.group(7)}" if m.group(7) else "")
    elif re.fullmatch(r"[0-9]{14}", date):
        digits = date
    else:
        raise ValueError(f"not a WARC or ARC date: {date!r}")
    if n < 1:
        raise ValueError(f"captures count from 1, not {n}")
    out = digits + (f"~{n}" if n > 1 else "")
    if len(out) > STAMP_MAX_BYTES:
        raise ValueError(f"stamp too long: {out!r}")
    return out


def capture_path(url: Url, date: str, n: int = 1) -> str:
    """The path of the n-th capture of the URL at this date: stem + stamp."""
    return url_to_path(url) + stamp(date, n)
