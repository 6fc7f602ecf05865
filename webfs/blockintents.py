"""The intents file (``meta/intents`` on the disk that holds the catalog):
one line per block about to be written, and per Refs header written ahead
of its commit, appended before the write. After a crash, the blocks and
headers it names are the only ones that can disagree with the catalog, so
recovery (``Store.forget_unfinished_writes``) reads it instead of walking
every disk; it is emptied whenever nothing it names is in flight.
"""
from __future__ import annotations

import os
from typing import Optional

from .volume import empty_own, open_own

INTENTS_FILE = "meta/intents"
REFS_INTENT = "refs"            # intent line of a Refs header not yet written after its commit


class Intents:
    """The file, appended to under the caller's lock (the catalog's)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._fd: Optional[int] = None

    def append(self, lines: str) -> None:
        if self._fd is None:
            self._fd = open_own(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        os.write(self._fd, lines.encode())

    def lines(self) -> list[str]:
        """Every line written since it was last emptied (none if there is no file)."""
        try:
            with open(self.path, opener=open_own) as f:
                return f.read().split("\n")
        except FileNotFoundError:
            return []

    def clear(self) -> None:
        if os.path.exists(self.path):
            empty_own(self.path)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
