"""Group commit for the event loop: requests that arrive together share one
catalog commit and one JOURNAL append, run in a worker thread.

A request that changed the catalog calls ``await commits.commit()`` and
returns once a commit that began after its changes has ended: then what it
did is in the catalog's WAL and in the JOURNAL, so it survives ``kill -9``
as before. A commit starts as soon as the previous one ends; every request
that arrived meanwhile waits for that next one, together. The event loop
never waits on the commit itself (the catalog lock it takes is held only for
the WAL write; the JOURNAL appends happen outside it).
"""
from __future__ import annotations

from typing import Callable, Optional

import trio


class _Batch:
    def __init__(self) -> None:
        self.done = trio.Event()
        self.error: Optional[BaseException] = None


class GroupCommit:
    """Commits shared by the requests that wait for them at the same time."""

    def __init__(self, commit: Callable[[], None]):
        self._commit = commit
        self._pending: Optional[_Batch] = None      # the batch the next commit takes
        self._running = False
        self._ended = trio.Event()                  # set when a running commit ends
        self.commits = 0                            # counts, for tests and benchmarks
        self.joined = 0

    async def commit(self) -> None:
        if self._pending is None:
            self._pending = _Batch()
        batch = self._pending
        self.joined += 1
        while not batch.done.is_set():
            if self._running:
                await self._ended.wait()
                continue
            # Nobody commits: this request runs the pending batch (its own).
            self._running = True
            running, self._pending = self._pending, None
            try:
                await trio.to_thread.run_sync(self._commit)
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
