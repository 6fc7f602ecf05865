"""The virtual WARC files a mount shows, read-only, under ``.webfs/warc/VIEW/NAME``.

This module owns the *views* a mount's daemon serves: ``webfs replay`` of a
collection in a mount lays out each source file's virtual WARC
(``webfs.cdxj.VirtualFile``: which slice of the kept ``.heads``, which capture
file, which literal bytes make each record) and hands that layout to the
daemon (admin command ``warc-view``); the daemon keeps it under an id, the
hash of the layout, and assembles the bytes of a read from the heads' and the
capture files' pieces. pywb then reads each virtual WARC as a local file (its
``archive_paths`` point here), as it reads its own collections, without an
HTTP request per capture.

A view never changes once made, so the offsets of the CDXJ replay wrote with
it stay true: a capture deleted or rewritten since (another size) fails its
record's read with EIO, and nothing else. Views live as long as the mount (a
bounded number of them, the oldest dropped first); after a remount
``webfs replay`` makes them again.
"""
from __future__ import annotations

import errno
import json
import os
from typing import Optional

from . import warc
from .admin import Progress, Result
from .cdxj import spans
from .errors import FsError, WebfsError
from .namespace import ROOT_INODE
from .signature import signature

VIEW_DIR = b"warc"          # .webfs/warc
MAX_VIEWS = 64              # layouts kept by a mount; a replay makes its own again


def layout(collection: str, files: dict) -> dict:
    """What ``warc-view`` is given: a collection's path in the archive and, per
    virtual file (name -> ``cdxj.VirtualFile``), its heads file and its records'
    starts and parts (a capture by its path, literal bytes as latin-1)."""
    out = {}
    for name, vf in files.items():
        parts = [[[kind, os.fsdecode(where) if kind == "f" else where.decode("latin-1") if kind == "b" else where, n]
                  for kind, where, n in rec] for rec in vf.parts]
        out[name] = {"heads": os.fsdecode(warc.KEEP_DIR + b"/" + vf.src + warc.HEADS_SUFFIX),
                     "starts": vf.starts, "parts": parts}
    return {"collection": collection, "files": out}


class ViewFile:
    """One virtual WARC file of a view, read from the live namespace."""

    def __init__(self, ns, top: int, spec: dict):
        self.ns, self.top = ns, top
        self.heads = os.fsencode(spec["heads"])
        self.starts = spec["starts"]
        self.parts = [[(kind, os.fsencode(where) if kind == "f" else where.encode("latin-1") if kind == "b" else where, n)
                       for kind, where, n in rec] for rec in spec["parts"]]
        self.size = self.starts[-1] + sum(p[2] for p in self.parts[-1]) if self.starts else 0
        self.inodes: dict[bytes, int] = {}

    def _inode(self, rel: bytes) -> int:
        """A file of the collection by its path, looked up once (numbers are never reused)."""
        ino = self.inodes.get(rel)
        if ino is None:
            ino = self.top
            for part in [p for p in rel.split(b"/") if p]:
                ino = self.ns.lookup(ino, part).id
            self.inodes[rel] = ino
        return ino

    async def read(self, reader, off: int, size: int) -> bytes:
        """Bytes [off, off+size): the heads' slices, the captures' bytes and the
        literal parts. A capture gone or of another size than laid out: EIO."""
        out = []
        for (kind, where, n), lo, hi in spans(self.starts, self.parts, off, min(off + size, self.size)):
            if kind == "b":
                out.append(where[lo:hi])
                continue
            try:
                ino = self._inode(self.heads if kind == "h" else where)
                if kind == "f" and self.ns.get(ino).size != n:
                    raise FsError(errno.EIO)
            except FsError:
                raise FsError(errno.EIO) from None      # the collection changed since replay laid it out
            base = where if kind == "h" else 0
            out.append(await reader.read(self.ns.pieces(ino), base + lo, hi - lo))
        return b"".join(out)


class WarcViews:
    """The views a mount serves: id -> {file name: ViewFile}, oldest first."""

    def __init__(self):
        self.views: dict[str, dict[bytes, ViewFile]] = {}

    def add(self, ns, spec: dict) -> str:
        """Keep a collection's layout (``layout``'s) as a view; its id."""
        view_id = signature(json.dumps(spec, sort_keys=True).encode())[:16]
        if view_id in self.views:
            return view_id
        top = ROOT_INODE
        try:
            for part in [p for p in os.fsencode(spec["collection"]).split(b"/") if p]:
                top = ns.lookup(top, part).id
        except FsError as exc:
            raise WebfsError(f"{spec['collection']}: not in the archive ({exc})") from None
        files = {name.encode("utf-8", "surrogateescape"): ViewFile(ns, top, f) for name, f in spec["files"].items()}
        while len(self.views) >= MAX_VIEWS:
            self.views.pop(next(iter(self.views)))
        self.views[view_id] = files
        return view_id

    def names(self, view_id: Optional[str] = None) -> list[bytes]:
        """The views' ids, or the file names of one view."""
        if view_id is None:
            return [v.encode() for v in self.views]
        return sorted(self.views.get(view_id, {}))

    def file(self, view_id: str, name: bytes) -> ViewFile:
        found = self.views.get(view_id, {}).get(name)
        if found is None:
            raise FsError(errno.ENOENT)
        return found


def warc_view(archive, progress: Progress, collection: str, files: dict) -> Result:
    """The admin command replay asks a mount's daemon: keep this layout of a
    collection's virtual WARC files as a view of ``.webfs/warc/``; its id."""
    view_id = archive.warc_views.add(archive.namespace, {"collection": collection, "files": files})
    return Result(figures={"view": view_id})
