"""webfs.locks.Clock: a manual clock stands still until advanced and wakes
whoever waits on it; the parity written behind (webfs.parity.writebehind) is
due by it, and an S3 endpoint's down periods and hedged reads
(webfs.backends.s3endpoint) are timed by it. (The lease's renewals by it: t1_lease; staged uploads:
t2_s3_staging; a disk's free-space count: t2_store.) The mount's periodic
tasks go by trio's clock: a MockClock moved by hand, the index keeper's
passes too (none while the mount's files are read or written, up to a bound)."""
from __future__ import annotations

import threading
import time
import types

import pytest
import trio
from conftest import eventually
from trio.testing import MockClock, wait_all_tasks_blocked, wait_all_threads_completed

from webfs import daemon
from webfs.mountoptions import MountOptions
from webfs.backends.s3endpoint import DOWN_SECONDS, HEDGE_SECONDS, Endpoint, Late
from webfs.errors import WebfsError
from webfs.heat import HeatTracker
from webfs.locks import SYSTEM_CLOCK, Clock
from webfs.parity.format import ParityHeader
from webfs.parity.writebehind import WRITE_BEHIND, WRITE_BEHIND_BYTES, WriteBehind

STRIPE_A, STRIPE_B = "a" * 32, "b" * 32


def test_a_manual_clock_stands_still_and_wakes_its_waiters_when_advanced():
    clock = Clock(start=500.0)
    assert clock.monotonic() == clock.time() == 500.0
    cond, woke = threading.Condition(), []

    def waiter():
        with cond:
            while clock.monotonic() < 510.0:
                clock.wait(cond, 510.0)
            woke.append(clock.monotonic())
    t = threading.Thread(target=waiter)
    t.start()
    eventually(lambda: clock.waiters == 1, "the thread waiting")
    clock.advance(4.0)
    clock.advance(6.0)
    t.join(60)
    assert woke == [510.0] and clock.waiters == 0
    with cond:
        clock.wait(cond, 505.0)         # already past: returns at once


def test_the_system_clock_is_not_advanced():
    assert abs(SYSTEM_CLOCK.time() - time.time()) < 60 and not SYSTEM_CLOCK.manual
    with pytest.raises(ValueError, match="only a manual clock"):
        SYSTEM_CLOCK.advance(1.0)


class Intents:
    """The IntentLog's side that WriteBehind uses: intents released."""

    def __init__(self):
        self.released: list[str] = []

    def done(self, stripe_id: str) -> None:
        self.released.append(stripe_id)


def test_parity_written_behind_is_due_after_it_waited_from_its_first_change():
    clock = Clock(start=0.0)
    intents = Intents()
    behind = WriteBehind(intents, clock)
    behind.hold(STRIPE_A, None, ParityHeader(STRIPE_A, 3), b"abc", 1)
    clock.advance(WRITE_BEHIND / 2)
    behind.hold(STRIPE_A, None, ParityHeader(STRIPE_A, 4), b"abcd", 1)    # waits since its first change
    behind.hold(STRIPE_B, None, ParityHeader(STRIPE_B, 3), b"xyz", 1)
    assert behind.due(WRITE_BEHIND) == []
    clock.advance(WRITE_BEHIND / 2)
    assert behind.due(WRITE_BEHIND) == [STRIPE_A]
    behind.forget(STRIPE_A)
    assert intents.released == [STRIPE_A, STRIPE_A] and behind.due(WRITE_BEHIND) == []
    behind.hold(STRIPE_A, None, ParityHeader(STRIPE_A, 0), b"\0" * (WRITE_BEHIND_BYTES + 1), 1)
    assert sorted(behind.due(WRITE_BEHIND)) == [STRIPE_A, STRIPE_B]     # past the byte bound: all


def test_a_periodic_task_runs_each_period_by_trios_clock_and_again_after_a_failure(caplog):
    """The mount's periodic tasks (Daemon.run_every) wait on trio's clock: a
    MockClock moved by hand shows each run at its period, a failed run logged
    and the next one made, without waiting a period."""
    clock = MockClock()                 # rate 0: time moves only by jump
    d = daemon.Daemon("/nonexistent/disk", "/nonexistent/mnt", MountOptions(), admin_commands={})
    runs: list[float] = []

    async def main():
        ran = trio.Event()

        def task():                     # in a worker thread, as the mount runs it
            runs.append(clock.current_time())
            trio.from_thread.run_sync(ran.set)
            if len(runs) == 1:
                raise WebfsError("disk 2 is missing (made by the test)")

        async def next_run():
            """Wait for the task's run, then for run_every to sleep again."""
            nonlocal ran
            await ran.wait()
            ran = trio.Event()
            await wait_all_threads_completed()
            await wait_all_tasks_blocked()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(d.run_every, 60.0, task, "the test's task")
            await wait_all_tasks_blocked()
            clock.jump(59.9)
            await wait_all_tasks_blocked()
            assert runs == []
            clock.jump(0.1)
            await next_run()
            clock.jump(60.0)
            await next_run()
            nursery.cancel_scope.cancel()
    trio.run(main, clock=clock)
    assert runs == [60.0, 120.0]
    assert "the test's task failed: disk 2 is missing (made by the test); it runs again in 60 s" in caplog.text


