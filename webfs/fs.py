"""The FUSE filesystem (pyfuse3 + trio): kernel requests in, namespace and store calls out.

It owns what only a mounted filesystem has: open files and their write
buffers, the cache of decoded pieces for readers, the read-only ``.webfs``
tree that mirrors the signature tree, the virtual ``user.webfs.*`` xattrs,
and the mapping of webfs errors to errnos. Policy (names, references,
placement, dedup) stays in ``namespace`` and ``store``.

A file's new content is buffered while it is open for writing (memory up
to a bound, then a spill file on a disk), hashed as it arrives when it
arrives in order, and stored as blocks — one per ``max_block`` piece — when
it is flushed (close) or fsynced. Hashing, compression and disk I/O run in
worker threads (zlib-ng and xxhash release the GIL).
"""
from __future__ import annotations

import errno
import json
import logging
import os
import sqlite3
import stat
import tempfile
import time
from collections import OrderedDict
from typing import Optional

import pyfuse3
import trio

from .catalog import BLOCK_COLUMNS, BlockRow
from .errors import CorruptBlock, DataLost, FsError, NoSpace, WebfsError
from .namespace import ROOT_INODE, Inode, Namespace, now_ns
from .signature import new_hasher
from .groupcommit import GroupCommit
from .store import Store

log = logging.getLogger(__name__)

CONTROL_DIR = b".webfs"
VIRTUAL_BASE = 1 << 60          # inode numbers of the .webfs tree start here
ENTRY_TIMEOUT = 300.0           # every change goes through this mount, so the kernel may cache long
XATTR_PREFIX = b"user.webfs."
# A lookup that finds nothing is answered with a negative entry the kernel
# keeps this long: rsync's generator stats a new name (a miss), its receiver
# opens it later (a hit now; it runs behind by seconds on a large tree). The
# kernel itself drops a negative entry for O_EXCL creates, mkdir and rename
# targets, and replaces it when a name is made through the mount; names the
# daemon makes (webfs import) go through take_misses. At most NEGATIVE_MAX
# misses are remembered (about 150 bytes each); beyond that a miss is not cached.
NEGATIVE_TIMEOUT = 60.0
NEGATIVE_MAX = 1 << 14
READ_THREADS_PER_DISK = 4      # reads in flight per disk
READ_AHEAD_FILES = 8            # files of a directory read in order are fetched this far ahead
READ_AHEAD_BYTES = 1 << 20      # ... when they are no larger than this
PREFETCH_PIECES = 4             # pieces fetched ahead of a sequential reader of a large file
# FUSE requests answered since the mount, by type: always counted (one dict
# update per request), read as JSON from the root's ``user.webfs.requests``
# xattr (``getfattr -n user.webfs.requests MOUNT``) and logged at unmount.
# Beside them: lookup-miss (lookups that found nothing), piece-hit and
# piece-miss (a read's piece was decoded already, or had to be fetched or
# waited for: what read-ahead saves).
REQUESTS: dict[str, int] = {}
MAX_PIECES = 1 << 18            # the largest file: 262,144 pieces (1 TiB at max_block 4 MiB); EFBIG beyond


