"""Bulk import (``webfs import SRC... DEST``): trees of ordinary files into
the archive without a FUSE round trip per file.

This module owns an import's run and the making of its names in the
namespace, in batches; what the items come from is a source
(webfs.importsource: a tree of files, webfs.treesource, or the records of
web archive files, webfs.warcimport), and their files reach the store in
chunks (webfs.preparation). It runs as the admin operation ``import``:
inside the daemon of a mount (which reads SRC itself, with its own rights)
or in-process on the disks of an unmounted archive (``DISK:/path``).
DEST and its missing parents are made (``mkdir -p``).

The walking thread makes the names in walk order, a batch at a time, under
the catalog lock: one catalog commit and so one JOURNAL append per batch,
not per file. A file is counted as imported (progress, summary) only once
the commit of its batch has returned, so a file reported imported survives
``kill -9`` of the daemon or of the import, as a file whose ``close()``
returned does.

A rerun is a resume (the source says which names are already there): an
entry already there is left alone; a regular file that differs gets the new
content, under a new inode; a directory is merged into. Anything that cannot be imported (unreadable, a name webfs
cannot hold, in the way of a different kind of file) is reported with its
path and the rest goes on.

Names made in a mounted archive are visible at once (the mount's namespace
reads the same catalog); the kernel is told to forget the attributes of the
directories that got new entries and the pages of files whose content was
replaced. A lookup that found nothing may be cached by the kernel (the
mount answers a miss with a negative entry): after each batch's commit the
mount is told which directories got names, and makes the kernel forget the
misses it handed out in them (``KernelHooks.forget_misses``).
"""
from __future__ import annotations

import contextlib
import errno
import gc
import logging
import os
import stat
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable, Optional

from . import admin, lockorder, recovery, testkill
from .admin import human
from .assembly import OpenArchive
from .errors import FsError, NoSpace, WebfsError
from .importsource import CONTROL_DIR, Item, Source, problem_line, show_path
from .namespace import ROOT_INODE, Inode, Namespace, now_ns
from .preparation import WORKERS, Preparation
from .store import Store
from .treesource import TreeSource
from .walkread import take_all, take_found

log = logging.getLogger(__name__)

WINDOW = 256                # entries walked ahead of the names made
BATCH_FILES = 512           # names per catalog commit ...
BATCH_SECONDS = 0.5         # ... or fewer, when they took this long to come
# The cyclic collector's youngest generation, while an import runs, is
# collected every IMPORT_GC_ALLOCATIONS allocations (of containers, net of
# those freed) instead of every cli.GC_THRESHOLD[0]: an import keeps every
# capture's item to its end (a revisit may name it), some 40 containers a
# record, and each young collection walks those made since the one before:
# at 50,000, nine collections an import of the bench's WARC (11,061
# records), 0.40 to 0.63 s of the daemon's CPU; none at this pace
# (webfs-internals(7), WARC IMPORT, BALANCED).
IMPORT_GC_ALLOCATIONS = 1_000_000
MADE_ELSEWHERE = "another machine made this name at the same moment; not imported (run the import again)"
FIRST_GONE = "its other name {} was removed during the import; not imported (run the import again)"


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


class CollectorPace:
    """The collector's pace: IMPORT_GC_ALLOCATIONS while any import runs in
    this process (a mount's daemon runs several at once), set back when the
    last ends, with what they made moved to the oldest generation."""

    def __init__(self):
        self.lock = lockorder.lock("collector pace")
        self.imports = 0
        self.before: tuple = ()

    @contextlib.contextmanager
    def importing(self):
        with self.lock:
            if not self.imports:
                self.before = gc.get_threshold()
                gc.set_threshold(max(IMPORT_GC_ALLOCATIONS, self.before[0]), *self.before[1:])
            self.imports += 1
        try:
            yield
        finally:
            with self.lock:
                self.imports -= 1
                if not self.imports:
                    # What the imports made and still hold goes to the oldest
                    # generation at once (two list splices), not walked by the
                    # young collection the count past the pace would start.
                    gc.freeze()
                    gc.unfreeze()
                    gc.set_threshold(*self.before)


COLLECTOR = CollectorPace()


