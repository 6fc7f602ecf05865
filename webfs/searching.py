"""The search and reindex operations (``webfs search``, ``webfs reindex``).

Admin operations in the sense of webfs.admin, so that a command given a disk
runs them here and one given a mount point runs them in its daemon, on the
live archive. A search first brings the index up to date (a pass that finds
nothing to do costs two counts over the catalog), so what was written before
is found.
"""
from __future__ import annotations

import json
import logging
import sqlite3
from typing import Optional

from . import indexengine, indexer, query
from .admin import Progress, Result

log = logging.getLogger(__name__)


def answers(store, text: str, limit: int, offset: int = 0) -> list[dict]:
    """The answers to a query, best first: path (from the archive's root), url, date, mime, size;
    none while there is no index yet (a mount's first pass makes it)."""
    try:
        index = indexer.open_for_queries(store)
    except FileNotFoundError:
        return []
    cat = indexer.open_catalog_reader(store)
    try:
        paths = indexer.Paths(cat)
        out = []
        try:
            rows = query.run(index, text, limit, offset)
        except sqlite3.DatabaseError as exc:
            if isinstance(exc, sqlite3.OperationalError) and "no such table" not in str(exc):
                raise
            return []                   # the first pass is making (or remaking) the index right now
        for ino, url, date, mime, size in rows:
            path = paths(ino)
            if path is not None:        # removed since the last pass
                out.append({"path": path, "url": url, "date": date, "mime": mime, "size": size})
        return out
    finally:
        cat.close()
        index.close()


def commit_names(store) -> None:
    """A mount commits name changes in the background; an index pass reads the
    catalog, so what was renamed or removed must be in it first."""
    store.commit()


def search(store, progress: Progress, query_text: str, limit: int = 100, offset: int = 0,
           output: str = "paths", prefix: str = "/") -> Result:
    """Print the files that answer a query (webfs.query), paged."""
    # A query that does not parse is refused before anything is looked up,
    # even before there is an index: webfs.quicksearch gives click's path an
    # error to say as a usage error.
    query.compile_query(query_text, checking=True)
    try:
        commit_names(store)
        indexer.catch_up(store)
    except (OSError, sqlite3.Error) as exc:     # a read-only disk: search what the index holds
        log.warning("the index was not brought up to date (%s)", exc)
    result = Result()
    if output == "count":
        index = indexer.open_for_queries(store)
        try:
            result.say(str(query.count(index, query_text)))
        finally:
            index.close()
        return result
    found = answers(store, query_text, limit, offset)
    if output == "json":
        result.say(json.dumps(found, indent=2))
    else:
        for a in found:
            result.say(a["url"] or "" if output == "urls" else prefix.rstrip("/") + "/" + a["path"])
    result.figures["answers"] = len(found)
    return result


def reindex(store, progress: Progress, index_dir: Optional[str] = None) -> Result:
    """Make the query index again from the catalog and the blocks."""
    commit_names(store)
    counts = indexer.rebuild(store, progress, index_dir)
    result = Result(figures=counts)
    result.say(f"indexed {counts['indexed']} files, {counts['documents']} distinct documents, "
               f"in {indexengine.place(store, indexer.location(store))}")
    return result
