"""Write-behind for a disk in an object store: objects written wait in a local
staging directory until background uploaders have PUT them.

``put`` writes the object to ``DIR/<name>`` (tmp file and rename, fsynced when
the caller asks: ``-o sync``) and returns, so a ``close()`` that returned has
its blocks in local files that survive ``kill -9`` of the daemon. Uploader
threads (``workers`` of them) PUT staged objects and then remove their files.
An object waits ``UPLOAD_AFTER`` seconds first (less when the area is over
a quarter of its limit, none while someone drains), as the kernel's dirty
pages do: a burst of writes is not slowed by its uploads, and an object
written again meanwhile (a new Refs count, a parity update) is PUT once,
with its last bytes. Reads see a staged object first. ``drain`` waits
for every upload (``webfs sync``, checkpoints, unmount), before ``meta/``
goes to the bucket, so the bucket's copy of ``meta/`` never names an object
the bucket lacks. ``replay`` stages again what a killed daemon left (done
when the disk is opened, before anything else). More than ``limit`` bytes
waiting make writers wait.
"""
from __future__ import annotations

import collections
import errno
import logging
import os
import threading
from dataclasses import dataclass
from typing import Callable, Optional

from ..locks import SYSTEM_CLOCK, Clock
from .local import TMP_SUFFIX, LocalBackend
from .. import lockorder

log = logging.getLogger(__name__)

UPLOAD_AFTER = 2.0                  # an object waits this long before its upload (see _due)
RETRY_SECONDS = 1.0                 # after a failed upload, the next starts this much later


@dataclass
class _Staged:
    """An object waiting: its size, how often it was written, whether it is
    being written (its file) or PUT."""
    size: int = 0
    version: int = 0
    writing: int = 0
    uploading: bool = False
    since: float = 0.0          # when it was queued (clock.monotonic())


