"""Which engine holds an archive's query index, chosen in one place.

This module owns that choice for webfs.indexer's passes and the searches:
an archive whose catalog is in PostgreSQL keeps its index in the same
database (webfs.pgindex), so that one server holds both and every mount of
the archive finds it; any other keeps an SQLite file (webfs.index) beside
the catalog, or in the directory ``webfs reindex --index-dir`` recorded.
"""
from __future__ import annotations

import os
from typing import Optional

from . import index
from .catalogengine import redact
from .errors import WebfsError


class IndexDirRefused(WebfsError):
    """--index-dir asked of an archive whose index is in the catalog's database."""


def in_catalog_database(store) -> bool:
    return store.catalog.engine.name == "postgresql"


def open_index(store, directory: str, read_only: bool = False):
    """The archive's index (``directory``: where an SQLite one lives), as
    index.Index opens it: read-only, FileNotFoundError while there is none."""
    if in_catalog_database(store):
        from .pgindex import PgIndex
        return PgIndex(store.catalog.engine, read_only=read_only)
    return index.Index(directory, read_only=read_only)


def remove(store, directory: str) -> None:
    """Throw the index away: the SQLite file in ``directory`` (one left from
    before the index moved to the catalog's database too), and the tables."""
    index.remove(directory)
    if in_catalog_database(store):
        from .pgindex import remove as drop
        drop(store.catalog.engine)


def refuse_index_dir(store, directory: Optional[str]) -> None:
    if directory is not None and in_catalog_database(store):
        raise IndexDirRefused(f"--index-dir {directory}: this archive's query index is in its catalog's "
                              f"database ({redact(store.catalog.engine.url)}), not in a directory")


def state(store, directory: str) -> tuple:
    """What moves when another process's pass writes the index, or the index is
    replaced, damaged or dropped (webfs.indexer then looks again)."""
    if in_catalog_database(store):
        from .pgindex import generation
        return generation(store.catalog.engine)
    now = []
    for name in (index.INDEX_FILE, index.INDEX_FILE + "-wal"):
        try:
            st = os.stat(os.path.join(directory, name))
        except OSError:
            now.append(None)
        else:
            # An empty WAL is as none: a pass's close removes the WAL and a
            # search's read-only open makes an empty one, which made every
            # search of a mount pass again.
            now.append((st.st_ino, st.st_size, st.st_mtime_ns) if st.st_size or name == index.INDEX_FILE else None)
    return tuple(now)


def place(store, directory: str) -> str:
    """Where the index is, for a message."""
    if in_catalog_database(store):
        return f"the catalog's database ({redact(store.catalog.engine.url)})"
    return directory
