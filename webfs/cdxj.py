"""The CDXJ lines of a collection's source files, as pywb indexes them.

This module owns the *virtual WARC file* of one source file kept in
``@warc/`` (a plain WARC or ARC whose records are rebuilt from ``F.heads``
and the capture files: the bytes ``export-warc`` writes, before gzip, with a
record separator added where a record ends without one), and its CDXJ lines:
made by pywb's own indexer with ``wb-manager add``'s options, under a key of
what they depend on. ``import-warc`` makes them from the records in memory
and keeps them as ``@warc/F.cdxj`` (derived data: replay uses them only while
their key is the one it computes, and indexes the source again otherwise).
``webfs.replay`` serves the virtual files and merges the lines.
"""
from __future__ import annotations

import bisect
import contextlib
import io
import logging
import re
from concurrent.futures import ThreadPoolExecutor
from typing import Optional

from . import importcdxj, lockorder, warc
from .capture import http_codings
from .errors import WebfsError
from .signature import signature

log = logging.getLogger(__name__)

CDXJ_SUFFIX = b".cdxj"

# Added after a WARC record whose tail holds no line end (a gzip member may end
# right after the block): a reader of a plain WARC takes the first line after
# a record for its separator, whatever it is, and would eat the next record's.
# (ARC readers find the next record by its URL line; their records are left.)
SEPARATOR = b"\r\n\r\n"


class VirtualFile:
    """One source file's records as one plain file, read by byte ranges."""

    def __init__(self, tree, src: warc.Source):
        """A source's kept files read; its layout is ``lay_out``'s."""
        self.tree, self.src = tree, src
        self.heads = tree.read(src.path(warc.HEADS_SUFFIX))
        self.index_bytes = tree.read(src.path(warc.INDEX_SUFFIX))
        self.lines = list(warc.parse_index(self.index_bytes))
        self._cache: tuple[bytes, bytes] = (b"", b"")
        self.lock = lockorder.lock("replay record")

    def payload_digest(self, ln) -> bytes:
        """A record's WARC-Payload-Digest, b"" when it names none."""
        return _field(ln.warc_head(self.heads), b"warc-payload-digest")

    def digests(self) -> set[bytes]:
        """The payload digests of the source's responses and resources (originals)
        its virtual file shows: a capture deleted since the import is no original
        (pywb would not find it, and its revisits are shown as responses)."""
        return {self.payload_digest(ln) for ln in self.lines
                if ln.rtype in ("response", "resource") and not self.deleted(ln)}

    def deleted(self, ln) -> bool:
        """Was the capture of a record deleted since the import? Then its record
        is not shown, wherever its bytes are kept (an encoded page's entity and
        a revisit are kept whole in the heads)."""
        return ln.capture != b"-" and self.sizes.get(ln.capture) is None

    def measure(self, sizes: Optional[dict[bytes, int]] = None) -> None:
        """Each capture file's size, before ``digests`` and ``lay_out``: ``sizes``
        if given (of the collection's files, by path; absent: gone)."""
        self.sizes = self._sizes() if sizes is None else sizes

    def _sizes(self) -> dict[bytes, Optional[int]]:
        """Each capture file's size (None: gone), where ``measure`` is not given
        them (replay gives a collection's at once: replay.collection_sizes): each
        a stat, READERS at once through a directory, as export-warc reads."""
        captures = list({ln.capture for ln in self.lines if ln.capture != b"-"})

        def size(capture: bytes) -> Optional[int]:
            try:
                return self.tree.size(capture)
            except (OSError, WebfsError):
                return None
        if not isinstance(self.tree, warc.MountTree):
            return {c: size(c) for c in captures}
        with ThreadPoolExecutor(warc.READERS) as pool:
            return dict(zip(captures, pool.map(size, captures)))

    def lay_out(self, originals: set[bytes]) -> None:
        """Each record's parts and start (after ``measure``); a revisit whose
        original is not among the collection's ``originals`` is shown as the
        response it stands for."""
        self.starts: list[int] = []
        self.shown: list = []             # per record: its index line
        self.parts: list[list] = []       # per record: ("h", start, n), ("f", path, n), ("b", bytes, n)
        self.digested: set[bytes] = set()   # capture files whose record names its payload digest
        pos = 0
        for ln in self.lines:
            if self.deleted(ln):
                continue
            p = ln.payload_at
            parts = self._revisit_as_response(ln, originals) if ln.rtype == "revisit" else None
            if parts is None and ln.where == "file":
                if self.payload_digest(ln):
                    self.digested.add(ln.capture)
                parts = [("h", ln.ho, ln.wl + ln.hl), ("f", ln.capture, self.sizes[ln.capture]), ("h", p, ln.tl)]
            elif parts is None:
                parts = [("h", ln.ho, ln.wl + ln.hl + ln.pl + ln.tl)]
            end = parts[-1][1] + parts[-1][2] if parts[-1][0] == "h" else 0    # the tail's end, in the heads
            is_warc = self.heads[ln.ho:ln.ho + 5] == b"WARC/"
            if is_warc and parts[-1][0] == "h" and (not ln.tl or self.heads[end - 1:end] != b"\n"):
                parts.append(("b", SEPARATOR, len(SEPARATOR)))
            self.starts.append(pos)
            self.shown.append(ln)
            self.parts.append(parts)
            pos += sum(x[2] for x in parts)
        self.size = pos

    def _revisit_as_response(self, ln, originals: set[bytes]) -> Optional[list]:
        """A revisit's parts as a response record (its WARC header made a
        response's, its HTTP header, the capture file: the original's payload)
        when its original is in another collection, where pywb cannot look; None
        to show it as recorded."""
        head, http = ln.warc_head(self.heads), ln.http_head(self.heads)
        if (ln.capture == b"-" or not head.startswith(b"WARC/") or _field(head, b"warc-payload-digest") in originals
                or not re.match(rb"HTTP/\S+ 2\d\d", http) or any(http_codings(http))):
            return None     # no capture file, its original is here, no 2xx header, or an encoded entity
        n = self.sizes[ln.capture]
        if not n:
            return None                   # unresolved: the file is empty
        response = _response_head(head, ln.hl + n)
        return [("b", response, len(response)), ("h", ln.ho + ln.wl, ln.hl), ("f", ln.capture, n),
                ("b", SEPARATOR, len(SEPARATOR))]

    def _part(self, part, lean: bool = False) -> bytes:
        kind, where, n = part
        if kind == "h":
            return self.heads[where:where + n]
        if kind == "b":
            return where
        if lean and where in self.digested:
            return bytes(n)     # the indexer takes the digest from the header: the bytes are not read
        with self.lock:
            if self._cache[0] != where:
                self._cache = (where, self.tree.read(where))
            return self._cache[1][:n]

    def read(self, start: int, end: int, lean: bool = False) -> bytes:
        """Bytes [start, end) of the virtual file (``lean``: for the indexer, the
        capture files of records that name their payload digest as zeros)."""
        return b"".join(self._part(part, lean)[lo:hi] for part, lo, hi in spans(self.starts, self.parts, start, end))


