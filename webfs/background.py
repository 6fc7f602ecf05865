"""Work that follows a commit, done by a worker thread instead of the committer.

A commit only makes the catalog's changes durable (and appends the JOURNAL);
what may wait goes here, as S3QL's removal channel does it: released blocks
are read, XOR-ed out of their stripe's parity and removed; parity written
behind is flushed once due. The crash story is unchanged: a block reaches
this queue only after the commit that released it (a crash before its
removal leaves an orphan that fsck removes, and the stripe is marked dirty
by the catalog's trigger in that commit), and parity waiting in memory is
covered by its intent until written.

``Background(inline=True)`` does the work at once in the caller's thread
(commands and tests, which expect a commit to leave the disks settled).
"""
from __future__ import annotations

import logging
import queue
import threading
from typing import Callable, Optional

from . import lockorder

log = logging.getLogger(__name__)

Job = Callable[[], None]


class Background:
    """One worker thread and its queue of jobs, run in order."""

    def __init__(self, name: str = "webfs-background", inline: bool = False, bound: int = 10000):
        self.inline = inline
        self._queue: "queue.Queue[Optional[Job]]" = queue.Queue(bound)
        self._thread: Optional[threading.Thread] = None
        self._name = name
        self._idle = lockorder.condition("background")
        self._pending = 0

    def submit(self, job: Job, here: bool = False) -> None:
        """Queue a job for the worker. ``here``: the caller may run it itself
        (it holds no lock and nothing it waits for is held across disk I/O:
        the event loop's commit of a small file); it does when no job is
        queued or running, which keeps the jobs in order and spares the
        worker's wake-up and the GIL's hand-over to it and back."""
        if self.inline:
            job()
            return
        if here and not self._pending:
            self._run_one(job)
            return
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
            self._thread.start()
        with self._idle:
            self._pending += 1
        self._queue.put(job)

    @property
    def busy(self) -> bool:
        """Jobs submitted and not yet done (read without the lock: a hint)."""
        return self._pending > 0

    def drain(self) -> None:
        """Wait until every job submitted so far is done."""
        with self._idle:
            while self._pending:
                self._idle.wait()

    def close(self) -> None:
        if self._thread is not None:
            self.drain()
            self._queue.put(None)
            self._thread.join()
            self._thread = None

    def _run(self) -> None:
        while True:
            job = self._queue.get()
            if job is None:
                return
            try:
                self._run_one(job)
            finally:
                with self._idle:
                    self._pending -= 1
                    if not self._pending:
                        self._idle.notify_all()

    @staticmethod
    def _run_one(job: Job) -> None:
        try:
            job()
        except Exception:       # the next commit's jobs still run; fsck mends what this left
            log.exception("background work after a commit failed")
