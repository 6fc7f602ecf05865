"""One disk's volume: its identity file and the signature tree of blocks on it.

A ``Volume`` reads and writes block files (header + payload) at the paths
``signature.location`` computes, over a backend. It knows nothing of
catalogs, placement or parity; it only makes sure that what it reads is a
well-formed block and that what it writes lands whole.
"""
from __future__ import annotations

import errno
import logging
import os
from typing import Callable, ContextManager, Iterator, Optional

from .backends import Backend
from .backends.local import LocalBackend

from . import signature as sigmod
from .locks import SYSTEM_CLOCK, Clock
from .block import HEADER_SIZE, BlockHeader, encode_refs, refs_offset
from .errors import ArchiveError, CorruptBlock
from . import lockorder

log = logging.getLogger(__name__)

BLOCKS = "blocks"
PARITY = "parity"
META = "meta"
DISK_ID_FILE = "WEBFS-DISK"
CONF_FILE = "webfs.conf"
ROOM_SLACK = 256 << 20      # free space past the reserve under which every has_room asks the disk
ROOM_FRESH = 1.0            # seconds a free-space figure is counted down before it is asked again
FS_BLOCK = 4096             # what a small file costs a file system at least (and a new directory)
# The catalog's WAL grows by megabytes between checkpoints (and a checkpoint
# put off by load lets it grow on): on the disk that holds it, at least this
# much is kept free, or half of a disk smaller than twice it (as ZFS's slop
# space keeps at least 128 MiB, or half a small pool).
CATALOG_RESERVE_FLOOR = 16 << 20


def open_own(path: str, flags: int, mode: int = 0o644) -> int:
    """``os.open`` of a file webfs keeps in a disk's meta/, never through a
    symlink planted at its name (ArchiveError, saying so); also an
    ``opener`` for ``open``."""
    try:
        return os.open(path, flags | os.O_NOFOLLOW, mode)
    except OSError as exc:
        if exc.errno != errno.ELOOP:
            raise
        raise _planted(path) from None


def own_database(path: str) -> str:
    """``path``, after checking that no symlink is planted at an SQLite file
    webfs keeps (the catalog, the search index) or at the files SQLite makes
    beside it: SQLite follows one at the database's name (and would write
    where it points), and fails at the others with a message that reads as
    a damaged database."""
    for name in (path, path + "-wal", path + "-shm", path + "-journal"):
        if os.path.islink(name):
            raise _planted(name)
    return path


def _planted(path: str) -> ArchiveError:
    return ArchiveError(f"{path}: a symlink where webfs keeps a file of its own; refusing to "
                        "read or write through it (remove it)")


def empty_own(path: str) -> None:
    """Empty such a file (``open_own``'s): not what a symlink there points to."""
    fd = open_own(path, os.O_WRONLY)
    try:
        os.ftruncate(fd, 0)
    finally:
        os.close(fd)


