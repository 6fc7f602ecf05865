"""A file found by a walk of the catalog and read a moment later: its bytes,
or word that it went in between (``webfs stream --tar``, export-warc).

A walk (a stream's pages, an export's capture files) takes a file's inode
number and then its block rows; the blocks are read after, by another
thread, while the mount goes on. A file whose removal (``rm``, or another
file renamed over its name) is committed before its rows are asked has
none to give (asked as ``contents(ino, named=True)``), which would read as
an empty file that is not its content; one removed after may have had its
blocks freed since, which then fail to read. Neither is written: the file
is asked for again by its inode number in the catalog, never by its name
(which may now be another file's); after a failed read, of a connection
opened then, as a reading command's own may still show a snapshot from
before the removal while the blocks are already gone. A file gone is told
as gone (None), to be left out and counted by the caller; a file still
there whose blocks fail to read is the error it is (a damaged block is
never taken for a removal). Bytes read are checked against the blocks'
signatures by the store, so what is returned is the file as it was when
its rows were asked: never a short read, never another file's bytes.
"""
from __future__ import annotations

from typing import Optional

from .errors import FsError, WebfsError


def read_found(ns, store, ino: int, rows) -> Optional[bytes]:
    """The bytes of the file numbered ``ino`` from ``rows`` (its blocks when the
    walk asked), or None when that file is no longer in the archive."""
    try:
        data = b"".join(store.read(row) for row in rows)
    except (OSError, FsError, WebfsError):
        if not ns.linked(ino, fresh=True):
            return None
        raise
    if not data and not ns.linked(ino):
        return None         # no rows: gone before they were asked (an empty file that is there is empty)
    return data
