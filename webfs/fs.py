"""The FUSE filesystem (pyfuse3 + trio): kernel requests in, namespace and store calls out.

It translates each request and dispatches it; it owns only what the kernel
itself needs: the kernel's lookup counts and inode generations, the
negative entries it answered, the virtual ``user.webfs.*`` xattrs, telling
the kernel to forget what it cached, and the mapping of webfs errors to
errnos (``translate_errors``). The rest is in rooms of its own: open files,
their write buffers and the commit at close in ``openfiles``; the piece
cache and read-ahead in ``readcache``; directory handles in
``dirhandles``; the read-only ``.webfs`` tree in ``controltree``; names and
attributes in ``namespace``; blocks in ``store``.
"""
from __future__ import annotations

import errno
import functools
import json
import logging
import os
import sqlite3
import stat
import time
from typing import Optional

import pyfuse3
import trio

from .controltree import CONTROL_DIR, ControlTree, VirtualNode, is_virtual
from .dirhandles import DirHandles
from .errors import CorruptBlock, DataLost, FsError, NoSpace, WebfsError, errno_of
from .groupcommit import HANDOFFS, REQUEST, GroupCommit, to_worker
from .kernelcounts import KernelCounts
from .kernelpages import KernelPages
from .namespace import NAME_MAX, ROOT_INODE, Inode, Namespace
from .openfiles import OpenFiles
from .readcache import PieceReader
from .store import Store
from .treesource import XATTR_KINDS
from . import lockorder, searching

log = logging.getLogger(__name__)

ENTRY_TIMEOUT = 300.0           # every change goes through this mount, so the kernel may cache long
XATTR_PREFIX = b"user.webfs."
READDIR_BATCH = 200             # entries a readdir reads from the catalog at once
# A lookup that finds nothing is answered with a negative entry the kernel
# keeps this long: rsync's generator stats a new name (a miss), its receiver
# opens it later (a hit now; it runs behind by seconds on a large tree). The
# kernel itself drops a negative entry for O_EXCL creates, mkdir and rename
# targets, and replaces it when a name is made through the mount (whose
# record of the miss then goes: _made); names the daemon makes (webfs
# import) go through take_misses. At most NEGATIVE_MAX
# misses are remembered (about 150 bytes each); beyond that a miss is not cached.
NEGATIVE_TIMEOUT = 60.0
UNCHANGED_IF_SAME = ("mode", "uid", "gid", "mtime_ns")  # setattr fields dropped when the inode has them already
NEGATIVE_MAX = 1 << 14
# FUSE requests answered since the mount, by type: always counted (one dict
# update per request), read as JSON from the root's ``user.webfs.requests``
# xattr (``getfattr -n user.webfs.requests MOUNT``) and logged at unmount.
# Beside them: lookup-miss (lookups that found nothing), piece-hit and
# piece-miss (a read's piece was decoded already, or had to be fetched or
# waited for: what read-ahead saves), others-invalidated (entries and inodes
# of other machines' changes told to the kernel), readdir-at-end (dirhandles),
# close-settled (a flush or release with nothing to store: no lock taken),
# setattr-stale-ctime (a ctime older than the file's, not written).
REQUESTS: dict[str, int] = {}
# Requests the kernel expects no reply to: an error is logged, never answered.
NO_REPLY = frozenset({"forget", "releasedir"})


def count_request(name: str, n: int = 1) -> None:
    REQUESTS[name] = REQUESTS.get(name, 0) + n


# The requests of a program at work on the mount's files: reading them
# (open, read) or changing names, contents and attributes. A listing or a
# stat alone (a poll of .webfs/search, ls) is not work.
WORK = ("open", "read", "create", "write", "setattr", "mkdir", "mknod", "symlink", "link",
        "rename", "unlink", "rmdir", "setxattr", "removexattr")


def work_answered() -> int:
    """How many requests of ``WORK`` were answered since the mount started."""
    return sum(REQUESTS.get(name, 0) for name in WORK)


def _brief(args) -> str:
    """A request's arguments for the log: no megabyte of written data."""
    return ", ".join(r if len(r) <= 80 else r[:77] + "..." for r in map(repr, args))


