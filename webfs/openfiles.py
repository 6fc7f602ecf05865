"""Open files of a mount: their write buffers and the commit that stores them.

It owns what happens between open and the last release of a file: the
write buffer (memory up to a bound, then a spill file in ``meta/spill/``),
hashing pieces as they arrive, storing the buffer as blocks at flush
(close) or fsync and committing them with the next shared catalog commit,
and, when storing fails (ENOSPC, EIO), dropping the file's new content and
telling each of its descriptors once. A ``close()`` returns only after its
blocks are written and the commit that names them has ended, so a closed
file survives ``kill -9``. Hashing, compression and disk I/O run in worker
threads, except the store of a small file at its close when nothing else
runs in one (``STORE_HERE_MAX``; ``GroupCommit.commit_here``). Nothing here speaks FUSE: ``webfs.fs``
calls it, and a test can drive it without a kernel. What the kernel must
forget of a file whose changes were dropped is the caller's to do
(``forget_kernel_copy``).
"""
from __future__ import annotations

import errno
import functools
import logging
import os
import stat
import tempfile
from typing import Callable, Optional

import trio

from .catalog import BlockRow
from .catalogengine import SQLITE
from .errors import FsError, WebfsError, errno_of
from .groupcommit import GroupCommit, to_worker
from .namespace import Namespace, now_ns
from .readcache import PieceReader, ReadState
from .signature import new_hasher
from .store import Store
from . import lockorder

log = logging.getLogger(__name__)

MAX_PIECES = 1 << 18            # the largest file: 262,144 pieces (1 TiB at max_block 4 MiB); EFBIG beyond
STORE_HERE_MAX = 64 << 10       # a file this small is stored on the loop when no worker is busy
FAILURES_KEPT = 1000            # files whose changes were dropped, listed at umount


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



class FileLock:
    """An open file's lock: taken at once when it is free, waited for when
    it is held. ``trio.Lock`` passes through trio's scheduler even when it is
    free (a checkpoint before and after), one more wake-up of the loop for
    each write, flush and release of every file; a waiter still gets the
    lock in turn (a release hands it to the first waiter, so it is not
    free to a newcomer)."""

    __slots__ = ("_lock",)

    def __init__(self) -> None:
        self._lock = lockorder.task_lock("open file")

    async def __aenter__(self) -> None:
        try:
            self._lock.acquire_nowait()
        except trio.WouldBlock:
            await self._lock.acquire()

    async def __aexit__(self, *exc) -> None:
        self._lock.release()

    def locked(self) -> bool:
        return self._lock.locked()


class OpenFile:
    """An inode that has open handles: its lock, its buffer while written."""

    def __init__(self, ino: int):
        self.ino = ino
        self.handles = 0
        self._lock: Optional[FileLock] = None     # made at its first use: a reader's close needs none
        self.buffer: Optional[FileBuffer] = None
        self.dirty = False
        self.mtime_ns = 0            # of the last write, or as set by utimens since
        self.pieces: Optional[list[BlockRow]] = None      # cached contents for readers
        self.error = 0               # errno of a write the buffer could not keep
        self.dropped = False         # changes were dropped (a store failed)
        self.owed: dict[int, int] = {}   # handle -> errno of a drop it has not been told of
        self.reading = ReadState()

    @property
    def lock(self) -> FileLock:
        if self._lock is None:
            self._lock = FileLock()
        return self._lock

    def settled(self, fh: int) -> bool:
        """Nothing for a close of ``fh`` to store or to tell, and no one holds
        the lock: what ``_commit_or_drop`` would find under it, without taking
        it (the loop runs nothing else between the take and the give back)."""
        return ((self._lock is None or not self._lock.locked()) and not self.error
                and (not self.dirty or self.buffer is None) and fh not in self.owed)