def reserve(total: int, holds_catalog: bool) -> int:
    """Bytes of a disk of ``total`` bytes that blocks and parity leave free
    for metadata: more on the disk that holds the catalog."""
    if holds_catalog:
        return min(256 << 20, max(total // 16, min(CATALOG_RESERVE_FLOOR, total // 2)))
    return min(64 << 20, total // 50)


def search_order(volumes: dict[int, "Volume"], disk: int) -> list["Volume"]:
    """Where a block of a disk may be: that disk's volume, then every other
    present one (an interrupted move leaves a block on its old disk)."""
    first = volumes.get(disk)
    return ([first] if first is not None else []) + [v for d, v in volumes.items() if d != disk]


class FreeSpace:
    """A file system's free space as last asked (``ask``: free bytes, bytes in
    all), counted down by what ``has_room`` let through since: a statfs per
    new block or name is many syscalls for an import of small pages. Far from
    full, a figure asked less than ROOM_FRESH seconds ago is counted down
    instead of asked again; near the reserve, every call asks. (The count is
    past the reserve of whichever call asked last: ROOM_SLACK is more than
    two reserves differ, so either answer holds.)"""

    def __init__(self, ask: Callable[[], tuple[int, int]], clock: Clock = SYSTEM_CLOCK):
        self.ask = ask
        self.clock = clock
        self.asked = (0, 0)             # (free, total) as last asked
        self._lock = lockorder.lock("disk room")
        self._left = 0
        self._until = 0.0

    def has_room(self, needed: int, kept: Callable[[int], int]) -> bool:
        """Are ``needed`` more bytes free past ``kept(total)``?"""
        cost = -(-needed // FS_BLOCK) * FS_BLOCK + FS_BLOCK
        with self._lock:
            if self.clock.monotonic() < self._until and self._left - cost >= ROOM_SLACK:
                self._left -= cost
                return True
        free, total = self.asked = self.ask()
        keep = kept(total)
        with self._lock:
            self._left = free - keep - cost
            self._until = self.clock.monotonic() + ROOM_FRESH
        return free >= needed + keep


class Volume:
    """The blocks of one disk of an archive."""

    def __init__(self, backend: "Backend", index: int, uuid: str, depth: int, clock: Clock = SYSTEM_CLOCK):
        self.backend = backend
        self.index = index
        self.uuid = uuid
        self.depth = depth
        self.free = FreeSpace(backend.free_space, clock)

    def __repr__(self) -> str:
        return f"<Volume {self.index} at {self.backend.root}>"

    @property
    def root(self) -> str:
        return self.backend.root

    @property
    def local_blocks(self) -> Optional[str]:
        """The directory of this disk's blocks, when the disk is a local directory."""
        return os.path.join(self.backend.root, BLOCKS) if isinstance(self.backend, LocalBackend) else None

    def block_path(self, sig: str, overflow: int = 0) -> str:
        return f"{BLOCKS}/{sigmod.location(sig, self.depth, overflow)}"

    def parity_path(self, stripe_id: str) -> str:
        return f"{PARITY}/{sigmod.location(stripe_id, self.depth)}"

    def has_room(self, needed: int, holds_catalog: bool = False) -> bool:
        """Can this disk take this many more bytes of blocks or parity? Room is
        left for metadata: more on the disk that holds the catalog."""
        return self.free.has_room(needed, lambda total: reserve(total, holds_catalog))

    def has_block(self, sig: str, overflow: int = 0) -> bool:
        return self.backend.exists(self.block_path(sig, overflow))

    def read_block(self, sig: str, overflow: int = 0) -> tuple[BlockHeader, bytes]:
        """Header and payload; CorruptBlock if malformed or short, OSError if unreadable."""
        path = self.block_path(sig, overflow)
        raw = self.backend.read(path)
        where = f"disk {self.index}: {path}"
        header = BlockHeader.parse(raw[:HEADER_SIZE], where)
        payload = raw[HEADER_SIZE:]
        if len(payload) != header.stored:
            raise CorruptBlock(f"{where}: payload is {len(payload)} bytes, header says {header.stored}")
        if header.signature != sig:
            raise CorruptBlock(f"{where}: header names signature {header.signature}")
        return header, payload

    def reading_ahead(self, blocks: list[tuple[str, int, int]]) -> ContextManager[None]:
        """Blocks (signature, overflow, stored bytes) this thread reads one
        after another in the block (``Backend.reading_ahead``)."""
        return self.backend.reading_ahead([(self.block_path(sig, overflow), HEADER_SIZE + stored)
                                           for sig, overflow, stored in blocks])

    def read_header(self, sig: str, overflow: int = 0) -> BlockHeader:
        path = self.block_path(sig, overflow)
        return BlockHeader.parse(self.backend.read(path, 0, HEADER_SIZE), f"disk {self.index}: {path}")

    def write_block(self, header: BlockHeader, payload: bytes, overflow: int = 0,
                    fsync: bool = False) -> None:
        self.backend.write_new(self.block_path(header.signature, overflow),
                               header.encode() + payload, fsync=fsync)

    def write_raw(self, sig: str, overflow: int, raw: bytes, fsync: bool = False) -> None:
        """Write a whole block file as given (moves and rebuilds keep bytes identical)."""
        self.backend.write_atomic(self.block_path(sig, overflow), raw, fsync=fsync)

    def read_raw(self, sig: str, overflow: int = 0) -> bytes:
        return self.backend.read(self.block_path(sig, overflow))

    def set_refs(self, sig: str, overflow: int, refs: int, fsync: bool = False,
                 offset: Optional[int] = None) -> None:
        """Rewrite the fixed-width Refs field in place (at offset, if the caller knows it)."""
        path = self.block_path(sig, overflow)
        if offset is None:
            offset = refs_offset(self.backend.read(path, 0, HEADER_SIZE))
        self.backend.write_at(path, offset, encode_refs(refs), fsync=fsync)

    def remove_block(self, sig: str, overflow: int = 0) -> None:
        self.backend.remove(self.block_path(sig, overflow))

    def iter_blocks(self) -> Iterator[tuple[str, int, str]]:
        """(signature, overflow, path) of every block file; other files are logged."""
        for rel in self.backend.list(BLOCKS):
            parsed = sigmod.parse_location(rel[len(BLOCKS) + 1:])
            if parsed is None:
                log.debug("disk %d: %s is not a block file name", self.index, rel)
                continue
            yield parsed[0], parsed[1], rel

    def stray_files(self) -> Iterator[str]:
        """Files under blocks/ that are not blocks (temporaries of a crash, strangers)."""
        for rel in self.backend.list(BLOCKS):
            if sigmod.parse_location(rel[len(BLOCKS) + 1:]) is None:
                yield rel