def translate_errors(method):
    """Count a request, turn webfs errors into FUSEError at the edge, and anything
    unexpected into EIO and one log line with its traceback: the daemon never
    dies of a request. A request with no reply (``NO_REPLY``) logs and goes on."""
    name = method.__name__

    @functools.wraps(method)
    async def answered(*args, **kwargs):
        count_request(name)
        REQUEST.set(name)
        try:
            return await method(*args, **kwargs)
        except pyfuse3.FUSEError:
            raise
        except (FsError, NoSpace) as exc:
            raise pyfuse3.FUSEError(errno_of(exc)) from None
        except (DataLost, CorruptBlock) as exc:
            log.error("%s: %s", name, exc)
            raise pyfuse3.FUSEError(errno.EIO) from None
        except (WebfsError, OSError) as exc:
            log.error("%s failed: %s", name, exc)
            raise pyfuse3.FUSEError(errno_of(exc)) from None
        except sqlite3.OperationalError as exc:
            if "full" not in str(exc):          # "database or disk is full": ENOSPC, no traceback
                log.exception("%s(%s): catalog error, answered EIO", name, _brief(args[1:]))
                raise pyfuse3.FUSEError(errno.EIO) from None
            log.error("%s failed: the catalog's disk is full (%s)", name, exc)
            raise pyfuse3.FUSEError(errno.ENOSPC) from None
        except Exception:
            log.exception("%s(%s): unexpected error, answered EIO", name, _brief(args[1:]))
            raise pyfuse3.FUSEError(errno.EIO) from None

    @functools.wraps(method)
    async def unanswered(*args, **kwargs):
        count_request(name)
        REQUEST.set(name)
        try:
            return await method(*args, **kwargs)
        except Exception:
            log.exception("%s: unexpected error, ignored", name)

    wrapper = unanswered if name in NO_REPLY else answered
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
        # The kernel's lookup count per inode: an inode it still knows (a path
        # walk that has not reached open yet, a cached dentry) stays in the
        # catalog after its last name goes, until the kernel forgets it.
        self.lookups = KernelCounts()
        self.owner = (os.getuid(), os.getgid())     # who mounted: the only user of .webfs
        self.root_xattrs: dict[bytes, bytes] = {}
        self.generations: dict[int, int] = {}  # inode -> generation, bumped when the kernel must forget it
        self.misses: dict[int, dict[bytes, float]] = {}   # parent -> name -> when the kernel's negative entry ends
        self.miss_count = 0
        self.nursery: Optional[trio.Nursery] = None
        # Commits in a worker thread, shared by requests; a small file's on the loop (commit_here).
        self.commits = GroupCommit(store.commit, here=lambda: store.commit(here=True))
        self.reader = PieceReader(store, namespace, cache_bytes, count_request)
        self.pages = KernelPages(namespace, self.reader, count_request)
        # Storing is CPU work (hashing, compression): a few threads for two cores.
        # Reading waits on disks: the reader gives each disk its own threads.
        self.limiter = lockorder.limiter("store threads", threads)
        self.files = OpenFiles(store, namespace, self.reader, self.commits, self.limiter,
                               store_mode=store_mode, buffer_bound=buffer_bound,
                               forget_kernel_copy=self._forget_kernel_copy,
                               known_to_kernel=lambda ino: bool(self.lookups.get(ino)),
                               stored=self.pages.written, count=count_request)
        self.control = ControlTree(store.catalog, store.conf.depth, self.owner)
        self.dirs = DirHandles()
        self.control.search.answer = lambda query, limit: searching.answers(store, query, limit)

    def running(self, nursery: trio.Nursery) -> None:
        """The mount runs: background work (read-ahead, telling the kernel) may start."""
        self.nursery = nursery
        self.reader.nursery = nursery

    # -- helpers -------------------------------------------------------------------

    def _attrs(self, node: Inode) -> pyfuse3.EntryAttributes:
        a = pyfuse3.EntryAttributes()
        a.st_ino = node.id
        a.generation = self.generations.get(node.id, 0)
        a.entry_timeout = a.attr_timeout = ENTRY_TIMEOUT
        a.st_mode = node.mode
        a.st_nlink = node.nlink
        a.st_uid, a.st_gid, a.st_rdev = node.uid, node.gid, node.rdev
        size = self.files.size(node.id)
        a.st_size = node.size if size is None else size
        a.st_blksize = 128 * 1024
        a.st_blocks = (a.st_size + 511) // 512        # st_blocks counts POSIX's 512-byte units
        a.st_atime_ns, a.st_mtime_ns, a.st_ctime_ns = node.atime_ns, node.mtime_ns, node.ctime_ns
        return a

    def _entry(self, node: Inode) -> pyfuse3.EntryAttributes:
        """Attributes for a reply that makes the kernel know the inode (lookup count + 1)."""
        a = self._attrs(node)
        self.lookups.add(node.id)
        return a

    def _virtual_attrs(self, node: VirtualNode) -> pyfuse3.EntryAttributes:
        return self.control.attrs(node, self.ns.get(ROOT_INODE).ctime_ns)

    def _check_control_access(self, ctx) -> None:
        """The .webfs tree shows every document whatever its file's mode: only the
        user who mounted the archive (and root) may look into it, with or without
        allow_other. Checked here by the caller's uid, not left to mode bits."""
        if ctx is not None and ctx.uid not in (0, self.owner[0]):
            raise FsError(errno.EACCES)

    def _check_writable(self, parent: int = 0, name: bytes = b"") -> None:
        if self.read_only:
            raise FsError(errno.EROFS)
        if is_virtual(parent):
            raise FsError(errno.EROFS)
        if parent == ROOT_INODE and name == CONTROL_DIR:
            raise FsError(errno.EEXIST)         # the .webfs tree owns this name

    # -- names --------------------------------------------------------------------

    @translate_errors
    async def lookup(self, parent_inode, name, ctx=None):
        if is_virtual(parent_inode) or (parent_inode == ROOT_INODE and name == CONTROL_DIR):
            self._check_control_access(ctx)
            return self._virtual_attrs(self.control.lookup(parent_inode, name))
        if name == b".":
            return self._entry(self.ns.get(parent_inode))
        if name == b"..":
            position = self.ns.position(parent_inode)
            return self._entry(self.ns.get(position[0] if position else ROOT_INODE))
        node = self.ns.find(parent_inode, name)
        if node is not None:
            return self._entry(node)
        if len(name) > NAME_MAX:
            raise FsError(errno.ENAMETOOLONG)
        return self._miss(parent_inode, name)

    def _miss(self, parent: int, name: bytes) -> pyfuse3.EntryAttributes:
        """A negative entry (inode 0) the kernel may keep NEGATIVE_TIMEOUT seconds,
        remembered so that names the daemon makes can be invalidated."""
        count_request("lookup-miss")
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

    def _made(self, parent: int, name: bytes, node: Inode) -> pyfuse3.EntryAttributes:
        """The reply for a name made through the mount. The kernel replaces
        its negative entry for the name with this one, so the record of the
        miss goes too: `cp -r` misses every name it then creates, and those
        records were a third of what the daemon's memory grew by in an ingest."""
        self._forget_miss(parent, name)
        return self._entry(node)

    def _forget_miss(self, parent: int, name: bytes) -> None:
        names = self.misses.get(parent)
        if names is not None and names.pop(name, None) is not None:
            self.miss_count -= 1
            if not names:
                del self.misses[parent]

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
        if is_virtual(inode):
            self._check_control_access(ctx)
            return self._virtual_attrs(self.control.node(inode))
        return self._attrs(self.ns.get(inode))

    @translate_errors
    async def setattr(self, inode, attr, fields, fh, ctx):
        if is_virtual(inode):
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
            self.files.set_mtime(inode, attr.st_mtime_ns)
        if fields.update_ctime:
            changes["ctime_ns"] = attr.st_ctime_ns
        if fields.update_size:
            await self.files.truncate(inode, attr.st_size)
        node = self.ns.get(inode)
        # A chmod or chown to what the file has already (rsync's fchmod of a
        # new file to its mode), or the mtime it has (the kernel writing back
        # its times after a chmod or rename: rsync's every file), changes its
        # ctime alone, which the JOURNAL does not hold: no record.
        changed = {k: v for k, v in changes.items() if k not in UNCHANGED_IF_SAME or getattr(node, k) != v}
        if self.files.is_dirty(inode) and set(changed) <= {"mtime_ns", "ctime_ns", "atime_ns"}:
            # The writeback cache sends a file's times before its close, rsync
            # its fchmod to the mode the file was made with: the content stored
            # at close carries the times and a new ctime, with no catalog write now.
            a = self._attrs(node)
            a.st_mtime_ns = self.files.pending_mtime(inode) or a.st_mtime_ns
            return a
        if set(changed) == {"ctime_ns"} and changed["ctime_ns"] <= node.ctime_ns:
            # The kernel writing back the ctime it took at a chmod or rename
            # this daemon has already stamped later (rsync's every file):
            # stale, the newer one stays, nothing is written.
            count_request("setattr-stale-ctime")
            return self._attrs(node)
        if changes:
            node = self.ns.set_attrs(inode, **changed)
        self._changed()
        return self._attrs(node)

    @translate_errors
    async def readlink(self, inode, ctx):
        if is_virtual(inode):
            self._check_control_access(ctx)
            return self.control.readlink(inode)
        return self.ns.readlink(inode)

    @translate_errors
    async def mknod(self, parent_inode, name, mode, rdev, ctx):
        self._check_writable(parent_inode, name)
        node = self.ns.create(parent_inode, name, mode, ctx.uid, ctx.gid, rdev)
        self._changed()
        return self._made(parent_inode, name, node)

    @translate_errors
    async def mkdir(self, parent_inode, name, mode, ctx):
        self._check_writable(parent_inode, name)
        node = self.ns.create(parent_inode, name, stat.S_IFDIR | (mode & 0o7777), ctx.uid, ctx.gid)
        self._changed()
        return self._made(parent_inode, name, node)

    @translate_errors
    async def symlink(self, parent_inode, name, target, ctx):
        self._check_writable(parent_inode, name)
        # A symlink's target is stored as a block: hashing and disk I/O off the loop.
        node = await to_worker(self.ns.create, parent_inode, name, stat.S_IFLNK | 0o777,
                               ctx.uid, ctx.gid, 0, target, limiter=self.limiter)
        self._changed()
        return self._made(parent_inode, name, node)

    @translate_errors
    async def link(self, inode, new_parent_inode, new_name, ctx):
        self._check_writable(new_parent_inode, new_name)
        await self.files.commit_open(inode)
        node = self.ns.link(inode, new_parent_inode, new_name)
        self._changed()
        return self._made(new_parent_inode, new_name, node)

    @translate_errors
    async def unlink(self, parent_inode, name, ctx):
        await self._remove(self.ns.unlink, parent_inode, name)

    @translate_errors
    async def rmdir(self, parent_inode, name, ctx):
        await self._remove(self.ns.rmdir, parent_inode, name)

    async def _remove(self, remove, parent: int, name: bytes) -> None:
        """unlink or rmdir: the name goes, and the inode too if nothing else
        holds it; committed in the background (``_changed``)."""
        self._check_writable(parent, name)
        self.free_if_unused(remove(parent, name))
        self._changed()

    @translate_errors
    async def rename(self, parent_inode_old, name_old, parent_inode_new, name_new, flags, ctx):
        if flags & ~(pyfuse3.RENAME_NOREPLACE | pyfuse3.RENAME_EXCHANGE):
            raise FsError(errno.EINVAL)     # RENAME_WHITEOUT or a flag not known: as a filesystem without it
        self._check_writable(parent_inode_old, name_old)
        self._check_writable(parent_inode_new, name_new)
        replaced = self.ns.rename(parent_inode_old, name_old, parent_inode_new, name_new,
                                  noreplace=bool(flags & pyfuse3.RENAME_NOREPLACE),
                                  exchange=bool(flags & pyfuse3.RENAME_EXCHANGE))
        self._forget_miss(parent_inode_new, name_new)
        if replaced is not None:
            self.free_if_unused(replaced)
        self._changed()

    def free_if_unused(self, node: Inode) -> None:
        """An inode with no name goes now, or when it is neither open nor known to the kernel."""
        if node.nlink <= 0 and not self.files.is_open(node.id) and not self.lookups.get(node.id):
            self.ns.free(node.id)

    # -- directories --------------------------------------------------------------

    @translate_errors
    async def opendir(self, inode, ctx):
        if is_virtual(inode):
            self._check_control_access(ctx)
        elif not self.ns.get(inode).is_dir:
            raise FsError(errno.ENOTDIR)
        return self.dirs.open(inode)

    @translate_errors
    async def readdir(self, fh, start_id, token):
        directory = self.dirs.directory(fh)
        if is_virtual(directory):
            return self.control.readdir(directory, start_id, token, self.ns.get(ROOT_INODE).ctime_ns)
        if self.dirs.at_end(fh, start_id):
            count_request("readdir-at-end")     # the kernel's readdir to find the end: empty
            return
        self.dirs.ended(fh, None)
        after = start_id
        while True:
            batch = self.ns.listing(directory, after, READDIR_BATCH)
            for i, (off, name, node, _) in enumerate(batch):
                if not pyfuse3.readdir_reply(token, name, self._attrs(node), off):
                    self.reader.listed(directory, start_id, batch[:i], end=False)
                    return
                self.lookups.add(node.id)
            # The end: a batch shorter than asked for, no query more to find it empty.
            end = len(batch) < READDIR_BATCH
            self.reader.listed(directory, start_id, batch, end=end)
            if end:
                self.dirs.ended(fh, batch[-1][0] if batch else after)
                return
            after = start_id = batch[-1][0]

    @translate_errors
    async def fsyncdir(self, fh, datasync):
        """The directory's names made durable, as fsync does for a file: the way
        to make a rename or unlink that returned survive a crash (mv, rm and
        rsync do not ask for it; ``webfs sync`` does the whole mount)."""
        if not is_virtual(self.dirs.directory(fh)):
            await self.files.sync_names()

    @translate_errors
    async def releasedir(self, fh):
        self.dirs.release(fh)

    # -- open files ---------------------------------------------------------------

    @translate_errors
    async def open(self, inode, flags, ctx):
        if is_virtual(inode):
            self._check_control_access(ctx)
            if flags & (os.O_WRONLY | os.O_RDWR):
                raise FsError(errno.EROFS)
            return self.control.file_info(inode)
        if flags & (os.O_WRONLY | os.O_RDWR):
            self._check_writable()
        fh = await self.files.open(inode, flags)
        if not flags & (os.O_TRUNC | os.O_WRONLY) and not self.pages.written_here(inode):
            self.reader.opened(inode, cached=self.pages.holds(inode))
            self.pages.opened(inode, self.files.of_handle(fh), flags)
        # A file's blocks never change in place, and every write comes through
        # this kernel, so its page cache stays true across opens.
        return pyfuse3.FileInfo(fh=fh, keep_cache=True)

    @translate_errors
    async def create(self, parent_inode, name, mode, flags, ctx):
        self._check_writable(parent_inode, name)
        node = self.ns.create(parent_inode, name, stat.S_IFREG | (mode & 0o7777), ctx.uid, ctx.gid)
        return (pyfuse3.FileInfo(fh=self.files.created(node.id, flags), keep_cache=True),
                self._made(parent_inode, name, node))

    @translate_errors
    async def read(self, fh, off, size):
        if is_virtual(fh):
            return await self.control.read(fh, off, size, self.reader)
        return await self.files.read(fh, off, size)

    @translate_errors
    async def write(self, fh, off, buf):
        return await self.files.write(fh, off, buf)

    @translate_errors
    async def flush(self, fh):
        if not is_virtual(fh):
            await self.files.flush(fh)

    @translate_errors
    async def fsync(self, fh, datasync):
        if not is_virtual(fh):
            await self.files.fsync(fh)

    @translate_errors
    async def release(self, fh):
        if not is_virtual(fh):
            await self.files.release(fh)

    def others_changed(self, inodes) -> None:
        """Inodes another machine's mount changed (webfs.changes): the kernel
        drops what it cached of each file it knows, its size included."""
        for ino in inodes:
            if self.lookups.get(ino):
                try:
                    node = self.ns.get(ino)
                except FsError:
                    continue            # gone there: the kernel hears ENOENT at its next look
                if not node.is_dir:
                    self._forget_kernel_copy(ino)

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
        names = self.ns.names_of(ino)
        token = trio.lowlevel.current_trio_token()
        # A new generation: if the kernel still holds the old inode when it next
        # looks the name up (a RELEASE in flight keeps it), it drops it as stale.
        self.generations[ino] = self.generations.get(ino, 0) + 1
        self.pages.forget(ino)

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
                await to_worker(work)
            except Exception:
                log.exception("cannot invalidate the kernel's copy of inode %d", ino)
            finally:
                names_done.set()
        # Not inside the request: the kernel may hold the inode's lock until we answer.
        self.nursery.start_soon(task)
        return names_done

    def _changed(self) -> None:
        """A change of names (mkdir, create, symlink, link, rename, unlink,
        rmdir, the free of a nameless inode) or of attributes only: it is
        committed with the next close or fsync of any file, an fsync of a
        directory, ``webfs sync``, or within a second (the daemon's periodic
        commit), not before the answer. As on a local filesystem, a crash may
        lose such a change unless something after it was closed or synced;
        it never loses a closed file, nor the names that lead to it: a file
        renamed after its close is found by one of its two names. Blocks
        released by a removal leave the disks only once it is committed."""

    # -- xattrs ---------------------------------------------------------------------

    def _virtual_xattr(self, inode: int, name: bytes) -> Optional[bytes]:
        if inode == ROOT_INODE and name in self.root_xattrs:
            return self.root_xattrs[name]
        if inode == ROOT_INODE and name == XATTR_PREFIX + b"requests":
            counts = dict(REQUESTS, **({"stored-on-loop": self.commits.here} if self.commits.here else {}))
            return json.dumps(dict(sorted(counts.items()))).encode()
        if inode == ROOT_INODE and name == XATTR_PREFIX + b"handoffs":
            return json.dumps(dict(sorted(HANDOFFS.items()))).encode()
        if not name.startswith(XATTR_PREFIX) or is_virtual(inode):
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
        if is_virtual(inode):
            self._check_control_access(ctx)
        value = self._virtual_xattr(inode, name)
        if value is not None:
            return value
        if is_virtual(inode) or name.startswith(b"system."):
            raise FsError(errno.ENODATA)        # ls -l asks every file for ACLs; we keep none
        value = self.ns.xattr(inode, name)
        if value is None:
            # The kernel asks for security.capability before each file's first
            # write: answered with no FsError to make and translate.
            raise pyfuse3.FUSEError(errno.ENODATA)
        return value

    @translate_errors
    async def setxattr(self, inode, name, value, ctx):
        if name.startswith(XATTR_PREFIX) or is_virtual(inode):
            raise FsError(errno.EPERM)      # webfs's own attributes are read-only
        if not name.startswith(XATTR_KINDS):
            # No POSIX ACLs (system.*: refusing them makes cp/rsync fall back to chmod),
            # nor a namespace Linux does not know (as ext4); such names kept already stay readable.
            raise FsError(errno.EOPNOTSUPP)
        self._check_writable()
        self.ns.setxattr(inode, name, value)
        self._changed()

    @translate_errors
    async def listxattr(self, inode, ctx):
        if is_virtual(inode):
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

    @translate_errors
    async def forget(self, inode_list):
        for ino, nlookup in inode_list:
            if is_virtual(ino):
                self.control.forget(ino, nlookup)
                continue
            if self.lookups.forget(ino, nlookup) > 0:
                continue
            self.pages.forget(ino)          # the kernel's inode went, and its pages with it
            if self.files.is_open(ino):
                continue                    # freed at its last close
            try:
                node = self.ns.get(ino)
                if node.nlink <= 0:
                    self.ns.free(ino)
                    self._changed()
            except FsError:
                pass                        # already gone
            except Exception:               # forget answers no request: it must not raise
                log.exception("freeing inode %d after the kernel forgot it", ino)


def _guard_every_handler() -> None:
    """Every request handler pyfuse3 may call goes through translate_errors,
    whether or not it was decorated."""
    for name, base in vars(pyfuse3.Operations).items():
        mine = vars(Operations).get(name)
        if name.startswith("_") or not callable(base) or mine is None:
            continue
        if not getattr(mine, "translated", False):
            setattr(Operations, name, translate_errors(mine))


_guard_every_handler()
