"""Replay of a collection by pywb, from the mount, without copying it into WARCs.

This module owns the *virtual WARC files* of a collection: for each source
file F kept in ``@warc/``, a plain (uncompressed) WARC or ARC whose records
are rebuilt on demand from ``F.heads`` and the capture files (the same bytes
``export-warc`` writes, before gzip). It makes the collection's sorted CDXJ
index over them (with cdxj-indexer, the indexer pywb uses) and serves them
over HTTP with byte ranges on 127.0.0.1, which pywb reads as remote
``archive_paths``. So ``webfs replay`` and ``wayback`` browse the mount.
"""
from __future__ import annotations

import bisect
import http.server
import io
import logging
import os
import re
from typing import Optional

from . import warc
from .errors import WebfsError
from .files import write_file
from . import lockorder

log = logging.getLogger(__name__)

CDXJ_NAME = b"index.cdxj"        # in @warc/: the collection's sorted CDXJ index


class VirtualFile:
    """One source file's records as one plain file, read by byte ranges."""

    def __init__(self, tree, src: bytes):
        self.tree = tree
        self.heads = tree.read(warc.KEEP_DIR + b"/" + src + warc.HEADS_SUFFIX)
        index = tree.read(warc.KEEP_DIR + b"/" + src + warc.INDEX_SUFFIX)
        self.starts: list[int] = []
        self.parts: list[list] = []       # per record: ("h", start, n) or ("f", path, n)
        pos = 0
        for ln in warc.parse_index(index):
            p = ln.ho + ln.wl + ln.hl
            if ln.where == "file":
                try:
                    n = tree.size(ln.capture)
                except (OSError, WebfsError, Exception):
                    n = 0
                parts = [("h", ln.ho, ln.wl + ln.hl), ("f", ln.capture, n), ("h", p, ln.tl)]
            else:
                parts = [("h", ln.ho, ln.wl + ln.hl + ln.pl + ln.tl)]
            self.starts.append(pos)
            self.parts.append(parts)
            pos += sum(x[2] for x in parts)
        self.size = pos
        self._cache: tuple[bytes, bytes] = (b"", b"")
        self.lock = lockorder.lock("replay record")

    def _part(self, part) -> bytes:
        kind, where, n = part
        if kind == "h":
            return self.heads[where:where + n]
        with self.lock:
            if self._cache[0] != where:
                self._cache = (where, self.tree.read(where))
            return self._cache[1][:n]

    def read(self, start: int, end: int) -> bytes:
        """Bytes [start, end) of the virtual file."""
        out = []
        i = max(bisect.bisect_right(self.starts, start) - 1, 0)
        while i < len(self.starts) and self.starts[i] < end:
            pos = self.starts[i]
            for part in self.parts[i]:
                a, b = pos, pos + part[2]
                if b > start and a < end:
                    data = self._part(part)
                    out.append(data[max(start - a, 0):min(end, b) - a])
                pos = b
            i += 1
        return b"".join(out)


class _Raw(io.RawIOBase):
    def __init__(self, vf: VirtualFile):
        self.vf, self.pos = vf, 0

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
        data = self.vf.read(self.pos, min(self.pos + len(b), self.vf.size))
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
    return out


def cdxj(files: dict[str, VirtualFile]) -> bytes:
    """The sorted CDXJ index of the virtual files (cdxj-indexer's lines)."""
    from cdxj_indexer.main import CDXJIndexer
    out = io.StringIO()
    indexer = CDXJIndexer(output=None, inputs=[])
    for name, vf in files.items():
        indexer.force_filename = name
        indexer.process_one(io.BufferedReader(_Raw(vf), 1 << 16), out, name)
    lines = sorted(line for line in out.getvalue().splitlines() if line)
    return "".join(line + "\n" for line in lines).encode()


def serve(files: dict[str, VirtualFile], coll: str, port: int, host: str = "127.0.0.1"):
    """An HTTP server of the virtual files at /COLL/NAME, with byte ranges (not started)."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def _target(self) -> Optional[VirtualFile]:
            prefix = "/" + coll + "/"
            if not self.path.startswith(prefix):
                return None
            return files.get(self.path[len(prefix):])

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


def pywb_config(coll: str, index_path: str, port: int) -> str:
    return (f"# written by webfs replay: pywb serves the collection {coll!r} from the webfs mount\n"
            f"collections:\n"
            f"  {coll}:\n"
            f"    index_paths: {index_path}\n"
            f"    archive_paths: http://127.0.0.1:{port}/{coll}/\n")


def _write(path: str, data: bytes) -> None:
    """A file replay makes, created new and renamed over its name (webfs.files)."""
    try:
        write_file(path, data)
    except OSError as exc:
        raise WebfsError(f"{path}: cannot write: {exc.strerror or exc}") from None


def prepare(collection: str, pywb_dir: str, port: int):
    """Index the collection, write the pywb config; return (server, lines to say)."""
    tree = warc.open_tree(collection)
    coll = os.path.basename(collection.rstrip("/").partition(":")[2] or collection.rstrip("/")) \
        if isinstance(tree, warc.DiskTree) else os.path.basename(os.path.abspath(collection))
    files = virtual_files(tree)
    index = cdxj(files)
    os.makedirs(pywb_dir, exist_ok=True)
    lines = []
    count = index.count(b"\n")
    if isinstance(tree, warc.MountTree):
        # the index lives in the collection itself, an ordinary file of the archive
        path = os.path.join(os.path.abspath(collection), "@warc", CDXJ_NAME.decode())
        try:
            with open(os.open(path, os.O_RDONLY | os.O_NOFOLLOW), "rb") as f:
                same = f.read() == index
        except OSError:
            same = False
        if not same:
            _write(path, index)
        lines.append(f"CDXJ index: {path} ({count} lines)")
    else:
        path = os.path.join(os.path.abspath(pywb_dir), coll + ".cdxj")
        _write(path, index)
        lines.append(f"CDXJ index: {path} ({count} lines)")
    _write(os.path.join(pywb_dir, "config.yaml"), pywb_config(coll, path, port).encode())
    lines.append(f"serving {len(files)} virtual WARC file(s) of {coll} on http://127.0.0.1:{port}/{coll}/")
    lines.append(f"now run:  cd {pywb_dir} && wayback   (then http://localhost:8080/{coll}/URL)")
    return serve(files, coll, port), lines, tree
