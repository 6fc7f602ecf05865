"""Replay of an archive's collections by pywb, without copying them into WARCs.

This module owns the *virtual WARC files* of a collection: for each source
file F kept in ``@warc/``, a plain (uncompressed) WARC or ARC whose records
are rebuilt on demand from ``F.heads`` and the capture files (the same bytes
``export-warc`` writes, before gzip, with a record separator added where a
record ends without one). It serves them over HTTP with byte ranges
(127.0.0.1 by default), which pywb reads as remote ``archive_paths``, and
writes the pywb config naming every collection served.

It also owns ``PYWBDIR/webfs-cdxj/``, the CDXJ indexes kept between starts:
per collection ``COLL.cdxj``, the sorted index pywb reads, merged from one
cache file per source file, ``COLL/NAME.cdxj``, whose first line is the key
of what it indexes (the source's kept ``.index`` and ``.heads`` and the
sizes of its captures, which fix every offset of its virtual file). A start
indexes again only the sources whose key changed, so a collection already
indexed starts without reading a capture. ``write_file`` is the one place
replay writes files outside the archive.
"""
from __future__ import annotations

import bisect
import heapq
import http.server
import io
import logging
import os
import re
import stat
from typing import Optional

from . import warc
from .files import write_file as write_new
from .errors import WebfsError
from .signature import signature
from . import lockorder

log = logging.getLogger(__name__)

# Added after a WARC record whose tail holds no line end (a gzip member may end
# right after the block): a reader of a plain WARC takes the first line after
# a record for its separator, whatever it is, and would eat the next record's.
# (ARC readers find the next record by its URL line; their records are left.)
SEPARATOR = b"\r\n\r\n"


class VirtualFile:
    """One source file's records as one plain file, read by byte ranges."""

    def __init__(self, tree, src: bytes):
        """A source's kept files read; its layout is ``lay_out``'s."""
        self.tree = tree
        self.heads = tree.read(warc.KEEP_DIR + b"/" + src + warc.HEADS_SUFFIX)
        self.index_bytes = tree.read(warc.KEEP_DIR + b"/" + src + warc.INDEX_SUFFIX)
        self.lines = list(warc.parse_index(self.index_bytes))
        self._cache: tuple[bytes, bytes] = (b"", b"")
        self.lock = lockorder.lock("replay record")

    def digests(self) -> set[bytes]:
        """The payload digests of the source's responses and resources (originals)."""
        return {_field(self.heads[ln.ho:ln.ho + ln.wl], b"warc-payload-digest") for ln in self.lines
                if ln.rtype in ("response", "resource")}

    def lay_out(self, originals: set[bytes]) -> None:
        """Each record's parts and start; a revisit whose original is not among
        the collection's ``originals`` is shown as the response it stands for."""
        self.starts: list[int] = []
        self.parts: list[list] = []       # per record: ("h", start, n), ("f", path, n), ("b", bytes, n)
        self.digested: set[bytes] = set()   # capture files whose record names its payload digest
        pos = 0
        for ln in self.lines:
            p = ln.ho + ln.wl + ln.hl
            parts = self._revisit_as_response(ln, originals) if ln.rtype == "revisit" else None
            if parts is None and ln.where == "file":
                if _field(self.heads[ln.ho:ln.ho + ln.wl], b"warc-payload-digest"):
                    self.digested.add(ln.capture)
                try:
                    n = self.tree.size(ln.capture)
                except (OSError, WebfsError):
                    continue        # deleted since the import: its record is not shown
                parts = [("h", ln.ho, ln.wl + ln.hl), ("f", ln.capture, n), ("h", p, ln.tl)]
            elif parts is None:
                parts = [("h", ln.ho, ln.wl + ln.hl + ln.pl + ln.tl)]
            end = parts[-1][1] + parts[-1][2] if parts[-1][0] == "h" else 0    # the tail's end, in the heads
            is_warc = self.heads[ln.ho:ln.ho + 5] == b"WARC/"
            if is_warc and parts[-1][0] == "h" and (not ln.tl or self.heads[end - 1:end] != b"\n"):
                parts.append(("b", SEPARATOR, len(SEPARATOR)))
            self.starts.append(pos)
            self.parts.append(parts)
            pos += sum(x[2] for x in parts)
        self.size = pos

    def _revisit_as_response(self, ln, originals: set[bytes]) -> Optional[list]:
        """A revisit's parts as a response record (its WARC header made a
        response's, its HTTP header, the capture file: the original's payload)
        when its original is in another collection, where pywb cannot look; None
        to show it as recorded."""
        head = self.heads[ln.ho:ln.ho + ln.wl]
        http = self.heads[ln.ho + ln.wl:ln.ho + ln.wl + ln.hl]
        if (ln.capture == b"-" or not head.startswith(b"WARC/") or _field(head, b"warc-payload-digest") in originals
                or not re.match(rb"HTTP/\S+ 2\d\d", http) or any(warc.http_codings(http))):
            return None     # no capture file, its original is here, no 2xx header, or an encoded entity
        try:
            n = self.tree.size(ln.capture)
        except (OSError, WebfsError):
            return None
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
        out = []
        i = max(bisect.bisect_right(self.starts, start) - 1, 0)
        while i < len(self.starts) and self.starts[i] < end:
            pos = self.starts[i]
            for part in self.parts[i]:
                a, b = pos, pos + part[2]
                if b > start and a < end:
                    data = self._part(part, lean)
                    out.append(data[max(start - a, 0):min(end, b) - a])
                pos = b
            i += 1
        return b"".join(out)


