"""Recently read (and written) objects of one S3 disk, kept in memory up to
a number of bytes (``block_cache=BYTES``), least recently used out first.

A parity file is read back at the next member's XOR and a block at its next
reference (Refs), so what is PUT is kept too: no GET for either. An object
larger than a quarter of the limit is not kept (it would push out many).
"""
from __future__ import annotations

import collections
from typing import Optional

from .. import lockorder


class ObjectCache:
    """Object name -> bytes, at most ``limit`` bytes in all (thread-safe)."""

    def __init__(self, limit: int):
        self.limit = limit
        self._objects: collections.OrderedDict[str, bytes] = collections.OrderedDict()
        self._bytes = 0
        self._lock = lockorder.lock("s3 cache")

    def get(self, path: str) -> Optional[bytes]:
        with self._lock:
            data = self._objects.get(path)
            if data is not None:
                self._objects.move_to_end(path)
            return data

    def keep(self, path: str, data: bytes) -> None:
        if len(data) > self.limit // 4:
            return
        with self._lock:
            old = self._objects.pop(path, None)
            self._bytes += len(data) - (len(old) if old is not None else 0)
            self._objects[path] = data
            while self._bytes > self.limit:
                _, gone = self._objects.popitem(last=False)
                self._bytes -= len(gone)

    def forget(self, path: str) -> None:
        with self._lock:
            old = self._objects.pop(path, None)
            if old is not None:
                self._bytes -= len(old)
