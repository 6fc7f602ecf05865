"""The signature tree's directories read into the kernel's caches at a mount's start.

After a boot or a drop of the caches, the first read of a block file
(blocks/ab/cd/rest on its disk) waits for the directory levels above it:
the inode and entries of ``ab``, then of ``cd``, then the file's own inode
(ext4 reads an inode's table block with its neighbours), then its data.
A page in a plain tree shares its directories with its neighbours; a block
shares them with no one, so a cold reader's opens cost two or three random
reads more each (webfs-internals(7), COLD READS, AGAIN).

A mount lists each quick local disk's tree in the background, one thread a
disk: its top level first (at most 256 directories under ``blocks``, whatever
the archive's size), then the leaves under them, at most
``DIRECTORIES_PER_DISK`` listings a disk in all, so the cost is bounded
however large the archive grows. Listing a directory brings its inode and
its entries into the kernel's caches; the leaves' listings bring the inodes
of their block files too (ext4 reads the inode table ahead). Nothing is
kept and nothing waits for it: a read that comes first reads as before.
Disks with a simulated delay or in an object store are not listed.
"""
from __future__ import annotations

import logging
import os
import threading
from typing import Iterable

log = logging.getLogger(__name__)

DIRECTORIES_PER_DISK = 1024     # listings a disk at most (its top level is 257 at most)


def warm_in_background(volumes: Iterable) -> list[threading.Thread]:
    """Start listing each quick local disk's block directories; the threads started."""
    started = []
    for vol in volumes:
        where = vol.local_blocks
        if where is None or not vol.backend.quick_io:
            continue
        thread = threading.Thread(target=warm, args=(where,), name=f"block directories {vol.index}",
                                  daemon=True)
        thread.start()
        started.append(thread)
    return started


def warm(blocks: str, bound: int = DIRECTORIES_PER_DISK) -> int:
    """List ``blocks`` and the directories below it, the top level first,
    ``bound`` listings at most; how many were listed. A directory that
    cannot be listed (gone, a removal racing) is passed over."""
    listed = 0
    level = [blocks]
    while level and listed < bound:
        below = []
        for path in level:
            if listed >= bound:
                break
            listed += 1
            try:
                with os.scandir(path) as entries:
                    below += [entry.path for entry in entries if entry.is_dir(follow_symlinks=False)]
            except OSError as exc:
                log.debug("%s: not listed: %s", path, exc)
        level = below
    return listed