def spans(starts: list[int], parts: list[list], start: int, end: int):
    """(part, lo, hi) for each part of a virtual file's records (``starts``,
    ``parts``: ``VirtualFile``'s) that bytes [start, end) cover, [lo, hi) within it."""
    i = max(bisect.bisect_right(starts, start) - 1, 0)
    while i < len(starts) and starts[i] < end:
        pos = starts[i]
        for part in parts[i]:
            a, b = pos, pos + part[2]
            if b > start and a < end:
                yield part, max(start - a, 0), min(end, b) - a
            pos = b
        i += 1


class _Raw(io.RawIOBase):
    """Bytes [start, end) of a virtual file, as a file whose offsets are the virtual file's."""

    def __init__(self, vf: VirtualFile, lean: bool = False, start: int = 0, end: Optional[int] = None):
        self.vf, self.pos, self.lean = vf, start, lean
        self.end = vf.size if end is None else end
        self.failed: Optional[BaseException] = None     # a read of the archive's files that failed

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, off: int, whence: int = 0) -> int:
        self.pos = off if whence == 0 else self.pos + off if whence == 1 else self.end + off
        return self.pos

    def tell(self) -> int:
        return self.pos

    def readinto(self, b) -> int:
        try:
            data = self.vf.read(self.pos, min(self.pos + len(b), self.end), self.lean)
        except BaseException as exc:
            self.failed = exc
            raise
        b[:len(data)] = data
        self.pos += len(data)
        return len(data)



