"""Parity written behind: the parity of stripes not yet full, kept in memory.

A stripe's parity file is written when the stripe fills, when it has waited
``WRITE_BEHIND`` seconds (or more than ``WRITE_BEHIND_BYTES`` wait in all),
or at sync and close: a stripe of G-1 small blocks costs one parity file
write instead of G-1. Until it is written, the intents of the blocks it
holds stay listed in ``meta/parity-intent``, so a crash recomputes it at the
next open (crash window 1 of ``webfs.parity``).

A stripe that fills waits here too, for ``ParityWriter``: one thread that
writes full stripes' parity files as they fill, so that the thread storing
the blocks (an import's) does not create them; a small file's close stored
on the event loop writes the stripe it fills itself (no wake-up of the
thread). Its intents are kept the same way until its file is written.
"""
from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, Optional

from ..locks import SYSTEM_CLOCK, Clock
from ..volume import Volume
from .format import ParityHeader
from .intents import IntentLog
from .. import lockorder

WRITE_BEHIND = 1.0
WRITE_BEHIND_BYTES = 64 << 20

log = logging.getLogger("webfs.parity")


@dataclass(frozen=True)
class UnwrittenParity:
    """A stripe's parity that waits in memory."""
    volume: Volume              # where it goes
    header: ParityHeader
    payload: bytes
    intents: int                # intents it holds, released when it is written or given up
    since: float                # clock.monotonic() of its first change since the last write
    new: bool = False           # no parity file of the stripe on its disk yet: created in place


class WriteBehind:
    """Stripes whose parity waits in memory, by stripe id (thread-safe)."""

    def __init__(self, intents: IntentLog, clock: Clock = SYSTEM_CLOCK):
        self.intents = intents
        self.clock = clock
        self._waiting: dict[str, UnwrittenParity] = {}
        self._bytes = 0
        self._lock = lockorder.lock("parity write-behind")

    def get(self, stripe_id: str) -> Optional[UnwrittenParity]:
        return self._waiting.get(stripe_id)

    def __contains__(self, stripe_id: str) -> bool:
        return stripe_id in self._waiting

    def hold(self, stripe_id: str, volume: Volume, header: ParityHeader, payload: bytes,
             intents: int, new: bool = False) -> None:
        """Keep a stripe's new parity in memory, with this many more intents;
        ``new``: the stripe has no parity file yet (it stays so until written)."""
        with self._lock:
            held, since = 0, self.clock.monotonic()
            old = self._waiting.pop(stripe_id, None)
            if old is not None:
                held, since, new = old.intents, old.since, old.new
                self._bytes -= len(old.payload)
            self._waiting[stripe_id] = UnwrittenParity(volume, header, payload, held + intents, since, new)
            self._bytes += len(payload)

    def due(self, older_than: float) -> list[str]:
        """Stripes that have waited long enough (all of them past the byte bound)."""
        now = self.clock.monotonic()
        with self._lock:
            return [sid for sid, entry in self._waiting.items()
                    if now - entry.since >= older_than or self._bytes > WRITE_BEHIND_BYTES]

    def forget(self, stripe_id: str) -> None:
        """The parity in memory is on its disk now (or given up): release its intents."""
        with self._lock:
            entry = self._waiting.pop(stripe_id, None)
            if entry is not None:
                self._bytes -= len(entry.payload)
        for _ in range(entry.intents if entry else 0):
            self.intents.done(stripe_id)

    @property
    def blocks(self) -> int:
        """Blocks whose parity is still only in memory."""
        with self._lock:
            return sum(len(e.header.members) for e in self._waiting.values())


class ParityWriter:
    """One thread writing the parity files of stripes that filled
    (``write(stripe_id)``, which takes the stripe's lock and writes what
    waits in memory, if anything still does), in the order they filled.
    The thread starts with the first stripe; ``close`` waits for those
    handed over."""

    def __init__(self, write: Callable[[str], None]):
        self._write = write
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="webfs-parity-writer")

    def due(self, stripe_ids: list[str], here: bool = False) -> None:
        """Write these stripes' parity files, in order; ``here``: in the
        caller's thread (which holds no lock), now. One task for them all:
        a chunk of an import fills some 16 stripes, and a task each was a
        Future, a queue put and a wake-up of the writer each."""
        if here:
            self._run(stripe_ids)
        elif stripe_ids:
            self.pool.submit(self._run, stripe_ids)

    def _run(self, stripe_ids: list[str]) -> None:
        for stripe_id in stripe_ids:
            try:
                self._write(stripe_id)
            except Exception:       # it still waits in memory: a flush (sync, close) tries again
                log.exception("stripe %s: writing its parity file failed", stripe_id)

    def close(self) -> None:
        self.pool.shutdown(wait=True)
