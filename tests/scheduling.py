"""Which test file each of make test's two xdist workers runs next
(``--dist loadfile``): the longest first, and only when the worker is out of
work, so that the run does not end with one long file on one worker while
the other idles.

xdist's own order is by number of tests, and it hands a worker its next file
while two tests of the current one are still to run: with tests of half a
minute, the last long file could wait behind them while the other worker
had nothing left. Here a worker gets its next file when one test of its
current file is left (the worker holds its last test until it knows what
comes after it, for the teardown of fixtures: that is when it would stall),
and the files go longest first (LPT): the many short ones come last and
fill the gap between the workers' ends. The length of a file is its tier's
(a t5 file crashes and remounts, a t1 file computes) and, within a tier,
the files measured the longest (LONGEST, from ``--durations``); a new file
needs no entry, it only runs in its tier's place."""
from __future__ import annotations

import pytest
from xdist.scheduler import LoadFileScheduling

# The files of the 40 slowest tests of a make test on an idle machine
# (--durations=40, 27 Nov 2026: seconds of those tests, summed by file;
# webfs-internals(7), TEST SUITE TIME). Only their order within a tier
# matters; a file not here counts as 0 in its tier, and the files of one
# weight keep xdist's order (the most tests first).
LONGEST = {
    "t5_s3_faults.py": 72, "t5_mount_faults.py": 43, "t5_import.py": 24, "t5_soak.py": 22,
    "t5_daemon_races.py": 17, "t5_fsx.py": 13, "t5_rebalance.py": 10, "t5_warc.py": 9,
    "t5_warc_export.py": 8,
    "t4_pg_catalog.py": 64, "t4_recover_tools.py": 62, "t4_rebalance.py": 50, "t4_mount.py": 37,
    "t4_replay.py": 37, "t4_s3_writebehind.py": 35, "t4_s3_mount.py": 35, "t4_bench.py": 29,
    "t4_pg_multimount_s3.py": 28, "t4_cooling.py": 27, "t4_warc.py": 10,
    "t2_parity.py": 11, "t2_store.py": 8,
}


def weight(scope: str) -> tuple[int, float]:
    """The sort key of a test file (a loadfile scope: its path), heaviest highest."""
    name = scope.rsplit("/", 1)[-1]
    tier = int(name[1]) if name[:1] == "t" and name[1:2].isdigit() else 0
    return tier, LONGEST.get(name, 0.0)


class LongestFirst(LoadFileScheduling):
    """--dist loadfile with the files longest first, each given to a worker
    only when it is about to run out."""

    def _assign_work_unit(self, node) -> None:
        if not getattr(self, "_ordered", False):
            for scope in sorted(self.workqueue, key=weight, reverse=True):
                self.workqueue.move_to_end(scope)
            self._ordered = True
        super()._assign_work_unit(node)

    def _reschedule(self, node) -> None:
        if node.shutting_down:
            return
        if not self.workqueue:
            node.shutdown()
            return
        # A worker runs a test only when it knows the next one: with one left,
        # it waits for this.
        if self._pending_of(self.assigned_work[node]) <= 1:
            self._assign_work_unit(node)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """The scheduler for ``--dist loadfile`` (make test); any other --dist
    keeps xdist's own."""
    if config.getoption("dist") == "loadfile":
        return LongestFirst(config, log)
    return None
