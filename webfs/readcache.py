"""Reading pieces for a mount: the cache of decoded pieces and what fetches ahead.

It owns the piece cache (decoded pieces by what they are, bounded in bytes),
the read threads of each disk (so a slow disk delays only the reads that
need it), the prefetch of a large file's next pieces, and the read-ahead of
a directory's next files for a reader that opens them in order. Every piece
comes from ``Store.read``, which checks it against its signature. Disk I/O
and decoding run in worker threads; the scheduling runs on the trio loop.
"""
from __future__ import annotations

import bisect
import logging
from collections import OrderedDict
from typing import Callable, Optional

import trio

from .catalog import BlockRow
from .errors import WebfsError
from .groupcommit import to_worker
from .namespace import Namespace
from .store import Store
from . import lockorder

log = logging.getLogger(__name__)

READ_THREADS_PER_DISK = 4      # reads in flight per disk
READ_AHEAD_FILES = 8            # files of a directory read in order are fetched this far ahead
READ_AHEAD_BYTES = 1 << 20      # ... when they are no larger than this
PREFETCH_PIECES = 4             # pieces fetched ahead of a sequential reader of a large file
DIRECTORIES_KEPT = 10_000       # directories remembered for read-ahead
# Files a read-ahead lookup asks for at once: an in-order reader then costs a
# lookup per 56 opens, not one per open (a round trip each with PostgreSQL).
READ_AHEAD_WINDOW = 64


PieceKey = tuple[str, int, int]          # (signature, overflow, size): what a piece is, not where


def piece_key(row: BlockRow) -> PieceKey:
    return (row.sig, row.overflow, row.size)


class PieceCache:
    """Decoded pieces by what they are (signature, overflow number, size), never
    by catalog row id (SQLite reuses those); least recently used out, bounded
    in bytes; concurrent readers of one piece share one fetch. Every hit is
    checked against the row the caller expects, so a stale entry can only miss."""

    def __init__(self, limit: int):
        self.limit = limit
        self.used = 0
        self.items: OrderedDict[PieceKey, bytes] = OrderedDict()
        self.inflight: dict[PieceKey, trio.Event] = {}

    def get(self, row: BlockRow) -> Optional[bytes]:
        key = piece_key(row)
        data = self.items.get(key)
        if data is None:
            return None
        if len(data) != row.size:           # cannot happen by construction; never serve it
            self.used -= len(self.items.pop(key))
            return None
        self.items.move_to_end(key)
        return data

    def put(self, row: BlockRow, data: bytes) -> None:
        key = piece_key(row)
        if key in self.items or len(data) > self.limit or len(data) != row.size:
            return
        self.items[key] = data
        self.used += len(data)
        while self.used > self.limit:
            _, old = self.items.popitem(last=False)
            self.used -= len(old)

    def wanted(self, row: BlockRow) -> bool:
        """Neither cached nor being fetched (for read-ahead and prefetch)."""
        key = piece_key(row)
        return key not in self.items and key not in self.inflight


class ReadState:
    """What one open file remembers of its reader."""

    def __init__(self):
        # The piece read last, kept while the file is open whatever the piece
        # cache holds (piece_cache=0 too): the kernel reads a file in several
        # requests (pages one by one when its background queue is full), and
        # each must not cost a disk read and a decode of the whole piece.
        self.last: Optional[tuple[BlockRow, bytes]] = None
        self.read_end = 0            # where the last read ended: the next one there is sequential


