"""Locks by name: ``KeyedLocks`` gives one lock per key (a signature, a stripe),
made on demand and dropped when nobody holds it."""
from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Iterator


class KeyedLocks:
    """One lock per key, made on demand and dropped when nobody holds it."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: dict[str, list] = {}

    @contextmanager
    def __call__(self, key: str) -> Iterator[None]:
        with self._guard:
            entry = self._locks.setdefault(key, [threading.Lock(), 0])
            entry[1] += 1
        entry[0].acquire()
        try:
            yield
        finally:
            entry[0].release()
            with self._guard:
                entry[1] -= 1
                if not entry[1]:
                    del self._locks[key]
