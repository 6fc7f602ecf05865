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

A lone mount (``Catalog.solo``: no other machine writes the catalog) needs
no read: the counts its own commit wrote are the counts (``CommittedRows``),
and the header is written from the row the store changed (webfs-internals(7),
POSTGRESQL WAITS A FILE).
"""
from __future__ import annotations

import logging
from typing import Callable, Optional

from . import lockorder
from .block import refs_offset_of
from .catalog import LOCKED_BLOCKS_SQL, BlockRow, Catalog
from .catalogengine import enter_pipeline
from .errors import CorruptBlock

log = logging.getLogger(__name__)

Mirror = Callable[[BlockRow], bool]     # writes one block's header from its row (Store.mirror_refs)


class FromCatalog:
    """Headers written from the counts as the store's catalog has them."""

    def __init__(self, catalog: Catalog, mirror: Mirror):
        self.catalog = catalog
        self.mirror = mirror

    def changed(self, rows: list[BlockRow]) -> None:
        pass

    def committed(self) -> None:
        pass

    def write(self, ids: list[int]) -> None:
        for row in self.catalog.blocks_by_ids(ids):
            self.mirror(row)

    def close(self) -> None:
        pass


class CommittedRows:
    """The rows whose counts a lone mount's commits wrote, latest commit's
    last, until their headers are written: a header is then written from
    its row, not from a read of the catalog.

    A row changed in the open transaction (``changed``, under the catalog
    lock) is stamped with ``Catalog.stripe_changes``, which a rollback, a
    block's move and a block's delete move: a row whose stamp is not the
    one at its commit may not be what was committed, and is read instead.
    A commit (``committed``, under the catalog lock, in the order of
    commits) keeps its rows with ``solo``'s token, overwriting an earlier
    commit's row of the block; the first header job that asks for a block
    takes its row (``take``), so a later job, or an earlier commit's job
    run after a later commit, finds none and reads the count committed last.
    """

    def __init__(self, catalog: Catalog):
        self.catalog = catalog
        self._changed: dict[int, tuple[BlockRow, int]] = {}     # id -> (row, stamp)
        # id -> (row, solo's token at its commit, stamp). Set under the catalog
        # lock, taken by header jobs without it (the header lock is taken under
        # the catalog lock): one dict operation each, atomic under the GIL.
        self._committed: dict[int, tuple[BlockRow, int, int]] = {}

    def changed(self, rows: list[BlockRow]) -> None:
        self.catalog.blocks_counted(rows)       # (the rows a lone mount keeps: webfs.catalogsigs)
        stamp = self.catalog.stripe_changes
        for row in rows:
            self._changed[row.id] = (row.copy(), stamp)

    def committed(self) -> None:
        token, stamp = self.catalog.solo(), self.catalog.stripe_changes
        changed, self._changed = self._changed, {}
        for block_id, (row, at) in changed.items():
            if token is not None and at == stamp:
                self._committed[block_id] = (row, token, stamp)
            else:
                self._committed.pop(block_id, None)

    def take(self, ids: list[int]) -> tuple[list[BlockRow], list[int], Optional[int]]:
        """(rows to write as they are, ids to read, the token they hold under)."""
        token, stamp = self.catalog.solo(), self.catalog.stripe_changes
        rows, unread = [], []
        for block_id in ids:
            kept = self._committed.pop(block_id, None)
            if kept is not None and token is not None and kept[1:] == (token, stamp):
                rows.append(kept[0])
            else:
                unread.append(block_id)
        return rows, unread, token


class UnderRowLock:
    """Headers written from the engine's counts under the rows' locks, one
    transaction per batch, on a connection made at the first batch and kept
    in pipeline mode (a round trip a batch); a lone
    mount's from the rows its commits wrote (``CommittedRows``)."""

    def __init__(self, engine, mirror: Mirror, catalog: Catalog):
        self.engine = engine
        self.mirror = mirror
        self._db = None
        # The removal worker writes after commits, a failed commit's thread puts headers back.
        self._lock = lockorder.lock("refs headers")
        self.rows = CommittedRows(catalog)
        self.changed, self.committed = self.rows.changed, self.rows.committed
        self.reads = 0                  # batches read under the rows' locks, for tests

    def write(self, ids: list[int]) -> None:
        rows, unread, token = self.rows.take(ids)
        if rows:
            with self._lock:
                for row in rows:
                    self.mirror(row)
            if self.rows.catalog.solo() != token:
                # A second machine counted while these were written: its own header
                # writes may have come first; what the catalog has now goes last.
                unread += [r.id for r in rows]
        self._write_read(unread)

    def _write_read(self, ids: list[int]) -> None:
        if not ids:
            return
        with self._lock:
            self.reads += 1
            if self._db is None:
                self._db = self.engine.connect()
                enter_pipeline(self._db.conn)
            conn = self._db.conn
            # One round trip a batch, not three (BEGIN, the read, COMMIT each
            # waited for): in the connection's pipeline the BEGIN goes with the
            # read, and the COMMIT is sent (the locks go as the server reads it)
            # and its answer read with the next batch's.
            try:
                conn.execute("BEGIN")
                rows = conn.execute(LOCKED_BLOCKS_SQL, (sorted(ids),)).fetchall()
                for r in rows:
                    self.mirror(BlockRow.of(r))
                conn.execute("COMMIT")
            except BaseException:
                self._db, db = None, self._db     # its pipeline out of step: the server rolls back
                db.close()
                raise

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
        return UnderRowLock(catalog.engine, mirror, catalog)
    return FromCatalog(catalog, mirror)


__all__ = ["CommittedRows", "FromCatalog", "UnderRowLock", "headers_writer", "mirror_refs"]
