"""The event loop's trips to worker threads: each one counted by the request
that makes it (``to_worker``), and the group commit, by which requests that
arrive together share one catalog commit and one JOURNAL append in one trip.

A hand-off (the loop gives a function to a worker thread and is woken when
it ends) costs two wake-ups, which a busy machine delays: ``HANDOFFS``
counts them by the FUSE request that made them (``REQUEST``, set by
``webfs.fs`` as each request starts; "other" for the mount's own periodic
work), read beside the request counts from the root's
``user.webfs.handoffs`` xattr.

A request that changed the catalog calls ``await commits.commit()`` and
returns once a commit that began after its changes has ended (a close gives
it the store of its file as a job, so the store and the commit are one trip,
shared by the closes that arrive together): then what it
did is in the catalog's WAL and in the JOURNAL, so it survives ``kill -9``
as before. A commit starts as soon as the previous one ends; every request
that arrived meanwhile waits for that next one, together. The event loop
never waits on the commit itself (the catalog lock it takes is held only for
the WAL write; the JOURNAL appends happen outside it), except a close's
``commit_here``: when no commit runs or waits and nothing of this process is
in another thread (``away``), a small file's store and its commit run on the
loop at once, which is quicker than the trip's two wake-ups and waits for no
lock (no other thread holds one of the store's).
"""
from __future__ import annotations

import contextlib
import contextvars
import functools
from typing import Callable, Iterator, Optional

import trio

REQUEST: contextvars.ContextVar[str] = contextvars.ContextVar("webfs_request", default="other")
HANDOFFS: dict[str, int] = {}
_AWAY: set[object] = set()  # work now in other threads that may hold a store's lock (set.add is atomic)


@contextlib.contextmanager
def away() -> Iterator[None]:
    """Around work the loop hands to another thread (a trip, an admin
    operation): while any runs, no store runs on the loop (``commit_here``)."""
    token = object()
    _AWAY.add(token)
    try:
        yield
    finally:
        _AWAY.discard(token)


async def to_worker(fn, *args, limiter: Optional[trio.CapacityLimiter] = None):
    """``fn(*args)`` in a worker thread, counted as one hand-off of the request that asks."""
    name = REQUEST.get()
    HANDOFFS[name] = HANDOFFS.get(name, 0) + 1
    with away():
        return await trio.to_thread.run_sync(functools.partial(fn, *args), limiter=limiter)


class _Job:
    """Work a request gives the next commit's trip, run just before the commit."""

    def __init__(self, fn: Callable[[], object]):
        self.fn = fn
        self.result: object = None
        self.error: Optional[Exception] = None


class _Batch:
    def __init__(self) -> None:
        self.done = trio.Event()
        self.error: Optional[BaseException] = None
        self.jobs: list[_Job] = []


class GroupCommit:
    """Commits shared by the requests that wait for them at the same time."""

    def __init__(self, commit: Callable[[], None], here: Optional[Callable[[], None]] = None):
        self._commit = commit
        self._commit_here = here or commit          # the commit that commit_here runs, on the loop
        self._pending: Optional[_Batch] = None      # the batch the next commit takes
        self._running = False
        self._ended = trio.Event()                  # set when a running commit ends
        self.commits = 0                            # counts, for tests and benchmarks
        self.joined = 0
        self.here = 0                               # commits run on the loop (commit_here)

    async def commit(self, before: Optional[Callable[[], object]] = None):
        """Return once a commit that began after this call has ended. ``before``,
        if given, runs in the same worker trip just before that commit (after
        the jobs of the requests that asked earlier): its result is returned,
        its error raised to this caller alone (the commit goes on for the
        others, with what the job changed before it failed)."""
        if self._pending is None:
            self._pending = _Batch()
        batch = self._pending
        job = None
        if before is not None:
            job = _Job(before)
            batch.jobs.append(job)
        self.joined += 1
        while not batch.done.is_set():
            if self._running:
                await self._ended.wait()
                continue
            # Nobody commits: this request runs the pending batch (its own).
            self._running = True
            running, self._pending = self._pending, None
            try:
                await to_worker(self._run_trip, running.jobs)
            except BaseException as exc:        # every request of the batch hears it
                running.error = exc
                # Requests that changed the catalog while it ran may have lost
                # their changes to its rollback: they hear it too, not a success.
                if self._pending is not None:
                    self._pending.error = exc
                    self._pending.done.set()
                    self._pending = None
            finally:
                self.commits += 1
                self._running = False
                running.done.set()
                ended, self._ended = self._ended, trio.Event()
                ended.set()
        if batch.error is not None:
            raise batch.error
        if job is None:
            return None
        if job.error is not None:
            raise job.error
        return job.result

    def commit_here(self, before: Callable[[], object]) -> bool:
        """Run ``before`` and a commit on the loop, now, if nothing else would
        have to wait for it or could hold what it takes: no commit running or
        queued and no trip in a worker. False (nothing done) otherwise."""
        if self._running or self._pending is not None or _AWAY:
            return False
        self._running = True
        job = _Job(before)
        try:
            self._run_trip([job], self._commit_here)
        finally:
            self.commits += 1
            self.joined += 1
            self.here += 1
            self._running = False
            ended, self._ended = self._ended, trio.Event()
            ended.set()
        if job.error is not None:
            raise job.error
        return True

    def _run_trip(self, jobs: list[_Job], commit: Optional[Callable[[], None]] = None) -> None:
        for job in jobs:
            try:
                job.result = job.fn()
            except Exception as exc:
                job.error = exc
        (commit or self._commit)()
