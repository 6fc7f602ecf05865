"""Bulk import (``webfs import SRC... DEST``): trees of ordinary files into
the archive without a FUSE round trip per file.

This module owns the walk of the sources, the reading and storing of their
files in chunks, and the making of their names in the namespace in batches.
It runs as the admin operation ``import``: inside the daemon of a mount
(which reads SRC itself, with its own rights) or in-process on the disks of
an unmounted archive (``DISK:/path``).

What lands where is ``cp -a SRC... DEST/``'s rule, with rsync's trailing
slash: a SRC directory ``x`` becomes ``DEST/x``; ``x/`` puts its contents
straight into DEST. DEST and its missing parents are made (``mkdir -p``).
Owners, modes, mtimes and atimes, symlinks, hard links (names of one source
inode become one webfs inode with nlink > 1), empty files, FIFOs and device
nodes, and xattrs (``user.*``, ``trusted.*``, ``security.*``; not POSIX
ACLs, which webfs refuses) are kept.

Files go to the store in chunks: a pool of threads reads, hashes, finds the
twin of, or compresses each file of a chunk (xxhash and zlib-ng release the
GIL; the pool takes no lock), while the walk goes on; the walking thread
stores the chunk at once (``Store.store_many``: block files, catalog rows,
parity placed and XOR-ed per stripe) and then makes the names in order, a
batch at a time, under the catalog lock: one catalog commit and so one
JOURNAL append per batch, not per file. A file is counted as imported
(progress, summary) only once the commit of its batch has returned, so a
file reported imported survives ``kill -9`` of the daemon or of the import,
as a file whose ``close()`` returned does.

A rerun is a resume: a name that is already there with the same type (a
regular file with the same size and mtime, a symlink to the same target) is
left alone; a regular file that differs gets the new content; a directory is
merged into. Anything that cannot be imported (unreadable, a name webfs
cannot hold, in the way of a different kind of file) is reported with its
path and the rest goes on.

Names made in a mounted archive are visible at once (the mount's namespace
reads the same catalog); the kernel is told to forget the attributes of the
directories that got new entries and the pages of files whose content was
replaced. A lookup that found nothing may be cached by the kernel (the
mount answers a miss with a negative entry): after each batch's commit the
mount is told which directories got names, and makes the kernel forget the
misses it handed out in them (``store.forget_misses``).
"""
from __future__ import annotations

import contextlib
import errno
import logging
import os
import stat
import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator, Optional

from . import admin, recovery
from .admin import human
from .assembly import OpenArchive
from .catalog import BlockRow
from .errors import FsError, NoSpace, WebfsError
from .namespace import ROOT_INODE, Inode, Namespace, check_name, now_ns
from .store import Piece, Store

log = logging.getLogger(__name__)

# Files go to the store in chunks. WORKERS threads prepare a chunk: they read
# each file of at most one block whole, hash it, look in one catalog query for
# a block with the same bytes, and compress what no block has yet; they hold
# no lock and mostly wait on disks or run C code. The walking thread itself
# then stores the chunk (and reads any larger file as it stores it): threads
# that each read and stored cost more in interpreter-lock hand-overs than they
# overlapped (webfs-internals(7) has the measurement).
WORKERS = 4
CHUNK_FILES = 64
CHUNK_BYTES = 16 << 20
WINDOW = 256                # entries walked ahead of the names made
BATCH_FILES = 512           # names per catalog commit ...
BATCH_SECONDS = 0.5         # ... or fewer, when they took this long to come
XATTR_KINDS = (b"user.", b"trusted.", b"security.")
CONTROL_DIR = b".webfs"     # the fs's read-only tree owns this name in the root


@dataclass
class Item:
    """One source entry on its way to one destination name."""
    kind: str                        # dir, file, symlink, special, hardlink
    src: bytes
    parent: Optional["Item"]         # the directory item it goes in (None: DEST)
    name: bytes
    path: bytes                      # its path from the archive root (for the journal)
    st: os.stat_result
    ino: Optional[int] = None        # its webfs inode, once made (or found)
    existing: Optional[Inode] = None
    skip: bool = False               # already there: nothing to do
    future: Optional[Future] = None
    rows: list = field(default_factory=list)
    stored: Optional[list] = None    # what the store gave for its prepared pieces (with its chunk's)
    size: int = 0
    target: bytes = b""
    xattrs: list = field(default_factory=list)
    first: Optional["Item"] = None   # a hard link: the item of the inode's first name
    failed: str = ""                 # why it cannot be imported (reported in walk order)
    warning: str = ""                # imported, but something of it was not (its xattrs)


