"""The preparation of an import's files (webfs.ingest): they go to the store
in chunks, prepared by a pool of threads and stored by the walking thread.

A pool thread reads, hashes, finds the twin of, or compresses each file of
a chunk (xxhash and zlib-ng release the GIL; the pool takes no lock) while
the walk goes on: what it does for one file is its source's ``prepare``
(webfs.importsource). The walking thread stores the chunk at once
(``Store.store_many``: block files, catalog rows, parity placed and XOR-ed
per stripe), through the source's ``store_prepared``, and only then gives
its items out to have their names made. What was stored for a name that is
not made gives its references back (``give_back``).
"""
from __future__ import annotations

from concurrent.futures import Future
from typing import Iterable, Iterator, Optional

from .catalog import BlockRow
from .importsource import Item, Source
from .store import Piece, Store

# Files go to the store in chunks. WORKERS threads prepare a chunk: they read
# each file of at most one block whole, hash it, look in one catalog query for
# a block with the same bytes, and compress what no block has yet; they hold
# no lock and mostly wait on disks or run C code. The walking thread itself
# then stores the chunk (and reads any larger file as it stores it): threads
# that each read and stored cost more in interpreter-lock hand-overs than they
# overlapped (webfs-internals(7) has the measurement).
WORKERS = 4
CHUNK_FILES = 64
CHUNK_BYTES = 16 << 20
# Signatures encoded for a new block earlier in an import, remembered (~100 B
# each) so that a repeat in a later chunk, prepared while that chunk is still
# being stored, is not encoded again: it will be its duplicate.
ENCODED_KEPT = 200_000


