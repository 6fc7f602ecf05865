"""Heat: how often each placement group is read from the disks.

This module owns the heat estimate of the disk-cooling paper (Scheuermann,
Weikum & Zabback, seed 002, section 3.3) and its bookkeeping. For every
placement group it keeps the times of the last k reads that reached a disk
(not the reads a cache answered); the group's heat is the reciprocal of the
mean interarrival time over those reads, ``(n−1)·R / (t_n − t_{n−k+1})``
for n ≤ k reads, in reads per second (the paper writes k·R over the same
span; counting intervals rather than reads keeps groups read a few times
from looking twice as hot as they are). R, the blocks per request, is 1
here: a read that reaches a disk reads one block. A group read fewer than
k times has all its reads in its window; its heat is their count over the
time reads have been watched (see ``estimate``), so a group read once has
a heat too (from the first read the process sees: the watch).

**Aging.** A group that stops being read would keep its old estimate for
ever, so the paper ages heat with *pseudo-requests*: a pseudo-request at
time t' gives the estimate the window would have if t' were a read, and is
kept only when it lowers the heat. Here the pseudo-request is made when a
heat is asked for, at the time of the newest read that reached any disk
(the archive's clock of reads, not the wall clock), so a group that goes
cold while others are read loses heat continuously (about k / its idle
time) and no demon has to walk every group. Aging by the wall clock made
an idle gap (a workload that has stopped, the seconds before ``webfs cool``
runs) age hot groups far faster than cool ones: a group read 12 times a
second has a window of 1.6 s, which half a second of silence cuts by a
quarter, while a group read once in 8 s hardly changes. Cooling then saw
the hot disk cooler than it was and stopped early (the bench's hot set:
the disk holding it still took 30 % of the reads after cooling instead of
25 %). On the clock of reads, heats taken in a quiet moment compare as
they did while the reads came.

**Cost.** ``record`` is one clock read, one dict lookup and one array
append (and, once the window is full, a shift of k doubles); a few hundred
nanoseconds beside a block read of tens of microseconds. A window is an
``array('d')``: 64 bytes plus 8 per time, about 240 bytes for a full window
of 20 (a deque of float objects took about 1,240), so the windows of all
65,536 groups of a depth-3 archive stay under 25 MB with their dict, and a
group read once or twice costs about 150 bytes. The windows are
replaced whole, never changed in place, so readers in other threads (the
saver, cooling) see a whole window without a lock. The windows live in
memory and are written to the catalog's
``groups`` table (``accesses``: the times, ``heat``: the estimate when
written) at most every ``save_every`` seconds at a commit, and at every
sync, so heat survives a remount.

The temperature of a group (heat per byte) and the heat of a disk (the sum
over its groups) are worked out by ``webfs.commands.cooling``, which knows the sizes
and the disks.
"""
from __future__ import annotations

import logging
import threading
import time
from array import array
from contextlib import contextmanager
from typing import Callable, Optional

from .catalog import Catalog

log = logging.getLogger(__name__)

DEFAULT_K = 20
SAVE_EVERY = 30.0                   # seconds between writes of the windows at commits
_TINY = 1e-6                        # seconds: reads closer than this count as this far apart


def estimate(times: tuple[float, ...] | list[float], k: int, now: float,
             since: Optional[float] = None) -> float:
    """The heat of one group from the times of its last (up to k) reads:
    (n−1)/(t_n − t_1) over the n reads of its window (the paper counts k
    intervals where there are k−1; see the comment below), aged by a
    pseudo-request at ``now``.

    With ``since`` (the first read this process saw) a group whose window
    is not full gets its reads since then counted over the time since then,
    n / (now − since): a fixed k gives a cool group a window longer than the
    watch so far, so the watch is its window. Without it such a group gets
    the rate over its own reads, which is 0 for a group read once and about
    (n+1)/n too high for one read n times: in a short workload most reads of
    a Zipf law's middle and tail are of such groups, the disk holding the
    top ranks holds most of them, and cooling saw that disk balanced while
    it still took 30–41 % of the reads of four disks. Reads from before the
    watch (an earlier mount's, kept in the catalog) are not counted: they
    would stretch the watch back over time nobody was reading."""
    n = len(times)
    if since is not None and n < k:
        n = sum(1 for t in times if t >= since)
        return n / max(now - since, _TINY) if n else 0.0
    if n < 2:
        return 0.0
    # n reads span n-1 interarrival times. The paper's k/(t_n - t_{n-k+1})
    # counts k: a little high for a full window but double for a group read
    # twice, which made cool disks with many rarely read groups look hot.
    # (n-1)/span rates every group alike, whatever its count.
    observed = (n - 1) / max(times[-1] - times[0], _TINY)
    aged = (list(times) + [now])[-k:]
    pseudo = (len(aged) - 1) / max(now - aged[0], _TINY)
    return min(observed, pseudo)


