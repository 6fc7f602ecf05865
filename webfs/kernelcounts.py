"""The kernel's lookup count of each inode it knows, kept small.

FUSE's rule: every reply that makes the kernel know an inode (a lookup, a
create, a readdirplus entry) adds one to its count, and FORGET takes some
back; an inode whose last name went stays until its count is 0. The kernel,
not webfs, decides how many it knows (all it has read or made, until memory
pressure evicts them), so these counts grow with the files a mount touches.

A dict of ints cost about 90 bytes an inode (its slot and a key object of
its own). Inode numbers are given out in order, so the inodes the kernel
knows sit close together: here they are counted a byte each in runs of
``RUN`` consecutive numbers (one bytearray a run, dropped when it falls to
0), with the rare count past 254 in a dict beside. About 3 bytes an inode
where they are dense; about 200 bytes a run where only one of its inodes is
known (webfs-internals(7), DAEMON RSS).
"""
from __future__ import annotations

from typing import Iterator

RUN_BITS = 6
RUN = 1 << RUN_BITS             # inode numbers counted in one bytearray
MASK = RUN - 1
BIG = 255                       # a byte holding this: the count is in ``big``
EMPTY_RUN = bytes(RUN)


class KernelCounts:
    """inode -> the kernel's lookup count (0 for an inode it does not know)."""

    def __init__(self) -> None:
        self._runs: dict[int, bytearray] = {}
        self._big: dict[int, int] = {}
        self._known = 0

    def __len__(self) -> int:
        """Inodes the kernel knows (a count above 0)."""
        return self._known

    def get(self, ino: int) -> int:
        run = self._runs.get(ino >> RUN_BITS)
        if run is None:
            return 0
        count = run[ino & MASK]
        return self._big[ino] if count == BIG else count

    def add(self, ino: int, n: int = 1) -> None:
        """The kernel was told of ``ino`` ``n`` more times."""
        key = ino >> RUN_BITS
        run = self._runs.get(key)
        if run is None:
            run = self._runs[key] = bytearray(RUN)
        count = run[ino & MASK]
        if count == 0:
            self._known += 1
        if count == BIG:
            self._big[ino] += n
        elif count + n < BIG:
            run[ino & MASK] = count + n
        else:
            run[ino & MASK] = BIG
            self._big[ino] = count + n

    def forget(self, ino: int, n: int) -> int:
        """The kernel forgot ``n`` of its count of ``ino``: the count left (0: it
        knows the inode no more; a FORGET of more than it was told is taken as 0)."""
        key = ino >> RUN_BITS
        run = self._runs.get(key)
        if run is None:
            return 0
        count = self.get(ino)
        if count == 0:
            return 0
        left = max(count - n, 0)
        if count >= BIG:
            if left >= BIG:
                self._big[ino] = left
                return left
            del self._big[ino]
        run[ino & MASK] = left
        if left == 0:
            self._known -= 1
            if run == EMPTY_RUN:
                del self._runs[key]
                if not self._runs:
                    self._runs = {}     # a dict never shrinks: its table goes with it
        return left

    def __iter__(self) -> Iterator[int]:
        """The inodes the kernel knows, in no set order."""
        for key, run in list(self._runs.items()):
            base = key << RUN_BITS
            for i, count in enumerate(run):
                if count:
                    yield base + i