class _Raw(io.RawIOBase):
    def __init__(self, vf: VirtualFile, lean: bool = False):
        self.vf, self.pos, self.lean = vf, 0, lean

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, off: int, whence: int = 0) -> int:
        self.pos = off if whence == 0 else self.pos + off if whence == 1 else self.vf.size + off
        return self.pos

    def tell(self) -> int:
        return self.pos

    def readinto(self, b) -> int:
        data = self.vf.read(self.pos, min(self.pos + len(b), self.vf.size), self.lean)
        b[:len(data)] = data
        self.pos += len(data)
        return len(data)


def virtual_files(tree) -> dict[str, VirtualFile]:
    """name -> virtual file, one per source file the collection keeps."""
    out: dict[str, VirtualFile] = {}
    for src in warc.kept_sources(tree):
        base = re.sub(r"\.gz$", "", os.fsdecode(src))
        if not base.endswith((".warc", ".arc")):
            base += ".warc"
        name, n = base, 1
        while name in out:
            n += 1
            stem, dot, ext = base.rpartition(".")
            name = f"{stem}~{n}.{ext}"
        out[name] = VirtualFile(tree, src)
    originals = set().union(*(vf.digests() for vf in out.values())) - {b""}
    for vf in out.values():
        vf.lay_out(originals)
    return out


def _field(head: bytes, name: bytes) -> bytes:
    """A WARC header's value (name lowercase), b"" when absent."""
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


# ---------------------------------------------------------------- pywb's choice among captures

def _xattr(tree, rel: str, name: bytes) -> bytes:
    """One xattr of a capture file of a tree (a mount's directory or the catalog); b"" if none."""
    try:
        if isinstance(tree, warc.MountTree):
            return os.getxattr(os.path.join(tree.root, os.fsencode(rel)), name)
        ino = tree.top
        for part in [p for p in os.fsencode(rel).split(b"/") if p]:
            ino = tree.ns.lookup(ino, part).id
        return tree.ns.getxattr(ino, name)
    except (OSError, WebfsError):
        return b""


def pywb_order(tree, caps: list[dict]) -> list[dict]:
    """Captures (``versions.captures``, oldest first) with those of one second in the
    order of pywb's CDXJ lines, which is the order pywb takes them in on a tie:
    by the fields its indexer writes after the URL (mime, status, digest)."""
    def line_key(v: dict) -> tuple:
        path = v["path"]
        if _xattr(tree, path, b"user.warc.type") == b"revisit":
            mime = b"warc/revisit"
        else:
            mime = re.split(rb"[; ]", _xattr(tree, path, b"user.http.content-type"), 1)[0] or b"unk"
        rtype = _xattr(tree, path, b"user.warc.type")
        status = _xattr(tree, path, b"user.http.status") if rtype == b"response" else b"-"
        digest = _xattr(tree, path, b"user.warc.payload-digest")
        return mime, status or b"-", (digest[5:] if digest.startswith(b"sha1:") else digest) or b"-"
    out, i = [], 0
    while i < len(caps):
        j = i
        while j < len(caps) and caps[j]["stamp"][:14] == caps[i]["stamp"][:14]:
            j += 1
        out += sorted(caps[i:j], key=line_key) if j - i > 1 else caps[i:j]
        i = j
    return out


