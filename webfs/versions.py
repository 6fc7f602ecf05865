"""Finding the captures of a URL in an archive (``webfs versions``, ``webfs url``):
under any common spelling of the URL, and the date a user writes.

A capture's file is named by its URL exactly as the record wrote it
(webfs.urlpath), so ``http://IANA.org:80/`` and ``https://www.iana.org``
are other paths than ``http://www.iana.org/``. As pywb, OutbackCDX and the
Wayback Machine do, a URL is looked up by its canonical key, SURT (the
``surt`` package pywb uses): scheme (http and https), host case, default
port, ``www.``, trailing slash, path case and query order do not count.

No index: the candidates are found by walking the URL's own path in each
collection, where at each level the names that can be the same segment are
kept (``http``/``https``; hosts of the same key; names equal but for case;
the last segment with or without its slash), and each file found is kept
when its URL has the query's key. A lookup lists the directories on the
URL's path only (the scheme's directory is the big one: one name a host).
The spellings filed elsewhere (an IDN host, dot segments, user info, a
space) are named by the SURT keys of the CDXJ lines import-warc keeps
(``@warc/F.cdxj``, sorted: a binary search reads a few windows of each;
of a source kept without them, by its index's URLs), and their
directories listed too.
"""
from __future__ import annotations

import calendar
import datetime
import json
import os
import re
from typing import Optional

from . import urlpath
from .errors import WebfsError

_WWW = re.compile(r"^www\d*\.")
_DEFAULT_PORT = re.compile(r":(80|443)$")
_DIGITS = re.compile(r"(\d{4})(?:(\d{2})(?:(\d{2})(?:(\d{2})(?:(\d{2})(?:(\d{2})(\.\d+)?)?)?)?)?)?")
_ISO = re.compile(r"(\d{4})(?:-(\d{2})(?:-(\d{2})(?:[T ](\d{2})(?::(\d{2})(?::(\d{2})([.,]\d+)?)?)?)?)?)?"
                  r"(Z|[+-]\d{2}(?::?\d{2})?)?")
WEB_SCHEMES = ("http", "https")
SEARCH_WINDOW = 1 << 16     # bytes of a kept CDXJ file a step of a search reads


# ---------------------------------------------------------------- dates

def when(text: str) -> float:
    """A date as seconds since the epoch (UTC): a WARC timestamp or a prefix of one
    (2014, 201401, 20140127000000), or ISO 8601 (2014-01, 2014-01-27T10:00:00.5+05:00);
    missing parts are the earliest. WebfsError, one line, for anything else."""
    text = text.strip()
    m = _DIGITS.fullmatch(text) or _ISO.fullmatch(text)
    if not m:
        raise WebfsError(f"{text!r}: not a date (YYYY[MM[DD[hh[mm[ss]]]]], or ISO 8601 such as "
                         "2024-01-01T12:00:00Z or 2024-01-01T12:00:00+05:00)")
    parts = [int(g) if g else default for g, default in zip(m.groups()[:6], (0, 1, 1, 0, 0, 0))]
    fraction = float(m.group(7).replace(",", ".")) if m.group(7) else 0.0
    zone = m.group(8) if m.re is _ISO else None
    try:
        moment = datetime.datetime(*parts, tzinfo=datetime.timezone.utc)
        if zone and zone != "Z":
            sign = -1 if zone[0] == "-" else 1
            hours, minutes = int(zone[1:3]), int(zone[-2:]) if len(zone) > 3 else 0
            moment -= sign * datetime.timedelta(hours=hours, minutes=minutes)
            if hours > 23 or minutes > 59:
                raise ValueError(f"time zone {zone} out of range")
    except (ValueError, OverflowError) as exc:
        raise WebfsError(f"{text!r}: not a date ({exc})") from None
    return moment.timestamp() + fraction


def stamp_seconds(stamp: str) -> float:
    """A capture stamp (20240101120000[.fraction][~n]) as seconds since the epoch."""
    digits = stamp.split("~")[0]
    whole = calendar.timegm(datetime.datetime.strptime(digits[:14], "%Y%m%d%H%M%S").timetuple())
    return whole + (float(digits[14:]) if digits[14:] else 0.0)


# ---------------------------------------------------------------- spellings

def key(url: str) -> Optional[str]:
    """The URL's canonical key (SURT), or None when it has none."""
    import surt
    try:
        return surt.surt(url)
    except Exception:        # surt raises what its URL parser raises; such a URL has no key
        return None


def _host_key(name: str) -> str:
    """An authority segment as a host compared across spellings."""
    host = name.rpartition("@")[2].lower().rstrip(".")
    return _WWW.sub("", _DEFAULT_PORT.sub("", host).rstrip("."))


def _stems(url: str) -> list[list[str]]:
    """The names of the URL's stem, with and without a slash ending its path."""
    segs = urlpath.segments(url)
    path, mark, rest = url.partition("?") if "?" in url else url.partition("#")
    other = path[:-1] if path.endswith("/") and len(segs) > 2 else path + "/"
    return [urlpath.url_to_path(u).split("/") for u in (url, other + mark + rest)]


