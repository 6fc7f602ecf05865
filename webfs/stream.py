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
page of every collection is sent. ``export-warc`` over a subset streams its
records the same way (webfs.warcexport), its own place (collection, output
file and offset) carried in the token too.

The pages are read by one thread per disk, each taking the pages whose
first block is on its disk in the stream's order (so each disk is read in
the order of its signature tree, one request at a time), a few pages ahead
of the writer, which sends them in the stream's order (``read_in_order``).
"""
from __future__ import annotations

import base64
import collections
import functools
import json
import tarfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Optional

from . import indexer, query, testkill, walkread
from .errors import FsError, WebfsError

PAGE = 1000                     # files asked of the catalog at a time
READ_AHEAD = 16                 # pages read ahead per disk
TOKEN_VERSION = 1


@dataclass
class Position:
    top_ino: int                # the snapshot: files numbered up to this
    grp: str
    ino: int
    subset: str                 # the query that chooses the pages ('' for all)
    place: Optional[dict] = field(default=None)     # a command's own place (export-warc's), None for a stream

    def token(self) -> str:
        fields = [TOKEN_VERSION, self.top_ino, self.grp, self.ino, self.subset]
        raw = json.dumps(fields + ([self.place] if self.place is not None else [])).encode()
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")

    @classmethod
    def from_token(cls, token: str, command: str = "webfs stream") -> "Position":
        """The position a token names; one printed by another command is refused."""
        try:
            v, top, grp, ino, subset, *place = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
            if v != TOKEN_VERSION or len(place) > 1 or (place and not isinstance(place[0], dict)):
                raise ValueError(v)
            pos = cls(int(top), str(grp), int(ino), str(subset), place[0] if place else None)
        except (ValueError, TypeError) as exc:
            raise WebfsError(f"{token[:40]}: not a token printed by {command} ({exc})") from None
        if (pos.place is None) != (command == "webfs stream"):
            raise WebfsError(f"{token[:40]}: a token of {'webfs stream' if pos.place is None else 'export-warc'}, "
                             f"not of {command}")
        return pos

    def at(self, grp: str, ino: int, place: Optional[dict] = None) -> "Position":
        """This stream's position after the file (grp, ino), with a command's new place."""
        return Position(self.top_ino, grp, ino, self.subset, self.place if place is None else place)


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
        index = indexer.open_for_queries(store)        # phrases checked, as webfs search does
        try:
            chosen = query.matching(index, pos.subset)
        finally:
            index.close()
    cat = indexer.open_catalog_reader(store)
    try:
        paths = indexer.Paths(cat)
        for grp, ino in _files_in_order(cat, pos, chosen):
            path = paths(ino)
            if path is None or "/" not in path or path.split("/")[1] == indexer.KEEP_DIR:
                continue            # not a page (webfs.indexer)
            testkill.point("stream-after-walk")
            yield path, ino, pos.at(grp, ino)
    finally:
        cat.close()


def _files_in_order(cat, pos: Position, chosen: Optional[set[int]]) -> Iterator[tuple[str, int]]:
    """(group, inode) of the files of the snapshot after ``pos``, in the stream's
    order: of a subset's files only (found by inode, not by walking the
    archive's), or of every file, a ``PAGE`` at a time."""
    after = (pos.grp, pos.ino)
    if chosen is not None:
        yield from sorted(r for r in cat.groups_of_files(sorted(chosen), pos.top_ino) if r > after)
        return
    while True:
        rows = cat.files_in_group_order(pos.top_ino, after, PAGE)
        if not rows:
            return
        yield from rows
        after = rows[-1]


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


def disk_of(rows) -> int:
    """The disk a file is read from first: its first block's (-1 for an empty file)."""
    return rows[0].disk if rows else -1


def read_in_order(jobs: Iterator[tuple[int, Callable[[], Any], Any]], disks: int) -> Iterator[tuple[Any, Any]]:
    """(result of the work, its tag) of each job (disk, work, tag), in the jobs'
    order. Each disk's work is done by a thread of its own, in the jobs' order
    (a sequential reader per disk, all disks at once), at most ``READ_AHEAD``
    jobs a disk ahead of the caller."""
    threads: dict[int, ThreadPoolExecutor] = {}
    ahead: collections.deque = collections.deque()
    try:
        for disk, work, tag in jobs:
            thread = threads.get(disk)
            if thread is None:
                thread = threads[disk] = ThreadPoolExecutor(1, thread_name_prefix=f"webfs-disk{disk}")
            ahead.append((thread.submit(work), tag))
            if len(ahead) >= READ_AHEAD * max(disks, len(threads)):
                done, tag = ahead.popleft()
                yield done.result(), tag
        while ahead:
            done, tag = ahead.popleft()
            yield done.result(), tag
    finally:
        for thread in threads.values():
            thread.shutdown(wait=True, cancel_futures=True)


def tar_chunks(store, pos: Position) -> Iterator[tuple[bytes, Position]]:
    """(tar member, the position after it) of each page still to send, read from
    the blocks by one thread per disk (``read_in_order``). A page removed
    after the walk found it is no member (b"", its position all the same):
    left out, as if removed before the stream reached it (webfs.walkread)."""
    from .namespace import Namespace
    ns = Namespace(store)

    def member(path: str, ino: int, rows) -> Callable[[], bytes]:
        try:
            node = ns.get(ino)
        except FsError:
            return lambda: b""      # removed after the walk found it
        data = functools.partial(walkread.read_found, ns, store, ino, rows)
        return lambda: b"" if (got := data()) is None else tar_member(path, got, node.mtime_ns, node.mode)

    def jobs():
        for path, ino, after in pages(store, pos):
            rows = ns.contents(ino, named=True)
            yield disk_of(rows), member(path, ino, rows), after

    return read_in_order(jobs(), len(store.archive.volumes))