class HeatTracker:
    """The last k read times of every placement group that has been read."""

    def __init__(self, catalog: Catalog, k: int = DEFAULT_K, save_every: float = SAVE_EVERY,
                 clock: Callable[[], float] = time.time):
        if k < 2:
            raise ValueError(f"heat needs k >= 2 reads per group, not {k}")
        self.catalog = catalog
        self.k = k
        self.save_every = save_every
        self.clock = clock                      # wall time: windows outlive the process
        self._windows: dict[str, array] = {}
        self._saved: dict[str, float] = {}      # group -> newest time written to the catalog
        self.latest = 0.0                       # the newest read of any group: the aging clock
        self.since: Optional[float] = None      # the first read this process saw: the watch began
        self._last_save = clock()
        # Threads whose reads are the archive's own upkeep, not a program's:
        # the mount's index keeper parses every new page once, which would
        # make every group it touches look read (and cost a window each).
        self._upkeep = threading.local()
        self._load()

    def _load(self) -> None:
        for grp, text in self.catalog.group_accesses():
            try:
                times = sorted(float(t) for t in text.split())
            except ValueError:
                log.warning("group %s: unreadable access times %r; its heat starts again", grp, text[:60])
                continue
            if times:
                self._windows[grp] = array('d', times[-self.k:])
                self._saved[grp] = times[-1]
                self.latest = max(self.latest, times[-1])

    @contextmanager
    def unrecorded(self):
        """Reads made by this thread inside are not heat (the index keeper's)."""
        self._upkeep.on = True
        try:
            yield
        finally:
            self._upkeep.on = False

    def record(self, grp: str) -> None:
        """One read of a block of this group reached a disk."""
        if getattr(self._upkeep, "on", False):
            return
        now = self.clock()
        window = self._windows.get(grp)
        if window is None:
            self._windows[grp] = array('d', (now,))
        elif len(window) < self.k:
            self._windows[grp] = window + array('d', (now,))
        else:
            self._windows[grp] = window[1:] + array('d', (now,))
        if now > self.latest:
            self.latest = now               # a race between threads costs a few microseconds here
        if self.since is None:
            self.since = now

    def heat(self, grp: str, now: Optional[float] = None) -> float:
        """A group's heat, aged to ``now`` (default: the newest read of any group)."""
        window = self._windows.get(grp)
        if window is None:
            return 0.0
        return estimate(tuple(window), self.k, self.latest if now is None else now, self.since)

    def heats(self, now: Optional[float] = None) -> dict[str, float]:
        """Every group with a heat above zero: group -> reads per second, aged
        to ``now`` (default: the newest read of any group)."""
        now = self.latest if now is None else now
        out = {}
        for grp, window in dict(self._windows).items():
            h = estimate(tuple(window), self.k, now, self.since)
            if h > 0:
                out[grp] = h
        return out

    def reads(self, grp: str) -> int:
        """Reads in the window (at most k)."""
        window = self._windows.get(grp)
        return 0 if window is None else len(window)

    def save(self) -> int:
        """Write the windows that changed since the last save into the catalog
        (the caller commits). Returns how many groups were written."""
        rows = []
        for grp, window in dict(self._windows).items():
            times = tuple(window)
            if times and self._saved.get(grp) != times[-1]:
                rows.append((grp, estimate(times, self.k, self.latest, self.since), " ".join(f"{t:.6f}" for t in times),
                             times[-1]))
        if rows:
            self.catalog.set_group_heats([r[:3] for r in rows])
            for r in rows:
                self._saved[r[0]] = r[3]
        self._last_save = self.clock()
        return len(rows)

    def save_if_due(self) -> None:
        if self.clock() - self._last_save >= self.save_every:
            self.save()


__all__ = ["HeatTracker", "estimate", "DEFAULT_K"]
