"""Heat and cooling without disks: the read-rate estimator, and the cooling
procedure's choice of move on made-up surveys."""
from __future__ import annotations

import pytest

from webfs.commands.cooling import Group, Survey, apply, next_step
from webfs.heat import estimate


# -- the estimator -----------------------------------------------------------------

def test_heat_is_the_read_rate_over_the_last_k_reads():
    times = [10.0 + 0.5 * i for i in range(30)]            # 2 reads per second
    k = 20
    assert estimate(times[-k:], k, now=times[-1]) == pytest.approx(2.0)
    # Fewer reads than k: the same rate from the ones there are (a group read
    # five times is not hotter than one read twenty times at the same pace);
    # a single read gives no rate.
    assert estimate(times[:5], k, now=times[4]) == pytest.approx(2.0)
    assert estimate(times[:2], k, now=times[1]) == pytest.approx(2.0)
    assert estimate(times[:1], k, now=100.0) == 0.0


def test_a_group_that_goes_cold_loses_heat():
    k = 20
    times = [float(i) for i in range(k)]                     # 1 read/s, then nothing
    hot = estimate(times, k, now=times[-1])
    later = [estimate(times, k, now=times[-1] + idle) for idle in (1, 10, 100, 1000)]
    assert later == sorted(later, reverse=True) and later[0] <= hot
    assert later[-1] < hot / 40                              # about k / idle time
    # A pseudo-request only ever lowers the estimate.
    burst = [0.0, 0.001, 0.002]
    assert estimate(burst, k, now=0.002) <= 3 / 0.002


# -- the procedure -----------------------------------------------------------------

def _survey(groups: list[tuple[str, int, float, int]], disks=(0, 1, 2, 3)) -> Survey:
    gs = [Group(g, d, h, size, 1) for g, d, h, size in groups]
    heat = {d: 0.0 for d in disks}
    for g in gs:
        heat[g.disk] += g.heat
    return Survey(gs, heat)


def everywhere(disk, nbytes):
    return True


def test_a_balanced_archive_is_left_alone():
    sv = _survey([("a", 0, 10, 100), ("b", 1, 10, 100), ("c", 2, 11, 100), ("d", 3, 9, 100)])
    step, why = next_step(sv, 0.2, everywhere)
    assert step is None and why.startswith("balanced")


def test_the_hottest_temperature_goes_to_the_coolest_disk():
    sv = _survey([("big", 0, 20, 10000), ("small", 0, 15, 100), ("x", 1, 10, 100),
                  ("y", 2, 5, 100), ("z", 3, 8, 100)])
    step, _ = next_step(sv, 0.1, everywhere)
    assert (step.group.grp, step.target) == ("small", 2)     # most heat per byte, coolest disk
    apply(sv, step)
    assert sv.disk_heat == {0: 20, 1: 10, 2: 20, 3: 8}


def test_a_move_that_would_make_the_target_hotter_than_the_source_is_skipped():
    # One group holds nearly all the heat: wherever it goes becomes the hot disk.
    sv = _survey([("hot", 0, 100, 100), ("warm", 0, 2, 100), ("x", 1, 5, 100), ("y", 2, 6, 100),
                  ("z", 3, 7, 100)])
    step, _ = next_step(sv, 0.1, everywhere)
    assert step.group.grp == "warm"                          # "hot" fails the cost test
    apply(sv, step)
    step, why = next_step(sv, 0.1, everywhere)
    assert step is None and "no migration candidate" in why


def test_a_disk_without_room_is_passed_over():
    sv = _survey([("a", 0, 20, 100), ("b", 0, 10, 1000), ("x", 1, 1, 100), ("y", 2, 5, 100),
                  ("z", 3, 6, 100)])
    step, _ = next_step(sv, 0.1, lambda disk, nbytes: disk != 1)
    assert step.target == 2