def _field(head: bytes, name: bytes) -> bytes:
    """A WARC header's value (name lowercase), b"" when absent."""
    # Found at once in the lowered header as most writers spell it; else line by
    # line (a space before the colon): replay's start asks it of every record twice.
    at = head.lower().find(b"\n" + name + b":")
    if at >= 0:
        start = at + len(name) + 2
        end = head.find(b"\n", start)
        return head[start:end if end >= 0 else len(head)].strip()
    for line in head.split(b"\n")[1:]:
        k, sep, v = line.partition(b":")
        if sep and k.strip().lower() == name:
            return v.strip()
    return b""


# What a revisit's WARC header loses as a response's: its type, length and references.
REVISIT_ONLY = (b"warc-type", b"content-length", b"warc-refers-to", b"warc-refers-to-target-uri",
                b"warc-refers-to-date", b"warc-profile", b"warc-block-digest", b"warc-truncated")


def _response_head(head: bytes, length: int) -> bytes:
    """A revisit's WARC header block as a response record's of this block length."""
    lines = [x.rstrip(b"\r") for x in head.split(b"\n") if x.strip(b"\r")]
    kept = [x for x in lines[1:] if x.partition(b":")[0].strip().lower() not in REVISIT_ONLY]
    return b"\r\n".join([lines[0], b"WARC-Type: response"] + kept + [b"Content-Length: %d" % length]) + b"\r\n\r\n"



KEY_PREFIX = b"#webfs-replay-key "


def key_of(name: str, vf) -> bytes:
    """What a virtual file's CDXJ lines depend on: its name (the lines' filename
    field) and the hashes of its kept files and of its layout (every part's
    size, which fixes every offset)."""
    layout = repr([(kind, n) for parts in vf.parts for kind, _, n in parts]).encode()
    return "-".join((signature(vf.index_bytes), signature(vf.heads), signature(layout))).encode() \
        + b" " + name.encode("utf-8", "surrogateescape")


class Unindexable(Exception):
    """pywb's indexer failed on records of a virtual file (what it raised, as text)."""


def index_one(name: str, vf) -> list[bytes]:
    """The CDXJ lines of one virtual file, sorted: pywb's own indexer, with the
    options ``wb-manager add`` gives it (POST bodies appended to the key), so
    replay finds and orders captures as a pywb collection of the same files.
    Unindexable if a record is one pywb's indexer cannot index (``index_served``
    leaves it out); a read of the collection's files that fails raises its error."""
    return _index_span(name, vf, 0, len(vf.starts))


def _index_span(name: str, vf, a: int, b: int) -> list[bytes]:
    """``index_one`` of the virtual file's records a to b (b excluded) alone, at their offsets in the file."""
    from pywb.indexer.cdxindexer import write_cdx_index
    bounds = vf.starts + [vf.size]
    raw, out = _Raw(vf, True, bounds[a], bounds[b]), io.BytesIO()
    try:
        # warcio's warnings about a damaged record go to stderr: the caller says its own
        with contextlib.redirect_stderr(io.StringIO()):
            write_cdx_index(out, io.BufferedReader(raw, 1 << 16), name, append_post=True, cdxj=True, sort=True)
    except Exception as exc:
        if raw.failed is not None:
            raise raw.failed from None      # not the record's doing: a capture, the heads, cannot be read
        raise Unindexable(" ".join(f"{type(exc).__name__}: {exc}".split())) from exc
    return [line + b"\n" for line in out.getvalue().splitlines() if line]


def index_served(name: str, vf) -> tuple[list[bytes], list[tuple[warc.IndexLine, str]]]:
    """``index_one``'s lines, but of a file with records pywb's indexer cannot
    index (a resource without a WARC-Date, which import-warc keeps in the heads
    only; a damaged record) those of the others, and each record left out,
    with why. The file's records are halved until each one that fails alone
    is found; the records between two of those are then indexed together
    again (a POST's request is joined to its response), as wb-manager add
    would index a file without them."""
    bad: list[tuple[int, str]] = []
    lines = _halving(name, vf, 0, len(vf.starts), bad)
    if not bad:
        return lines, []
    lines, cut = [], sorted(bad)
    for (a, _), (b, _) in zip([(-1, "")] + cut, cut + [(len(vf.starts), "")]):
        lines += _halving(name, vf, a + 1, b, bad) if b > a + 1 else []
    return sorted(lines), [(vf.shown[i], why) for i, why in sorted(set(bad))]


def _halving(name: str, vf, a: int, b: int, bad: list[tuple[int, str]]) -> list[bytes]:
    """The lines of records a to b, indexed together, else each half's; a record
    that fails alone goes into ``bad`` (its number, why)."""
    try:
        return _index_span(name, vf, a, b)
    except Unindexable as exc:
        if b - a == 1:
            bad.append((a, str(exc)))
            return []
        mid = (a + b) // 2
        return _halving(name, vf, a, mid, bad) + _halving(name, vf, mid, b, bad)