def test_the_index_keeper_waits_while_the_mount_is_written_at_most_its_busy_interval(monkeypatch):
    """Daemon._index_when_quiet: a keeper pass every KEEP_INTERVAL in which no
    file of the mount was read or written; while writes or reads keep coming,
    none until INDEX_BUSY_INTERVAL has passed since the last; the first quiet
    period after them runs one again. Listings and stats alone (a poll of
    .webfs/search) do not hold it back."""
    from webfs import fs, indexer
    clock = MockClock()
    d = daemon.Daemon("/nonexistent/disk", "/nonexistent/mnt", MountOptions(), admin_commands={})
    passes: list[float] = []
    step = indexer.KEEP_INTERVAL

    class Keeper:
        def step(self):
            passes.append(clock.current_time())
            d.store.heat.record("ab")           # a new page read to be parsed

    d.index_keeper = Keeper()
    d.store = types.SimpleNamespace(heat=HeatTracker(types.SimpleNamespace(group_accesses=lambda: [])))
    monkeypatch.setattr(fs, "REQUESTS", {})

    async def tick(writes: int = 0, request: str = "write"):
        """A period of the keeper, with this many requests answered in it."""
        fs.REQUESTS[request] = fs.REQUESTS.get(request, 0) + writes
        clock.jump(step)
        await wait_all_tasks_blocked()
        await wait_all_threads_completed()
        await wait_all_tasks_blocked()

    async def main():
        async with trio.open_nursery() as nursery:
            nursery.start_soon(d._index_when_quiet)
            await wait_all_tasks_blocked()
            await tick()
            await tick()
            assert passes == [step, 2 * step]
            busy_ticks = int(daemon.INDEX_BUSY_INTERVAL / step)
            for _ in range(busy_ticks - 1):
                await tick(writes=3)
            assert passes == [step, 2 * step], "a pass ran while the mount was being written"
            await tick(writes=3)
            bound = 2 * step + daemon.INDEX_BUSY_INTERVAL
            assert passes == [step, 2 * step, bound]
            await tick(writes=1, request="read")
            assert passes == [step, 2 * step, bound], "a pass ran while the mount was being read"
            await tick(writes=50, request="readdir")
            assert passes == [step, 2 * step, bound, bound + 2 * step]
            # The keeper's reads are no program's: no group heated by them.
            assert d.store.heat.reads("ab") == 0
            d.store.heat.record("ab")
            assert d.store.heat.reads("ab") == 1
            nursery.cancel_scope.cancel()
    trio.run(main, clock=clock)


def probes_running() -> bool:
    return any(t.name == "webfs-endpoint-probe" for t in threading.enumerate())


def test_a_down_s3_endpoint_is_probed_once_each_down_period_by_the_clock(caplog):
    """webfs.backends.s3endpoint: down after a failure; no probe before
    DOWN_SECONDS have passed by the clock, one at a time, in a thread of its
    own; a probe that fails keeps it down another period, one that answers
    makes it up."""
    clock = Clock(start=100.0)
    answers = [OSError("still down"), None]
    asked: list[float] = []

    def probe():
        asked.append(clock.monotonic())
        if answers.pop(0) is not None:
            raise OSError("still down")
    endpoint = Endpoint("s3+http://test:1/b", probe, 2, clock)
    endpoint.answered()
    endpoint.failed("refused")
    assert endpoint.down and not endpoint.up()
    assert "endpoint down (refused)" in caplog.text
    clock.advance(DOWN_SECONDS - 0.1)
    assert not endpoint.up() and asked == []
    clock.advance(0.1)
    assert not endpoint.up()                    # starts the probe; the caller never waits for it
    eventually(lambda: asked and not probes_running(), "the first probe")
    assert asked == [100.0 + DOWN_SECONDS] and endpoint.down
    assert not endpoint.up() and asked == [100.0 + DOWN_SECONDS]      # the next is a period away
    clock.advance(DOWN_SECONDS)
    assert not endpoint.up()
    eventually(lambda: not endpoint.down and not probes_running(), "the second probe finding it back")
    assert asked == [100.0 + DOWN_SECONDS, 100.0 + 2 * DOWN_SECONDS] and endpoint.up()
    assert "endpoint answers again" in caplog.text


def test_a_hedged_s3_read_is_late_by_the_clock_and_one_answered_in_time_is_not():
    """Endpoint.within: the caller waits HEDGE_SECONDS by the clock, then gives
    up (Late) while the request goes on in the worker; an answer that comes
    first is returned."""
    clock = Clock(start=0.0)
    endpoint = Endpoint("s3+http://test:1/b", lambda: None, 1, clock)
    hung, outcome = threading.Event(), []

    def caller():
        try:
            outcome.append(endpoint.within(HEDGE_SECONDS, lambda: hung.wait(120) and "slow"))
        except Late as exc:
            outcome.append(exc)
    thread = threading.Thread(target=caller)
    thread.start()
    eventually(lambda: clock.waiters == 1, "the caller waiting")
    clock.advance(HEDGE_SECONDS - 0.01)
    eventually(lambda: clock.waiters == 1, "the caller waiting again")
    assert outcome == []
    clock.advance(0.01)
    thread.join(60)
    assert len(outcome) == 1 and isinstance(outcome[0], Late), outcome
    hung.set()                                  # the one worker is free again
    assert endpoint.within(HEDGE_SECONDS, lambda: "fast") == "fast"
    assert clock.monotonic() == HEDGE_SECONDS