def _names_like(tree, rel: bytes, want: str, level: int) -> list[bytes]:
    """The directory names in ``rel`` that can be the segment named ``want``."""
    out = []
    for name in tree.listdir(rel):
        text = os.fsdecode(name)
        if "@" in text:
            continue                       # a capture, not a directory
        if level == 0:
            same = text.lower() in WEB_SCHEMES
        elif level == 1:
            same = _host_key(text) == _host_key(want)
        else:
            same = text.lower() == want.lower()
        if same:
            out.append(name)
    return out


def _candidates(tree, top: bytes, names: list[str]) -> list[bytes]:
    """Paths below ``top`` of the files that can be captures of the stem ``names``."""
    dirs = [top]
    for level, want in enumerate(names[:-1]):
        dirs = [d + b"/" + n if d else n for d in dirs for n in _names_like(tree, d, want, level)]
    leaf = names[-1][:-1]                   # without its '@'
    head = re.split(r"[?#]", leaf, maxsplit=1)[0].lower()
    found = []
    for d in dirs:
        for name in tree.listdir(d):
            text = os.fsdecode(name)
            stem = text.partition("@")[0]
            if "@" in text and (stem.lower().startswith(head) if len(names) > 2 else _host_key(stem) == _host_key(leaf)):
                found.append(d + b"/" + name if d else name)
    return found


def _exact(tree, top: bytes, names: list[str]) -> list[bytes]:
    """Paths below ``top`` of the files named by the stem ``names`` and a stamp."""
    parent = os.fsencode("/".join([os.fsdecode(top)] + names[:-1]) if top else "/".join(names[:-1]))
    leaf = os.fsencode(names[-1])
    return [parent + b"/" + n for n in tree.listdir(parent) if n.startswith(leaf) and n != leaf]


def _spelled_as(tree, top: bytes, want: str) -> dict[str, list[bytes]]:
    """The URLs (as recorded) whose key is ``want`` among the records of every
    source file the collection at ``top`` keeps, each with the paths of its
    capture files (``_exact``): from its CDXJ lines (``@warc/F.cdxj``, pywb's
    keys, sorted), else from its index's capture paths (a source kept
    without them)."""
    from .cdxj import CDXJ_SUFFIX
    from .warc import INDEX_SUFFIX, kept_sources, parse_index
    found: dict[str, list[bytes]] = {}
    listed: dict[str, list[bytes]] = {}
    wanted = want.encode("utf-8", "surrogateescape")
    keyed: dict[str, Optional[str]] = {}

    def paths(url: str) -> list[bytes]:         # a URL's directory listed once a lookup
        if url not in listed:
            listed[url] = _exact(tree, top, urlpath.url_to_path(url).split("/"))
        return listed[url]

    for src in kept_sources(tree, top):
        urls = _keyed_lines(tree, src.path(CDXJ_SUFFIX, top), wanted)
        if urls == set():
            continue                        # no record of this key: the index is not read
        # Each URL filed as it reads (its capture is there), or the index tells:
        # pywb's indexer reads some as warcio cleans them (a space as %20).
        if urls is not None and all(paths(u) for u in urls):
            found.update((u, paths(u)) for u in urls)
            continue
        try:
            index = tree.read(src.path(INDEX_SUFFIX, top))
        except (OSError, WebfsError):
            continue
        for ln in parse_index(index):       # no CDXJ kept: each capture's URL, and its key
            try:
                got = urlpath.path_to_url(os.fsdecode(ln.capture).rpartition("@")[0] + "@")
            except ValueError:
                continue                    # "-": no capture file
            if got not in keyed:
                keyed[got] = key(got)
            if keyed[got] == want:
                found[got] = paths(got)
    return found


def _keyed_lines(tree, path: bytes, want: bytes, window: int = SEARCH_WINDOW) -> Optional[set[str]]:
    """The URLs of a kept CDXJ file's lines whose key is ``want``; None if the
    file is not there. Its lines are sorted (import-warc writes them so, as
    pywb's indexer does), so they are found as look(1) finds lines: a binary
    search over byte offsets, a window read a step, then the lines from
    there. A lookup reads a few windows of each source file, not all of it
    (a source of a million records keeps some 250 MB of lines)."""
    try:
        lines = SortedLines(tree, path, tree.size(path), window)
    except (OSError, WebfsError):
        return None
    # The first line whose key is want or more starts after lo (at 0, from it),
    # and at or before the first line start after hi.
    lo, hi = 0, lines.size
    while hi - lo > window:
        mid = (lo + hi) // 2
        start = lines.next_start(mid)
        if start is not None and lines.line_at(start).split(b" ", 1)[0] < want:
            lo = mid
        else:
            hi = mid
    out = set()
    start = 0 if lo == 0 else lines.next_start(lo)
    while start is not None:
        line = lines.line_at(start)
        got = line.split(b" ", 1)[0]
        if got > want:
            break
        if got == want:
            try:
                out.add(json.loads(line.split(b" ", 2)[2])["url"])
            except (ValueError, IndexError, KeyError, TypeError):
                pass            # not a line pywb's indexer wrote
        start = lines.next_start(start + len(line))
    return out


