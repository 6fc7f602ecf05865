"""The virtual WARC files a mount shows, read-only, under ``.webfs/warc/VIEW/NAME``.

This module owns the *views* a mount's daemon serves: asked by ``webfs
replay`` (admin command ``warc-view``), the daemon lays out a collection's
virtual WARC files as replay would (``webfs.cdxj.laid_out``: which slice of
the kept ``.heads``, which capture file, which literal bytes make each
record, from its live namespace, reading no capture), keeps that layout
under an id, and assembles the bytes of a read from the heads' and the
capture files' pieces. pywb then reads each virtual WARC as a local file (its
``archive_paths`` point here), as it reads its own collections, without an
HTTP request per capture. Replay is told each file's key (``cdxj.key_of``),
which names the CDXJ lines that hold for that layout.

A view never changes once made, so the offsets of the CDXJ replay wrote with
it stay true: a capture deleted or rewritten since (another size) fails its
record's read with EIO, and nothing else. Views live as long as the mount,
one per collection (a newer layout of it replaces the older); after a
remount ``webfs replay`` makes them again, under the same id if nothing
changed.
"""
from __future__ import annotations

import bisect
import errno
import json
import os
from typing import Optional

from . import warc
from .admin import Progress, Result
from .cdxj import key_of, laid_out, spans
from .errors import FsError
from .signature import signature

VIEW_DIR = b"warc"          # .webfs/warc


class ViewFile:
    """One virtual WARC file of a view, read from the live namespace."""

    def __init__(self, ns, top: int, vf):
        """``vf``: a laid out ``cdxj.VirtualFile`` of the collection at inode ``top``."""
        self.ns, self.top = ns, top
        self.heads = warc.KEEP_DIR + b"/" + vf.src + warc.HEADS_SUFFIX
        self.starts, self.parts, self.size = vf.starts, vf.parts, vf.size
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

    def record_end(self, off: int) -> int:
        """Where the record that holds byte ``off`` ends (the next one starts)."""
        i = bisect.bisect_right(self.starts, off)
        return self.starts[i] if i < len(self.starts) else self.size

    async def read(self, reader, off: int, size: int) -> bytes:
        """Bytes [off, off+size), cut at the end of the record ``off`` is in: the
        heads' slices, the captures' bytes and the literal parts. A capture gone
        or of another size than laid out: EIO.

        The cut is what lets a reader's buffer be large (st_blksize 128 KiB):
        pywb opens the file for each record, and Python's buffer fill at the
        record's start then brings the whole record in one request without
        assembling its neighbours, where 4 KiB buffers took two or more."""
        out = []
        for (kind, where, n), lo, hi in spans(self.starts, self.parts, off, min(off + size, self.record_end(off))):
            if kind == "b":
                out.append(where[lo:hi])
                continue
            try:
                ino = self._inode(self.heads if kind == "h" else where)
                node = self.ns.get(ino)
                # Unlinked but not yet forgotten by the kernel, the inode is
                # still there: gone all the same.
                if node.nlink == 0 or (kind == "f" and node.size != n):
                    raise FsError(errno.EIO)
            except FsError:
                raise FsError(errno.EIO) from None      # the collection changed since replay laid it out
            base = where if kind == "h" else 0
            out.append(await reader.read(self.ns.pieces(ino), base + lo, hi - lo))
        return b"".join(out)


class WarcViews:
    """The views a mount serves: id -> {file name: ViewFile}, the latest of each collection."""

    def __init__(self):
        self.views: dict[str, dict[bytes, ViewFile]] = {}
        self.of_collection: dict[int, str] = {}        # its directory's inode -> its view's id

    def add(self, ns, top: int, files: dict, keys: dict[str, str]) -> str:
        """Keep a collection's laid out virtual files (name -> ``cdxj.VirtualFile``,
        whose keys are ``keys``) as a view; its id."""
        view_id = signature(json.dumps([top, sorted(keys.items())]).encode())[:16]
        if view_id not in self.views:
            self.views[view_id] = {name.encode("utf-8", "surrogateescape"): ViewFile(ns, top, vf)
                                   for name, vf in files.items()}
        older = self.of_collection.get(top)
        if older not in (None, view_id):
            self.views.pop(older, None)         # its CDXJ no longer fits the collection: replay again
        self.of_collection[top] = view_id
        return view_id

    def names(self, view_id: Optional[str] = None) -> list[bytes]:
        """The views' ids, or the file names of one view."""
        if view_id is None:
            return [v.encode() for v in list(self.views)]     # a snapshot: replay's thread may add one
        return sorted(self.views.get(view_id, {}))

    def file(self, view_id: str, name: bytes) -> ViewFile:
        found = self.views.get(view_id, {}).get(name)
        if found is None:
            raise FsError(errno.ENOENT)
        return found


def warc_view(archive, progress: Progress, collection: str) -> Result:
    """The admin command replay asks a mount's daemon: lay out a collection's
    virtual WARC files and show them as a view of ``.webfs/warc/``; its id, and
    each file's source and key."""
    tree = warc.DiskTree("", collection, None, opened=archive)
    try:
        files = laid_out(tree, tree.sizes_below())
    finally:
        tree.close()
    keys = {name: key_of(name, vf).decode("utf-8", "surrogateescape") for name, vf in files.items()}
    view_id = archive.warc_views.add(archive.namespace, tree.top, files, keys)
    return Result(figures={"view": view_id, "files": {name: [os.fsdecode(vf.src), keys[name]]
                                                     for name, vf in files.items()}})
