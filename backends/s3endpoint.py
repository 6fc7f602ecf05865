"""The health of one S3 endpoint: up or down, the probe that finds it back,
and requests with a deadline (hedged reads).

Down after a failed request: every request fails at once (logged once per
outage), so reads are served from parity and writes go to the other disks
without waiting. A probe (a thread of its own, never a caller) asks a down
endpoint again every ``DOWN_SECONDS``. A read with a deadline (``within``)
runs in a worker (daemon threads: a hung request never holds up the end of
the process); its caller stops waiting at the deadline (``Late``) and the
answer is dropped.

Time is read from a ``webfs.locks.Clock`` (``SYSTEM_CLOCK`` unless given
another): a test moves a manual clock past a down period or a deadline
instead of sleeping through it.
"""
from __future__ import annotations

import concurrent.futures
import logging
import queue
import threading
from typing import Callable

from ..locks import SYSTEM_CLOCK, Clock
from .. import lockorder

log = logging.getLogger(__name__)

DOWN_SECONDS = 3.0                      # a down endpoint is asked again (by a probe) this often
HEDGE_SECONDS = 1.5                     # a block or parity read not answered by then is served through parity
PRESENT_SECONDS = 5.0                   # present()'s listing not answered by then: the endpoint is down


class EndpointDown(OSError):
    """The endpoint did not answer (refused, timed out): the disk is unreachable."""


class Late(Exception):
    """A request was not answered within its deadline (it goes on in the background)."""


class Endpoint:
    """Up or down, for one disk's endpoint; ``probe()`` raises unless it answers."""

    def __init__(self, where: str, probe: Callable[[], None], workers: int, clock: Clock = SYSTEM_CLOCK):
        self.where = where
        self.clock = clock
        self._probe = probe
        self._down_until = 0.0          # 0: up; else down, not probed before then (clock.monotonic())
        self._answered = False          # it answered once: an outage is worth a log line
        self._probing = False
        self._lock = lockorder.lock("s3 endpoint")
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._workers = workers
        self._started = 0

    @property
    def down(self) -> bool:
        """Known down (the last request failed, no probe found it back since)."""
        return self._down_until != 0.0

    def up(self) -> bool:
        """May a request go to it now? When down, starts a probe if one is due; never waits."""
        if not self._down_until:
            return True
        with self._lock:
            if self._probing or self.clock.monotonic() < self._down_until:
                return False
            self._probing = True
        threading.Thread(target=self.ask_now, name="webfs-endpoint-probe", daemon=True).start()
        return False

    def ask_now(self) -> bool:
        """The probe, run in the caller, whenever it is due: the background
        one's, and a caller's that must know before it goes on (an unmount,
        whose records would miss a disk given up a moment ago for a late read)."""
        try:
            self._probe()
        except Exception:
            with self._lock:
                self._down_until = self.clock.monotonic() + DOWN_SECONDS
                self._probing = False
            return False
        with self._lock:
            was_down, self._down_until, self._probing = self.down, 0.0, False
        if was_down:
            log.warning("%s: endpoint answers again", self.where)
        return True

    def failed(self, why: str) -> None:
        """A request found it unreachable: down from now (said once per outage,
        and only of an endpoint that answered before: one that never did is
        reported by whoever asked, mkfs or mount)."""
        with self._lock:
            first = not self._down_until and self._answered
            self._down_until = self.clock.monotonic() + DOWN_SECONDS
        if first:
            log.error("%s: endpoint down (%s); reads come from parity, writes go to other disks",
                      self.where, why)

    def answered(self) -> None:
        self._answered = True

    def within(self, seconds: float, request: Callable):
        """``request()``'s answer, or ``Late`` after ``seconds`` by the clock (the
        request goes on in a worker and its answer is dropped)."""
        future: concurrent.futures.Future = concurrent.futures.Future()
        answered = lockorder.condition("s3 answer")     # this request's: no other caller woken
        with self._lock:
            if self._started < self._workers:
                self._started += 1
                threading.Thread(target=self._work, name="webfs-endpoint-read", daemon=True).start()
        deadline = self.clock.monotonic() + seconds
        self._jobs.put((future, request, answered))
        with answered:
            while not future.done() and self.clock.monotonic() < deadline:
                self.clock.wait(answered, deadline)
        if not future.done():
            future.cancel()             # not started yet: no worker takes it up
            raise Late(f"no answer within {seconds:g} s")
        return future.result()

    def _work(self) -> None:
        while True:
            future, request, answered = self._jobs.get()
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(request())
            except BaseException as exc:
                future.set_exception(exc)
            with answered:
                answered.notify()