# ---------------------------------------------------------------- the CDXJ indexes

CACHE_DIR = "webfs-cdxj"
KEY_PREFIX = b"#webfs-replay-key "


def write_file(path: str, data: bytes) -> None:
    """A file replay makes: created new and renamed over its name, never written
    through a symlink planted there (``webfs.files``)."""
    try:
        write_new(path, data)
    except OSError as exc:
        raise WebfsError(f"{path}: cannot write: {exc.strerror or exc}") from None


def _own_dir(path: str) -> str:
    """Make the directory ``path`` (a real directory, not a symlink planted in
    its place, which would send the indexes elsewhere); return it."""
    try:
        os.mkdir(path, 0o755)
    except FileExistsError:
        if not stat.S_ISDIR(os.lstat(path).st_mode):
            raise WebfsError(f"{path}: not a directory (a symlink or a file is in its place); "
                             "remove it and run replay again") from None
    return path


def key_of(vf) -> bytes:
    """What a virtual file's CDXJ lines depend on, as 32 hex digits."""
    layout = repr([(kind, n) for parts in vf.parts for kind, _, n in parts]).encode()
    return "-".join((signature(vf.index_bytes), signature(vf.heads), signature(layout))).encode()


def index_one(name: str, vf) -> list[bytes]:
    """The CDXJ lines of one virtual file, sorted: pywb's own indexer, with the
    options ``wb-manager add`` gives it (POST bodies appended to the key), so
    replay finds and orders captures as a pywb collection of the same files."""
    from pywb.indexer.cdxindexer import write_cdx_index
    out = io.BytesIO()
    write_cdx_index(out, io.BufferedReader(_Raw(vf, lean=True), 1 << 16), name, append_post=True, cdxj=True, sort=True)
    return [line + b"\n" for line in out.getvalue().splitlines() if line]


def _cached(path: str, key: bytes):
    """The lines of a source's cache file if it holds this key, else None."""
    try:
        with open(path, "rb") as f:
            first = f.readline()
            if first != KEY_PREFIX + key + b"\n":
                return None
            return f.read().splitlines(keepends=True)
    except OSError:
        return None


def current(coll: str, files: dict, pywb_dir: str) -> tuple[str, str]:
    """(the path of the collection's sorted CDXJ index, a line to say), indexing
    again only the virtual files whose key changed."""
    top = _own_dir(os.path.join(os.path.abspath(pywb_dir), CACHE_DIR))
    cache = _own_dir(os.path.join(top, coll))
    per_file, fresh = [], 0
    for name, vf in files.items():
        path = os.path.join(cache, name + ".cdxj")
        key = key_of(vf)
        lines = _cached(path, key)
        if lines is None:
            lines = index_one(name, vf)
            write_file(path, KEY_PREFIX + key + b"\n" + b"".join(lines))
            fresh += 1
        per_file.append(lines)
    for stale in set(os.listdir(cache)) - {n + ".cdxj" for n in files}:
        os.unlink(os.path.join(cache, stale))          # a source no longer kept
    merged = b"".join(heapq.merge(*per_file))
    index = os.path.join(top, coll + ".cdxj")
    try:
        with open(index, "rb") as f:
            same = f.read() == merged
    except OSError:
        same = False
    if not same:
        write_file(index, merged)
    count = merged.count(b"\n")
    return index, (f"CDXJ index of {coll}: {index} ({count} lines; "
                   f"{fresh} of {len(files)} source file(s) indexed now, the rest kept)")


# ---------------------------------------------------------------- serving

