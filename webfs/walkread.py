"""A file found by a walk of the catalog and read a moment later: its bytes,
or word that it went in between (``webfs stream --tar``, export-warc); or
its blocks taken, one more reference each, by an import that found it
earlier (a revisit's original, a hard link's first name already there).

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

An import taking a file's blocks asks the same way (``take_found``), in
the writing connection, which has no lag: none named, or freed between its
rows and its references (a block gone), is gone; the references it took
are then given back. A reference is taken to the very block the row named
(``Store.add_ref`` checks its signature: a freed block's number may be
given to a new block), so what is taken is the file as it was when named.
"""
from __future__ import annotations

from typing import Optional

from .errors import FsError, NoSuchBlock, WebfsError


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


def take_found(ns, store, ino: int) -> Optional[list]:
    """One more reference to each block of the file numbered ``ino`` (its rows,
    in order), or None, and none taken, when that file has no name left."""
    rows = ns.contents(ino, named=True)
    if not rows and not ns.linked(ino):
        return None
    try:
        return take_all(store, rows)
    except NoSuchBlock:
        if not ns.linked(ino):
            return None         # removed and freed between its rows and its references
        raise


def take_all(store, rows) -> list:
    """One more reference to each of these blocks; none if one fails."""
    taken = []
    try:
        for row in rows:
            taken.append(store.add_ref(row))
    except BaseException:
        for row in taken:
            store.release(row)
        raise
    return taken
