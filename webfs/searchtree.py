"""``.webfs/search/<query>/``: a query as a directory of symlinks to its answers.

This module owns what the names below ``.webfs/search`` mean. Any name
looked up there is a query (percent-decoded, so ``%2F`` writes a ``/``), a
directory whose entries are symlinks to the files that answer it, best
first, at most ``SEARCH_LIMIT`` of them: ``ls``, ``cat``, ``grep`` and
``tar -h`` work on a result set. An entry's name is its file's path from
the archive's root with ``%`` written ``%25`` and ``/`` written ``%2F``
(unique, and says which file it is); its target is the relative path to
the file. A query that does not parse is EINVAL. The answers are asked of
the index (webfs.searching) when the directory is listed, or when a name in
it is looked up before it was; ``.webfs/search`` itself lists nothing.
"""
from __future__ import annotations

import errno
import urllib.parse
from typing import Callable, Optional

from .errors import FsError

SEARCH_LIMIT = 1000             # answers one query directory shows
NAME_MAX = 255
UP = "../../../"                # from .webfs/search/<query>/ back to the mount's root


def query_of(name: bytes) -> str:
    """The query a directory name stands for; EINVAL if it does not parse."""
    from .query import BadQuery, compile_query
    text = urllib.parse.unquote(name.decode("utf-8", "surrogateescape"), errors="surrogateescape")
    try:
        compile_query(text)
    except BadQuery:
        raise FsError(errno.EINVAL) from None
    return text


def entry_name(path: str, rank: int) -> bytes:
    """The name of an answer in its query's directory."""
    name = path.replace("%", "%25").replace("/", "%2F").encode("utf-8", "surrogateescape")
    if len(name) > NAME_MAX:
        name = name[:NAME_MAX - 8] + b"~%d" % rank
    return name


class SearchResults:
    """The answers of the queries the kernel knows: query -> [(name, target)]."""

    def __init__(self, answer: Optional[Callable[[str, int], list[dict]]] = None):
        self.answer = answer            # (query, limit) -> answers (webfs.searching.answers), set by the mount
        self.cached: dict[str, list[tuple[bytes, bytes]]] = {}
        self.targets: dict[str, dict[bytes, bytes]] = {}         # the same, by name

    def refresh(self, query: str) -> list[tuple[bytes, bytes]]:
        if self.answer is None:
            raise FsError(errno.ENOENT)
        found = self.answer(query, SEARCH_LIMIT)
        self.cached[query] = [(entry_name(a["path"], i), (UP + a["path"]).encode("utf-8", "surrogateescape"))
                              for i, a in enumerate(found, 1)]
        self.targets.pop(query, None)
        return self.cached[query]

    def entries(self, query: str) -> list[tuple[bytes, bytes]]:
        return self.cached.get(query) or self.refresh(query)

    def target(self, query: str, name: bytes) -> bytes:
        found = self.targets.get(query)
        if found is None or query not in self.cached:
            found = self.targets[query] = dict(self.entries(query))
        if name not in found:
            raise FsError(errno.ENOENT)
        return found[name]

    def forget(self, query: str) -> None:
        self.cached.pop(query, None)
        self.targets.pop(query, None)
