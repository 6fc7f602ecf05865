"""Small files' bytes given to the kernel's page cache at their open.

A reader of a small file (cat, grep -r, tar, a page server) sends OPEN,
READ, FLUSH and RELEASE, and waits for each of the first three. When the
file is one piece whose bytes are at hand as it is opened (fetched ahead,
cached, or small enough to read on the loop), the open stores them in the
kernel's page cache (FUSE_NOTIFY_STORE) before it answers; the file is
opened with keep_cache, so the reader's read finds every page and the READ
is never sent. This module owns that decision and the record of what was
stored; the bytes come from ``PieceReader.at_hand``.

Only a file opened read-only, by no other handle, with no buffer being
written is stored: with the writeback cache a writer's pages live in the
kernel until its close, and they must never be overwritten. The check and
the store run on the loop with no wait between them, so no other request
of this mount comes in between.
"""
from __future__ import annotations

import errno
import logging
import os
from collections import OrderedDict
from typing import Callable

import pyfuse3

from .namespace import Namespace
from .readcache import KERNEL_STORE_BYTES, PieceReader

log = logging.getLogger(__name__)

KERNEL_STORES_KEPT = 4096       # files stored, remembered by inode (about 100 bytes each)


class KernelPages:
    """Stores small files in the kernel's page cache as they are opened.

    ``store(ino, offset, data)`` is pyfuse3.notify_store; ``count`` is told
    ``kernel-store`` for each file stored."""

    def __init__(self, namespace: Namespace, reader: PieceReader,
                 count: Callable[[str], None],
                 store: Callable[[int, int, bytes], None] = pyfuse3.notify_store):
        self.ns = namespace
        self.reader = reader
        self.count = count
        self.store = store
        self.enabled = True
        # Files stored, by inode. The kernel keeps a file's pages across opens
        # (keep_cache: every write comes through it), so a file opened again
        # (a popular page) asks nothing here, not even its blocks; if the
        # kernel let the pages go, its read comes as it would without this.
        # Its copy dropped (forget_kernel_copy) takes it out. The value says
        # how the kernel got the pages: True, written through this mount.
        self.stored: OrderedDict[int, bool] = OrderedDict()

    def opened(self, ino: int, of, flags: int) -> None:
        """A regular file was opened (``of``: its OpenFile, this handle counted)."""
        if (not self.enabled or flags & os.O_ACCMODE != os.O_RDONLY or flags & os.O_DIRECT
                or of.handles != 1 or of.buffer is not None or of.dirty):
            return
        if ino in self.stored:
            self.stored.move_to_end(ino)
            return
        size = self.ns.get(ino).size
        if not 0 < size <= KERNEL_STORE_BYTES:
            return
        if of.pieces is None:
            of.pieces = self.ns.pieces(ino)
        data = self.reader.at_hand(of.pieces)
        if data is None or len(data) != size:
            return
        try:
            self.store(ino, 0, data)
        except OSError as exc:
            if exc.errno == errno.ENOSYS:      # a kernel without it: reads as before
                self.enabled = False
            log.debug("inode %d: the kernel did not take its pages: %s", ino, exc)
            return
        self.count("kernel-store")
        self._keep(ino, False)

    def written(self, ino: int) -> None:
        """The file's content written through this mount was just stored."""
        self._keep(ino, True)

    def written_here(self, ino: int) -> bool:
        """Whether the kernel holds the file's pages from its own writes."""
        return self.stored.get(ino, False)

    def _keep(self, ino: int, written: bool) -> None:
        self.stored[ino] = written
        self.stored.move_to_end(ino)
        if len(self.stored) > KERNEL_STORES_KEPT:
            self.stored.popitem(last=False)

    def holds(self, ino: int) -> bool:
        """Whether the kernel was given the file's pages (and has not been told to drop them)."""
        return ino in self.stored

    def forget(self, ino: int) -> None:
        """The kernel lets go of the file's pages (its copy is dropped)."""
        self.stored.pop(ino, None)