class SortedLines:
    """A text file of a tree read a window at a time, each window once."""

    def __init__(self, tree, path: bytes, size: int, window: int):
        self.tree, self.path, self.size, self.window = tree, path, size, window
        self._windows: dict[int, bytes] = {}

    def _at(self, i: int) -> bytes:
        got = self._windows.get(i)
        if got is None:
            got = self._windows[i] = self.tree.read_at(self.path, i * self.window, self.window)
        return got

    def _newline(self, pos: int) -> int:
        """Where the first newline at or after ``pos`` is (the size if none)."""
        i = pos // self.window
        while i * self.window < self.size:
            j = self._at(i).find(b"\n", max(0, pos - i * self.window))
            if j >= 0:
                return i * self.window + j
            i += 1
        return self.size

    def next_start(self, pos: int) -> Optional[int]:
        """Where the first line that starts after ``pos`` starts, or None."""
        start = self._newline(pos) + 1
        return start if start < self.size else None

    def line_at(self, start: int) -> bytes:
        """The line that starts at ``start``, without its newline."""
        end, w = self._newline(start), self.window
        return b"".join(self._at(i)[max(0, start - i * w):end - i * w] for i in range(start // w, end // w + 1))


def _web(url: str) -> Optional[str]:
    """The URL as pywb reads a web URL: itself, or http:// before one that names
    no scheme (as pywb redirects example.com); None for another scheme (dns:)."""
    first = urlpath.segments(url)[0]
    if first.lower() in WEB_SCHEMES:
        return url
    return "http://" + url if first == urlpath.NO_SCHEME and url.strip() else None


def captures(tree, url: str) -> tuple[list[dict], bool]:
    """(every capture of URL under any spelling with its key in every collection of
    the tree, those of the spelling asked for first, each spelling's oldest first;
    whether the tree is one collection). Identical captures share a group."""
    web = _web(url)
    want = key(web) if web else None
    stems = _stems(web) if want else [urlpath.url_to_path(url).split("/")]
    from .warc import collection_tops      # a module that does not import this one
    tops, one = collection_tops(tree)
    out, seen = [], set()
    for top in tops:
        found = []
        for names in stems:
            found += _candidates(tree, top, names) if want else _exact(tree, top, names)
        spelled = _spelled_as(tree, top, want) if want else {}
        for other in sorted(spelled):
            found += spelled[other]
        for rel in found:
            inside = rel[len(top) + 1:] if top else rel
            if rel in seen:
                continue
            seen.add(rel)
            try:
                got, stamp = urlpath.split_capture_path(os.fsdecode(inside))
            except ValueError:
                continue
            if not stamp or (got != url and (want is None or key(got) != want)):
                continue
            out.append({"collection": os.fsdecode(top or os.path.basename(tree.name.rstrip("/"))),
                        "path": os.fsdecode(rel), "url": got, "exact": got == url, "stamp": stamp,
                        "date": _iso(stamp), "size": tree.size(rel), "signature": tree.signature(rel)})
    out.sort(key=lambda v: (not v["exact"], v["url"] if not v["exact"] else "", stamp_key(v["stamp"]),
                            v["collection"]))
    groups: dict[str, int] = {}
    for v in out:
        v["same_as"] = groups.setdefault(v["signature"], len(groups) + 1)
    return out, one


def closest(caps: list[dict], at: Optional[str]) -> Optional[dict]:
    """Memento's rule: the capture nearest in time to ``at`` (the earlier one on a tie;
    in one second, the first as listed); without ``at``, the latest."""
    if not caps:
        return None
    if at is None:          # the latest second; in it, the first as listed (pywb's order, if so sorted)
        last = max(v["stamp"][:14] for v in caps)
        return next(v for v in caps if v["stamp"][:14] == last)
    want = when(at)
    # min keeps the first of equals: in one second, the order the captures are listed in
    return min(caps, key=lambda v: (abs(stamp_seconds(v["stamp"]) - want), v["stamp"][:14]))


def spellings(caps: list[dict]) -> dict[str, int]:
    """The other spellings among captures, with their number of captures."""
    out: dict[str, int] = {}
    for v in caps:
        if not v["exact"]:
            out[v["url"]] = out.get(v["url"], 0) + 1
    return out


def stamp_key(stamp: str) -> tuple[str, int]:
    digits, _, n = stamp.partition("~")
    return digits, int(n or 1)


def _iso(stamp: str) -> str:
    d = stamp.split("~")[0]
    return f"{d[0:4]}-{d[4:6]}-{d[6:8]}T{d[8:10]}:{d[10:12]}:{d[12:14]}{d[14:]}Z"
