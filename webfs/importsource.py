"""What an import is fed: the ``Item`` each source entry becomes on its way to
one destination name, and ``Source``, what a source of items supplies to an
import (webfs.ingest) and what it may use of it.

Two sources exist: a tree of files (webfs.treesource, ``webfs import``) and
the records of web archive files (webfs.warcimport, ``webfs import-warc``).
An import runs them alike: the source walks, its files are prepared by the
threads and stored in chunks (webfs.preparation), and their names are made
in batches (webfs.ingest).
"""
from __future__ import annotations

import errno
import os
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Iterable, Iterator, Optional

from .errors import FsError
from .namespace import Inode
from .store import Piece

CONTROL_DIR = b".webfs"     # the fs's read-only tree owns this name in the root


@dataclass
class Item:
    """One source entry on its way to one destination name."""
    kind: str                        # dir, file, symlink, special, hardlink
    src: bytes
    parent: Optional["Item"]         # the directory item it goes in (None: DEST)
    name: bytes
    path: bytes                      # its path from the archive root (for the journal)
    st: os.stat_result
    ino: Optional[int] = None        # its webfs inode, once made (or found)
    existing: Optional[Inode] = None
    skip: bool = False               # already there: nothing to do
    future: Optional[Future] = None
    rows: list = field(default_factory=list)
    stored: Optional[list] = None    # what the store gave for its prepared pieces (with its chunk's)
    size: int = 0
    target: bytes = b""
    xattrs: list = field(default_factory=list)
    first: Optional["Item"] = None   # a hard link: the item of the inode's first name
    failed: str = ""                 # why it cannot be imported (reported in walk order)
    warning: str = ""                # imported, but something of it was not (its xattrs)
    shares: bool = False             # its blocks are another file's (a WARC revisit's original)
    apart: Optional[object] = None   # the ingest.Counts its duplicates and new blocks go to, if not the import's


def show_path(path: bytes) -> str:
    """A path as a message line shows it: bytes that are not UTF-8 as \\xff,
    newlines and other control characters escaped, so one problem is one line."""
    text = path.decode("utf-8", "backslashreplace")
    if text.isprintable():          # (most: import-warc shows its source's path at every record)
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def problem_line(path: bytes, exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.errno:
        return f"{show_path(path)}: {exc.strerror} ({errno.errorcode.get(exc.errno, exc.errno)})"
    if isinstance(exc, FsError):
        return f"{show_path(path)}: {exc} ({errno.errorcode.get(exc.errno, exc.errno)})"
    return f"{show_path(path)}: {exc}"


class Source:
    """What feeds an import its items. A source supplies ``count`` (or None:
    no total for the progress bar), ``walk`` (items, every directory before
    what it holds; a file is handed to ``enqueue``), ``prepare`` (run by a
    pool thread: what it can do ahead of storing) and ``store_prepared`` (run
    by the walking thread). It uses the import's store, namespace and
    preparation through the names below; a tree's walk also tells the import
    which directories it merges into (``importer.merged``, given their
    source's attributes at the end) and reads the mount's device it must not
    walk into (``importer.avoid_dev``)."""

    def __init__(self, importer):
        self.importer = importer
        self.store = importer.store
        self.ns = importer.ns
        self.progress = importer.progress
        self.max_block = importer.max_block
        self.uid, self.gid = importer.uid, importer.gid

    def count(self, sources: list[bytes]) -> Optional[int]:
        raise NotImplementedError

    def walk(self, sources: list[bytes], dest: Item) -> Iterator[Item]:
        raise NotImplementedError

    def prepare(self, item: Item) -> Optional[tuple[list[Piece], object]]:
        raise NotImplementedError

    def store_prepared(self, item: Item, prepared: Optional[tuple[list[Piece], object]]) -> None:
        raise NotImplementedError

    def enqueue(self, item: Item, size: int) -> None:
        """A file to store: it joins the chunk being walked (webfs.preparation)."""
        self.importer.prep.enqueue(item, size)

    def store_pieces(self, item: Item, pieces: Iterable[Piece]) -> None:
        self.importer.prep.store_pieces(item, pieces)

    def give_back(self, item: Item) -> None:
        self.importer.prep.give_back(item)

    def names_in(self, parent: Item) -> dict[bytes, Inode]:
        """The names already in a directory that was there before this import."""
        if parent.ino is None or parent.existing is None:
            return {}
        return self.ns.children(parent.ino)