class Preparation:
    """One import's files on their way to the store, a chunk at a time."""

    def __init__(self, store: Store, source: Source):
        self.store = store
        self.source = source
        self.pool = None                               # the import's threads, while it runs
        self.chunk: list[Item] = []                    # files walked, not yet handed to the threads
        self.chunk_bytes = 0
        self.ready: list[Item] = []                    # items walked since the last chunk went out
        self.waiting: Optional[tuple] = None           # (chunk, its preparation, its items): stored next
        self.walk: Optional[Iterator[Item]] = None     # the source's walk, until it ends
        self.walk_failed: Optional[Exception] = None   # how it ended, if it failed
        self.encoded: set[str] = set()                 # signatures encoded (ENCODED_KEPT at most)

    def enqueue(self, item: Item, size: int) -> None:
        """A file (a capture) to store: it joins the chunk being walked, and its
        future is settled when this thread has stored it (see ``_send``)."""
        item.future = Future()
        self.chunk.append(item)
        self.chunk_bytes += size

    def chunked(self, items: Iterator[Item]) -> Iterator[Item]:
        """The walk's items, in walk order, each given out once stored."""
        self.walk = items
        try:
            while self._walk_chunk():
                yield from self._send()
            if self.walk_failed is not None:
                raise self.walk_failed
            yield from self._send(last=True)
        finally:
            if self.walk is not None:       # stopped: the walk ends now (a WARC's reading process with it)
                self.walk.close()
                self.walk = None

    def _walk_chunk(self) -> bool:
        """Walk on until the chunk being walked is full; False once the walk
        has ended (or failed: ``walk_failed``, raised by ``chunked``). Called
        by the storing thread between chunks, and while a chunk's block files
        are written (``Store.store_many``'s ``walk_on``: the walk takes no
        signature lock), so that the walk's Python runs beside the writers'
        file creation instead of after it."""
        while not (len(self.chunk) >= CHUNK_FILES or self.chunk_bytes >= CHUNK_BYTES):
            if self.walk is None:
                return False
            try:
                self.ready.append(next(self.walk))
            except StopIteration:
                self.walk = None
            except Exception as exc:      # raised where the walk is driven from (chunked)
                self.walk, self.walk_failed = None, exc
        return True

    def _send(self, last: bool = False) -> Iterator[Item]:
        """Hand the chunk walked so far to the threads; store the one before it
        (prepared meanwhile) and give out its items, stored: the batches wait
        on items' futures, so none goes out before this thread settled it.
        ``last``: this chunk too."""
        todo = [self.waiting] if self.waiting else []
        self.waiting = None
        if self.chunk or self.ready:
            chunk, self.chunk, self.chunk_bytes = self.chunk, [], 0
            self.waiting = (chunk, self.pool.submit(self._prepare, chunk), self.ready)
            self.ready = []
        if last and self.waiting:
            todo.append(self.waiting)
            self.waiting = None
        for chunk, prepared, ready in todo:
            self._store_chunk(chunk, prepared)
            for i, item in enumerate(ready):
                try:
                    yield item
                except GeneratorExit:
                    # The import stops here (closed by ``run``): what this chunk
                    # stored (each future settled above) and will not give out.
                    self.give_back_unnamed(ready[i + 1:])
                    raise

    def _prepare(self, chunk: list[Item]) -> list[Optional[tuple[list[Piece], object]]]:
        """What the source's ``prepare`` gives for each item of a chunk, its pieces then
        matched with a block holding the very same bytes or (when no block has
        their signature yet, nor was one encoded earlier in the import)
        encoded, in one catalog query for the chunk. Never raises: what fails
        here fails again when stored, and is reported there; a repeat whose
        first was not stored after all is encoded by the store."""
        out: list = []
        for item in chunk:
            try:
                out.append(self.source.prepare(item))
            except Exception:
                out.append(None)
        try:
            sign = self.store.signature_fn
            for prep in out:
                if prep:
                    prep[0][:] = [p.signed(sign) for p in prep[0]]
            twins = iter(self.store.twins([p for prep in out if prep for p in prep[0]]))
            if len(self.encoded) > ENCODED_KEPT:
                self.encoded = set()
            encoded = self.encoded      # a twin later in the import will be a duplicate
            for prep in out:
                for i, p in enumerate(prep[0] if prep else ()):
                    same, stored = next(twins)
                    if same is not None:
                        prep[0][i] = p._replace(same=same)
                    elif not stored and p.sig not in encoded:
                        encoded.add(p.sig)
                        if p.encoded is None:         # (a WARC's reading process may have)
                            prep[0][i] = p._replace(encoded=self.store.encode(p.data))
        except Exception:
            pass                          # the store reads back and encodes what it needs
        return out

    def _store_chunk(self, chunk: list[Item], prepared: Future) -> None:
        """Store a chunk's items in walk order, settling each one's future. The
        pieces prepared ahead go to the store first, all in one ``store_many``."""
        try:
            ready = prepared.result()
        except BaseException:
            ready = [None] * len(chunk)
        # (not running: cancelled, the import was cut short)
        live = [(item, prep) for item, prep in zip(chunk, ready) if item.future.set_running_or_notify_cancel()]
        pieces = [(item, piece) for item, prep in live if prep is not None for piece in prep[0]]
        try:
            outcomes = self.store.store_many([piece for _, piece in pieces], [item.path for item, _ in pieces],
                                             walk_on=self._walk_chunk)
        except BaseException as exc:
            outcomes = [exc] * len(pieces)
        for item, _ in pieces:
            item.stored = []
        for (item, _), outcome in zip(pieces, outcomes):
            item.stored.append(outcome)
        for item, prep in live:
            try:
                self.source.store_prepared(item, prep)
            except BaseException as exc:
                item.future.set_exception(exc)
            else:
                item.future.set_result(None)

    def store_pieces(self, item: Item, pieces: Iterable[Piece]) -> None:
        """Store a file's content, piece by piece (each at most max_block bytes), as
        ``item.rows`` and ``item.size`` (or take what ``_store_chunk`` stored). The references taken are the item's own
        until its name is made; if a piece fails, those already taken are given back."""
        if item.stored is not None:             # stored with its chunk
            outcomes, item.stored = item.stored, None
            rows = [o for o in outcomes if isinstance(o, BlockRow)]
            failed = next((o for o in outcomes if not isinstance(o, BlockRow)), None)
            if failed is not None:
                for row in rows:
                    self.store.release(row)
                raise failed
            item.rows, item.size = rows, sum(row.size for row in rows)
            return
        rows: list[BlockRow] = []
        size = 0
        try:
            for piece in pieces:
                rows.append(self.store.store(piece.data, name=item.path, sig=piece.sig,
                                             encoded=piece.encoded, same=piece.same, sha256=piece.sha256))
                size += len(piece.data)
        except BaseException:
            for row in rows:
                self.store.release(row)
            raise
        item.rows, item.size = rows, size

    def give_back_unnamed(self, items: Iterable[Item]) -> None:
        """Give back what items whose names will not be made stored: not those
        whose store failed or was cancelled (they took nothing)."""
        for item in items:
            if item.future is not None and (item.future.cancelled() or item.future.exception() is not None):
                continue
            self.give_back(item)

    def give_back(self, item: Item) -> None:
        """Drop the references a file's blocks took for a name that was not made."""
        if item.ino is None:
            for row in item.rows:
                self.store.release(row)
            item.rows = []
