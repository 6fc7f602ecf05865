"""The interface every backend implements: a disk root that holds files.

Every path is relative to the disk's root and uses '/'. A backend knows
nothing of blocks or parity: it reads and writes files.
"""
from __future__ import annotations

import abc
from contextlib import contextmanager
from typing import Callable, Iterator, Optional

LEASE = "meta/MOUNTED"      # the mount lease (webfs.locks): in an object store's bucket only, never cached
MACHINES = "meta/machines/"  # likewise: each machine's shared lease and copy of its records (several mounts)

class Backend(abc.ABC):
    """A disk root that holds files."""

    root: str
    bounded = True              # has a size (free_space means something); an object store has none
    quick_io = False            # a small read or write is a local system call, short enough for the event loop

    @abc.abstractmethod
    def read(self, path: str, offset: int = 0, size: int = -1) -> bytes:
        """Bytes of a file (from offset, size bytes or to the end)."""

    @contextmanager
    def reading_ahead(self, files: list[tuple[str, int]]) -> Iterator[None]:
        """Files (path, expected size) this thread reads one after another in
        the block: a backend may fetch or open them all first. Nothing is said
        of a file that cannot be; its read says why."""
        yield

    @abc.abstractmethod
    def write_atomic(self, path: str, data: bytes, fsync: bool = False) -> None:
        """Replace a file whole: a crash leaves the old file or the new, never half."""

    @abc.abstractmethod
    def write_new(self, path: str, data: bytes, fsync: bool = False) -> None:
        """Write a file that should not exist yet (a new block, or a new
        stripe's parity file, each listed in an intent log first, so a crash's
        half-written file is found and removed or rewritten). By default the
        same as ``write_atomic``."""
        self.write_atomic(path, data, fsync)

    def write_at(self, path: str, offset: int, data: bytes, fsync: bool = False) -> None:
        """Overwrite bytes of an existing file in place (fixed-width fields)."""

    @abc.abstractmethod
    def open_append(self, path: str) -> int:
        """An OS file descriptor that appends to a file (created if absent), for logs."""

    @abc.abstractmethod
    def rename(self, src: str, dst: str) -> None:
        """Rename atomically, replacing dst."""

    @abc.abstractmethod
    def remove(self, path: str) -> None:
        """Remove a file; a missing file is not an error."""

    @abc.abstractmethod
    def exists(self, path: str) -> bool: ...

    @abc.abstractmethod
    def size(self, path: str) -> int:
        """Length of a file; FileNotFoundError if missing."""

    @abc.abstractmethod
    def list(self, prefix: str) -> Iterator[str]:
        """Every file below a directory, recursively, as relative paths."""

    @abc.abstractmethod
    def remove_leftovers(self, path: str) -> list[str]:
        """Remove what an interrupted write_atomic of this path left; say what."""

    @abc.abstractmethod
    def free_space(self) -> tuple[int, int]:
        """(bytes free for us, bytes in all) on the device."""

    @abc.abstractmethod
    def sync(self, catalog_copy: Optional[Callable[[str], bytes]] = None) -> None:
        """Make everything written so far durable. ``catalog_copy(path)``, from
        the catalog layer, gives the catalog file at path as one consistent
        database, for a backend that keeps a copy of meta/ elsewhere (S3)."""

    @abc.abstractmethod
    def present(self) -> bool:
        """Is the disk still there (its root reachable)?"""

    def known_present(self) -> bool:
        """Reachable as far as is known without asking (``webfs status`` must
        not wait on a hung server); by default, ``present()``."""
        return self.present()

    def answers_now(self) -> bool:
        """Reachable, asked now even if known unreachable a moment ago (a sync
        or an unmount, which would leave the disk out); by default, ``present()``."""
        return self.present()

    def waiting(self) -> int:
        """Objects written that the disk does not hold yet, kept only on this
        machine until it does (an object store's staged uploads); 0 here."""
        return 0

    def comes_back(self) -> bool:
        """Can a disk that went away during a mount be taken back when
        ``present()`` again? Only when its absence was an outage that ends by
        itself (an object store's endpoint); a directory that vanished is not
        trusted to be the same disk when one appears at its path."""
        return False

    def close(self, catalog_copy: Optional[Callable[[str], bytes]] = None) -> None:
        """The archive is closed: hand over what is kept only locally (S3: meta/)."""

    @property
    def location(self) -> str:
        """Where the disk is, as webfs.conf, logs and status name it (no secrets)."""
        return self.root

    @property
    def domain(self) -> str:
        """The failure domain this disk is in by default: ``""`` (its own),
        or, for an object store, its endpoint."""
        return ""
