"""GroupCommit without a kernel: requests that wait together share a commit,
each hears its own commit's failure, and none returns before a commit that
began after it asked."""
import threading
import time

import pytest
import trio

from webfs.groupcommit import GroupCommit


def test_requests_that_arrive_together_share_one_commit():
    started = []

    def commit():
        started.append(time.monotonic())
        time.sleep(0.05)                # the commit's work, not a wait

    gc = GroupCommit(commit)

    async def main():
        async with trio.open_nursery() as n:
            for _ in range(20):
                n.start_soon(gc.commit)

    trio.run(main)
    assert gc.joined == 20
    assert 1 <= gc.commits <= 2          # the first alone, the 19 behind it together


def test_a_request_waits_for_a_commit_that_began_after_it_asked():
    lock = threading.Lock()
    state = {"changes": 0, "committed": 0}

    def commit():
        with lock:
            seen = state["changes"]
        time.sleep(0.02)                # the commit's work, not a wait
        state["committed"] = max(state["committed"], seen)

    gc = GroupCommit(commit)

    async def writer():
        for _ in range(5):
            with lock:
                state["changes"] += 1
                mine = state["changes"]
            await gc.commit()
            assert state["committed"] >= mine

    async def main():
        async with trio.open_nursery() as n:
            for _ in range(4):
                n.start_soon(writer)

    trio.run(main)
    assert gc.commits < gc.joined


def test_a_failed_commit_is_heard_by_its_batch_and_the_next_one_runs():
    calls = []

    def commit():
        calls.append(1)
        if len(calls) == 1:
            raise OSError(28, "No space left on device")

    gc = GroupCommit(commit)

    async def main():
        with pytest.raises(OSError):
            await gc.commit()
        await gc.commit()               # a later commit runs and succeeds

    trio.run(main)
    assert len(calls) == 2
