"""Directories as the kernel's readdir last listed them, kept for the read-ahead.

A walker of the tree (grep -r, find, tar) lists a directory, then opens its
files in listing order and goes into its subdirectories where they are
listed. The read-ahead follows that walk (``readcache.Walk``); it listed each
directory again from the catalog, twice a directory on the way (its files,
then its parent's next entries): 657 queries for the 351 directories of a
cold grep -r of 1,360 small pages. The readdir's query gives the same
entries with their blocks (``Namespace.listing``), so the walk takes them
from here and asks the catalog only for a directory no readdir listed whole.

What is kept may be older than the catalog: a name made since is not in it
(its file is not read ahead, nothing more), and a block is fetched ahead only
while the namespace still keeps it for its file (``Namespace.kept_block``),
which every change of the file's blocks or names ends.
"""
from __future__ import annotations

import bisect
from typing import Optional

from .catalog import BlockRow

from .namespace import Inode

Entry = tuple[int, int, bool, Optional[BlockRow]]    # (offset, inode, is a directory, first block or None)

LISTED_ENTRIES_KEPT = 8192      # entries kept over all directories (a tuple each; the blocks are the memo's)


class Listings:
    """Whole listings of directories by inode, the oldest out past
    LISTED_ENTRIES_KEPT entries, and where each listed directory sits."""

    def __init__(self, bound: int = LISTED_ENTRIES_KEPT):
        self.bound = bound
        self.kept: dict[int, list[Entry]] = {}          # directory -> its entries, oldest listed first
        self.count = 0
        self.places: dict[int, tuple[int, int]] = {}    # a listed subdirectory -> (its parent, offset)
        self.partial: dict[int, list[Entry]] = {}       # being listed from its start, across readdirs

    def listed(self, directory: int, after: int, answered: list[tuple[int, bytes, Inode, Optional[BlockRow]]],
               end: bool) -> None:
        """A readdir answered these entries (``Namespace.listing``'s) after
        offset ``after``; ``end``: the directory has no more. Kept once listed
        from its start to its end."""
        if after == 0:
            so_far = self.partial[directory] = []
        else:
            so_far = self.partial.get(directory)
            if so_far is None or not so_far or so_far[-1][0] != after:
                self.partial.pop(directory, None)
                return                  # not read from its start in this walk: not whole
        so_far += [(off, node.id, node.is_dir, row) for off, _, node, row in answered]
        if len(so_far) > self.bound:
            del self.partial[directory]
            return
        if end:
            del self.partial[directory]
            self._keep(directory, so_far)
        elif len(self.partial) > 64:    # listings abandoned half way (a reader that stopped)
            self.partial.pop(next(iter(self.partial)))

    def _keep(self, directory: int, entries: list[Entry]) -> None:
        self._forget(directory)
        self.kept[directory] = entries
        self.count += len(entries)
        for off, ino, is_dir, _ in entries:
            if is_dir:
                self.places[ino] = (directory, off)
        while self.count > self.bound:
            self._forget(next(iter(self.kept)))

    def _forget(self, directory: int) -> None:
        entries = self.kept.pop(directory, None)
        if entries is None:
            return
        self.count -= len(entries)
        for _, ino, is_dir, _ in entries:
            if is_dir and self.places.get(ino, (None,))[0] == directory:     # a directory has one parent
                del self.places[ino]

    def ahead(self, directory: int, after: int, limit: int) -> Optional[list[Entry]]:
        """Up to ``limit`` entries after offset ``after``, or None when the
        directory is not kept whole."""
        entries = self.kept.get(directory)
        if entries is None:
            return None
        start = bisect.bisect_right(entries, after, key=lambda e: e[0])
        return entries[start:start + limit]

    def place(self, directory: int) -> Optional[tuple[int, int]]:
        """(parent, offset) of a directory its parent's kept listing holds."""
        return self.places.get(directory)