def laid_out(tree, sizes: Optional[dict[bytes, int]]) -> dict[str, VirtualFile]:
    """name -> virtual file, laid out, one per source file a collection keeps
    (``sizes``: of its files by path, if known; ``VirtualFile.lay_out``)."""
    out: dict[str, VirtualFile] = {}
    for src in warc.kept_sources(tree):
        n = src.n
        name = virtual_name(src.name, n)
        while name in out:
            n += 1
            name = virtual_name(src.name, n)
        out[name] = VirtualFile(tree, src)
    for vf in out.values():
        vf.measure(sizes)
    originals = set().union(*(vf.digests() for vf in out.values())) - {b""}
    for vf in out.values():
        vf.lay_out(originals)
    return out


def virtual_name(src: bytes, n: int = 1) -> str:
    """The name of the virtual file of a source file named ``src``: without
    ``.gz``, and ending ``.warc`` or ``.arc``; ``~N`` before that ending for the
    N-th of that name (``warc.Source``), or for a clash."""
    base = re.sub(r"\.gz$", "", src.decode("utf-8", "surrogateescape"))
    base = base if base.endswith((".warc", ".arc")) else base + ".warc"
    stem, _, ext = base.rpartition(".")
    return base if n == 1 else f"{stem}~{n}.{ext}"


def kept_lines(tree, src: warc.Source, key: bytes) -> Optional[list[bytes]]:
    """The lines import-warc kept for a source's virtual file if they are under ``key``, else None."""
    try:
        data = tree.read(src.path(CDXJ_SUFFIX))
    except (OSError, WebfsError):
        return None
    first, _, rest = data.partition(b"\n")
    if first != KEY_PREFIX + key:
        return None
    return rest.splitlines(keepends=True)


class _Memory:
    """A source's kept files and captures held in memory, read as a tree is
    (their sizes are given to ``VirtualFile.measure``)."""

    def __init__(self, files: dict[bytes, bytes]):
        self.files = files

    def read(self, rel: bytes) -> bytes:
        try:
            return self.files[rel]
        except KeyError:
            raise OSError(f"{rel!r}: not held") from None


def at_import(src: bytes, index: bytes, heads: bytes, sizes: dict[bytes, int],
              payloads: dict[bytes, bytes], keys: Optional[dict] = None) -> Optional[bytes]:
    """The ``@warc/F.cdxj`` of a source being imported: its key line and its
    CDXJ lines, laid out as replay lays it out in a collection that holds every
    revisit's original (the usual case; otherwise replay's key differs and it
    indexes the source itself). ``sizes``: the capture files' sizes;
    ``payloads``: the captures whose record names no payload digest (the
    indexer reads those); ``keys``: the lines' keys made already
    (importcdxj.KeyMaker). None if pywb is not installed."""
    try:
        import pywb  # noqa: F401   (its indexer is imported where it is used)
    except ImportError:
        return None
    source = warc.Source(src)
    vf = VirtualFile(_Memory({source.path(warc.HEADS_SUFFIX): heads, source.path(warc.INDEX_SUFFIX): index,
                              **payloads}), source)
    revisits = {vf.payload_digest(ln) for ln in vf.lines if ln.rtype == "revisit"}
    # every capture is there; those of records kept whole in the heads (revisits,
    # encoded pages) need no size here: their files are not part of the layout
    vf.measure({ln.capture: sizes.get(ln.capture, 0) for ln in vf.lines if ln.capture != b"-"})
    vf.lay_out(vf.digests() | revisits)
    if vf.digested | set(payloads) != {ln.capture for ln in vf.lines if ln.where == "file"}:
        return None     # a capture neither named by its digest nor held: replay reads it
    name = virtual_name(src)
    try:
        # warcio's warnings about a damaged record go to stderr: import-warc has said its own
        with contextlib.redirect_stderr(io.StringIO()):
            lines = importcdxj.lines_of(name, vf, keys) or index_one(name, vf)
    except Exception as exc:     # a record pywb cannot read: replay indexes the source itself, and says
        log.debug("%r: not indexed at import (%s: %s)", src, type(exc).__name__, exc)
        return None
    return KEY_PREFIX + key_of(name, vf) + b"\n" + b"".join(lines)
