"""The block files of a chunk of new blocks, written by a few threads at once.

A bulk import stores its documents a chunk at a time (``Store.store_many``);
each new block is a new file in a leaf directory of the signature tree,
most often a directory of its own. Creating that file is a system call
that waits on the filesystem (its journal, the directory's blocks), not on
the interpreter, so a few threads create a chunk's files side by side while
the storing thread waits once for all of them. Each thread writes a block
on the disk its intent line already names, and only there: a block that
cannot go there (the disk full, gone, failing) comes back unwritten, and
the storing thread writes it itself with the store's whole choice of disks
(``Store._write_new``), as it writes any single block. So these threads
take no lock of the store's but a volume's room count, and the order on
the disks is the store's: intents, then block files, then catalog rows.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Optional

from .archive import Archive
from .block import HEADER_SIZE, BlockHeader

# Threads that create block files. Measured on ext4 (2 cores, 4 disks, an
# import of 11,061 small pages): see webfs-internals(7), SMALL BLOCK WRITES.
WRITERS = 4


class BlockWriters:
    """A store's threads writing new block files."""

    def __init__(self, archive: Archive, threads: int = WRITERS):
        self.archive = archive
        self.threads = threads
        # Threads are started by the first chunk, not before (a mount that never imports has none).
        self.pool = ThreadPoolExecutor(threads, thread_name_prefix="webfs-block-writer")

    def write_all(self, blocks: list[tuple[BlockHeader, bytes, int, Optional[int]]],
                  fsync: bool, meanwhile: Callable[[], None] = lambda: None) -> list[Optional[int]]:
        """Write blocks (header, payload, overflow, the disk their intent
        names) side by side, calling ``meanwhile`` while they are written (an
        import walks on: ``Store.store_many``); for each, the disk it was
        written on, or None: not written, for the caller to write. One block
        is left to the caller. Each thread is handed its share of the chunk
        at once (every ``threads``-th block): a hand-off and a wait per block
        were a Future, two wake-ups and a futex call or more each, 64 a chunk."""
        if len(blocks) < 2:
            meanwhile()
            return [None] * len(blocks)
        n = min(self.threads, len(blocks))
        shares = [self.pool.submit(self._write_share, blocks[i::n], fsync) for i in range(n)]
        meanwhile()
        out: list[Optional[int]] = [None] * len(blocks)
        for i, share in enumerate(shares):
            out[i::n] = share.result()
        return out

    def _write_share(self, blocks: list[tuple[BlockHeader, bytes, int, Optional[int]]],
                     fsync: bool) -> list[Optional[int]]:
        out = []
        for header, payload, overflow, disk in blocks:
            try:
                out.append(self._write_on(header, payload, overflow, disk, fsync))
            except Exception:          # the caller meets it again, and says it
                out.append(None)
        return out

    def _write_on(self, header: BlockHeader, payload: bytes, overflow: int, disk: Optional[int],
                  fsync: bool) -> Optional[int]:
        vol = self.archive.volumes.get(disk) if disk is not None else None
        if vol is None or not self.archive.has_room(disk, len(payload) + HEADER_SIZE):
            return None
        try:
            vol.write_block(header, payload, overflow, fsync=fsync)
        except OSError:
            return None
        return disk

    def close(self) -> None:
        self.pool.shutdown(wait=True)