class PieceReader:
    """Pieces for readers of a mount, from the cache or the disks, with fetches ahead.

    ``nursery`` is set once the mount runs; without it nothing is fetched ahead.
    ``count`` is told of each hit and miss of a read (``piece-hit``, ``piece-miss``).
    """

    def __init__(self, store: Store, namespace: Namespace, cache_bytes: int,
                 count: Callable[[str], None]):
        self.store = store
        self.ns = namespace
        self.max_block = store.conf.max_block
        self.cache = PieceCache(cache_bytes)
        self.count = count
        self.read_threads_per_disk = READ_THREADS_PER_DISK
        self.disk_limiters: dict[int, trio.CapacityLimiter] = {}
        self.nursery: Optional[trio.Nursery] = None
        self._listed: dict[int, None] = {}               # directories listed to the end, oldest first
        self._last_open: dict[int, int] = {}             # directory -> position of the file an in-order reader opens next
        # directory -> (position looked up after, the files after it, whether they reach its end)
        self._windows: dict[int, tuple[int, list[tuple[int, BlockRow]], bool]] = {}

    def _disk_limiter(self, disk: int) -> trio.CapacityLimiter:
        limiter = self.disk_limiters.get(disk)
        if limiter is None:
            limiter = self.disk_limiters[disk] = lockorder.limiter("disk reads", self.read_threads_per_disk)
        return limiter

    async def piece(self, row: BlockRow) -> bytes:
        """One piece's decoded bytes, checked against its signature."""
        data = self.cache.get(row)
        if data is not None:
            return data
        key = piece_key(row)
        event = self.cache.inflight.get(key)
        if event is not None:
            await event.wait()
            data = self.cache.get(row)
            if data is not None:
                return data
        event = self.cache.inflight[key] = trio.Event()
        try:
            # store.read checks the bytes against row.sig: what goes in the cache is that piece.
            data = await to_worker(self.store.read, row, limiter=self._disk_limiter(row.disk))
            self.cache.put(row, data)
            return data
        finally:
            # Two readers that waited for an uncached piece (larger than the
            # cache, or evicted) each fetch it; only the owner's entry goes.
            if self.cache.inflight.get(key) is event:
                del self.cache.inflight[key]
            event.set()

    async def read(self, pieces: list[BlockRow], off: int, size: int,
                   state: Optional[ReadState] = None) -> bytes:
        """Bytes [off, off+size) of a file made of these pieces."""
        out = []
        first = off // self.max_block
        for index in range(first, len(pieces)):
            start = index * self.max_block
            if start >= off + size:
                break
            row = pieces[index]
            if state is not None and state.last is not None and state.last[0] == row:
                data = state.last[1]
            else:
                self.count("piece-hit" if self.cache.get(row) is not None else "piece-miss")
                data = await self.piece(row)
                if state is not None:
                    state.last = (row, data)
            out.append(data[max(0, off - start):off + size - start])
        if len(pieces) > 1:
            # A reader that goes on where it stopped gets PREFETCH_PIECES ahead
            # (on other disks, decoded on other cores); any other reader, one.
            sequential = state is not None and state.read_end == off
            self._prefetch(pieces, (off + size) // self.max_block + 1,
                           PREFETCH_PIECES if sequential else 1)
        if state is not None:
            state.read_end = off + size
        return b"".join(out)

    def _prefetch(self, pieces: list[BlockRow], index: int, ahead: int = 1) -> None:
        """Start fetching the next pieces of a large file (they sit on other disks)."""
        if self.nursery is None:
            return
        for row in pieces[index:index + ahead]:
            self._fetch_ahead(row)

    def listed(self, directory: int) -> None:
        """A directory was listed to the end: its files may be opened next, in order."""
        self._listed[directory] = None
        if len(self._listed) > DIRECTORIES_KEPT:
            self._listed.pop(next(iter(self._listed)))

    def opened(self, ino: int) -> None:
        """A reader that opens a directory's files in order (cat of a find, tar,
        grep -r) gets the next files' blocks fetched in parallel while it reads
        this one: they are on other disks, and one file at a time leaves them idle.
        In order means exactly the file after the one opened last in this
        directory: random readers (many at once) must not fill the disks with
        guesses, as "any later file" did (half of all random opens)."""
        if self.nursery is None or self.cache.limit < READ_AHEAD_BYTES:
            return                          # no room to keep what is fetched ahead
        found = self.ns.position(ino)
        if found is None:
            return
        parent, pos = found
        expected = self._last_open.get(parent)
        in_order = expected == pos
        if expected is None and parent in self._listed:
            # The first file of a directory just listed (grep -r, tar, cp -r):
            # a walker opens the next ones, so fetch them now, not from the second.
            in_order = not self.ns.has_file_before(parent, pos)
        if len(self._last_open) > DIRECTORIES_KEPT:
            self._last_open.clear()
        following = self._following(parent, pos)
        if not following:
            self._last_open.pop(parent, None)
            return
        self._last_open[parent] = following[0][0]    # the file an in-order reader opens next
        if in_order:
            for _, row in following:
                if row.size <= READ_AHEAD_BYTES:
                    self._fetch_ahead(row)

    def _following(self, parent: int, pos: int) -> list[tuple[int, BlockRow]]:
        """The next READ_AHEAD_FILES files with content after a position: from
        the window the directory's last lookup fetched while it reaches that
        far, else a new lookup of READ_AHEAD_WINDOW files. The lookup keeps
        their blocks for their readers (Namespace.pieces), where another
        machine's change drops them; the window only says what to fetch
        ahead, so one outdated fetches a block nobody reads, nothing worse."""
        window = self._windows.get(parent)
        if window is not None and window[0] <= pos:
            _, files, to_end = window
            i = bisect.bisect_right(files, pos, key=lambda f: f[0])
            ahead = files[i:i + READ_AHEAD_FILES]
            if len(ahead) == READ_AHEAD_FILES or (to_end and ahead):
                return ahead
        self.count("read-ahead-lookup")
        files = self.ns.first_pieces_after(parent, pos, READ_AHEAD_WINDOW)
        if len(self._windows) > DIRECTORIES_KEPT:
            self._windows.clear()
        self._windows[parent] = (pos, files, len(files) < READ_AHEAD_WINDOW)
        return files[:READ_AHEAD_FILES]

    def _fetch_ahead(self, row: BlockRow) -> bool:
        """Fetch a piece nobody asked for yet, if the cache can keep it and its disk
        has a free read slot: a reader's demand never queues behind a guess."""
        if not self.cache.wanted(row) or row.size > self.cache.limit // 2:
            return False
        if self._disk_limiter(row.disk).available_tokens <= 0:
            return False
        self.nursery.start_soon(self._quiet_piece, row)
        return True

    async def _quiet_piece(self, row: BlockRow) -> None:
        try:
            await self.piece(row)
        except WebfsError:
            pass            # the reader that needs it will see the error
        except Exception:
            log.exception("fetching block %s ahead failed", row.block_name)