class FileBuffer:
    """The whole new content of one file: a bytearray up to a bound, then a spill file."""

    def __init__(self, spill_dir: str, bound: int, piece: int):
        self.spill_dir = spill_dir
        self.bound = bound
        self.piece = piece
        self.mem: Optional[bytearray] = bytearray()
        self.fd: Optional[int] = None
        self.size = 0
        # Signatures of pieces as they arrive in order: (hasher of the open piece, done sigs).
        self._hasher = new_hasher()
        self._hashed = 0
        self._piece_sigs: list[str] = []

    def write(self, off: int, data: bytes) -> None:
        end = off + len(data)
        if self.mem is not None and end > self.bound:
            self._spill()
        if self.mem is not None:
            if off > len(self.mem):
                self.mem.extend(bytes(off - len(self.mem)))
            self.mem[off:end] = data
        else:
            os.pwrite(self.fd, data, off)
        if off == self._hashed and self._hashed >= 0:
            self._hash(data)
        elif off < self._hashed or off > self._hashed:
            self._hashed = -1                   # out of order: hash at store time
        self.size = max(self.size, end)

    def _hash(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            room = self.piece - self._hashed % self.piece
            self._hasher.update(view[:room])
            self._hashed += min(room, len(view))
            view = view[room:]
            if self._hashed % self.piece == 0:
                self._piece_sigs.append(self._hasher.hexdigest())
                self._hasher = new_hasher()

    def piece_sig(self, index: int) -> Optional[str]:
        """The signature of a piece if it was hashed on arrival and is still whole."""
        if self._hashed < 0 or self._hashed != self.size:
            return None
        if index < len(self._piece_sigs):
            return self._piece_sigs[index]
        if index == len(self._piece_sigs) and self.size % self.piece:
            return self._hasher.hexdigest()
        return None

    def read(self, off: int, size: int) -> bytes:
        size = max(0, min(size, self.size - off))
        if self.mem is not None:
            return bytes(self.mem[off:off + size])
        return os.pread(self.fd, size, off)

    def truncate(self, size: int) -> None:
        if self.mem is not None and size > self.bound:
            self._spill()                       # a spill file stays sparse; memory would not
        if self.mem is not None:
            if size < len(self.mem):
                del self.mem[size:]
            else:
                self.mem.extend(bytes(size - len(self.mem)))
        else:
            os.ftruncate(self.fd, size)
        if size != self.size:
            self._hashed = -1
        self.size = size

    def is_hole(self, off: int, size: int) -> bool:
        """True if [off, off+size) was never written since the spill (reads as zeros
        without being stored anywhere): a sparse file's holes stay holes."""
        if self.fd is None:
            return False
        try:
            return os.lseek(self.fd, off, os.SEEK_DATA) >= off + size
        except OSError as exc:
            if exc.errno == errno.ENXIO:        # no data at or after off
                return True
            return False

    def _spill(self) -> None:
        os.makedirs(self.spill_dir, exist_ok=True)
        f = tempfile.TemporaryFile(dir=self.spill_dir, prefix="spill-")
        self.fd = os.dup(f.fileno())
        f.close()
        os.pwrite(self.fd, self.mem, 0)
        self.mem = None

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
        self.mem = None


class OpenFile:
    """An inode that has open handles: its lock, its buffer while written."""

    def __init__(self, ino: int):
        self.ino = ino
        self.handles = 0
        self.lock = trio.Lock()
        self.buffer: Optional[FileBuffer] = None
        self.dirty = False
        self.mtime_ns = 0            # of the last write, or as set by utimens since
        self.pieces: Optional[list[BlockRow]] = None      # cached contents for readers
        self.error = 0               # errno of a write the buffer could not keep
        self.dropped = False         # changes were dropped (a store failed)
        self.owed: dict[int, int] = {}   # handle -> errno of a drop it has not been told of
        # The piece read last, kept while the file is open whatever the piece
        # cache holds (piece_cache=0 too): the kernel reads a file in several
        # requests (pages one by one when its background queue is full), and
        # each must not cost a disk read and a decode of the whole piece.
        self.last: Optional[tuple[BlockRow, bytes]] = None
        self.read_end = 0            # where the last read ended: the next one there is sequential


PieceKey = tuple[str, int, int]          # (signature, overflow, size): what a piece is, not where


def piece_key(row: BlockRow) -> PieceKey:
    return (row.sig, row.overflow, row.size)


class PieceCache:
    """Decoded pieces by what they are (signature, overflow number, size), never
    by catalog row id (SQLite reuses those); least recently used out, bounded
    in bytes; concurrent readers of one piece share one fetch. Every hit is
    checked against the row the caller expects, so a stale entry can only miss."""

    def __init__(self, limit: int):
        self.limit = limit
        self.used = 0
        self.items: OrderedDict[PieceKey, bytes] = OrderedDict()
        self.inflight: dict[PieceKey, trio.Event] = {}

    def get(self, row: BlockRow) -> Optional[bytes]:
        key = piece_key(row)
        data = self.items.get(key)
        if data is None:
            return None
        if len(data) != row.size:           # cannot happen by construction; never serve it
            self.used -= len(self.items.pop(key))
            return None
        self.items.move_to_end(key)
        return data

    def put(self, row: BlockRow, data: bytes) -> None:
        key = piece_key(row)
        if key in self.items or len(data) > self.limit or len(data) != row.size:
            return
        self.items[key] = data
        self.used += len(data)
        while self.used > self.limit:
            _, old = self.items.popitem(last=False)
            self.used -= len(old)

    def wanted(self, row: BlockRow) -> bool:
        """Neither cached nor being fetched (for read-ahead and prefetch)."""
        key = piece_key(row)
        return key not in self.items and key not in self.inflight


class VirtualNode:
    """An entry of the read-only .webfs tree: a directory prefix or one block."""

    def __init__(self, ino: int, kind: str, key: str, overflow: int = 0):
        self.ino, self.kind, self.key, self.overflow = ino, kind, key, overflow


def _errno_of(exc: BaseException) -> int:
    if isinstance(exc, FsError):
        return exc.errno
    if isinstance(exc, NoSpace):
        return errno.ENOSPC
    if isinstance(exc, OSError) and exc.errno:
        return exc.errno
    return errno.EIO


def _brief(args) -> str:
    """A request's arguments for the log: no megabyte of written data."""
    return ", ".join(r if len(r) <= 80 else r[:77] + "..." for r in map(repr, args))


def translate_errors(method):
    """Turn webfs errors into FUSEError at the edge, and anything unexpected into
    EIO and one log line with its traceback: the daemon never dies of a request."""
    import functools

    name = method.__name__

    @functools.wraps(method)
    async def wrapper(*args, **kwargs):
        REQUESTS[name] = REQUESTS.get(name, 0) + 1
        try:
            return await method(*args, **kwargs)
        except pyfuse3.FUSEError:
            raise
        except (FsError, NoSpace) as exc:
            raise pyfuse3.FUSEError(_errno_of(exc)) from None
        except (DataLost, CorruptBlock) as exc:
            log.error("%s: %s", method.__name__, exc)
            raise pyfuse3.FUSEError(errno.EIO) from None
        except (WebfsError, OSError) as exc:
            log.error("%s failed: %s", method.__name__, exc)
            raise pyfuse3.FUSEError(_errno_of(exc)) from None
        except sqlite3.OperationalError as exc:
            if "full" not in str(exc):          # "database or disk is full": ENOSPC, no traceback
                log.exception("%s(%s): catalog error, answered EIO", method.__name__, _brief(args[1:]))
                raise pyfuse3.FUSEError(errno.EIO) from None
            log.error("%s failed: the catalog's disk is full (%s)", method.__name__, exc)
            raise pyfuse3.FUSEError(errno.ENOSPC) from None
        except Exception:
            log.exception("%s(%s): unexpected error, answered EIO", method.__name__, _brief(args[1:]))
            raise pyfuse3.FUSEError(errno.EIO) from None
    wrapper.translated = True
    return wrapper


def _log_errors(method):
    """For the requests that get no reply (forget, releasedir): log and go on."""
    import functools

    name = method.__name__

    @functools.wraps(method)
    async def wrapper(*args, **kwargs):
        REQUESTS[name] = REQUESTS.get(name, 0) + 1
        try:
            return await method(*args, **kwargs)
        except Exception:
            log.exception("%s: unexpected error, ignored", method.__name__)
    wrapper.translated = True
    return wrapper


class Operations(pyfuse3.Operations):
    """The webfs mount."""

    enable_writeback_cache = True
    supports_dot_lookup = True

    def __init__(self, store: Store, namespace: Namespace, *, read_only: bool = False,
                 store_mode: Optional[str] = None, buffer_bound: int = 64 << 20,
                 cache_bytes: int = 128 << 20, threads: int = 4):
        super().__init__()
        self.store = store
        self.ns = namespace
        self.read_only = read_only
        self.store_mode = store_mode
        self.max_block = store.conf.max_block
        self.buffer_bound = buffer_bound
        self.spill_dir = os.path.join(store.archive.first_volume.root, "meta", "spill")
        self.open_files: dict[int, OpenFile] = {}
        self.handles: dict[int, int] = {}                 # fh -> inode
        # The kernel's lookup count per inode: an inode it still knows (a path
        # walk that has not reached open yet, a cached dentry) stays in the
        # catalog after its last name goes, until the kernel forgets it.
        self.lookups: dict[int, int] = {}
        self.next_fh = 1
        self.cache = PieceCache(cache_bytes)
        # Storing is CPU work (hashing, compression): a few threads for two cores.
        # Reading waits on disks: each disk gets its own threads, so a slow or
        # busy disk does not hold up reads from the others.
        self.limiter = trio.CapacityLimiter(threads)
        self.read_threads_per_disk = READ_THREADS_PER_DISK
        self.disk_limiters: dict[int, trio.CapacityLimiter] = {}
        self.vnodes: dict[int, VirtualNode] = {}
        self.vnode_by_key: dict[tuple[str, str, int], int] = {}
        self.root_xattrs: dict[bytes, bytes] = {}
        self._listed: dict[int, None] = {}               # directories listed to the end, oldest first
        self._last_open: dict[int, int] = {}             # directory -> position of the file an in-order reader opens next
        self.nursery: Optional[trio.Nursery] = None
        self._zero_sigs: dict[int, str] = {}
        self.owner = (os.getuid(), os.getgid())     # who mounted: the only user of .webfs
        self.failures: list[str] = []       # files whose changes could not be stored, for umount
        self.generations: dict[int, int] = {}  # inode -> generation, bumped when the kernel must forget it
        self.commits = GroupCommit(store.commit)   # commits in a worker thread, shared by requests
        self.misses: dict[int, dict[bytes, float]] = {}   # parent -> name -> when the kernel's negative entry ends
        self.miss_count = 0

    # -- helpers -------------------------------------------------------------------

    async def _thread(self, fn, *args, limiter: Optional[trio.CapacityLimiter] = None, **kwargs):
        return await trio.to_thread.run_sync(lambda: fn(*args, **kwargs),
                                             limiter=limiter or self.limiter)

    def _disk_limiter(self, disk: int) -> trio.CapacityLimiter:
        limiter = self.disk_limiters.get(disk)
        if limiter is None:
            limiter = self.disk_limiters[disk] = trio.CapacityLimiter(self.read_threads_per_disk)
        return limiter

    def _attrs(self, node: Inode) -> pyfuse3.EntryAttributes:
        a = pyfuse3.EntryAttributes()
        a.st_ino = node.id
        a.generation = self.generations.get(node.id, 0)
        a.entry_timeout = a.attr_timeout = ENTRY_TIMEOUT
        a.st_mode = node.mode
        a.st_nlink = node.nlink
        a.st_uid, a.st_gid, a.st_rdev = node.uid, node.gid, node.rdev
        of = self.open_files.get(node.id)
        a.st_size = of.buffer.size if of is not None and of.buffer is not None else node.size
        a.st_blksize = 128 * 1024
        a.st_blocks = (a.st_size + 511) // 512
        a.st_atime_ns, a.st_mtime_ns, a.st_ctime_ns = node.atime_ns, node.mtime_ns, node.ctime_ns
        return a

    def _entry(self, node: Inode) -> pyfuse3.EntryAttributes:
        """Attributes for a reply that makes the kernel know the inode (lookup count + 1)."""
        a = self._attrs(node)
        self.lookups[node.id] = self.lookups.get(node.id, 0) + 1
        return a

    def _check_control_access(self, ctx) -> None:
        """The .webfs tree shows every document whatever its file's mode: only the
        user who mounted the archive (and root) may look into it, with or without
        allow_other. Checked here by the caller's uid, not left to mode bits."""
        if ctx is not None and ctx.uid not in (0, self.owner[0]):
            raise FsError(errno.EACCES)

    def _check_writable(self, parent: int = 0, name: bytes = b"") -> None:
        if self.read_only:
            raise FsError(errno.EROFS)
        if parent >= VIRTUAL_BASE:
            raise FsError(errno.EROFS)
        if parent == ROOT_INODE and name == CONTROL_DIR:
            raise FsError(errno.EEXIST)         # the .webfs tree owns this name

    # -- names --------------------------------------------------------------------

    @translate_errors
    async def lookup(self, parent_inode, name, ctx=None):
        if parent_inode >= VIRTUAL_BASE or (parent_inode == ROOT_INODE and name == CONTROL_DIR):
            self._check_control_access(ctx)
            return self._virtual_attrs(self._virtual_lookup(parent_inode, name))
        if name == b".":
            return self._entry(self.ns.get(parent_inode))
        if name == b"..":
            parent = self.store.catalog.scalar(
                "SELECT parent FROM dentries WHERE inode=? LIMIT 1", (parent_inode,)) or ROOT_INODE
            return self._entry(self.ns.get(parent))
        try:
            return self._entry(self.ns.lookup(parent_inode, name))
        except FsError as exc:
            if exc.errno != errno.ENOENT:
                raise
            return self._miss(parent_inode, name)

    def _miss(self, parent: int, name: bytes) -> pyfuse3.EntryAttributes:
        """A negative entry (inode 0) the kernel may keep NEGATIVE_TIMEOUT seconds,
        remembered so that names the daemon makes can be invalidated."""
        REQUESTS["lookup-miss"] = REQUESTS.get("lookup-miss", 0) + 1
        now = time.monotonic()
        if self.miss_count >= NEGATIVE_MAX:
            for p in list(self.misses):
                names = self.misses[p]
                for n in [n for n, end in names.items() if end <= now]:
                    del names[n]
                    self.miss_count -= 1
                if not names:
                    del self.misses[p]
            if self.miss_count >= NEGATIVE_MAX:
                raise FsError(errno.ENOENT)     # not cached
        names = self.misses.setdefault(parent, {})
        if name not in names:
            self.miss_count += 1
        names[name] = now + NEGATIVE_TIMEOUT
        a = pyfuse3.EntryAttributes()
        a.st_ino = 0
        a.entry_timeout = NEGATIVE_TIMEOUT
        return a

    def take_misses(self, parents) -> list[tuple[int, bytes]]:
        """The misses still cached by the kernel in these directories, forgotten
        here: the caller invalidates them (on the event loop; see daemon)."""
        now = time.monotonic()
        out = []
        for parent in parents:
            names = self.misses.pop(parent, None)
            if names:
                self.miss_count -= len(names)
                out += [(parent, n) for n, end in names.items() if end > now]
        return out

    @translate_errors
    async def getattr(self, inode, ctx=None):
        if inode >= VIRTUAL_BASE:
            self._check_control_access(ctx)
            return self._virtual_attrs(self._vnode(inode))
        return self._attrs(self.ns.get(inode))

    @translate_errors
    async def setattr(self, inode, attr, fields, fh, ctx):
        if inode >= VIRTUAL_BASE:
            raise FsError(errno.EROFS)
        self._check_writable()
        changes = {}
        if fields.update_mode:
            changes["mode"] = (self.ns.get(inode).mode & ~0o7777) | (attr.st_mode & 0o7777)
        if fields.update_uid:
            changes["uid"] = attr.st_uid
        if fields.update_gid:
            changes["gid"] = attr.st_gid
        if fields.update_atime:
            changes["atime_ns"] = attr.st_atime_ns
        if fields.update_mtime:
            changes["mtime_ns"] = attr.st_mtime_ns
            of = self.open_files.get(inode)
            if of is not None:
                of.mtime_ns = attr.st_mtime_ns      # the content stored at close keeps it
        if fields.update_ctime:
            changes["ctime_ns"] = attr.st_ctime_ns
        if fields.update_size:
            await self._truncate(inode, attr.st_size)
        of = self.open_files.get(inode)
        if of is not None and of.dirty and set(changes) <= {"mtime_ns", "ctime_ns", "atime_ns"}:
            # The writeback cache sends a file's times before its close: the
            # content stored at close carries them, with no catalog write now.
            a = self._attrs(self.ns.get(inode))
            a.st_mtime_ns = of.mtime_ns or a.st_mtime_ns
            return a
        node = self.ns.set_attrs(inode, **changes) if changes else self.ns.get(inode)
        self._changed()
        return self._attrs(node)

    async def _truncate(self, ino: int, size: int) -> None:
        self._check_size(size)
        node = self.ns.get(ino)
        if not stat.S_ISREG(node.mode):
            raise FsError(errno.EINVAL)
        # A reference of our own while we wait for the lock: without it, the
        # last release can close the buffer and drop the open file under us
        # (a closed buffer, or a truncation nobody ever stores).
        of = self._open_file(ino)
        try:
            async with of.lock:
                await self._load(of)
                of.buffer.truncate(size)
                of.dirty = True
                of.mtime_ns = now_ns()
                if of.handles == 1:
                    # Truncate by path with nobody holding the file open: store it at once
                    # (otherwise the holders' close stores it).
                    await self._commit(of)
        finally:
            await self._close_file(of)

    @translate_errors
    async def readlink(self, inode, ctx):
        return self.ns.readlink(inode)

    @translate_errors
    async def mknod(self, parent_inode, name, mode, rdev, ctx):
        self._check_writable(parent_inode, name)
        node = self.ns.create(parent_inode, name, mode, ctx.uid, ctx.gid, rdev)
        self._changed()
        return self._entry(node)

    @translate_errors
    async def mkdir(self, parent_inode, name, mode, ctx):
        self._check_writable(parent_inode, name)
        node = self.ns.create(parent_inode, name, stat.S_IFDIR | (mode & 0o7777), ctx.uid, ctx.gid)
        self._changed()
        return self._entry(node)

    @translate_errors
    async def symlink(self, parent_inode, name, target, ctx):
        self._check_writable(parent_inode, name)
        node = await self._thread(self.ns.create, parent_inode, name, stat.S_IFLNK | 0o777,
                                  ctx.uid, ctx.gid, 0, target)
        self._changed()
        return self._entry(node)

    @translate_errors
    async def link(self, inode, new_parent_inode, new_name, ctx):
        self._check_writable(new_parent_inode, new_name)
        of = self.open_files.get(inode)
        if of is not None:
            async with of.lock:
                await self._commit(of)
        node = self.ns.link(inode, new_parent_inode, new_name)
        self._changed()
        return self._entry(node)

    @translate_errors
    async def unlink(self, parent_inode, name, ctx):
        self._check_writable(parent_inode, name)
        node = self.ns.unlink(parent_inode, name)
        self._maybe_free(node)
        await self.commits.commit()

    @translate_errors
    async def rmdir(self, parent_inode, name, ctx):
        self._check_writable(parent_inode, name)
        node = self.ns.rmdir(parent_inode, name)
        self._maybe_free(node)
        await self.commits.commit()

    @translate_errors
    async def rename(self, parent_inode_old, name_old, parent_inode_new, name_new, flags, ctx):
        self._check_writable(parent_inode_old, name_old)
        self._check_writable(parent_inode_new, name_new)
        replaced = self.ns.rename(parent_inode_old, name_old, parent_inode_new, name_new,
                                  noreplace=bool(flags & pyfuse3.RENAME_NOREPLACE),
                                  exchange=bool(flags & pyfuse3.RENAME_EXCHANGE))
        if replaced is not None:
            self._maybe_free(replaced)
        await self.commits.commit()

    def _maybe_free(self, node: Inode) -> None:
        """An inode with no name goes now, or when it is neither open nor known to the kernel."""
        if node.nlink <= 0 and node.id not in self.open_files and not self.lookups.get(node.id):
            self.ns.free(node.id)

    # -- directories --------------------------------------------------------------

    @translate_errors
    async def opendir(self, inode, ctx):
        if inode >= VIRTUAL_BASE:
            self._check_control_access(ctx)
        if inode < VIRTUAL_BASE and not self.ns.get(inode).is_dir:
            raise FsError(errno.ENOTDIR)
        return inode

    @translate_errors
    async def readdir(self, fh, start_id, token):
        if fh >= VIRTUAL_BASE:
            return self._virtual_readdir(fh, start_id, token)
        after = start_id
        while True:
            batch = self.ns.entries(fh, after, 200)
            if not batch:
                self._listed[fh] = None         # listed to the end: its files may come next, in order
                if len(self._listed) > 10_000:
                    self._listed.pop(next(iter(self._listed)))
                return
            for off, name, node in batch:
                if not pyfuse3.readdir_reply(token, name, self._attrs(node), off):
                    return
                self.lookups[node.id] = self.lookups.get(node.id, 0) + 1
            after = batch[-1][0]

    async def releasedir(self, fh):
        pass

    # -- open files ---------------------------------------------------------------

    def _open_file(self, ino: int) -> OpenFile:
        of = self.open_files.get(ino)
        if of is None:
            of = self.open_files[ino] = OpenFile(ino)
        of.handles += 1
        return of

    def _new_handle(self, ino: int) -> int:
        fh = self.next_fh
        self.next_fh += 1
        self.handles[fh] = ino
        return fh

    @translate_errors
    async def open(self, inode, flags, ctx):
        if inode >= VIRTUAL_BASE:
            self._check_control_access(ctx)
            if flags & (os.O_WRONLY | os.O_RDWR):
                raise FsError(errno.EROFS)
            self._vnode(inode)
            return pyfuse3.FileInfo(fh=inode, keep_cache=True)
        if flags & (os.O_WRONLY | os.O_RDWR):
            self._check_writable()
        node = self.ns.get(inode)
        if not stat.S_ISREG(node.mode):
            raise FsError(errno.EINVAL)
        of = self._open_file(inode)
        if flags & os.O_TRUNC:
            # libfuse asks the kernel for atomic O_TRUNC: the truncation is ours to do.
            async with of.lock:
                if of.buffer is None:
                    of.buffer = FileBuffer(self.spill_dir, self.buffer_bound, self.max_block)
                of.buffer.truncate(0)
                of.dirty = True
                of.mtime_ns = now_ns()
        elif not flags & os.O_WRONLY:
            self._read_ahead(inode)
        # A file's blocks never change in place, and every write comes through
        # this kernel, so its page cache stays true across opens.
        return pyfuse3.FileInfo(fh=self._new_handle(inode), keep_cache=True)

    def _read_ahead(self, ino: int) -> None:
        """A reader that opens a directory's files in order (cat of a find, tar,
        grep -r) gets the next files' blocks fetched in parallel while it reads
        this one: they are on other disks, and one file at a time leaves them idle.
        In order means exactly the file after the one opened last in this
        directory: random readers (many at once) must not fill the disks with
        guesses, as "any later file" did (half of all random opens)."""
        if self.nursery is None or self.cache.limit < READ_AHEAD_BYTES:
            return                          # no room to keep what is fetched ahead
        cat = self.store.catalog
        found = cat.query("SELECT parent, rowid FROM dentries WHERE inode=? LIMIT 1", (ino,))
        if not found:
            return
        parent, pos = found[0]
        expected = self._last_open.get(parent)
        in_order = expected == pos
        if expected is None and parent in self._listed:
            # The first file of a directory just listed (grep -r, tar, cp -r):
            # a walker opens the next ones, so fetch them now, not from the second.
            in_order = not cat.query(
                "SELECT 1 FROM dentries d JOIN contents c ON c.inode = d.inode AND c.piece = 0 "
                "WHERE d.parent=? AND d.rowid<? LIMIT 1", (parent, pos))
        if len(self._last_open) > 10_000:
            self._last_open.clear()
        cols = ", ".join("b." + c.strip() for c in BLOCK_COLUMNS.split(","))
        rows = cat.query(
            f"SELECT d.rowid, {cols} FROM dentries d JOIN contents c ON c.inode = d.inode AND c.piece = 0 "
            "JOIN blocks b ON b.id = c.block WHERE d.parent=? AND d.rowid>? "
            "ORDER BY d.rowid LIMIT ?", (parent, pos, READ_AHEAD_FILES))
        if not rows:
            self._last_open.pop(parent, None)
            return
        self._last_open[parent] = rows[0][0]    # the file an in-order reader opens next
        if in_order:
            for r in rows:
                row = BlockRow(*r[1:])
                if row.size <= READ_AHEAD_BYTES:
                    self._fetch_ahead(row)

    def _fetch_ahead(self, row: BlockRow) -> bool:
        """Fetch a piece nobody asked for yet, if the cache can keep it and its disk
        has a free read slot: a reader's demand never queues behind a guess."""
        if not self.cache.wanted(row) or row.size > self.cache.limit // 2:
            return False
        if self._disk_limiter(row.disk).available_tokens <= 0:
            return False
        self.nursery.start_soon(self._quiet_piece, row)
        return True

    @translate_errors
    async def create(self, parent_inode, name, mode, flags, ctx):
        self._check_writable(parent_inode, name)
        node = self.ns.create(parent_inode, name, stat.S_IFREG | (mode & 0o7777), ctx.uid, ctx.gid)
        of = self._open_file(node.id)
        of.buffer = FileBuffer(self.spill_dir, self.buffer_bound, self.max_block)
        of.dirty = True
        return pyfuse3.FileInfo(fh=self._new_handle(node.id), keep_cache=True), self._entry(node)

    async def _load(self, of: OpenFile) -> None:
        """Give an open file a write buffer holding its current content (copy on write)."""
        if of.buffer is not None:
            return
        buf = FileBuffer(self.spill_dir, self.buffer_bound, self.max_block)
        off = 0
        try:
            for row in self.ns.contents(of.ino):
                if row.sig != self._zero_sig(row.size):     # zeros stay a hole
                    buf.write(off, await self._piece(row))
                off += row.size
            buf.truncate(off)
        except BaseException:
            buf.close()
            raise
        of.buffer = buf

    def _zero_sig(self, size: int) -> str:
        sig = self._zero_sigs.get(size)
        if sig is None:
            if len(self._zero_sigs) > 16:
                self._zero_sigs.clear()
            sig = self._zero_sigs[size] = self.store.signature_fn(bytes(size))
        return sig

    def _check_size(self, size: int) -> None:
        if size > self.max_block * MAX_PIECES:
            raise FsError(errno.EFBIG)

    @translate_errors
    async def write(self, fh, off, buf):
        of = self.open_files[self.handles[fh]]
        if off + len(buf) > self.max_block * MAX_PIECES:
            await self._write_failed(of, errno.EFBIG)
        async with of.lock:
            if of.error:
                raise FsError(of.error)
            await self._load(of)
            try:
                of.buffer.write(off, buf)
            except OSError as exc:      # the spill file's disk is full: this content is lost
                await self._write_failed(of, exc.errno or errno.EIO)
            of.dirty = True
            of.mtime_ns = now_ns()
        return len(buf)

    async def _write_failed(self, of: OpenFile, err: int) -> None:
        """A write the file cannot keep. With the writeback cache the kernel took
        it long ago (and grew its idea of the size), and when writeback fails it
        does not send FLUSH: close fails, and the file's new content is dropped
        at release. So the kernel forgets the file now, before that close."""
        of.error = err
        with trio.move_on_after(1.0):
            await self._forget_kernel_copy(of.ino).wait()
        raise FsError(err)

    async def _commit(self, of: OpenFile) -> None:
        """Store a dirty file's buffer as blocks and make them its content (lock held)."""
        if of.error:
            raise FsError(of.error)
        if not of.dirty or of.buffer is None:
            return
        buf = of.buffer
        size = buf.size
        path = self.ns.path_of(of.ino)
        rows: list[BlockRow] = []
        holes: dict[int, BlockRow] = {}     # piece length -> the zeros block (a sparse file's holes)
        try:
            for i, start in enumerate(range(0, size, self.max_block)):
                length = min(self.max_block, size - start)
                if length in holes and buf.is_hole(start, length):
                    rows.append(await self._thread(self.store.add_ref, holes[length]))
                    continue
                data = buf.read(start, self.max_block)
                row = await self._thread(self.store.store, data, name=path,
                                         mode=self.store_mode, sig=buf.piece_sig(i))
                if buf.is_hole(start, length):
                    holes[length] = row
                rows.append(row)
                del data
            self.ns.set_contents(of.ino, rows, size, of.mtime_ns or now_ns())
        except BaseException:
            for row in rows:
                try:
                    self.store.release(row)
                except WebfsError as exc:
                    log.warning("%s: cannot give back block %s: %s", path, row.block_name, exc)
            raise
        # A WAL commit without fsync, shared with the requests that arrive meanwhile;
        # a failure rolls all of it back.
        await self.commits.commit()
        of.dirty = False
        of.pieces = None

    @translate_errors
    async def flush(self, fh):
        if fh >= VIRTUAL_BASE:
            return
        of = self.open_files[self.handles[fh]]
        async with of.lock:
            await self._commit_or_drop(of, "close", fh)

    @translate_errors
    async def fsync(self, fh, datasync):
        if fh >= VIRTUAL_BASE:
            return
        of = self.open_files[self.handles[fh]]
        async with of.lock:
            await self._commit_or_drop(of, "fsync", fh)
        await self._thread(self.store.sync)

    @translate_errors
    async def release(self, fh):
        if fh >= VIRTUAL_BASE:
            return
        of = self.open_files[self.handles.pop(fh)]
        async with of.lock:
            try:
                # The flush before it committed what this close owes; other
                # writers' pending changes are not this release's to wait for.
                await self._commit_or_drop(of, "close", fh, pending=False)
            finally:
                await self._close_file(of)
                if of.dropped:
                    self._forget_kernel_copy(of.ino)   # again, now the kernel has let go of it

    async def _commit_or_drop(self, of: OpenFile, what: str, fh: int, pending: bool = True) -> None:
        """Store an open file's changes; if that fails (ENOSPC, EIO), drop them all:
        the file keeps the content it had at its last successful store (none, if
        new), the caller's errno tells the writer, the kernel forgets what it
        cached of the file, and ``webfs umount`` reports it."""
        # A write the file could not keep was refused to the kernel, which tells
        # the writer itself (at its fsync or close): drop, but say it only once.
        told = of.error != 0
        try:
            await self._commit(of)
            if pending:
                await self._commit_pending()
        except Exception as exc:
            done = self._drop_changes(of, what, exc, fh, owe=not told)
            if what == "fsync":
                # The caller of fsync hears it now, and once (as ext4 says an error
                # once per open file). A flush may come from a forked child's close
                # of a shared descriptor: the descriptor's own close hears it again.
                of.owed.pop(fh, None)
            # Answer after the kernel has forgotten the file, so that the writer's
            # next stat already sees what is kept; bounded, should it wait on us.
            with trio.move_on_after(1.0):
                await done.wait()
            if told:
                return
            raise
        # Changes dropped at an earlier close or fsync (perhaps a forked child's,
        # through the same descriptor, or another descriptor's): say so once more.
        err = of.owed.pop(fh, 0)
        if err:
            raise FsError(err)

    def _drop_changes(self, of: OpenFile, what: str, exc: BaseException, fh: int,
                      owe: bool = True) -> trio.Event:
        if of.buffer is not None:
            of.buffer.close()
        # Every descriptor open now hears of it at its next close or fsync, this
        # one too: a forked child shares it, and its close flushes first.
        for other, ino in self.handles.items():
            if ino == of.ino and owe:
                of.owed[other] = _errno_of(exc)
        of.buffer, of.dirty, of.error, of.pieces, of.dropped = None, False, 0, None, True
        try:
            path = self.ns.path_of(of.ino).decode("utf-8", "replace")
            size = self.ns.get(of.ino).size
        except WebfsError:
            path, size = f"inode {of.ino}", 0
        err = errno.errorcode.get(_errno_of(exc), "EIO")
        line = f"{path}: {what} failed ({err}: {exc}); its new content was dropped, it keeps {size} bytes"
        log.error("%s", line)
        if len(self.failures) < 1000:
            self.failures.append(line)
        return self._forget_kernel_copy(of.ino)

    def _forget_kernel_copy(self, ino: int) -> trio.Event:
        """Make the kernel drop its names, cached pages and attributes of a file.
        With the writeback cache it trusts its own idea of the size, so the inode
        itself must go: with its names invalidated, the last close evicts it.
        The event is set once the names are (the pages may wait on a writeback
        that waits on our answer, so they come after, in the same thread)."""
        names_done = trio.Event()
        if self.nursery is None:
            names_done.set()
            return names_done
        names = self.store.catalog.query("SELECT parent, name FROM dentries WHERE inode=?", (ino,))
        token = trio.lowlevel.current_trio_token()
        # A new generation: if the kernel still holds the old inode when it next
        # looks the name up (a RELEASE in flight keeps it), it drops it as stale.
        self.generations[ino] = self.generations.get(ino, 0) + 1

        def work():
            try:
                for parent, name in names:
                    try:
                        pyfuse3.invalidate_entry(parent, name)
                    except OSError:
                        pass
            finally:
                trio.from_thread.run_sync(names_done.set, trio_token=token)
            try:
                pyfuse3.invalidate_inode(ino, attr_only=False)
            except OSError:
                pass

        async def task():
            try:
                await trio.to_thread.run_sync(work)
            except Exception:
                log.exception("cannot invalidate the kernel's copy of inode %d", ino)
            finally:
                names_done.set()
        # Not inside the request: the kernel may hold the inode's lock until we answer.
        self.nursery.start_soon(task)
        return names_done

    def _changed(self) -> None:
        """A change of names or attributes only: it is committed with the next
        close or fsync of any file, or within a second (the daemon's periodic
        commit), not before the answer. As on a local filesystem, a crash may
        lose such a change unless something after it was closed or synced;
        it never loses a closed file, nor the names that lead to it."""

    async def _commit_pending(self) -> None:
        """Join the next commit if the catalog holds changes not yet committed
        (the create, mkdir or chmod before a close, a release's free)."""
        if self.store.catalog.uncommitted:
            await self.commits.commit()

    async def _close_file(self, of: OpenFile) -> None:
        of.handles -= 1
        if of.handles > 0:
            return
        del self.open_files[of.ino]
        if of.buffer is not None:
            of.buffer.close()
        try:
            node = self.ns.get(of.ino)
        except FsError:
            return
        if node.nlink <= 0 and not self.lookups.get(of.ino):
            self.ns.free(of.ino)
            await self.commits.commit()

    # -- reading ------------------------------------------------------------------

    async def _piece(self, row: BlockRow) -> bytes:
        data = self.cache.get(row)
        if data is not None:
            return data
        key = piece_key(row)
        event = self.cache.inflight.get(key)
        if event is not None:
            await event.wait()
            data = self.cache.get(row)
            if data is not None:
                return data
        event = self.cache.inflight[key] = trio.Event()
        try:
            # store.read checks the bytes against row.sig: what goes in the cache is that piece.
            data = await self._thread(self.store.read, row, limiter=self._disk_limiter(row.disk))
            self.cache.put(row, data)
            return data
        finally:
            # Two readers that waited for an uncached piece (larger than the
            # cache, or evicted) each fetch it; only the owner's entry goes.
            if self.cache.inflight.get(key) is event:
                del self.cache.inflight[key]
            event.set()

    @translate_errors
    async def read(self, fh, off, size):
        if fh >= VIRTUAL_BASE:
            node = self._vnode(fh)
            row = self.store.catalog.block(node.key, node.overflow)
            if row is None:
                raise FsError(errno.ENOENT)
            return (await self._piece(row))[off:off + size]
        of = self.open_files[self.handles[fh]]
        if of.buffer is not None:
            return of.buffer.read(off, size)
        if of.pieces is None:
            of.pieces = self.ns.contents(of.ino)
        pieces = of.pieces
        try:
            return await self._read_pieces(pieces, off, size, of)
        except WebfsError:
            # The file was stored anew while this read waited (its old blocks
            # may be gone): read it again as it is now, once.
            if of.pieces is pieces and pieces == self.ns.contents(of.ino):
                raise
            if of.buffer is not None:
                return of.buffer.read(off, size)
            of.pieces = self.ns.contents(of.ino)
            return await self._read_pieces(of.pieces, off, size, of)

    async def _read_pieces(self, pieces: list[BlockRow], off: int, size: int,
                           of: Optional[OpenFile] = None) -> bytes:
        out = []
        first = off // self.max_block
        for index in range(first, len(pieces)):
            start = index * self.max_block
            if start >= off + size:
                break
            row = pieces[index]
            if of is not None and of.last is not None and of.last[0] == row:
                data = of.last[1]
            else:
                hit = "piece-hit" if self.cache.get(row) is not None else "piece-miss"
                REQUESTS[hit] = REQUESTS.get(hit, 0) + 1
                data = await self._piece(row)
                if of is not None:
                    of.last = (row, data)
            out.append(data[max(0, off - start):off + size - start])
        if len(pieces) > 1:
            # A reader that goes on where it stopped gets PREFETCH_PIECES ahead
            # (on other disks, decoded on other cores); any other reader, one.
            sequential = of is not None and of.read_end == off
            self._prefetch(pieces, (off + size) // self.max_block + 1,
                           PREFETCH_PIECES if sequential else 1)
        if of is not None:
            of.read_end = off + size
        return b"".join(out)

    def _prefetch(self, pieces: list[BlockRow], index: int, ahead: int = 1) -> None:
        """Start fetching the next pieces of a large file (they sit on other disks)."""
        if self.nursery is None:
            return
        for row in pieces[index:index + ahead]:
            self._fetch_ahead(row)

    async def _quiet_piece(self, row: BlockRow) -> None:
        try:
            await self._piece(row)
        except WebfsError:
            pass            # the reader that needs it will see the error
        except Exception:
            log.exception("fetching block %s ahead failed", row.block_name)

    # -- xattrs ---------------------------------------------------------------------

    def _virtual_xattr(self, inode: int, name: bytes) -> Optional[bytes]:
        if inode == ROOT_INODE and name in self.root_xattrs:
            return self.root_xattrs[name]
        if inode == ROOT_INODE and name == XATTR_PREFIX + b"requests":
            return json.dumps(dict(sorted(REQUESTS.items()))).encode()
        if not name.startswith(XATTR_PREFIX) or inode >= VIRTUAL_BASE:
            return None
        key = name[len(XATTR_PREFIX):]
        if key not in (b"signature", b"disk", b"refs", b"codec"):
            return None
        rows = self.ns.contents(inode)
        if key == b"signature":
            return ",".join(r.block_name for r in rows).encode()
        if key == b"disk":
            return ",".join(str(r.disk) for r in rows).encode()
        if key == b"refs":
            return ",".join(str(r.refs) for r in rows).encode()
        return ",".join(r.codec for r in rows).encode()

    @translate_errors
    async def getxattr(self, inode, name, ctx):
        if inode >= VIRTUAL_BASE:
            self._check_control_access(ctx)
        value = self._virtual_xattr(inode, name)
        if value is not None:
            return value
        if inode >= VIRTUAL_BASE or name.startswith(b"system."):
            raise FsError(errno.ENODATA)        # ls -l asks every file for ACLs; we keep none
        return self.ns.getxattr(inode, name)

    @translate_errors
    async def setxattr(self, inode, name, value, ctx):
        if name.startswith(XATTR_PREFIX) or inode >= VIRTUAL_BASE:
            raise FsError(errno.EPERM)      # webfs's own attributes are read-only
        if name.startswith(b"system."):
            # No POSIX ACLs: refusing them makes cp/rsync fall back to chmod.
            raise FsError(errno.EOPNOTSUPP)
        self._check_writable()
        self.ns.setxattr(inode, name, value)
        self._changed()

    @translate_errors
    async def listxattr(self, inode, ctx):
        if inode >= VIRTUAL_BASE:
            self._check_control_access(ctx)
            return []
        return self.ns.listxattr(inode)

    @translate_errors
    async def removexattr(self, inode, name, ctx):
        if name.startswith(XATTR_PREFIX):
            raise FsError(errno.EPERM)
        self._check_writable()
        self.ns.removexattr(inode, name)
        self._changed()

    # -- the filesystem ---------------------------------------------------------------

    @translate_errors
    async def statfs(self, ctx):
        s = pyfuse3.StatvfsData()
        free = total = 0
        for vol in self.store.archive.volumes.values():
            f, t = vol.backend.free_space()
            free, total = free + f, total + t
        s.f_bsize = s.f_frsize = 4096
        s.f_blocks = total // 4096
        s.f_bfree = s.f_bavail = free // 4096
        inodes = self.ns.count_inodes()
        s.f_files = inodes + free // 4096
        s.f_ffree = s.f_favail = free // 4096
        s.f_namemax = 255
        return s

    async def forget(self, inode_list):
        for ino, nlookup in inode_list:
            if ino >= VIRTUAL_BASE:
                if ino in self.vnodes:
                    node = self.vnodes.pop(ino)
                    self.vnode_by_key.pop((node.kind, node.key, node.overflow), None)
                continue
            left = self.lookups.get(ino, 0) - nlookup
            if left > 0:
                self.lookups[ino] = left
                continue
            self.lookups.pop(ino, None)
            if ino in self.open_files:
                continue                    # freed at its last close
            try:
                node = self.ns.get(ino)
                if node.nlink <= 0:
                    self.ns.free(ino)
                    await self.commits.commit()
            except FsError:
                pass                        # already gone
            except Exception:               # forget answers no request: it must not raise
                log.exception("freeing inode %d after the kernel forgot it", ino)

    # -- the .webfs tree --------------------------------------------------------------

    def _vnode(self, ino: int) -> VirtualNode:
        node = self.vnodes.get(ino)
        if node is None:
            raise FsError(errno.ENOENT)
        return node

    def _vnode_for(self, kind: str, key: str, overflow: int = 0) -> VirtualNode:
        ident = (kind, key, overflow)
        ino = self.vnode_by_key.get(ident)
        if ino is None:
            ino = VIRTUAL_BASE + len(self.vnode_by_key) + 1
            while ino in self.vnodes:
                ino += 1
            self.vnodes[ino] = VirtualNode(ino, kind, key, overflow)
            self.vnode_by_key[ident] = ino
        return self.vnodes[ino]

    def _group_chars(self) -> int:
        return 2 * (self.store.conf.depth - 1)

    def _virtual_lookup(self, parent: int, name: bytes) -> VirtualNode:
        if parent == ROOT_INODE:
            return self._vnode_for("root", "")
        node = self._vnode(parent)
        text = name.decode("ascii", "replace")
        if node.kind == "root":
            if name == b"blocks":
                return self._vnode_for("dir", "")
            raise FsError(errno.ENOENT)
        if node.kind != "dir":
            raise FsError(errno.ENOTDIR)
        if len(node.key) < self._group_chars():
            key = node.key + text
            if len(text) == 2 and self.store.catalog.scalar(
                    "SELECT 1 FROM blocks WHERE grp >= ? AND grp < ? LIMIT 1", (key, key + "g")):
                return self._vnode_for("dir", key)
            raise FsError(errno.ENOENT)
        rest, _, ovf = text.partition("~")
        if ovf and not ovf.isdigit():
            raise FsError(errno.ENOENT)
        sig = node.key + rest
        if self.store.catalog.block(sig, int(ovf or 0)) is None:
            raise FsError(errno.ENOENT)
        return self._vnode_for("block", sig, int(ovf or 0))

    def _virtual_attrs(self, node: VirtualNode) -> pyfuse3.EntryAttributes:
        a = pyfuse3.EntryAttributes()
        a.st_ino = node.ino
        a.entry_timeout = a.attr_timeout = 1.0       # blocks come and go
        if node.kind == "block":
            row = self.store.catalog.block(node.key, node.overflow)
            if row is None:
                raise FsError(errno.ENOENT)
            a.st_mode = stat.S_IFREG | 0o400
            a.st_size = row.size
            a.st_nlink = 1
        else:
            a.st_mode = stat.S_IFDIR | 0o500
            a.st_nlink = 2
        root = self.ns.get(ROOT_INODE)
        a.st_uid, a.st_gid = self.owner
        a.st_atime_ns = a.st_mtime_ns = a.st_ctime_ns = root.ctime_ns
        a.st_blksize = 128 * 1024
        a.st_blocks = (a.st_size + 511) // 512
        return a

    def _virtual_children(self, node: VirtualNode) -> list[tuple[bytes, VirtualNode]]:
        if node.kind == "root":
            return [(b"blocks", self._vnode_for("dir", ""))]
        width = self._group_chars()
        if len(node.key) < width:
            n = len(node.key) + 2
            rows = self.store.catalog.query(
                "SELECT DISTINCT substr(grp, 1, ?) FROM blocks WHERE grp >= ? AND grp < ? ORDER BY 1",
                (n, node.key, node.key + "g"))
            return [(r[0][-2:].encode(), self._vnode_for("dir", r[0])) for r in rows]
        rows = self.store.catalog.query(
            "SELECT sig, overflow FROM blocks WHERE grp=? ORDER BY sig, overflow", (node.key,))
        return [((sig[width:] + (f"~{ovf}" if ovf else "")).encode(), self._vnode_for("block", sig, ovf))
                for sig, ovf in rows]

    def _virtual_readdir(self, fh: int, start_id: int, token) -> None:
        children = self._virtual_children(self._vnode(fh))
        for i, (name, child) in enumerate(children[start_id:], start_id + 1):
            if not pyfuse3.readdir_reply(token, name, self._virtual_attrs(child), i):
                return


def _guard_every_handler() -> None:
    """Every request handler pyfuse3 may call goes through translate_errors (or,
    for the ones without a reply, _log_errors), whether or not it was decorated."""
    no_reply = {"forget", "releasedir"}
    for name, base in vars(pyfuse3.Operations).items():
        mine = vars(Operations).get(name)
        if name.startswith("_") or not callable(base) or mine is None:
            continue
        if getattr(mine, "translated", False):
            continue
        setattr(Operations, name, (_log_errors if name in no_reply else translate_errors)(mine))


_guard_every_handler()
