"""The local-directory backend: a disk is a directory on a mounted filesystem.

Writes that replace a file go to a temporary file in the same directory
and are renamed over the real name, so a crash never leaves half a file
under a real name. ``delay`` adds a fixed service time to every I/O, to
simulate a slow or busy disk in benchmarks (disk cooling); like a disk arm,
the disk serves one such I/O at a time, so requests to a busy disk queue.
"""
from __future__ import annotations

import errno
import glob
import os
import threading
import time
from contextlib import contextmanager
from typing import Callable, Iterator, Optional

from .base import Backend
from .. import lockorder

TMP_SUFFIX = ".webfs-tmp"
READ_ON = 1 << 20           # bytes a read asks for past a file's size at its fstat (it grew)
# Never written through a symlink planted at the name (ELOOP instead).
NEW_OR_LEFTOVER = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW
APPEND = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW


def free_space(path: str) -> tuple[int, int]:
    """(bytes free for us, bytes in all) on the file system that holds ``path``."""
    try:
        st = os.statvfs(path)
    except FileNotFoundError:
        return 0, 0             # a vanished disk has no room; the store notices it is gone
    return st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize


class LocalBackend(Backend):
    def __init__(self, root: str, delay: float = 0.0):
        self.root = root
        self.delay = delay
        self._arm = lockorder.lock("simulated I/O")     # one simulated I/O at a time
        self._noatime = getattr(os, "O_NOATIME", 0)
        # Files opened by ``reading_ahead`` for this thread's reads of them:
        # {path: (fd, expected size)}, or nothing outside such a block.
        self._ahead = threading.local()

    def __repr__(self) -> str:
        return f"LocalBackend({self.root!r})"

    @property
    def quick_io(self) -> bool:
        return not self.delay

    def _makedirs(self, path: str) -> None:
        """Make directories below the root, never the root itself: a disk whose
        root vanished must fail, not be quietly made again as an empty directory."""
        if not os.path.isdir(self.root):
            raise FileNotFoundError(errno.ENOENT, "the disk's root directory is gone", self.root)
        os.makedirs(path, exist_ok=True)

    def present(self) -> bool:
        return os.path.isdir(self.root)

    def _path(self, path: str) -> str:
        return os.path.join(self.root, path)

    def _wait(self) -> None:
        if self.delay:
            with self._arm:
                time.sleep(self.delay)

    def read(self, path: str, offset: int = 0, size: int = -1) -> bytes:
        """One open, one fstat (to the end only) and one pread: a whole block
        file in one read, where Python's open and read took seven calls. A file
        this thread opened ahead (``reading_ahead``) is read by that descriptor,
        its expected size in place of the fstat."""
        self._wait()
        kept = getattr(self._ahead, "files", None)
        fd, expected = kept.pop(path) if kept and path in kept else (self._open_to_read(self._path(path)), None)
        try:
            if size >= 0:
                return os.pread(fd, size, offset)
            # One byte more than the file holds: the short read is its end,
            # without a read more to find it; a file that grew is read on.
            want = max((os.fstat(fd).st_size if expected is None else expected) - offset, 0) + 1
            parts = []
            while True:
                data = os.pread(fd, want, offset)
                parts.append(data)
                if len(data) < want:
                    return b"".join(parts)
                offset += len(data)
                want = READ_ON
        finally:
            os.close(fd)

    @contextmanager
    def reading_ahead(self, files: list[tuple[str, int]]) -> Iterator[None]:
        """Each file opened and advised to the kernel (POSIX_FADV_WILLNEED,
        which starts its disk read without waiting), its descriptor kept for
        this thread's ``read`` of it in the block: several files' disk reads
        in flight together (a trip of 16 cold blocks, 0.73 to 0.90 ms a block
        read in turn, 0.33 to 0.45 ms advised first), and a block costs an
        open, an advice, a pread and a close, where an advice then a read
        took seven calls (each lets the GIL go to another thread and take it
        back: GREP OF SMALL PAGES). A file that cannot be opened is left to
        its read, which says why; one not read is closed at the end."""
        kept: dict[str, tuple[int, int]] = {}
        try:
            for path, expected in files:
                try:
                    fd = self._open_to_read(self._path(path))
                except OSError:
                    continue
                kept[path] = (fd, expected)
                try:
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
                except OSError:
                    pass
            self._ahead.files = kept
            yield
        finally:
            self._ahead.files = None
            for fd, _ in kept.values():
                os.close(fd)

    def _open_to_read(self, full: str) -> int:
        """O_NOATIME where allowed (the disk's files are ours): reading a cold
        archive does not write every block file's inode back (relatime
        updates a day-old atime at its first read)."""
        if self._noatime:
            try:
                return os.open(full, os.O_RDONLY | os.O_CLOEXEC | self._noatime)
            except PermissionError as exc:
                if exc.errno != errno.EPERM:
                    raise
                self._noatime = 0           # not the files' owner: plain opens from now on
        return os.open(full, os.O_RDONLY | os.O_CLOEXEC)

    def write_atomic(self, path: str, data: bytes, fsync: bool = False) -> None:
        self._wait()
        full = self._path(path)
        tmp = f"{full}.{os.getpid()}{TMP_SUFFIX}"
        try:
            fd = os.open(tmp, NEW_OR_LEFTOVER, 0o644)
        except FileNotFoundError:
            self._makedirs(os.path.dirname(full))
            fd = os.open(tmp, NEW_OR_LEFTOVER, 0o644)
        _fill(fd, data, fsync, tmp)
        try:
            os.rename(tmp, full)
        except BaseException:
            _unlink_quietly(tmp)
            raise
        if fsync:
            self._fsync_dir(os.path.dirname(full))

    def write_new(self, path: str, data: bytes, fsync: bool = False) -> None:
        """Create the file under its own name (O_EXCL): one file creation and no
        rename per new block. A file already there (a leftover the intents did
        not name) is replaced atomically instead."""
        self._wait()
        full = self._path(path)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
        try:
            try:
                fd = os.open(full, flags, 0o644)
            except FileNotFoundError:
                # A new placement group, most often under a known parent: one mkdir.
                try:
                    os.mkdir(os.path.dirname(full))
                except FileNotFoundError:
                    self._makedirs(os.path.dirname(full))
                except FileExistsError:
                    pass
                fd = os.open(full, flags, 0o644)
        except FileExistsError:
            self.write_atomic(path, data, fsync)
            return
        _fill(fd, data, fsync, full)
        if fsync:
            self._fsync_dir(os.path.dirname(full))

    def write_at(self, path: str, offset: int, data: bytes, fsync: bool = False) -> None:
        self._wait()
        fd = os.open(self._path(path), os.O_WRONLY | os.O_NOFOLLOW)
        try:
            os.pwrite(fd, data, offset)
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)

    def open_append(self, path: str) -> int:
        full = self._path(path)
        try:
            return os.open(full, APPEND, 0o644)
        except FileNotFoundError:
            self._makedirs(os.path.dirname(full))
            return os.open(full, APPEND, 0o644)

    def rename(self, src: str, dst: str) -> None:
        self._wait()
        full = self._path(dst)
        try:
            os.rename(self._path(src), full)
        except FileNotFoundError:
            if os.path.exists(self._path(src)):
                self._makedirs(os.path.dirname(full))
                os.rename(self._path(src), full)
            else:
                raise

    def remove(self, path: str) -> None:
        self._wait()
        _unlink_quietly(self._path(path))

    def exists(self, path: str) -> bool:
        return os.path.exists(self._path(path))

    def size(self, path: str) -> int:
        return os.stat(self._path(path)).st_size

    def list(self, prefix: str) -> Iterator[str]:
        base = self._path(prefix)
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames.sort()
            rel = os.path.relpath(dirpath, self.root)
            for name in sorted(filenames):
                yield name if rel == "." else f"{rel}/{name}"

    def remove_leftovers(self, path: str) -> list[str]:
        full = self._path(path)
        gone = []
        for leftover in glob.glob(glob.escape(full) + ".*" + TMP_SUFFIX):
            _unlink_quietly(leftover)
            gone.append(os.path.relpath(leftover, self.root))
        return gone

    def free_space(self) -> tuple[int, int]:
        return free_space(self.root)

    def sync(self, catalog_copy: Optional[Callable[[str], bytes]] = None) -> None:
        os.sync()

    @staticmethod
    def _fsync_dir(path: str) -> None:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _fill(fd: int, data: bytes, fsync: bool, path: str) -> None:
    """Write all of ``data`` to a new file's ``fd`` and close it; if that
    fails, the half-written file at ``path`` goes too."""
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        if fsync:
            os.fsync(fd)
    except BaseException:
        os.close(fd)
        _unlink_quietly(path)
        raise
    os.close(fd)


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError as exc:
        if exc.errno != errno.ENOENT:
            raise