class Importer:
    """One import: sources into one destination directory of one archive."""

    def __init__(self, store: Store, ns: Namespace, progress: admin.Progress,
                 invalidate: Optional[Callable[[int, bool], None]] = None,
                 invalidate_entry: Optional[Callable[[int, bytes], None]] = None,
                 free_unused: Optional[Callable[[int], None]] = None,
                 workers: Optional[int] = None, batch_files: Optional[int] = None,
                 source: Optional[Callable[["Importer"], Source]] = None):
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
        self.merged: list[Item] = []                         # directories that were already there
        self.touched: set[int] = set()                       # existing directories given new names
        self.relinked: set[int] = set()                      # existing files given another name
        self.orphans: list[int] = []                         # replaced inodes with no name left
        self.renamed: list[tuple[int, bytes]] = []           # names that point at a new inode
        self.dirs_changed: set[int] = set()                  # directories whose attributes the kernel may hold
        # A batch's new files and directories, written in one statement a table
        # (_write_new) where no other machine makes names (see _make)
        self.new_nodes: list[Inode] = []
        self.new_names: list[tuple[int, bytes, int]] = []
        self.new_contents: list[tuple[int, int, int]] = []
        self.new_items: list[tuple[Item, list]] = []          # their items, with their blocks
        self.started = time.monotonic()
        self.uid, self.gid = os.getuid(), os.getgid()
        self.avoid_dev: Optional[int] = None           # the mount's device, given by the command
        self.source = (source or TreeSource)(self)     # what the items come from
        self.prep = Preparation(store, self.source)    # their files on their way to the store

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
                node = self._make_dest_part(ino, part, here)
                made = True
            if not node.is_dir:
                raise WebfsError(f"{show_path(here)}: not a directory")
            ino = node.id
        if made:
            self.store.commit()
        return ino, here

    def _make_dest_part(self, parent: int, part: bytes, here: bytes):
        """A missing directory of DEST, made; made by another machine at the
        same moment (its commit came first), that one (as ``mkdir -p``)."""
        try:
            node = self.ns.create(parent, part, stat.S_IFDIR | 0o755, self.uid, self.gid)
        except FsError as exc:
            if exc.errno != errno.EEXIST:
                raise WebfsError(f"{show_path(here)}: {exc}") from None
            node = self.ns.lookup(parent, part)
        self.dirs_changed.add(parent)
        return node

    # -- making names (this thread, in batches) -----------------------------------

    def run(self, sources: list[bytes], dest_path: bytes) -> Counts:
        dest_ino, dest_path = self.dest_dir(dest_path)
        dest = Item("dir", b"", None, b"", dest_path, os.stat_result((0,) * 10), ino=dest_ino,
                    existing=self.ns.get(dest_ino))
        self.progress.set_total(self.source.count(sources), "importing")
        self.last_flush = time.monotonic()
        journal = self.store.journal       # its MANIFEST rewritten once, after the import
        with ThreadPoolExecutor(self.workers, thread_name_prefix="import") as pool, COLLECTOR.importing(), \
                journal.importing() if journal is not None else contextlib.nullcontext():
            self.prep.pool = pool
            pending: deque[Item] = deque()
            batch: list[Item] = []
            walked = self.prep.chunked(self.source.walk(sources, dest))
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
                self.prep.give_back_unnamed(list(pending) + batch)
                try:
                    self.store.commit()
                except WebfsError:
                    pass
                raise
            finally:
                self._invalidate(self.dirs_changed)
        return self.counts

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
            # The whole import stops (its blocks given back) while the catalog's disk has room for that.
            new = sum(1 for item in batch if not item.failed and not item.skip)
            if new:
                self.cat.room.check(new)
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
            self._write_new()
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
            self.prep.give_back(item)
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
                if ino is None:             # its first name is in this batch, not made yet
                    item.rows = take_all(self.store, first.rows)
                    continue
                testkill.point("import-before-refs")
                item.rows = take_found(self.ns, self.store, ino)
                if item.rows is None:
                    item.rows = []
                    raise FsError(errno.ENOENT, FIRST_GONE.format(show_path(first.path)))
                testkill.point("import-after-refs")
            except (OSError, FsError, NoSpace) as exc:
                item.failed = problem_line(item.src, exc)
                self.prep.give_back(item)

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
            self._write_new()                 # its first name's inode may be in this batch
            first = item.first
            if first.ino is None:
                raise FsError(errno.ENOENT, f"its other name {show_path(first.src)} could not be imported")
            if not self.ns.linked(first.ino):   # removed since its blocks were taken (they are given back)
                raise FsError(errno.ENOENT, FIRST_GONE.format(show_path(first.path)))
            if not self.ns.add_name(parent.ino, item.name, first.ino):
                raise FsError(errno.EEXIST, MADE_ELSEWHERE)
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
        rdev = st.st_rdev if item.kind == "special" else 0
        node = self._add_inode(item, parent.ino, size, rdev)
        if node is None:
            return
        ino = node.id
        if is_dir:
            nlinks[parent.ino] = nlinks.get(parent.ino, 0) + 1
        rows = item.rows
        xattrs += [(ino, name, value) for name, value in item.xattrs]
        # a new inode's xattrs are these: its journal line need not ask the catalog
        self.ns.journal("+", node, item.path, rows=rows, xattrs=item.xattrs)
        if is_dir:
            self.counts.dirs += 1
        elif item.kind == "file":
            self._count_file(item)
        elif item.kind == "symlink":
            self.counts.symlinks += 1
        else:
            self.counts.special += 1
        item.rows = []                            # not needed any more; keep memory flat

    def _add_inode(self, item: Item, parent: int, size: int, rdev: int) -> Optional[Inode]:
        """The item's inode and name (and a symlink's target, a file's blocks);
        None when another machine made the name first. A file or directory in
        a catalog where no other machine makes names joins the batch's rows,
        written in one statement a table (``_write_new``): a statement per
        file was a tenth of an import-warc's walking thread."""
        st, t = item.st, now_ns()
        nlink = 2 if item.kind == "dir" else 1
        if self.cat.inode_numbers is None and item.kind in ("file", "dir"):
            node = Inode(self.ns.new_ino(), st.st_mode, st.st_uid, st.st_gid, size, nlink,
                         st.st_atime_ns, st.st_mtime_ns, t, rdev)
            item.ino = node.id
            self.new_nodes.append(node)
            self.new_names.append((parent, item.name, node.id))
            self.new_contents.extend((node.id, piece, row.id) for piece, row in enumerate(item.rows))
            self.new_items.append((item, item.rows))
            return node
        self._write_new()
        node = self.ns.add_inode(st.st_mode, st.st_uid, st.st_gid, size, nlink, st.st_atime_ns,
                                 st.st_mtime_ns, t, rdev)
        item.ino = node.id
        if not self.ns.add_name(parent, item.name, node.id):
            self._made_elsewhere(item, parent, node.id)
            return None
        if item.kind == "symlink":
            self.ns.add_symlink_target(node.id, item.target)
        if item.rows:
            self.ns.add_contents(node.id, [r.id for r in item.rows])
        return node

    def _write_new(self) -> None:
        """The batch's new files and directories so far, into the catalog; if
        that fails (the import fails), their names are not made, so the
        references their blocks took are given back."""
        if not self.new_nodes:
            return
        try:
            self.ns.add_many(self.new_nodes, self.new_names, self.new_contents)
        except BaseException:
            for item, rows in self.new_items:
                item.ino, item.rows = None, rows
            raise
        finally:
            self.new_nodes, self.new_names, self.new_contents, self.new_items = [], [], [], []

    def _made_elsewhere(self, item: Item, parent: int, ino: int) -> None:
        """Another machine's mount made the item's name at the same moment (its
        commit came first): the inode made for it goes; a directory there is
        merged into, as when the import found it; anything else is a problem
        (the file's blocks are given back), for a rerun to resolve."""
        self.ns.drop_unnamed(ino)
        item.ino = None
        there = self.ns.find(parent, item.name)
        if item.kind == "dir" and there is not None and there.is_dir:
            item.ino, item.existing = there.id, there
            self.merged.append(item)
            return
        raise FsError(errno.EEXIST, MADE_ELSEWHERE)

    def _count_file(self, item: Item) -> None:
        self.counts.files += 1
        if item.shares:          # its original's blocks: one file, not duplicates the size of that
            return
        self.counts.bytes += item.size
        c = item.apart or self.counts     # (import-warc's kept files: not captures)
        for row in item.rows:
            if row.refs > 1:
                c.dup_bytes += row.size
            else:
                c.new_blocks += 1
        if item.rows and all(r.refs > 1 for r in item.rows):
            c.dup_files += 1

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
