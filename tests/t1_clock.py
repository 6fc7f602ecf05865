"""webfs.locks.Clock: a manual clock stands still until advanced and wakes
whoever waits on it; the parity written behind (webfs.parity.writebehind) is due by
it. (The lease's renewals by it: t1_lease; staged uploads: t2_s3_staging; a
disk's free-space count: t2_store.)"""
from __future__ import annotations

import threading
import time

import pytest
from conftest import eventually

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
