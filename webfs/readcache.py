"""Reading pieces for a mount: the cache of decoded pieces and what fetches ahead.

It owns the piece cache (decoded pieces by what they are, bounded in bytes),
the read threads of each disk (so a slow disk delays only the reads that
need it), the prefetch of a large file's next pieces, and the read-ahead of
a directory's next files for a reader that opens them in order. Every piece
comes from ``Store.read``, which checks it against its signature. Disk I/O
and decoding run in worker threads; the scheduling runs on the trio loop.
"""
from __future__ import annotations

import itertools
import logging
from collections import OrderedDict, deque
from contextlib import ExitStack
from typing import Callable, Optional

import trio

from .catalog import BlockRow
from .errors import WebfsError
from .groupcommit import to_worker
from .listings import Listings
from .namespace import Namespace
from .store import Store
from . import lockorder

log = logging.getLogger(__name__)

READ_THREADS_PER_DISK = 4      # reads in flight per disk
READ_AHEAD_FILES = 8            # files of a directory read in order are fetched this far ahead
READ_AHEAD_BYTES = 1 << 20      # ... when they are no larger than this
TOGETHER_FILES = 16             # ... or this far from quick disks, several files to a worker's trip
PREFETCH_PIECES = 4             # pieces fetched ahead of a sequential reader of a large file
DIRECTORIES_KEPT = 10_000       # directories remembered for read-ahead
WALKERS_KEPT = 256              # walks kept, by the file each expects next (each holds up to 16 files' rows, about 70 once in order)
WALK_LISTINGS = 6               # listings read at most to find the next files of a walk
# Entries a walk in order lists at once: a reader in order then costs a
# lookup per 56 or so opens, not one per 8 (a round trip each with PostgreSQL).
# A walk not yet in order lists READ_AHEAD_FILES: random readers make many.
READ_AHEAD_WINDOW = 64
# A piece this small, wanted by a reader while no other piece is being read,
# is read and decoded on the loop: a trip to a worker and back costs two
# wake-ups, longer than the read itself on a busy machine.
LOOP_READ_BYTES = 64 << 10
# A file of one piece this small, opened to read with its bytes at hand, is
# given to the kernel's page cache with the open's answer: its reader's read
# then asks the daemon nothing (webfs-internals(7), READS THROUGH THE MOUNT).
KERNEL_STORE_BYTES = 1 << 20


PieceKey = tuple[str, int, int]          # (signature, overflow, size): what a piece is, not where


def still_kept(kept: Optional[BlockRow], row: BlockRow) -> bool:
    """Whether the block the namespace keeps for a file is the row a walk
    listed. Mostly the very object (the listing kept both); comparing a
    BlockRow's fields costs 0.7 us, 16 a walker's open (the window)."""
    return kept is row or kept == row


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


