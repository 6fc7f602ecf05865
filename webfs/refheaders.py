"""Who writes a block's ``Refs`` header from the catalog's count, after the
commit that changed it: ``headers_writer`` gives the store one of two.

With SQLite one process writes the archive, and its store writes a header
from the catalog's count as it reads it (``FromCatalog``). With several
machines on one PostgreSQL catalog two of them may change one count at
once: each writes the header after its own commit, and a header written from
a count read before the other's commit, landing after the other's write,
kept the older count (fsck: "header says Refs 1, catalog 2").
``UnderRowLock`` reads the counts and writes the headers holding the rows'
locks (SELECT .. FOR UPDATE, on a connection of its own), so header writes
of one block are in the order of the counts they read, and the last one
reads the last count. A row locked by another transaction is skipped (SKIP
LOCKED): that is a count change not yet committed, whose own header write
follows its commit (or its rollback's), or another header writer that took
the lock after this count was committed and so read it or a later one.
"""
from __future__ import annotations

import logging
from typing import Callable

from . import lockorder
from .block import refs_offset_of
from .catalog import LOCKED_BLOCKS_SQL, BlockRow, Catalog
from .errors import CorruptBlock

log = logging.getLogger(__name__)

Mirror = Callable[[BlockRow], bool]     # writes one block's header from its row (Store.mirror_refs)


class FromCatalog:
    """Headers written from the counts as the store's catalog has them."""

    def __init__(self, catalog: Catalog, mirror: Mirror):
        self.catalog = catalog
        self.mirror = mirror

    def write(self, ids: list[int]) -> None:
        for row in self.catalog.blocks_by_ids(ids):
            self.mirror(row)

    def close(self) -> None:
        pass


class UnderRowLock:
    """Headers written from the engine's counts under the rows' locks, one
    transaction per batch, on a connection made at the first batch."""

    def __init__(self, engine, mirror: Mirror):
        self.engine = engine
        self.mirror = mirror
        self._db = None
        # The removal worker writes after commits, a failed commit's thread puts headers back.
        self._lock = lockorder.lock("refs headers")

    def write(self, ids: list[int]) -> None:
        if not ids:
            return
        with self._lock:
            if self._db is None:
                self._db = self.engine.connect()
            conn = self._db.conn
            with conn.transaction():
                rows = conn.execute(LOCKED_BLOCKS_SQL, (sorted(ids),)).fetchall()
                for r in rows:
                    self.mirror(BlockRow.of(r))

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None


def mirror_refs(store, row: BlockRow) -> bool:
    """``Store.mirror_refs``: the row's count into its block's Refs header;
    False if its disk cannot take it now (a disk that is away remembers it)."""
    vol = store.archive.volumes.get(row.disk)
    if vol is None:
        if row.disk in store.archive.lost:
            store.missed.refs(row.disk, row.id)
        return False
    try:
        vol.set_refs(row.sig, row.overflow, row.refs, fsync=store.fsync,
                     offset=refs_offset_of(row.sig, row.size, row.stored, row.codec))
        return True
    except (OSError, CorruptBlock) as exc:
        if isinstance(exc, OSError):
            # Remembered whether or not the disk is known to be away yet (the
            # first failed request may come before its endpoint is marked
            # down): written again if it returns (``catch_up``).
            store.missed.refs(row.disk, row.id)
            if not vol.backend.known_present():
                return False
        # The catalog is the truth; fsck and scrub mend the header.
        log.warning("cannot update Refs in block %s on disk %d: %s", row.block_name, row.disk, exc)
        return False


def headers_writer(catalog: Catalog, mirror: Mirror):
    """The writer of Refs headers for a store over this catalog."""
    if catalog.engine.name == "postgresql":
        return UnderRowLock(catalog.engine, mirror)
    return FromCatalog(catalog, mirror)


__all__ = ["FromCatalog", "UnderRowLock", "headers_writer", "mirror_refs"]
