"""``meta/parity-intent``: the stripes whose parity file may be ahead of the
committed catalog (crash window 1 of ``webfs.parity``)."""
from __future__ import annotations

import os
from collections import Counter
from typing import Optional

from .. import signature as sigmod
from ..volume import META, empty_own, open_own
from .. import lockorder

INTENT_FILE = f"{META}/parity-intent"


class IntentLog:
    """``meta/parity-intent``: stripes whose parity file may be ahead of the
    committed catalog, one id per line. An id is appended before a parity
    rewrite for a block the catalog has not committed; the file is emptied
    once no rewrite is running and every rewrite since has been committed."""

    def __init__(self, path: str, fsync: bool):
        self.path = path
        self.fsync = fsync
        self._lock = lockorder.lock("parity intents")
        self._fd: Optional[int] = None
        self._listed: set[str] = set()    # the ids in the file
        self._inflight: Counter[str] = Counter()
        self._uncommitted: set[str] = set()

    def listed(self) -> set[str]:
        try:
            with open(self.path, "r", encoding="ascii", errors="replace", opener=open_own) as f:
                return {line for line in f.read().split() if sigmod.is_signature(line)}
        except FileNotFoundError:
            return set()

    def begin(self, stripe_id: str) -> None:
        self.begin_many([stripe_id])

    def begin_many(self, stripe_ids: list[str]) -> None:
        """``begin`` for each stripe of a chunk's new blocks (an id once per
        block): the ids not listed yet appended in one write."""
        with self._lock:
            # A stripe listed since the file was last emptied is not listed again
            # (the next members of a stripe whose parity is written behind).
            new = list(dict.fromkeys(s for s in stripe_ids if s not in self._listed))
            if new:
                if self._fd is None:
                    self._fd = open_own(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
                os.write(self._fd, "".join(f"{s}\n" for s in new).encode())
                if self.fsync:
                    os.fsync(self._fd)
                self._listed.update(new)
            for stripe_id in stripe_ids:
                self._inflight[stripe_id] += 1
                self._uncommitted.add(stripe_id)

    def done(self, stripe_id: str) -> None:
        with self._lock:
            self._inflight[stripe_id] -= 1
            if not self._inflight[stripe_id]:
                del self._inflight[stripe_id]
            self._settle()

    def busy(self, stripe_id: str) -> bool:
        """Is a parity rewrite of this stripe under way?"""
        with self._lock:
            return stripe_id in self._inflight

    def committed(self) -> None:
        with self._lock:
            self._uncommitted.clear()
            self._settle()

    def _settle(self) -> None:
        if self._listed and not self._inflight and not self._uncommitted:
            os.ftruncate(self._fd, 0)
            self._listed.clear()

    def clear(self) -> None:
        with self._lock:
            if os.path.exists(self.path):
                empty_own(self.path)
            self._listed.clear()

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