class Walk:
    """Where a depth-first walker of the tree (find, grep -r, tar: a directory's
    entries in listing order, each subdirectory's where it is listed) is: the
    next files with content it opens, as far as listed, and the directories
    still being listed (innermost last), so that each open lists only what the
    one before did not. Going up to the parent's next entries where a directory
    ends: without it, the first file of every directory was a miss that waited
    for its disk (882 of 4,375 small pages read by a cold cat)."""

    __slots__ = ("files", "walking", "top", "streak")

    def __init__(self, parent: int, pos: int):
        self.files: deque[tuple[int, BlockRow, int]] = deque()   # (inode, first block, directory)
        self.walking: list[tuple[int, int]] = [(parent, pos)]
        self.top: Optional[int] = parent      # the outermost directory walked; None past the root
        self.streak = 0                       # opens in order so far

    def extend(self, ns: Namespace, listings: Listings, wanted: int, count: Callable[[str], None]) -> None:
        """List on until ``wanted`` files are known, in at most WALK_LISTINGS
        listings: a readdir's where kept, else a query (each told to ``count``
        as a ``read-ahead-lookup``)."""
        batch = READ_AHEAD_WINDOW if self.streak else READ_AHEAD_FILES
        for _ in range(WALK_LISTINGS):
            if len(self.files) >= wanted:
                return
            if not self.walking:
                above = None if self.top is None else listings.place(self.top) or ns.position(self.top)
                if above is None:               # the root, or a directory without a name
                    self.top = None
                    return
                self.top = above[0]
                self.walking.append(above)
            directory, after = self.walking.pop()
            entries = listings.ahead(directory, after, batch)
            if entries is None:
                count("read-ahead-lookup")
                entries = ns.entries_ahead(directory, after, batch)
            for off, ino, is_dir, row in entries:
                if is_dir:
                    self.walking += [(directory, off), (ino, 0)]
                    break
                if row is not None:
                    self.files.append((ino, row, directory))
            else:
                if len(entries) == batch:               # more of it to list
                    self.walking.append((directory, entries[-1][0]))


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
        self.listings = Listings()                       # ... and the entries of those listed whole
        self._expected: dict[int, Walk] = {}             # file an in-order reader opens next -> its walk, oldest first
        self._expecting: dict[int, int] = {}             # directory of the file opened -> that next file
        self._held: dict[int, Walk] = {}                 # directory -> the walk of its last open out of order

    def _disk_limiter(self, disk: int) -> trio.CapacityLimiter:
        limiter = self.disk_limiters.get(disk)
        if limiter is None:
            limiter = self.disk_limiters[disk] = lockorder.limiter("disk reads", self.read_threads_per_disk)
        return limiter

    async def piece(self, row: BlockRow, ahead: bool = False) -> bytes:
        """One piece's decoded bytes, checked against its signature (``ahead``:
        fetched for no reader yet, so never on the loop)."""
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
        if not ahead:
            data = self._read_here(row)
            if data is not None:
                self.cache.put(row, data)
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

    def _read_here(self, row: BlockRow) -> Optional[bytes]:
        """A small piece read and decoded on the loop, from a disk that is a
        local directory in place (no simulated delay, not an object store),
        while no other piece is being read: a fetch ahead's result is never
        kept waiting by the loop (when it was, a cold cat of small pages
        missed more pieces: webfs-internals(7)). None where that does not
        hold or anything is not as the catalog says: the worker's
        ``Store.read`` then looks elsewhere (other disks, parity)."""
        if row.stored > LOOP_READ_BYTES or self.cache.inflight or not self._quick(row):
            return None
        try:
            header, payload = self.store.archive.volumes[row.disk].read_block(row.sig, row.overflow)
            if (header.codec, header.stored) != (row.codec, row.stored):
                return None
            data = self.store.decode_checked(row, payload)
        except (OSError, WebfsError):
            return None
        self.store.heat.record(row.grp)
        return data

    def at_hand(self, pieces: list[BlockRow]) -> Optional[bytes]:
        """A small file of one piece, if its bytes come without a wait:
        decoded already, or read on the loop as ``_read_here`` reads a
        reader's piece. None otherwise (its reader's read fetches it)."""
        if len(pieces) != 1 or not 0 < pieces[0].size <= KERNEL_STORE_BYTES:
            return None
        row = pieces[0]
        data = self.cache.get(row)
        if data is not None:
            self.count("piece-hit")
            return data
        data = self._read_here(row)
        if data is not None:
            self.count("piece-miss")
            self.cache.put(row, data)
        return data

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

    def listed(self, directory: int, after: int, answered: list, end: bool) -> None:
        """A readdir answered these entries (``Namespace.listing``'s) after
        offset ``after``; ``end``: the directory was listed to the end, its
        files may be opened next, in order."""
        self.listings.listed(directory, after, answered, end)
        if not end:
            return
        self._listed[directory] = None
        if len(self._listed) > DIRECTORIES_KEPT:
            self._listed.pop(next(iter(self._listed)))

    def opened(self, ino: int, cached: bool = False) -> None:
        """A reader that opens files in the order of a walk of the tree (cat of a
        find, tar, grep -r) gets the next files' blocks fetched in parallel while
        it reads this one: they are on other disks, and one file at a time leaves
        them idle. In order means exactly the file the walk gives after the one
        opened before: random readers (many at once) must not fill the disks with
        guesses, as "any later file" did (half of all random opens).
        ``cached``: the kernel holds the file's pages. Only a walk that expects
        it goes on; any other open of it is a random reader's re-read (a popular
        page), which costs nothing here: looking for a walk at each cost half
        the loop's time of a Zipf reader's re-reads (webfs-internals(7), ZIPF
        READS)."""
        if self.nursery is None or self.cache.limit < READ_AHEAD_BYTES:
            return                          # no room to keep what is fetched ahead
        walk = self._expected.pop(ino, None)
        if walk is not None:
            parent_of_opened = walk.files.popleft()[2]
        elif cached:
            return
        else:
            found = self.ns.position(ino)
            if found is None:
                return
            parent_of_opened, pos = found
            walk = self._resumed(parent_of_opened, pos, ino)
            if walk is None:
                walk = Walk(parent_of_opened, pos)
                # The first file of a directory just listed (grep -r, tar, cp -r):
                # a walker opens the next ones, so fetch them now, not from the second.
                if parent_of_opened not in self._listed or self.ns.has_file_before(parent_of_opened, pos):
                    self._hold(parent_of_opened, walk)
                    return
        # As the kernel's read-ahead window: 2 files ahead at the first open
        # in order, doubling to READ_AHEAD_FILES (TOGETHER_FILES for trips of
        # several), so that a random reader that lands on the next file by
        # chance costs the disks little.
        window = min(TOGETHER_FILES, 1 << (walk.streak + 1))
        walk.extend(self.ns, self.listings, max(READ_AHEAD_FILES, window), self.count)
        if not walk.files:
            return
        self._expect(parent_of_opened, walk)
        walk.streak += 1
        self._fetch_files_ahead([(ahead, row) for ahead, row, _ in itertools.islice(walk.files, window)
                                 if row.size <= READ_AHEAD_BYTES])

    def _hold(self, directory: int, walk: Walk) -> None:
        """An open out of order: its walk is kept, not listed, until the
        directory's next open asks whether it came in order. Listing the next
        file at every open cost a random reader a query each (2,607 for 2,000
        Zipf reads); the price is a walk that begins at a directory's last
        file, whose next open in another directory is taken as out of order."""
        self._held[directory] = walk
        if len(self._held) > WALKERS_KEPT:
            self._held.pop(next(iter(self._held)))

    def _resumed(self, directory: int, pos: int, ino: int) -> Optional[Walk]:
        """The walk held for this directory, if the file opened is the one it
        gives next: the next offset, or nothing a walker reads between them
        (a subdirectory, a file with content; one query, which stops at the
        first). Listing the next files with their blocks to find out cost a
        random reader a query of 8 rows at a third of its opens."""
        walk = self._held.get(directory)
        if walk is None or walk.walking[0][1] >= pos:      # held walks are never listed
            return None
        del self._held[directory]
        held = walk.walking[0][1]
        if pos != held + 1:
            self.count("read-ahead-lookup")
            if self.ns.has_reading_between(directory, held, pos):
                return None
        walk.walking = [(directory, pos)]
        return walk

    def _expect(self, directory: int, walk: Walk) -> None:
        """The walk's next file is what an in-order reader opens next. One such
        guess a directory, as the last open there made it: random readers (many
        files of few directories) leave one each, not one for every open."""
        earlier = self._expecting.pop(directory, None)
        if earlier is not None:
            self._expected.pop(earlier, None)
        ino = walk.files[0][0]
        self._expecting[directory] = ino
        self._expected[ino] = walk
        for kept in (self._expected, self._expecting):
            if len(kept) > WALKERS_KEPT:
                kept.pop(next(iter(kept)))

    def _quick(self, row: BlockRow) -> bool:
        """The piece's disk is a local directory in place (no simulated delay, not an object store)."""
        vol = self.store.archive.volumes.get(row.disk)
        return vol is not None and vol.backend.quick_io

    def _fetch_files_ahead(self, files: list[tuple[int, BlockRow]]) -> None:
        """Fetch the pieces of a walk's next files (up to TOGETHER_FILES).
        From quick disks, in one trip to a worker once fewer than three
        quarters of them are at hand or coming: a trip a file was a hand-off
        a file (two wake-ups, and a task), and a trip started with only half
        ahead was still running when its reader got there (a cold cat's
        pieces waited for: 104 to 214 of 1,360, against 11 to 51). From other disks (delays, object stores),
        the first READ_AHEAD_FILES each in its own trip as its disk has room,
        so that a slow disk holds up only its own reads.
        A file listed earlier (a kept listing) is fetched only while it still
        has that block; that is asked of the pieces wanted alone, after the
        count of those at hand (three opens in four stop there)."""
        wanted = [(ino, row) for ino, row in files if self.cache.wanted(row) and row.size <= self.cache.limit // 2]
        quick = bool(wanted) and all(self._quick(row) for _, row in wanted)
        if quick and len(files) - len(wanted) >= max(1, len(files) * 3 // 4):
            return                          # enough ahead still: the next trip takes more at once
        wanted = [row for ino, row in wanted if still_kept(self.ns.kept_block(ino), row)]
        if not quick:
            for row in wanted[:READ_AHEAD_FILES]:
                self._fetch_ahead(row)
            return
        if not wanted:
            return
        if self._disk_limiter(wanted[0].disk).available_tokens <= 0:
            return
        # In flight from now, so that the opens before the trip starts ask for none of them again.
        together = {piece_key(row): (row, trio.Event()) for row in wanted}     # a block two files share, once
        self.cache.inflight.update((key, event) for key, (_, event) in together.items())
        self.nursery.start_soon(self._pieces_together, together, wanted[0].disk)

    async def _pieces_together(self, together: dict[PieceKey, tuple[BlockRow, trio.Event]], disk: int) -> None:
        """Several pieces fetched ahead in one worker trip, each checked as
        ``piece`` checks it; a reader waiting for one waits for the trip."""
        try:
            rows = [row for row, _ in together.values()]
            for row, data in await to_worker(self._read_quietly, rows, limiter=self._disk_limiter(disk)):
                self.cache.put(row, data)
        finally:
            for key, (_, event) in together.items():
                if self.cache.inflight.get(key) is event:
                    del self.cache.inflight[key]
                event.set()

    def _read_quietly(self, rows: list[BlockRow]) -> list[tuple[BlockRow, bytes]]:
        """(In a worker.) The pieces that read well; the reader that needs
        another will see its error. Each disk's block files are opened and
        advised first (``Volume.reading_ahead``), so that their disk reads are
        in flight together, not one after another."""
        volumes = self.store.archive.volumes
        by_disk: dict[int, list[tuple[str, int, int]]] = {}
        for row in rows:
            by_disk.setdefault(row.disk, []).append((row.sig, row.overflow, row.stored))
        out = []
        with ExitStack() as ahead:
            for disk, blocks in by_disk.items():
                vol = volumes.get(disk)
                if vol is not None:
                    ahead.enter_context(vol.reading_ahead(blocks))
            for row in rows:
                try:
                    out.append((row, self.store.read(row)))
                except WebfsError:
                    pass
                except Exception:
                    log.exception("fetching block %s ahead failed", row.block_name)
        return out

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
            await self.piece(row, ahead=True)
        except WebfsError:
            pass            # the reader that needs it will see the error
        except Exception:
            log.exception("fetching block %s ahead failed", row.block_name)
