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
it stay true: it keeps, for the heads and each capture it reads, the file's
inode, size and mtime and its blocks as the catalog listed them when the view
was made (a record's read asks the catalog nothing but the inode, to check
it); a capture deleted, replaced or written since fails its record's read
with EIO, and nothing else. Views live as long as the mount, one per
collection (a newer layout of it replaces the older); after a remount
``webfs replay`` makes them again, under the same id if nothing changed.
"""
from __future__ import annotations

import bisect
import errno
import json
import os
from typing import NamedTuple, Optional

from . import warc
from .admin import Progress, Result
from .cdxj import key_of, laid_out, spans
from .errors import FsError
from .signature import signature

VIEW_DIR = b"warc"          # .webfs/warc


class Kept(NamedTuple):
    """A file a view reads, as it was when the view was made."""
    ino: int
    size: int
    mtime_ns: int
    rows: list                  # its blocks (BlockRow), in order


class ViewFile:
    """One virtual WARC file of a view, read from the files it keeps."""

    def __init__(self, ns, vf, kept: dict[bytes, Kept]):
        """``vf``: a laid out ``cdxj.VirtualFile``; ``kept``: the collection's
        files it reads (``kept_files``), by path."""
        self.ns = ns
        self.heads = vf.src.path(warc.HEADS_SUFFIX)
        self.starts, self.parts, self.size = vf.starts, vf.parts, vf.size
        self.kept = kept

    def _rows(self, rel: bytes) -> list:
        """The blocks of a file the view reads, while it is the file the view
        found (its inode there, of the same size and mtime); else EIO: the
        collection changed since replay laid it out. A block moved to another
        disk since is found there by the store, as for any open file."""
        kept = self.kept.get(rel)
        try:
            # Unlinked but not yet forgotten by the kernel, the inode is still there: gone all the same.
            node = self.ns.get(kept.ino) if kept else None
        except FsError:
            node = None
        if node is None or node.nlink == 0 or (node.size, node.mtime_ns) != (kept.size, kept.mtime_ns):
            raise FsError(errno.EIO)
        return kept.rows

    def record_end(self, off: int) -> int:
        """Where the record that holds byte ``off`` ends (the next one starts)."""
        i = bisect.bisect_right(self.starts, off)
        return self.starts[i] if i < len(self.starts) else self.size

    async def read(self, reader, off: int, size: int) -> bytes:
        """Bytes [off, off+size), cut at the end of the record ``off`` is in: the
        heads' slices, the captures' bytes and the literal parts.

        The cut is what lets a reader's buffer be large (st_blksize 128 KiB):
        pywb opens the file for each record, and Python's buffer fill at the
        record's start then brings the whole record in one request without
        assembling its neighbours, where 4 KiB buffers took two or more."""
        out = []
        for (kind, where, _), lo, hi in spans(self.starts, self.parts, off, min(off + size, self.record_end(off))):
            if kind == "b":
                out.append(where[lo:hi])
                continue
            rows = self._rows(self.heads if kind == "h" else where)
            base = where if kind == "h" else 0
            out.append(await reader.read(rows, base + lo, hi - lo))
        return b"".join(out)


def kept_files(ns, files: dict, found: dict) -> dict[bytes, Kept]:
    """The files the laid out virtual files ``files`` read (heads, captures) as
    ``found`` (path -> Inode: ``DiskTree.files_below``) has them, with their
    blocks, in a catalog query per 500 files."""
    paths = {vf.src.path(warc.HEADS_SUFFIX) for vf in files.values()}
    paths.update(part[1] for vf in files.values() for parts in vf.parts for part in parts if part[0] == "f")
    nodes = {p: found[p] for p in paths if p in found}
    blocks = ns.contents_of([node.id for node in nodes.values()])
    return {p: Kept(node.id, node.size, node.mtime_ns, blocks.get(node.id, [])) for p, node in nodes.items()}


class WarcViews:
    """The views a mount serves: id -> {file name: ViewFile}, the latest of each collection."""

    def __init__(self):
        self.views: dict[str, dict[bytes, ViewFile]] = {}
        self.of_collection: dict[int, str] = {}        # its directory's inode -> its view's id

    def add(self, ns, top: int, files: dict, keys: dict[str, str], kept: dict[bytes, Kept]) -> str:
        """Keep a collection's laid out virtual files (name -> ``cdxj.VirtualFile``,
        whose keys are ``keys``, reading ``kept``) as a view; its id. Made again
        under the same id (replay run again), its files keep the new ``kept``,
        blocks moved since included."""
        view_id = signature(json.dumps([top, sorted(keys.items())]).encode())[:16]
        self.views[view_id] = {name.encode("utf-8", "surrogateescape"): ViewFile(ns, vf, kept)
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
    each file's source (by its index file's name: ``warc.source_of``) and key."""
    tree = warc.DiskTree("", collection, None, opened=archive)
    try:
        found = tree.files_below()
        files = laid_out(tree, {path: node.size for path, node in found.items()})
        kept = kept_files(tree.ns, files, found)
    finally:
        tree.close()
    keys = {name: key_of(name, vf).decode("utf-8", "surrogateescape") for name, vf in files.items()}
    view_id = archive.warc_views.add(archive.namespace, tree.top, files, keys, kept)
    return Result(figures={"view": view_id, "files": {name: [os.fsdecode(vf.src.index_name), keys[name]]
                                                     for name, vf in files.items()}})