def serve(served: dict[str, dict[str, VirtualFile]], port: int, host: str = "127.0.0.1"):
    """An HTTP server of the virtual files at /COLL/NAME, with byte ranges (not started)."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def _target(self) -> Optional[VirtualFile]:
            coll, _, name = self.path.lstrip("/").partition("/")
            return served.get(coll, {}).get(name)

        def do_HEAD(self):
            self.do_GET(body=False)

        def do_GET(self, body: bool = True):
            vf = self._target()
            if vf is None:
                self.send_error(404)
                return
            start, end = 0, vf.size
            m = re.fullmatch(r"bytes=(\d+)-(\d*)", self.headers.get("Range", "") or "")
            if m:
                start = int(m.group(1))
                end = min(int(m.group(2)) + 1, vf.size) if m.group(2) else vf.size
                if start >= vf.size:
                    self.send_error(416)
                    return
                self.send_response(206)
                self.send_header("Content-Range", f"bytes {start}-{end - 1}/{vf.size}")
            else:
                self.send_response(200)
            self.send_header("Content-Length", str(end - start))
            self.send_header("Accept-Ranges", "bytes")
            self.end_headers()
            if body:
                pos = start
                while pos < end:
                    chunk = vf.read(pos, min(end, pos + (1 << 20)))
                    if not chunk:
                        break
                    self.wfile.write(chunk)
                    pos += len(chunk)

        def log_message(self, fmt, *args):
            log.debug("replay: " + fmt, *args)

    return http.server.ThreadingHTTPServer((host, port), Handler)


def pywb_config(indexes: dict[str, str], host: str, port: int) -> str:
    """pywb's config.yaml: every served collection, its index and its virtual files."""
    out = ["# written by webfs replay: pywb serves these collections from the webfs archive\n",
           "collections:\n"]
    for coll, index_path in sorted(indexes.items()):
        out.append(f"  {coll}:\n"
                   f"    index_paths: {index_path}\n"
                   f"    archive_paths: http://{host}:{port}/{coll}/\n")
    return "".join(out)


def collections_of(target: str) -> list[tuple[str, str]]:
    """(name, where) of each collection TARGET names: itself, or, for a mount point or
    DISK:/, every top directory that keeps web archive files (in @warc/)."""
    place = warc.archive_place(target)
    if place is not None:
        disk, path = place
        if path.strip("/"):
            return [(os.path.basename(path.rstrip("/")), target)]
        tree = warc.DiskTree(disk, "/")
        try:
            names = [n for n in tree.listdir(b"") if tree.is_dir(n + b"/" + warc.KEEP_DIR)]
        finally:
            tree.close()
        return [(os.fsdecode(n), f"{disk}:/{os.fsdecode(n)}") for n in names]
    if not os.path.isdir(target):
        raise WebfsError(f"{target}: not a directory, and not DISK:/NAME of an archive")
    if os.path.isdir(os.path.join(target, os.fsdecode(warc.KEEP_DIR))):
        return [(os.path.basename(os.path.abspath(target)), target)]
    names = sorted(n for n in os.listdir(target)
                   if os.path.isdir(os.path.join(target, n, os.fsdecode(warc.KEEP_DIR))))
    if not names:
        raise WebfsError(f"{target}: no collection of web archive files here (no @warc/ in it or below)")
    return [(n, os.path.join(target, n)) for n in names]


def prepare(target: str, pywb_dir: str, port: int, host: str = "127.0.0.1"):
    """Index the collections of TARGET, write the pywb config; return (server, lines
    to say, trees to close)."""
    os.makedirs(pywb_dir, exist_ok=True)
    served: dict[str, dict[str, VirtualFile]] = {}
    indexes: dict[str, str] = {}
    trees, lines = [], []
    try:
        for coll, where in collections_of(target):
            tree = warc.open_tree(where)
            trees.append(tree)
            files = served[coll] = virtual_files(tree)
            indexes[coll], said = current(coll, files, pywb_dir)
            lines.append(said)
        write_file(os.path.join(pywb_dir, "config.yaml"),
                               pywb_config(indexes, host, port).encode())
        server = serve(served, port, host)
    except BaseException:
        for tree in trees:
            tree.close()
        raise
    count = sum(len(f) for f in served.values())
    lines.append(f"serving {count} virtual WARC file(s) of {len(served)} collection(s) "
                 f"on http://{host}:{port}/")
    lines.append(f"now run:  cd {pywb_dir} && wayback -b 127.0.0.1 -p 8080   "
                 f"(then http://127.0.0.1:8080/{next(iter(sorted(served)), 'COLLECTION')}/URL)")
    return server, lines, trees