@dataclass
class Counts:
    files: int = 0
    dirs: int = 0
    symlinks: int = 0
    hardlinks: int = 0
    special: int = 0
    bytes: int = 0
    dup_files: int = 0
    dup_bytes: int = 0
    new_blocks: int = 0
    unchanged: int = 0
    replaced: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def imported(self) -> int:
        return self.files + self.dirs + self.symlinks + self.hardlinks + self.special


def show_path(path: bytes) -> str:
    """A path as a message line shows it: bytes that are not UTF-8 as \\xff,
    newlines and other control characters escaped, so one problem is one line."""
    text = path.decode("utf-8", "backslashreplace")
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def problem_line(path: bytes, exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.errno:
        return f"{show_path(path)}: {exc.strerror} ({errno.errorcode.get(exc.errno, exc.errno)})"
    if isinstance(exc, FsError):
        return f"{show_path(path)}: {exc} ({errno.errorcode.get(exc.errno, exc.errno)})"
    return f"{show_path(path)}: {exc}"


def read_xattrs(path, follow: bool = False) -> list[tuple[bytes, bytes]]:
    """The xattrs cp -a would copy and webfs keeps (path or open fd)."""
    out = []
    try:
        names = os.listxattr(path, follow_symlinks=follow) if not isinstance(path, int) \
            else os.listxattr(path)
    except OSError as exc:
        if exc.errno in (errno.ENOTSUP, errno.EPERM):
            return out
        raise
    for name in names:
        raw = os.fsencode(name)
        if raw.startswith(XATTR_KINDS) and not raw.startswith(b"user.webfs."):
            try:
                value = os.getxattr(path, name, follow_symlinks=follow) if not isinstance(path, int) \
                    else os.getxattr(path, name)
            except OSError as exc:
                if exc.errno == errno.ENODATA:
                    continue
                raise
            out.append((raw, value))
    return out


class Importer:
    """One import: sources into one destination directory of one archive."""

    def __init__(self, store: Store, ns: Namespace, progress: admin.Progress,
                 invalidate: Optional[Callable[[int, bool], None]] = None,
                 invalidate_entry: Optional[Callable[[int, bytes], None]] = None,
                 free_unused: Optional[Callable[[int], None]] = None,
                 workers: Optional[int] = None, batch_files: Optional[int] = None):
        self.store = store
        self.ns = ns
        self.cat = store.catalog
        self.progress = progress
        self.invalidate = invalidate
        self.invalidate_entry = invalidate_entry
        self.free_unused = free_unused
        self.forget_misses: Optional[Callable[[set], None]] = None    # a mount's (``into``)
        self.workers = workers or WORKERS
        self.batch_files = batch_files or BATCH_FILES
        self.max_block = store.conf.max_block
        self.counts = Counts()
        self.links: dict[tuple[int, int], Item] = {}        # (dev, ino) -> item of its first name
        self.merged: list[Item] = []                         # directories that were already there
        self.touched: set[int] = set()                       # existing directories given new names
        self.relinked: set[int] = set()                      # existing files given another name
        self.orphans: list[int] = []                         # replaced inodes with no name left
        self.renamed: list[tuple[int, bytes]] = []           # names that point at a new inode
        self.dirs_changed: set[int] = set()                  # directories whose attributes the kernel may hold
        self.started = time.monotonic()
        self.uid, self.gid = os.getuid(), os.getgid()
        # Never walk into the archive itself (its disks, its mount): it grows as we go.
        self.avoid: set[tuple[int, int]] = set()
        for vol in store.archive.volumes.values():
            try:
                st = os.stat(vol.root)
                self.avoid.add((st.st_dev, st.st_ino))
            except OSError:
                pass
        self.avoid_dev: Optional[int] = None           # the mount's device, given by the command
        self.chunk: list[Item] = []                    # files walked, not yet handed to the threads
        self.chunk_bytes = 0
        self.ready: list[Item] = []                    # items walked since the last chunk went out
        self.waiting: Optional[tuple] = None           # (chunk, its preparation, its items): stored next

    @classmethod
    def into(cls, archive: OpenArchive, ns: Namespace, progress: admin.Progress,
             mount_dev: Optional[int] = None, **kw) -> "Importer":
        """An importer into an archive, told how to make a mount's kernel forget
        what it cached (when the archive is a mount's); ``mount_dev``: the mount's
        device, never walked into."""
        hooks = archive.kernel
        importer = cls(archive.store, ns, progress, hooks and hooks.invalidate_inode,
                       hooks and hooks.invalidate_entry, hooks and hooks.free_unused, **kw)
        importer.forget_misses = hooks and hooks.forget_misses
        importer.avoid_dev = mount_dev
        return importer

    # -- the destination -------------------------------------------------------

    def dest_dir(self, path: bytes) -> tuple[int, bytes]:
        """The inode of DEST (made, with its parents, when missing) and its path."""
        ino, here = ROOT_INODE, b""
        made = False
        for part in [p for p in path.split(b"/") if p and p != b"."]:
            if part == b"..":
                raise WebfsError("DEST may not contain '..'")
            here += b"/" + part
            try:
                node = self.ns.lookup(ino, part)
            except FsError as exc:
                if exc.errno != errno.ENOENT:
                    raise WebfsError(f"{show_path(here)}: {exc}") from None
                if ino == ROOT_INODE and part == CONTROL_DIR:
                    raise WebfsError(f"{show_path(here)}: the name is webfs's own") from None
                node = self.ns.create(ino, part, stat.S_IFDIR | 0o755, self.uid, self.gid)
                self.dirs_changed.add(ino)
                made = True
            if not node.is_dir:
                raise WebfsError(f"{show_path(here)}: not a directory")
            ino = node.id
        if made:
            self.store.commit()
        return ino, here

    # -- the walk ----------------------------------------------------------------

    def count(self, sources: list[bytes]) -> int:
        """How many entries the sources hold (for the progress bar's total)."""
        n = 0
        stack = []
        for src in sources:
            n += not src.endswith(b"/")
            if os.path.isdir(src):
                stack.append(src)
        while stack:
            d = stack.pop()
            try:
                with os.scandir(d) as it:
                    for e in it:
                        n += 1
                        if e.is_dir(follow_symlinks=False):
                            stack.append(e.path)
            except OSError:
                pass
        return n

    def walk(self, sources: list[bytes], dest: Item) -> Iterator[Item]:
        """Items in an order where every directory comes before what it holds."""
        for src in sources:
            contents_only = src.endswith(b"/")
            try:
                st = os.lstat(src)
            except OSError as exc:
                yield self._failed(src, exc)
                continue
            if contents_only and stat.S_ISDIR(st.st_mode):
                if dest.ino != ROOT_INODE:
                    dest.st = st              # rsync: DEST takes the attributes of SRC/
                    self.merged.append(dest)
                yield from self._children(src.rstrip(b"/") or b"/", dest)
                continue
            name = os.path.basename(src.rstrip(b"/")) or b"/"
            item = self._item(src.rstrip(b"/") or src, st, dest, name)
            yield item
            if item.kind == "dir" and not item.failed:
                yield from self._children(item.src, item)

    def _children(self, src_dir: bytes, parent: Item) -> Iterator[Item]:
        stack = [(src_dir, parent)]
        while stack:
            d, parent = stack.pop()
            try:
                with os.scandir(d) as it:
                    entries = sorted((e.name, e.path) for e in it)
            except OSError as exc:
                yield self._failed(d, exc)
                continue
            existing = self.names_in(parent)
            subdirs = []
            for name, path in entries:
                try:
                    st = os.lstat(path)
                except OSError as exc:
                    yield self._failed(path, exc)
                    continue
                item = self._item(path, st, parent, name, existing)
                yield item
                if item.kind == "dir" and not item.failed:
                    subdirs.append((path, item))
            stack.extend(reversed(subdirs))

    def names_in(self, parent: Item) -> dict[bytes, Inode]:
        """The names already in a directory that was there before this import."""
        if parent.ino is None or parent.existing is None:
            return {}
        return self.ns.children(parent.ino)

    def _item(self, src: bytes, st: os.stat_result, parent: Item, name: bytes,
              existing: Optional[dict] = None) -> Item:
        """The item of one source entry; a failed one (``failed`` set) if it cannot be imported."""
        path = parent.path + b"/" + name
        mode = st.st_mode
        kind = ("dir" if stat.S_ISDIR(mode) else "file" if stat.S_ISREG(mode)
                else "symlink" if stat.S_ISLNK(mode) else "special")
        item = Item(kind, src, parent, name, path, st)
        try:
            check_name(name)
            if parent.ino == ROOT_INODE and name == CONTROL_DIR:
                raise FsError(errno.EEXIST, "the name .webfs in the root is webfs's own")
            if kind == "dir" and ((st.st_dev, st.st_ino) in self.avoid or st.st_dev == self.avoid_dev):
                raise FsError(errno.ELOOP, "is part of the archive it is imported into")
            if existing is None:
                existing = self.names_in(parent) if parent.existing is not None else {}
            old = existing.get(name)
            if old is not None:
                item.existing = old
                self._resume(item, old)
        except FsError as exc:
            item.failed = problem_line(src, exc) + ("; not walked" if kind == "dir" else "")
            return item
        if kind == "dir":
            if old is not None:
                item.ino = old.id                 # merge into it; its attributes are set at the end
                item.skip = True
                self.merged.append(item)
            else:
                try:
                    item.xattrs = read_xattrs(src)
                except OSError as exc:
                    item.warning = problem_line(src, exc) + " (its xattrs)"
            return item
        if st.st_nlink > 1:
            key = (st.st_dev, st.st_ino)
            first = self.links.get(key)
            if first is None:
                self.links[key] = item
            else:
                item.kind, item.first = "hardlink", first
                item.skip = old is not None       # a rerun: the name is there already
                return item
        if item.skip:
            if old is not None:
                item.ino = old.id
            return item
        try:
            if kind == "symlink":
                item.target = os.readlink(src)
            if kind != "file":
                item.xattrs = read_xattrs(src)
        except OSError as exc:
            item.failed = problem_line(src, exc)
            return item
        if kind == "file":
            self.enqueue(item, st.st_size)
        return item

    def _resume(self, item: Item, old: Inode) -> None:
        """An entry whose name is already there: merge, skip, replace, or refuse (FsError)."""
        st, kind = item.st, item.kind
        if kind == "dir":
            if not old.is_dir:
                raise FsError(errno.EEXIST, "already there and not a directory")
            return
        if old.is_dir:
            raise FsError(errno.EISDIR, "a directory of that name is already there")
        if stat.S_IFMT(old.mode) != stat.S_IFMT(st.st_mode):
            raise FsError(errno.EEXIST, "already there as another kind of file; not replaced")
        if kind == "file":
            item.skip = old.size == st.st_size and old.mtime_ns == st.st_mtime_ns
            return
        if kind == "symlink":
            try:
                same = self.ns.readlink(old.id) == os.readlink(item.src)
            except (OSError, WebfsError):
                same = False
            if not same:
                raise FsError(errno.EEXIST, "already there, a symlink to another target; not replaced")
        item.skip = True

    # -- chunks: prepared by the threads, stored by the walking thread -------------

    def enqueue(self, item: Item, size: int) -> None:
        """A file (a capture) to store: it joins the chunk being walked, and its
        future is settled when this thread has stored it (see ``_send``)."""
        item.future = Future()
        self.chunk.append(item)
        self.chunk_bytes += size

    def _chunked(self, items: Iterator[Item]) -> Iterator[Item]:
        """The walk's items, in walk order, each given out once stored."""
        for item in items:
            self.ready.append(item)
            if len(self.chunk) >= CHUNK_FILES or self.chunk_bytes >= CHUNK_BYTES:
                yield from self._send()
        yield from self._send(last=True)

    def _send(self, last: bool = False) -> Iterator[Item]:
        """Hand the chunk walked so far to the threads; store the one before it
        (prepared meanwhile) and give out its items, stored: the batches wait
        on items' futures, so none goes out before this thread settled it.
        ``last``: this chunk too."""
        todo = [self.waiting] if self.waiting else []
        self.waiting = None
        if self.chunk or self.ready:
            chunk, self.chunk, self.chunk_bytes = self.chunk, [], 0
            self.waiting = (chunk, self.pool.submit(self._prepare, chunk), self.ready)
            self.ready = []
        if last and self.waiting:
            todo.append(self.waiting)
            self.waiting = None
        for chunk, prepared, ready in todo:
            self._store_chunk(chunk, prepared)
            for i, item in enumerate(ready):
                try:
                    yield item
                except GeneratorExit:
                    # The import stops here (closed by ``run``): what this chunk
                    # stored (each future settled above) and will not give out.
                    self._give_back_unnamed(ready[i + 1:])
                    raise

    def _prepare(self, chunk: list[Item]) -> list[Optional[tuple[list[Piece], object]]]:
        """What ``prepare`` gives for each item of a chunk, its pieces then
        matched with a block holding the very same bytes or (when no block has
        their signature yet) encoded, in one catalog query for the chunk. Never
        raises: what fails here fails again when stored, and is reported there."""
        out: list = []
        for item in chunk:
            try:
                out.append(self.prepare(item))
            except Exception:
                out.append(None)
        try:
            sign = self.store.signature_fn
            for prep in out:
                if prep:
                    prep[0][:] = [p.signed(sign) for p in prep[0]]
            twins = iter(self.store.twins([p for prep in out if prep for p in prep[0]]))
            encoded: set[str] = set()    # a twin later in the chunk will be a duplicate
            for prep in out:
                for i, p in enumerate(prep[0] if prep else ()):
                    same, stored = next(twins)
                    if same is not None:
                        prep[0][i] = p._replace(same=same)
                    elif not stored and p.sig not in encoded:
                        encoded.add(p.sig)
                        if p.encoded is None:         # (a WARC's reading process may have)
                            prep[0][i] = p._replace(encoded=self.store.encode(p.data))
        except Exception:
            pass                          # the store reads back and encodes what it needs
        return out

    def _store_chunk(self, chunk: list[Item], prepared: Future) -> None:
        """Store a chunk's items in walk order, settling each one's future. The
        pieces prepared ahead go to the store first, all in one ``store_many``."""
        try:
            ready = prepared.result()
        except BaseException:
            ready = [None] * len(chunk)
        # (not running: cancelled, the import was cut short)
        live = [(item, prep) for item, prep in zip(chunk, ready) if item.future.set_running_or_notify_cancel()]
        pieces = [(item, piece) for item, prep in live if prep is not None for piece in prep[0]]
        try:
            outcomes = self.store.store_many([piece for _, piece in pieces], [item.path for item, _ in pieces])
        except BaseException as exc:
            outcomes = [exc] * len(pieces)
        for item, _ in pieces:
            item.stored = []
        for (item, _), outcome in zip(pieces, outcomes):
            item.stored.append(outcome)
        for item, prep in live:
            try:
                self.store_prepared(item, prep)
            except BaseException as exc:
                item.future.set_exception(exc)
            else:
                item.future.set_result(None)

    def prepare(self, item: Item) -> Optional[tuple[list[Piece], object]]:
        """(a file's pieces, signed; what ``store_prepared`` needs besides), read
        by a thread ahead of storing; None: read it when storing (a file
        longer than a block is not held in memory whole)."""
        if item.st.st_size > self.max_block:
            return None
        with _source_file(item.src) as (fd, st):
            if st.st_size > self.max_block:
                return None
            sign = self.store.signature_fn
            pieces = [Piece(d, sign(d)) for d in _file_pieces(fd, self.max_block, st.st_size)]
            return pieces, (st, read_xattrs(fd))

    def store_prepared(self, item: Item, prepared: Optional[tuple[list[Piece], object]]) -> None:
        """Store a file as prepared, or read and store it here."""
        if prepared is None:
            self._read_and_store(item)
            return
        pieces, (st, xattrs) = prepared
        self.store_pieces(item, pieces)
        item.st, item.xattrs = st, xattrs

    def store_pieces(self, item: Item, pieces: Iterable[Piece]) -> None:
        """Store a file's content, piece by piece (each at most max_block bytes), as
        ``item.rows`` and ``item.size`` (or take what ``_store_chunk`` stored). The references taken are the item's own
        until its name is made; if a piece fails, those already taken are given back."""
        if item.stored is not None:             # stored with its chunk
            outcomes, item.stored = item.stored, None
            rows = [o for o in outcomes if isinstance(o, BlockRow)]
            failed = next((o for o in outcomes if not isinstance(o, BlockRow)), None)
            if failed is not None:
                for row in rows:
                    self.store.release(row)
                raise failed
            item.rows, item.size = rows, sum(row.size for row in rows)
            return
        rows: list[BlockRow] = []
        size = 0
        try:
            for piece in pieces:
                rows.append(self.store.store(piece.data, name=item.path, sig=piece.sig,
                                             encoded=piece.encoded, same=piece.same, sha256=piece.sha256))
                size += len(piece.data)
        except BaseException:
            for row in rows:
                self.store.release(row)
            raise
        item.rows, item.size = rows, size

    def _read_and_store(self, item: Item) -> None:
        """Read a file and store its pieces as they are read."""
        with _source_file(item.src) as (fd, st):
            self.store_pieces(item, map(Piece, _file_pieces(fd, self.max_block, st.st_size)))
            try:
                item.xattrs = read_xattrs(fd)
            except BaseException:
                self._give_back(item)
                raise
        item.st = st

    # -- making names (this thread, in batches) -----------------------------------

    def run(self, sources: list[bytes], dest_path: bytes) -> Counts:
        dest_ino, dest_path = self.dest_dir(dest_path)
        dest = Item("dir", b"", None, b"", dest_path, os.stat_result((0,) * 10), ino=dest_ino,
                    existing=self.ns.get(dest_ino))
        self.progress.set_total(self.count(sources), "importing")
        self.last_flush = time.monotonic()
        with ThreadPoolExecutor(self.workers, thread_name_prefix="import") as pool:
            self.pool = pool
            pending: deque[Item] = deque()
            batch: list[Item] = []
            walked = self._chunked(self.walk(sources, dest))
            try:
                for item in walked:
                    pending.append(item)
                    self._take(pending, batch, wait=len(pending) > WINDOW)
                    if self.progress.stopping:
                        break
                walked.close()          # stopped: what was stored and not given out is given back
                while pending:
                    self._take(pending, batch, wait=True)
                self._flush(batch, final=True)
            except BaseException:
                # Failed, or cut short (the command hung up): what was stored for
                # names not made gives its references back.
                try:
                    walked.close()
                except Exception as exc:          # the failure to report is the first one
                    log.warning("giving back what an import stored and did not name: %s", exc)
                for item in pending:
                    if item.future is not None:
                        item.future.cancel()
                self._give_back_unnamed(list(pending) + batch)
                try:
                    self.store.commit()
                except WebfsError:
                    pass
                raise
            finally:
                self._invalidate(self.dirs_changed)
        return self.counts

    def _give_back_unnamed(self, items: Iterable[Item]) -> None:
        """Give back what items whose names will not be made stored: not those
        whose store failed or was cancelled (they took nothing)."""
        for item in items:
            if item.future is not None and (item.future.cancelled() or item.future.exception() is not None):
                continue
            self._give_back(item)

    def _give_back(self, item: Item) -> None:
        """Drop the references a file's blocks took for a name that was not made."""
        if item.ino is None:
            for row in item.rows:
                self.store.release(row)
            item.rows = []

    def _take(self, pending: deque, batch: list, wait: bool) -> None:
        """Move finished items from the head of the queue into the batch (in walk order)."""
        while pending:
            head = pending[0]
            if head.future is not None:
                if not head.future.done() and not wait:
                    break
                try:
                    head.future.result()
                except (OSError, WebfsError) as exc:
                    head.failed = problem_line(head.src, exc)
                head.future = None
            wait = False
            batch.append(pending.popleft())
            if len(batch) >= self.batch_files or time.monotonic() - self.last_flush >= BATCH_SECONDS:
                self._flush(batch)

    def _flush(self, batch: list, final: bool = False) -> None:
        """Make the names of a batch, commit once, then (and only then) count them done.
        What takes a signature lock (a symlink's target stored, a hard link's
        references, what a failed name gives back) is done before or after the
        catalog lock the names are made under: the store's lock order is a
        signature's lock, then the catalog's."""
        self._take_blocks(batch)
        failed = []
        with self.cat.lock:
            nlinks: dict[int, int] = {}
            xattrs: list[tuple[int, bytes, bytes]] = []      # set in one statement for the batch
            for item in batch:
                if item.failed:
                    continue
                try:
                    self._make(item, nlinks, xattrs)
                except (OSError, FsError, NoSpace) as exc:
                    item.failed = problem_line(item.src, exc)
                    failed.append(item)
            self.ns.add_xattrs(xattrs)
            for ino, delta in nlinks.items():
                self.ns.bump_nlink(ino, delta)
            t = now_ns()
            for ino in self.touched:
                self.ns.set_changed(ino, t)
            for ino in self.touched:
                self.ns.journal("+", self.ns.get(ino), self.ns.path_of(ino) or b"/", rows=[])
            if final:
                for item in self.merged:
                    self._set_dir_attrs(item)
        for item in failed:
            self._give_back(item)
        self.store.commit()
        self._forget_replaced()
        # Only now are these names durable: count them, and say what failed.
        # Failed entries are in the batch too, so the bar counts entries in walk order.
        for item in batch:
            for line in (item.failed, item.warning):
                if line:
                    self.counts.problems.append(line)
                    self.progress.note(line)
        self.progress.advance(len(batch), self._rates())
        if self.forget_misses is not None:
            self.forget_misses(self.touched | self.dirs_changed)   # names the kernel looked up in vain
        self._invalidate(self.touched | self.relinked)     # nlink, mtime: stat shows them at once
        self.touched, self.relinked = set(), set()
        batch.clear()
        self.last_flush = time.monotonic()

    def _take_blocks(self, batch: list) -> None:
        """The blocks of a batch's symlinks (their targets, stored: recovery
        reads them) and hard links (one more reference to each of their first
        name's), as ``item.rows``."""
        for item in batch:
            if item.failed or item.skip or item.kind not in ("symlink", "hardlink"):
                continue
            try:
                if item.kind == "symlink":
                    item.rows = [self.store.store(item.target, name=item.path)]
                    continue
                first = item.first
                ino = first.ino if first.ino is not None else \
                    first.existing.id if first.skip and first.existing is not None else None
                for row in self.ns.contents(ino) if ino is not None else first.rows:
                    item.rows.append(self.store.add_ref(row))
            except (OSError, FsError, NoSpace) as exc:
                item.failed = problem_line(item.src, exc)
                self._give_back(item)

    def _make(self, item: Item, nlinks: dict[int, int], xattrs: list[tuple[int, bytes, bytes]]) -> None:
        parent = item.parent
        if parent.ino is None:
            raise FsError(errno.ENOENT, "its directory could not be imported")
        if item.skip:
            if item.ino is None and item.existing is not None:
                item.ino = item.existing.id
            self.counts.unchanged += 1
            return
        st = item.st
        if parent.existing is not None:
            self.touched.add(parent.ino)
        if item.kind == "hardlink":
            first = item.first
            if first.ino is None:
                raise FsError(errno.ENOENT, f"its other name {show_path(first.src)} could not be imported")
            self.ns.add_name(parent.ino, item.name, first.ino)
            self.ns.bump_nlink(first.ino, 1)
            item.ino = first.ino
            if first.existing is not None:
                self.relinked.add(first.ino)      # the kernel may hold its old nlink
            self.ns.journal("+", self.ns.get(first.ino), item.path, rows=item.rows)
            self.counts.hardlinks += 1
            item.rows = []
            return
        if item.kind == "file" and item.existing is not None:
            # A changed file gets a new inode under its name, as rsync does: with the
            # writeback cache the kernel trusts the size it has cached for an inode
            # over ours, so new content under the same inode would read wrong.
            old = self.ns.unlink(parent.ino, item.name)
            if old.nlink <= 0:
                self.orphans.append(old.id)
            self.renamed.append((parent.ino, item.name))
            self.counts.replaced += 1
        is_dir = item.kind == "dir"
        size = item.size if item.kind == "file" else len(item.target) if item.kind == "symlink" else 0
        t = now_ns()
        rdev = st.st_rdev if item.kind == "special" else 0
        node = self.ns.add_inode(st.st_mode, st.st_uid, st.st_gid, size, 2 if is_dir else 1,
                                 st.st_atime_ns, st.st_mtime_ns, t, rdev)
        ino = item.ino = node.id
        self.ns.add_name(parent.ino, item.name, ino)
        if is_dir:
            nlinks[parent.ino] = nlinks.get(parent.ino, 0) + 1
        rows = item.rows
        if item.kind == "symlink":
            self.ns.add_symlink_target(ino, item.target)
        if rows:
            self.ns.add_contents(ino, [r.id for r in rows])
        xattrs.extend((ino, name, value) for name, value in item.xattrs)
        self.ns.journal("+", node, item.path, rows=rows)
        if is_dir:
            self.counts.dirs += 1
        elif item.kind == "file":
            self._count_file(item)
        elif item.kind == "symlink":
            self.counts.symlinks += 1
        else:
            self.counts.special += 1
        item.rows = []                            # not needed any more; keep memory flat

    def _count_file(self, item: Item) -> None:
        self.counts.files += 1
        self.counts.bytes += item.size
        for row in item.rows:
            if row.refs > 1:
                self.counts.dup_bytes += row.size
            else:
                self.counts.new_blocks += 1
        if item.rows and all(r.refs > 1 for r in item.rows):
            self.counts.dup_files += 1

    def _set_dir_attrs(self, item: Item) -> None:
        """A directory that was there before takes its source's attributes (cp -a)."""
        st = item.st
        if item.ino is None or item.ino == ROOT_INODE or not st.st_mode:
            return
        self.ns.set_attrs(item.ino, mode=st.st_mode, uid=st.st_uid, gid=st.st_gid,
                          atime_ns=st.st_atime_ns, mtime_ns=st.st_mtime_ns)
        self.touched.discard(item.ino)
        self.dirs_changed.add(item.ino)

    def _rates(self) -> str:
        c = self.counts
        secs = max(time.monotonic() - self.started, 1e-6)
        dedup = f"{c.dup_bytes / c.bytes:.0%}" if c.bytes else "-"
        return f"{c.bytes / secs / 1e6:.1f} MB/s, dedup {dedup}"

    def _failed(self, path: bytes, exc: BaseException) -> Item:
        """An entry the walk could not even look at: reported in its turn."""
        return Item("failed", path, None, b"", b"", None, failed=problem_line(path, exc))

    def _forget_replaced(self) -> None:
        """After the commit, outside the catalog lock: the kernel forgets the names
        that point at new inodes, and the old inodes go unless they are open."""
        for parent, name in self.renamed:
            if self.invalidate_entry is not None:
                try:
                    self.invalidate_entry(parent, name)
                except OSError:
                    pass
        for ino in self.orphans:
            if self.free_unused is not None:
                self.free_unused(ino)
            else:
                self.ns.free(ino)
        if self.orphans and self.free_unused is None:
            self.store.commit()
        self.renamed, self.orphans = [], []

    def _invalidate(self, inodes) -> None:
        """Tell the kernel to forget the attributes it cached of directories that
        got new names or attributes (outside the catalog lock: the kernel may
        wait for a request that needs it)."""
        if self.invalidate is None:
            return
        for ino in inodes:
            try:
                self.invalidate(ino, True)
            except (OSError, WebfsError):
                pass            # the kernel does not know it: nothing cached


@contextlib.contextmanager
def _source_file(path: bytes) -> Iterator[tuple[int, os.stat_result]]:
    """A source file open for reading, with its stat (FsError if it is no
    longer a regular file): where it is read, ahead or as it is stored."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise FsError(errno.EINVAL, "changed into another kind of file during the import")
        yield fd, st
    finally:
        os.close(fd)


def _file_pieces(fd: int, size: int, expected: int) -> Iterator[bytes]:
    """The pieces of an open file; an empty file has none."""
    done = 0
    while True:
        data = _read_piece(fd, size, expected - done + 1)
        if data:
            yield data
            done += len(data)
        if len(data) < size:
            return


def _read_piece(fd: int, size: int, hint: int) -> bytes:
    """Up to ``size`` bytes: fewer only at the end of the file. ``hint`` is how
    many are expected (from fstat): asking os.read for 4 MiB to get a 6 KB page
    allocates, maps and unmaps 4 MiB each time, which cost a third of the
    import's time with several threads (TLB shootdowns)."""
    parts = []
    got = 0
    want = max(1, min(size, hint))
    while got < size:
        data = os.read(fd, want)
        if not data:
            break
        parts.append(data)
        got += len(data)
        want = min(size - got, 1 << 16)
    return parts[0] if len(parts) == 1 else b"".join(parts)


def summary(c: Counts, seconds: float, stopped: bool) -> list[str]:
    lines = []
    if c.imported == 0 and not c.problems and not stopped:
        lines.append(f"nothing new: all {c.unchanged} entries were already there")
    else:
        rate = c.imported / seconds if seconds > 0 else 0
        lines.append(f"imported {c.files} files ({human(c.bytes)}), {c.dirs} directories, "
                     f"{c.symlinks} symlinks, {c.hardlinks} hard links, {c.special} special files "
                     f"in {seconds:.1f} s ({rate:.0f} entries/s, {c.bytes / max(seconds, 1e-6) / 1e6:.1f} MB/s)")
        lines.append(f"  {c.dup_files} files ({human(c.dup_bytes)}) were duplicates, stored as "
                     f"references; {c.new_blocks} new blocks; {c.unchanged} entries already there"
                     + (f"; {c.replaced} changed files replaced" if c.replaced else ""))
    if c.problems:
        lines.append(f"  {len(c.problems)} problem(s): not imported:")
        lines += ["    " + p for p in c.problems]
    if stopped:
        lines.append("  stopped before the end; run the same import again to go on")
    return lines


def import_(archive: OpenArchive, progress: admin.Progress, sources: list[str], dest: str,
            mount_dev: Optional[int] = None) -> admin.Result:
    """Import SRC trees into DEST (a path from the archive's root)."""
    started = time.monotonic()
    with recovery.names(archive) as ns:
        importer = Importer.into(archive, ns, progress, mount_dev)
        counts = importer.run([os.fsencode(s) for s in sources], os.fsencode(dest))
    seconds = time.monotonic() - started
    stopped = progress.stopping
    result = admin.Result(summary(counts, seconds, stopped), 4 if counts.problems or stopped else 0)
    result.figures = {k: v for k, v in vars(counts).items()}
    result.figures.update(seconds=round(seconds, 3), stopped=stopped, imported=counts.imported)
    return result