class Staging:
    """The staged objects of one disk (thread-safe); the uploads wait by ``clock``."""

    def __init__(self, directory: str, upload: Callable[[str, bytes], None], workers: int,
                 limit: int, where: str, clock: Clock = SYSTEM_CLOCK):
        self.dir = directory
        self.clock = clock
        self.files = LocalBackend(directory)
        self._upload = upload
        self._workers = workers
        self._limit = limit
        self._where = where                     # the disk, for messages
        self._waiting: dict[str, _Staged] = {}
        self._queue: collections.deque[str] = collections.deque()
        self._bytes = 0
        self._failure: Optional[OSError] = None  # the last upload's error, until one succeeds
        self._retry_at = 0.0                    # after a failure, no upload starts before (clock.monotonic())
        self._draining = 0                      # callers of drain(): upload everything now
        lock = lockorder.rlock("staging")
        self._changed = lockorder.condition("staging", lock)      # writers, drain, discard wait on it
        self._ready = lockorder.condition("staging", lock)        # the uploaders wait on it
        self._threads: list[threading.Thread] = []
        self._closing = False

    # -- writers ---------------------------------------------------------------

    def put(self, path: str, data: bytes, fsync: bool = False) -> None:
        """Stage an object (replacing any staged one of that name). Waits while
        the staging area is over its limit; over it while uploads fail, the
        disk is full (ENOSPC: the store tries the next disk)."""
        with self._changed:
            while self._bytes > self._limit and not self._closing:
                if self._failure is not None:
                    raise OSError(errno.ENOSPC, f"staging area full ({self._bytes} bytes) and uploads "
                                  f"failing ({self._failure.strerror or self._failure})", self._where)
                self._changed.wait(RETRY_SECONDS)
            # Counted as written before the file changes, so an upload of the
            # old bytes that ends meanwhile leaves the file for the next one.
            staged = self._waiting.setdefault(path, _Staged())
            staged.version += 1
            staged.writing += 1
        try:
            os.makedirs(self.dir, exist_ok=True)
            self.files.write_atomic(path, data, fsync=fsync)
        except BaseException:
            with self._changed:
                staged.writing -= 1
                if not staged.writing and not staged.size and not staged.uploading:
                    del self._waiting[path]     # never had a file
                self._changed.notify_all()
            raise
        self._written(path, staged, len(data))

    def _written(self, path: str, staged: _Staged, size: int) -> None:
        with self._changed:
            staged.writing -= 1
            self._bytes += size - staged.size
            staged.size = size
            if not staged.uploading and path not in self._queue:
                staged.since = self.clock.monotonic()
                self._queue.append(path)
                if len(self._queue) == 1:
                    self._ready.notify()    # the others wait for the head's time, or are busy
            self._start_workers()
            self._changed.notify_all()

    def discard(self, path: str) -> None:
        """Forget a staged object (its disk's copy is being removed): waits for
        an upload of it in progress, so the caller's DELETE comes after it."""
        with self._changed:
            while path in self._waiting and self._waiting[path].uploading:
                self._changed.wait()
            staged = self._waiting.pop(path, None)
            if staged is None:
                return
            self._bytes -= staged.size
            if path in self._queue:
                self._queue.remove(path)
            self.files.remove(path)
            self._changed.notify_all()

    # -- readers ---------------------------------------------------------------

    def read(self, path: str) -> Optional[bytes]:
        """A staged object's bytes, or None if it is not staged (or was PUT
        just now: then the bucket has it)."""
        if path not in self._waiting:
            return None
        try:
            return self.files.read(path)
        except FileNotFoundError:
            return None

    def size(self, path: str) -> Optional[int]:
        staged = self._waiting.get(path)
        return staged.size if staged is not None else None

    def names(self, prefix: str) -> list[str]:
        """Staged objects below a directory ("" or ending in "/"), sorted."""
        with self._changed:
            return sorted(p for p in self._waiting if p.startswith(prefix))

    @property
    def pending(self) -> int:
        """Objects waiting to be PUT."""
        return len(self._waiting)

    # -- uploading ------------------------------------------------------------------

    def _start_workers(self) -> None:
        """(With the lock held.) The uploader threads, started at the first put."""
        if not self._threads and not self._closing:
            for i in range(self._workers):
                t = threading.Thread(target=self._work, name=f"webfs-upload-{i}", daemon=True)
                t.start()
                self._threads.append(t)

    def _work(self) -> None:
        while True:
            with self._changed:
                while not self._closing:
                    if not self._queue:
                        self._ready.wait()
                        continue
                    until = max(self._retry_at, self._due(self._queue[0]))
                    if until <= self.clock.monotonic():
                        break
                    self.clock.wait(self._ready, until)
                if self._closing:
                    return
                path = self._queue.popleft()
                if self._queue:
                    self._ready.notify()        # one more uploader for what is left
                staged = self._waiting[path]
                staged.uploading = True
                version = staged.version
            failure = None
            try:
                self._upload(path, self.files.read(path))
            except OSError as exc:
                failure = exc
            with self._changed:
                staged.uploading = False
                if isinstance(failure, FileNotFoundError) and failure.filename == os.path.join(self.dir, path):
                    log.error("%s: staged %s vanished before its upload", self._where, path)
                    del self._waiting[path]
                    self._bytes -= staged.size
                elif failure is not None:
                    if self._failure is None:
                        log.warning("%s: cannot upload %s (%s); it stays staged and is tried again",
                                    self._where, path, failure.strerror or failure)
                    self._failure = failure
                    self._retry_at = self.clock.monotonic() + RETRY_SECONDS
                    self._queue.append(path)
                elif staged.version == version and not staged.writing:
                    self._failure = None
                    del self._waiting[path]
                    self._bytes -= staged.size
                    self.files.remove(path)
                else:
                    self._failure = None
                    if path not in self._queue:
                        staged.since = self.clock.monotonic()
                        self._queue.append(path)    # written again meanwhile: its last bytes
                self._changed.notify_all()

    def _due(self, path: str) -> float:
        """(With the lock held.) When the object may be uploaded: UPLOAD_AFTER
        after it was queued, at once while someone drains or the staging area
        is over a quarter of its limit."""
        if self._draining or self._bytes > self._limit // 4:
            return 0.0
        return self._waiting[path].since + UPLOAD_AFTER

    def drain(self) -> None:
        """Wait until every staged object is in the bucket; the upload error
        if uploads fail (the objects stay staged). Each is tried again at
        once: an earlier failure (an outage that is over) is not the answer."""
        with self._changed:
            self._failure = None
            self._retry_at = 0.0
            self._draining += 1
            self._ready.notify_all()
            try:
                self._wait_empty()
            finally:
                self._draining -= 1

    def _wait_empty(self) -> None:
        with self._changed:
            while self._waiting:
                if self._failure is not None and not any(s.uploading for s in self._waiting.values()):
                    failure = self._failure
                    raise OSError(failure.errno or errno.EIO,
                                  f"{len(self._waiting)} objects wait in {self.dir} to be uploaded "
                                  f"({failure.strerror or failure})", self._where)
                self._changed.wait(RETRY_SECONDS)

    def replay(self) -> int:
        """Stage again what is in the directory (a daemon killed before its
        uploads were done), dropping a tmp file that a kill cut short; how many."""
        if not os.path.isdir(self.dir):
            return 0
        found = 0
        for path in list(self.files.list("")):
            if path.endswith(TMP_SUFFIX):
                self.files.remove(path)
                continue
            with self._changed:
                staged = self._waiting.setdefault(path, _Staged())
                staged.writing += 1
            self._written(path, staged, self.files.size(path))
            found += 1
        return found

    def close(self) -> None:
        """Stop the uploaders (what is still staged stays, for the next replay)."""
        with self._changed:
            self._closing = True
            self._ready.notify_all()
            self._changed.notify_all()
            threads, self._threads = self._threads, []
        for t in threads:
            t.join()
        with self._changed:
            self._closing = False
            self._queue.extend(p for p in self._waiting if p not in self._queue)