class OpenFiles:
    """Every open file of a mount, by inode, and its handles.

    ``forget_kernel_copy(ino)`` makes the kernel drop what it cached of a file
    and returns an event set once its names are gone; ``known_to_kernel(ino)``
    says whether the kernel still holds the inode (then it is freed when the
    kernel forgets it, not at its last close); ``stored(ino)`` is told of each
    file whose writes were just stored.
    """

    def __init__(self, store: Store, namespace: Namespace, reader: PieceReader, commits: GroupCommit,
                 limiter: trio.CapacityLimiter, *, store_mode: Optional[str] = None,
                 buffer_bound: int = 64 << 20,
                 forget_kernel_copy: Optional[Callable[[int], trio.Event]] = None,
                 known_to_kernel: Callable[[int], bool] = lambda ino: False,
                 stored: Callable[[int], None] = lambda ino: None,
                 count: Callable[[str], None] = lambda name: None):
        self.store = store
        self.ns = namespace
        self.reader = reader
        self.commits = commits
        self.limiter = limiter
        self.store_mode = store_mode
        self.max_block = store.conf.max_block
        self.buffer_bound = buffer_bound
        self.spill_dir = os.path.join(store.archive.first_volume.root, "meta", "spill")
        self.forget_kernel_copy = forget_kernel_copy or _nothing_to_forget
        self.known_to_kernel = known_to_kernel
        self.stored = stored
        self.count = count
        self.by_inode: dict[int, OpenFile] = {}
        self.handles: dict[int, int] = {}                 # fh -> inode
        self.direct: set[int] = set()                     # handles opened O_DIRECT
        self.next_fh = 1
        self._failures: dict[int, tuple[str, str]] = {}   # inode -> (its path then, what failed): umount's
        self._zero_sigs: dict[int, str] = {}

    async def _thread(self, fn, *args, **kwargs):
        return await to_worker(functools.partial(fn, *args, **kwargs), limiter=self.limiter)

    def of_handle(self, fh: int) -> OpenFile:
        return self.by_inode[self.handles[fh]]

    def size(self, ino: int) -> Optional[int]:
        """The size of a file being written, which the catalog does not know yet."""
        of = self.by_inode.get(ino)
        return of.buffer.size if of is not None and of.buffer is not None else None

    def is_open(self, ino: int) -> bool:
        return ino in self.by_inode

    def _acquire(self, ino: int) -> OpenFile:
        of = self.by_inode.get(ino)
        if of is None:
            of = self.by_inode[ino] = OpenFile(ino)
        of.handles += 1
        return of

    def _new_handle(self, ino: int, flags: int = 0) -> int:
        fh = self.next_fh
        self.next_fh += 1
        self.handles[fh] = ino
        if flags & os.O_DIRECT:
            self.direct.add(fh)
        return fh

    def _new_buffer(self) -> FileBuffer:
        return FileBuffer(self.spill_dir, self.buffer_bound, self.max_block)

    # -- open, write, truncate ------------------------------------------------------

    async def open(self, ino: int, flags: int) -> int:
        """A new handle of a regular file (truncated, for O_TRUNC)."""
        node = self.ns.get(ino)
        if not stat.S_ISREG(node.mode):
            raise FsError(errno.EINVAL)
        of = self._acquire(ino)
        if flags & os.O_TRUNC:
            # libfuse asks the kernel for atomic O_TRUNC: the truncation is ours to do.
            async with of.lock:
                if of.buffer is None:
                    of.buffer = self._new_buffer()
                of.buffer.truncate(0)
                of.dirty = True
                of.mtime_ns = now_ns()
        return self._new_handle(ino, flags)

    def created(self, ino: int, flags: int = 0) -> int:
        """A handle of a file just created: empty, and to be stored at its close."""
        of = self._acquire(ino)
        of.buffer = self._new_buffer()
        of.dirty = True
        return self._new_handle(ino, flags)

    def set_mtime(self, ino: int, mtime_ns: int) -> None:
        """utimens of an open file: the content stored at its close keeps this mtime."""
        of = self.by_inode.get(ino)
        if of is not None:
            of.mtime_ns = mtime_ns

    def is_dirty(self, ino: int) -> bool:
        """Open with changes not stored yet."""
        of = self.by_inode.get(ino)
        return of is not None and of.dirty

    def pending_mtime(self, ino: int) -> int:
        """The mtime the content stored at close will carry (0: none set yet)."""
        of = self.by_inode.get(ino)
        return of.mtime_ns if of is not None else 0

    async def _load(self, of: OpenFile) -> None:
        """Give an open file a write buffer holding its current content (copy on write)."""
        if of.buffer is not None:
            return
        buf = self._new_buffer()
        off = 0
        try:
            for row in self.ns.contents(of.ino):
                if row.sig != self._zero_sig(row.size):     # zeros stay a hole
                    buf.write(off, await self.reader.piece(row))
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

    def check_size(self, size: int) -> None:
        if size > self.max_block * MAX_PIECES:
            raise FsError(errno.EFBIG)

    async def truncate(self, ino: int, size: int) -> None:
        self.check_size(size)
        node = self.ns.get(ino)
        if not stat.S_ISREG(node.mode):
            raise FsError(errno.EINVAL)
        # A reference of our own while we wait for the lock: without it, the
        # last release can close the buffer and drop the open file under us
        # (a closed buffer, or a truncation nobody ever stores).
        of = self._acquire(ino)
        try:
            async with of.lock:
                await self._load(of)
                of.buffer.truncate(size)
                of.dirty = True
                of.mtime_ns = now_ns()
                if of.handles == 1:
                    # Truncate by path with nobody holding the file open: store it at once
                    # (otherwise the holders' close stores it).
                    await self.commit(of)
        finally:
            await self._let_go(of)

    async def write(self, fh: int, off: int, data: bytes) -> int:
        of = self.of_handle(fh)
        if off + len(data) > self.max_block * MAX_PIECES:
            if self._uncached(of.ino):
                # The writer waits for this answer (O_DIRECT): refused alone, as
                # on ext4; the file keeps every other write.
                raise FsError(errno.EFBIG)
            # A cached write, taken long ago; the kernel's idea of the size grew
            # with it and padded the pages it wrote back since: only the content
            # stored last is sure (FUSE cannot tell the kernel a largest size).
            await self._write_failed(of, errno.EFBIG)
        async with of.lock:
            if of.error:
                raise FsError(of.error)
            await self._load(of)
            try:
                of.buffer.write(off, data)
            except OSError as exc:      # the spill file's disk is full: this content is lost
                await self._write_failed(of, exc.errno or errno.EIO)
            of.dirty = True
            of.mtime_ns = now_ns()
        return len(data)

    def _uncached(self, ino: int) -> bool:
        """Is every handle of the file O_DIRECT (its writes bypass the kernel's cache)?"""
        return all(fh in self.direct for fh, i in self.handles.items() if i == ino)

    async def _write_failed(self, of: OpenFile, err: int) -> None:
        """A write the file cannot keep. With the writeback cache the kernel took
        it long ago (and grew its idea of the size), and when writeback fails it
        does not send FLUSH: close fails, and the file's new content is dropped
        at release. So the kernel forgets the file now, before that close."""
        of.error = err
        with trio.move_on_after(1.0):
            await self.forget_kernel_copy(of.ino).wait()
        raise FsError(err)

    # -- reading ----------------------------------------------------------------------

    async def read(self, fh: int, off: int, size: int) -> bytes:
        of = self.of_handle(fh)
        if of.buffer is not None:
            return of.buffer.read(off, size)
        if of.pieces is None:
            of.pieces = self.ns.pieces(of.ino)
        pieces = of.pieces
        try:
            return await self.reader.read(pieces, off, size, of.reading)
        except WebfsError:
            # The file was stored anew while this read waited (its old blocks
            # may be gone), or what the read-ahead kept of it is out of date:
            # read it again as the catalog says now, once.
            self.ns.forget_pieces(of.ino)
            if of.pieces is pieces and pieces == self.ns.contents(of.ino):
                raise
            if of.buffer is not None:
                return of.buffer.read(off, size)
            of.pieces = self.ns.contents(of.ino)
            return await self.reader.read(of.pieces, off, size, of.reading)

    # -- storing ----------------------------------------------------------------------

    async def commit(self, of: OpenFile) -> bool:
        """Store a dirty file's buffer as blocks and make them its content (lock
        held); True if it did, with a commit that holds whatever the catalog
        held before. A file of one piece is stored in the commit's own worker
        trip: one hand-off, shared with the closes that arrive together; a
        small one on the loop when no worker is busy (no hand-off)."""
        if of.error:
            raise FsError(of.error)
        if not of.dirty or of.buffer is None:
            return False
        buf = of.buffer
        size = buf.size
        path = self.ns.path_of(of.ino)
        mtime_ns = of.mtime_ns or now_ns()
        if size <= self.max_block:
            here = lambda: self._store_small(of.ino, buf, path, mtime_ns, here=True)
            if not self._may_store_here(size) or not self.commits.commit_here(here):
                await self.commits.commit(lambda: self._store_small(of.ino, buf, path, mtime_ns))
        else:
            rows = await self._store_pieces(buf, path)
            try:
                self.ns.set_contents(of.ino, rows, size, mtime_ns)
            except BaseException:
                self._give_back(rows, path)
                raise
            # A WAL commit without fsync, shared with the requests that arrive meanwhile;
            # a failure rolls all of it back.
            await self.commits.commit()
        of.dirty = False
        of.pieces = None
        self.stored(of.ino)
        return True

    def _may_store_here(self, size: int) -> bool:
        """Whether a file this size may be stored on the loop: small, every disk
        a local directory (no simulated delay), the catalog SQLite's, and no
        removal or parity write behind running (they hold stripe locks)."""
        if size > STORE_HERE_MAX or self.store.background.busy or self.store.catalog.engine is not SQLITE:
            return False
        return all(v.backend.quick_io for v in self.store.archive.volumes.values())

    def _store_small(self, ino: int, buf: FileBuffer, path: bytes, mtime_ns: int, here: bool = False) -> None:
        """(in the commit's worker trip, or ``here`` on the loop) A file of at
        most one piece made its content."""
        size = buf.size
        rows = [self.store.store(buf.read(0, size), name=path, mode=self.store_mode,
                                 sig=buf.piece_sig(0), here=here)] if size else []
        try:
            self.ns.set_contents(ino, rows, size, mtime_ns)
        except BaseException:
            self._give_back(rows, path)
            raise

    async def _store_pieces(self, buf: FileBuffer, path: bytes) -> list[BlockRow]:
        """A large file's pieces stored one worker trip each (holes share the zeros block)."""
        rows: list[BlockRow] = []
        holes: dict[int, BlockRow] = {}     # piece length -> the zeros block (a sparse file's holes)
        size = buf.size
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
        except BaseException:
            self._give_back(rows, path)
            raise
        return rows

    def _give_back(self, rows: list[BlockRow], path: bytes) -> None:
        """The references taken for a store that did not become the file's content."""
        for row in rows:
            try:
                self.store.release(row)
            except WebfsError as exc:
                log.warning("%s: cannot give back block %s: %s", path, row.block_name, exc)

    async def commit_open(self, ino: int) -> None:
        """Store an open file's changes now (before a hard link shares its content)."""
        of = self.by_inode.get(ino)
        if of is not None:
            async with of.lock:
                await self.commit(of)

    async def commit_all(self) -> list[str]:
        """Store every open file's buffer. A file that cannot be stored now (a full
        disk) does not keep the others from it: it stays open and dirty for its
        writer. Returns one line per file that failed."""
        failed = []
        for of in list(self.by_inode.values()):
            async with of.lock:
                try:
                    await self.commit(of)
                except Exception as exc:
                    try:
                        name = self.ns.path_of(of.ino).decode("utf-8", "replace")
                    except WebfsError:
                        name = f"inode {of.ino}"
                    log.error("sync: cannot store %s: %s", name, exc)
                    failed.append(f"{name} ({exc or type(exc).__name__})")
        return failed

    async def _commit_pending(self) -> None:
        """Join the next commit if the catalog holds changes not yet committed
        (an fsync of a clean file whose name or mode changed)."""
        if self.store.catalog.uncommitted:
            await self.commits.commit()

    async def flush(self, fh: int) -> None:
        """A close: a file written since its last store is stored and committed
        before the answer. A clean file's close waits for nothing: changes of
        names and attributes made meanwhile go with the next commit (within a
        second), as they would if it had not been opened."""
        of = self.of_handle(fh)
        if of.settled(fh):
            self.count("close-settled")
            return
        async with of.lock:
            await self._commit_or_drop(of, "close", fh, pending=False)

    async def fsync(self, fh: int) -> None:
        of = self.of_handle(fh)
        async with of.lock:
            await self._commit_or_drop(of, "fsync", fh)
        await self._thread(self.store.sync)

    async def sync_names(self) -> None:
        """What fsync does, for changes of names only (an fsync of a directory):
        the pending changes committed, then made durable on the disks."""
        await self._commit_pending()
        await self._thread(self.store.sync)

    async def release(self, fh: int) -> None:
        of = self.by_inode[self.handles.pop(fh)]
        self.direct.discard(fh)
        if of.settled(fh) and not of.dropped:
            self.count("close-settled")
            await self._let_go(of)
            return
        async with of.lock:
            try:
                # The flush before it committed what this close owes; other
                # writers' pending changes are not this release's to wait for.
                await self._commit_or_drop(of, "close", fh, pending=False)
            finally:
                await self._let_go(of)
                if of.dropped:
                    self.forget_kernel_copy(of.ino)   # again, now the kernel has let go of it

    async def _commit_or_drop(self, of: OpenFile, what: str, fh: int, pending: bool = True) -> None:
        """Store an open file's changes; if that fails (ENOSPC, EIO), drop them all:
        the file keeps the content it had at its last successful store (none, if
        new), the caller's errno tells the writer, the kernel forgets what it
        cached of the file, and ``webfs umount`` reports it."""
        # A write the file could not keep was refused to the kernel, which tells
        # the writer itself (at its fsync or close): drop, but say it only once.
        told = of.error != 0
        try:
            if not await self.commit(of) and pending:
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
                of.owed[other] = errno_of(exc)
        of.buffer, of.dirty, of.error, of.pieces, of.dropped = None, False, 0, None, True
        try:
            path = self.ns.path_of(of.ino).decode("utf-8", "replace")
            size = self.ns.get(of.ino).size
        except WebfsError:
            path, size = f"inode {of.ino}", 0
        err = errno.errorcode.get(errno_of(exc), "EIO")
        line = f"{path}: {what} failed ({err}: {exc}); its new content was dropped, it keeps {size} bytes"
        log.error("%s", line)
        if of.ino in self._failures or len(self._failures) < FAILURES_KEPT:
            self._failures.pop(of.ino, None)               # once a file, at its last failure
            self._failures[of.ino] = (path, f"{what} failed ({err}: {exc}); its new content was dropped")
        return self.forget_kernel_copy(of.ino)

    @property
    def failures(self) -> list[str]:
        """The files whose changes were dropped, one line each, as they are now
        (``webfs umount``'s report): its path and what it keeps, or, with no name
        left, that it was removed since (it keeps nothing)."""
        lines = []
        for ino, (then, why) in self._failures.items():
            try:
                node = self.ns.get(ino)
                path = self.ns.path_of(ino).decode("utf-8", "replace") if node.nlink > 0 else None
            except (WebfsError, OSError):
                node = path = None
            if path is None:
                lines.append(f"{then}: {why}; the file was removed since")
            else:
                lines.append(f"{path}: {why}, it keeps {node.size} bytes")
        return lines

    async def _let_go(self, of: OpenFile) -> None:
        """One handle fewer; at the last, the buffer goes, and so does an inode
        with no name that the kernel no longer knows."""
        of.handles -= 1
        if of.handles > 0:
            return
        del self.by_inode[of.ino]
        if of.buffer is not None:
            of.buffer.close()
        try:
            node = self.ns.get(of.ino)
        except FsError:
            return
        if node.nlink <= 0 and not self.known_to_kernel(of.ino):
            self.ns.free(of.ino)
            await self.commits.commit()


def _nothing_to_forget(ino: int) -> trio.Event:
    done = trio.Event()
    done.set()
    return done
