"""The source of ``webfs import``: trees of ordinary files, walked as
``cp -a SRC... DEST/`` would copy them (webfs.importsource's ``Source``).

What lands where is ``cp -a``'s rule, with rsync's trailing slash: a SRC
directory ``x`` becomes ``DEST/x``; ``x/`` puts its contents straight into
DEST. Owners, modes, mtimes and atimes, symlinks, hard links (names of one
source inode become one webfs inode with nlink > 1), empty files, FIFOs and
device nodes, and xattrs (``user.*``, ``trusted.*``, ``security.*``; not
POSIX ACLs, which webfs refuses) are kept.

A rerun is a resume: an entry whose name is already there with the same
type (a regular file with the same size and mtime, a symlink to the same
target) is skipped; a regular file that differs is replaced; a directory is
merged into (``_resume``). An entry that cannot be imported is an item with
``failed`` set, reported in its turn. The walk never goes into the archive
itself (its disks, its mount).

A file of at most one block is read whole, hashed, by a pool thread
(``prepare``); a larger one is read as it is stored.
"""
from __future__ import annotations

import contextlib
import errno
import os
import stat
from typing import Iterator, Optional

from .errors import FsError, WebfsError
from .importsource import CONTROL_DIR, Item, Source, problem_line
from .namespace import ROOT_INODE, Inode, check_name
from .store import Piece

XATTR_KINDS = (b"user.", b"trusted.", b"security.")


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


class TreeSource(Source):
    """Trees of files, walked; their files read from the disk they are on."""

    def __init__(self, importer):
        super().__init__(importer)
        self.links: dict[tuple[int, int], Item] = {}        # (dev, ino) -> item of its first name
        self.merged = importer.merged                        # directories that were already there
        # Never walk into the archive itself (its disks, its mount): it grows as we go.
        self.avoid: set[tuple[int, int]] = set()
        for vol in self.store.archive.volumes.values():
            try:
                st = os.stat(vol.root)
                self.avoid.add((st.st_dev, st.st_ino))
            except OSError:
                pass

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
            if kind == "dir" and ((st.st_dev, st.st_ino) in self.avoid or st.st_dev == self.importer.avoid_dev):
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

    def _read_and_store(self, item: Item) -> None:
        """Read a file and store its pieces as they are read."""
        with _source_file(item.src) as (fd, st):
            self.store_pieces(item, map(Piece, _file_pieces(fd, self.max_block, st.st_size)))
            try:
                item.xattrs = read_xattrs(fd)
            except BaseException:
                self.give_back(item)
                raise
        item.st = st

    def _failed(self, path: bytes, exc: BaseException) -> Item:
        """An entry the walk could not even look at: reported in its turn."""
        return Item("failed", path, None, b"", b"", None, failed=problem_line(path, exc))


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
