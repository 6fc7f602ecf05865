"""GroupCommit without a kernel: requests that wait together share a commit,
each hears its own commit's failure, and none returns before a commit that
began after it asked."""
import threading
import time

import pytest
import trio
import trio.testing

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


def test_jobs_of_requests_that_arrive_together_run_in_one_trip_before_its_commit():
    """A close gives its store as a job: the jobs of closes that wait together
    run in one worker trip, each before the commit that holds it; each caller
    gets its own result, and a failed job is heard by its caller alone."""
    from webfs.groupcommit import HANDOFFS
    log = []

    def commit():
        log.append("commit")
        time.sleep(0.05)                # not a wait: a slow commit, so the closes gather

    gc = GroupCommit(commit)
    results = {}

    def job(i):
        def run():
            log.append(i)
            if i == 7:
                raise OSError(5, "Input/output error")
            return i * 10
        return run

    async def close(i):
        try:
            results[i] = await gc.commit(job(i))
        except OSError as exc:
            results[i] = exc.errno

    before = sum(HANDOFFS.values())

    async def main():
        async with trio.open_nursery() as n:
            for i in range(10):
                n.start_soon(close, i)

    trio.run(main)
    assert results == {i: (5 if i == 7 else i * 10) for i in range(10)}
    assert sum(HANDOFFS.values()) - before == gc.commits <= 2        # trips, not jobs
    assert log.count("commit") == gc.commits
    # Every job ran before the commit of its trip.
    assert log[-1] == "commit" and all(log.index(i) < len(log) - 1 for i in range(10))


def test_a_close_alone_stores_and_commits_on_the_loop_with_no_hand_off():
    """commit_here runs the job and the commit at once, on the loop, when no
    commit runs or waits and nothing is away in another thread; a failed job
    is heard by its caller and the commit still ran."""
    from webfs.groupcommit import HANDOFFS
    log = []
    gc = GroupCommit(lambda: log.append(("commit", threading.current_thread().name)))

    def failing():
        log.append("job")
        raise OSError(28, "No space left on device")

    async def main():
        before = sum(HANDOFFS.values())
        assert gc.commit_here(lambda: log.append("job"))
        with pytest.raises(OSError):
            gc.commit_here(failing)
        assert sum(HANDOFFS.values()) == before

    trio.run(main)
    me = threading.current_thread().name
    assert log == ["job", ("commit", me), "job", ("commit", me)]
    assert gc.commits == gc.here == 2


def test_a_close_goes_to_a_worker_while_a_commit_runs_or_work_is_away():
    """commit_here does nothing (False) while a commit runs in a worker, while
    a trip of any request is in a worker, or while an admin operation holds
    ``away``: the loop then never waits for a lock those may hold."""
    from webfs.groupcommit import away, to_worker
    ran = []
    release = threading.Event()
    gc = GroupCommit(lambda: release.wait(10))

    async def main():
        async with trio.open_nursery() as n:
            n.start_soon(gc.commit)                     # a commit in a worker, held
            await trio.testing.wait_all_tasks_blocked()
            assert not gc.commit_here(lambda: ran.append("running"))
            release.set()
        release.clear()
        async with trio.open_nursery() as n:
            n.start_soon(to_worker, release.wait, 10)   # another request's trip
            await trio.testing.wait_all_tasks_blocked()
            assert not gc.commit_here(lambda: ran.append("trip"))
            release.set()
        with away():
            assert not gc.commit_here(lambda: ran.append("admin"))
        assert gc.commit_here(lambda: ran.append("alone"))

    trio.run(main)
    assert ran == ["alone"]


def test_commit_here_runs_the_loops_own_commit():
    """GroupCommit(commit, here=...): commit_here runs ``here`` (the store's
    commit that settles its Refs headers itself), a trip runs ``commit``."""
    log = []
    gc = GroupCommit(lambda: log.append("trip"), here=lambda: log.append("here"))

    async def main():
        assert gc.commit_here(lambda: None)
        await gc.commit()

    trio.run(main)
    assert log == ["here", "trip"]
