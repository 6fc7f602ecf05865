"""Restartable, consistent streams of an archive's pages (``webfs stream``),
after WebBase's streams (seed 000, section 3.4).

This module owns the stream's order, its snapshot and its resume token.
The snapshot is the files whose inode number is at most the highest one
when the stream started: a file made later has a higher number
(webfs.namespace numbers new inodes past every number used), so it is not
sent, while a file of the snapshot renamed or touched meanwhile still is.
The order is (placement group of the file's first block, inode number):
the signature tree's order, which is the order a disk's blocks lie in, and
which moving a group to another disk (cooling, rebalance) does not change,
so a moved page is neither missed nor sent twice. The token is that
highest number, the last (group, inode) sent and the subset asked for,
printed after each page is written: a stream started again with it sends
exactly the pages after that one. A subset (host, collection, dates, a
query) is taken from the query index (webfs.query); without one, every
page of every collection is sent.
"""
from __future__ import annotations

import base64
import collections
import json
import tarfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Iterator, Optional

from . import indexer, query
from .errors import WebfsError
from .index import Index

PAGE = 1000                     # files asked of the catalog at a time
READ_AHEAD = 16                 # pages read ahead per disk by the tar stream
TOKEN_VERSION = 1


@dataclass
class Position:
    top_ino: int                # the snapshot: files numbered up to this
    grp: str
    ino: int
    subset: str                 # the query that chooses the pages ('' for all)

    def token(self) -> str:
        raw = json.dumps([TOKEN_VERSION, self.top_ino, self.grp, self.ino, self.subset]).encode()
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")

    @classmethod
    def from_token(cls, token: str) -> "Position":
        try:
            v, top, grp, ino, subset = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
            if v != TOKEN_VERSION:
                raise ValueError(v)
            return cls(int(top), str(grp), int(ino), str(subset))
        except (ValueError, TypeError) as exc:
            raise WebfsError(f"{token[:40]}: not a token printed by webfs stream ({exc})") from None


def subset_query(host: Optional[str], collection: Optional[str], since: Optional[str],
                 until: Optional[str], text: Optional[str]) -> str:
    """The options of a stream as one query of webfs.query ('' for every page)."""
    terms = [text] if text else []
    terms += [f"host:{host}"] if host else []
    terms += [f"collection:{collection}"] if collection else []
    if since or until:
        terms.append(f"date:{since or ''}..{until or ''}")
    return " ".join(terms)


def pages(store, pos: Position) -> Iterator[tuple[str, int, Position]]:
    """(path from the archive's root, inode, the position after it) of each page still to send."""
    chosen = None
    if pos.subset:
        index = Index(indexer.location(store), read_only=True)
        try:
            chosen = query.matching(index.db, pos.subset)
        finally:
            index.close()
    cat = indexer.open_catalog_reader(store)
    try:
        paths = indexer.Paths(cat)
        after = (pos.grp, pos.ino)
        while True:
            rows = cat.files_in_group_order(pos.top_ino, after, PAGE)
            if not rows:
                return
            for grp, ino in rows:
                after = (grp, ino)
                if chosen is not None and ino not in chosen:
                    continue
                path = paths(ino)
                if path is None or "/" not in path or path.split("/")[1] == indexer.KEEP_DIR:
                    continue            # not a page (webfs.indexer)
                yield path, ino, Position(pos.top_ino, grp, ino, pos.subset)
    finally:
        cat.close()


def start(store, subset: str) -> Position:
    """A new stream's position: the files there now, before every one; the index
    brought up to date."""
    if subset:
        query.compile_query(subset)
        indexer.catch_up(store)
    cat = indexer.open_catalog_reader(store)
    try:
        return Position(cat.top_inode(), "", 0, subset)
    finally:
        cat.close()


def tar_member(name: str, data: bytes, mtime_ns: int, mode: int = 0o644) -> bytes:
    """One file as a tar member (POSIX pax, any name length), padded to 512 bytes.
    Members written one after another and ended by ``TAR_END`` are a tar archive,
    so the parts of a stopped and resumed stream, each cut where its last token
    says, make one."""
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = len(data), mtime_ns // 10**9, mode & 0o7777
    return info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape") + data + bytes(-len(data) % 512)


TAR_END = bytes(1024)           # two zero blocks end a tar archive


def tar_chunks(store, pos: Position) -> Iterator[tuple[bytes, Position]]:
    """(tar member, the position after it) of each page still to send, read from
    the blocks by one thread per disk, a few pages ahead, sent in order."""
    from .namespace import Namespace
    ns = Namespace(store)
    readers = max(1, len(store.archive.volumes))
    ahead: collections.deque = collections.deque()

    def read(rows) -> bytes:
        return b"".join(store.read(r) for r in rows)

    with ThreadPoolExecutor(readers, thread_name_prefix="webfs-stream") as pool:
        for path, ino, after in pages(store, pos):
            node = ns.get(ino)
            ahead.append((path, node, after, pool.submit(read, ns.contents(ino))))
            if len(ahead) >= READ_AHEAD * readers:
                path, node, after, data = ahead.popleft()
                yield tar_member(path, data.result(), node.mtime_ns, node.mode), after
        while ahead:
            path, node, after, data = ahead.popleft()
            yield tar_member(path, data.result(), node.mtime_ns, node.mode), after
