"""Disk cooling: moving the hottest placement groups off the hottest disk.

This module owns the cooling procedure of Scheuermann, Weikum & Zabback
("Disk Cooling in Parallel Disk Systems", seed 002, figure 1), the
``webfs cool`` and ``webfs heat`` operations, the background step the mount
runs every ``cool_interval`` seconds, and ``measure``, the benchmark.

Heat comes from ``webfs.heat`` (reads that reached a disk, per group). A
group's temperature is its heat per byte it holds; a disk's heat is the
sum over the groups on it. One cooling step:

1. the hottest disk s is cooled only if its heat exceeds the mean disk
   heat by more than δ (the trigger);
2. its groups are tried in descending temperature (the most heat moved per
   byte copied), and each goes to the coolest other disk that takes new
   groups (weight above 0), is present, and has room for it;
3. a move is skipped when the target's heat after it would not stay below
   the source's heat before it (the paper's cost test, in the words of its
   section 4.2) — then the next group is tried, since every other target
   is hotter still;
4. groups with no observed reads are never moved.

``webfs cool`` repeats steps until one of them says stop (and prints why);
the background step makes at most one move per call, as the paper's
demon does. A moved block leaves its parity stripe and joins another
(``webfs.commands.rebalance.move_group``), so members and parity stay on distinct
disks whatever the target. The paper's other cost test (no move while the
source disk has a queue) is not made: an on-demand cool should not refuse
because the disk it is asked to cool is busy.
"""
from __future__ import annotations

import itertools
import logging
import os
import random
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Optional

from .. import admin, archive as archmod
from ..admin import Progress, Result, human
from ..block import HEADER_SIZE, percent_decode
from ..catalog import BlockRow
from ..errors import NoSpace
from ..heat import DEFAULT_K
from .rebalance import MOVER, finish_interrupted, move_group
from ..assembly import open_archive
from ..store import Store

log = logging.getLogger(__name__)

DEFAULT_DELTA = 0.2     # the paper gives no value; within 20% of the mean, a move gains little


@dataclass
class Group:
    grp: str
    disk: int
    heat: float             # reads per second
    bytes: int              # block files, headers included
    blocks: int

    @property
    def temperature(self) -> float:
        return self.heat / max(self.bytes, 1)


@dataclass
class Survey:
    """Where the heat is: every group with heat, and the heat of each disk
    that takes part in cooling (present, weight above 0)."""
    groups: list[Group]
    disk_heat: dict[int, float]

    @property
    def mean(self) -> float:
        return sum(self.disk_heat.values()) / len(self.disk_heat) if self.disk_heat else 0.0

    @property
    def ratio(self) -> Optional[float]:
        """Hottest disk's heat over the mean (None before any heat is seen)."""
        mean = self.mean
        return max(self.disk_heat.values()) / mean if mean > 0 else None

    def hottest(self) -> int:
        return max(self.disk_heat, key=lambda d: (self.disk_heat[d], -d))


def survey(store: Store) -> Survey:
    heats = store.heat.heats()
    names = sorted(heats)
    groups = []
    for i in range(0, len(names), 500):
        chunk = names[i:i + 500]
        per_group: dict[str, Counter] = {}
        sizes: Counter = Counter()
        for grp, disk, n, nbytes in store.catalog.query(
                f"SELECT grp, disk, COUNT(*), SUM(stored) + {HEADER_SIZE} * COUNT(*) FROM blocks "
                f"WHERE grp IN ({','.join('?' * len(chunk))}) GROUP BY grp, disk", chunk):
            per_group.setdefault(grp, Counter())[disk] += n
            sizes[grp] += nbytes
        for grp, where in per_group.items():
            groups.append(Group(grp, where.most_common(1)[0][0], heats[grp], sizes[grp], sum(where.values())))
    disks = {d.index: 0.0 for d in store.conf.disks if d.weight > 0 and d.index in store.archive.volumes}
    for g in groups:
        if g.disk in disks:
            disks[g.disk] += g.heat
    return Survey(groups, disks)


@dataclass
class Step:
    group: Group
    target: int


def next_step(sv: Survey, delta: float, room, moved: frozenset = frozenset()) -> tuple[Optional[Step], str]:
    """One step of the procedure on a survey: the move to make, or None and
    why there is none. ``room(disk, bytes)`` says whether a disk has room.
    Groups in ``moved`` (moved earlier in the same run) are tried last:
    moving one on again copies it twice for what one move to the final
    target would have done, but a disk made hottest by what moved onto it
    would otherwise stay hot."""
    if len(sv.disk_heat) < 2:
        return None, "fewer than two disks take part in cooling"
    if sv.mean <= 0:
        return None, "no reads have reached the disks yet: no heat to balance"
    s = sv.hottest()
    hs = sv.disk_heat[s]
    if hs <= sv.mean * (1 + delta):
        return None, (f"balanced: the hottest disk ({s}, {hs:.1f} reads/s) is within {delta:.0%} "
                      f"of the mean ({sv.mean:.1f} reads/s)")
    targets = sorted((d for d in sv.disk_heat if d != s), key=lambda d: (sv.disk_heat[d], d))
    candidates = sorted((g for g in sv.groups if g.disk == s),
                        key=lambda g: (g.grp in moved, -g.temperature))
    no_room = 0
    for g in candidates:
        for t in targets:
            if not room(t, g.bytes):
                no_room += 1
                continue
            if sv.disk_heat[t] + g.heat < hs:
                return Step(g, t), ""
            break                   # the coolest target with room is too hot; the rest are hotter
    if no_room and not any(room(t, 0) for t in targets):
        return None, f"no other disk has room to take a group of disk {s}"
    return None, (f"no migration candidate on disk {s}: moving any of its {len(candidates)} hot group(s) "
                  f"would leave the target at least as hot as disk {s} is now")


def apply(sv: Survey, step: Step) -> None:
    """Account a move in the survey."""
    g = step.group
    sv.disk_heat[g.disk] -= g.heat
    sv.disk_heat[step.target] += g.heat
    g.disk = step.target


def _heat_lines(sv: Survey) -> list[str]:
    mean = sv.mean
    return [f"  disk {d}: {h:8.1f} reads/s" + (f"  ({h / mean:.2f} x mean)" if mean else "")
            for d, h in sorted(sv.disk_heat.items())]


@admin.operation("cool")
def cool(store: Store, progress: Progress, dry_run: bool = False, max_moves: Optional[int] = None,
         delta: float = DEFAULT_DELTA) -> Result:
    """Run the cooling procedure until it says stop (``webfs cool``)."""
    res = Result()
    with MOVER:
        if not dry_run:
            res.lines += finish_interrupted(store)
        sv = survey(store)
        before = dict(sv.disk_heat)
        ratio_before = sv.ratio
        res.say("disk heat before:")
        res.lines += _heat_lines(sv)
        moves = []
        progress.set_total(max_moves, "cooling")
        while True:
            if max_moves is not None and len(moves) >= max_moves:
                why = f"made --max-moves {max_moves} move(s)"
                break
            if progress.stopping:
                why = "stopped on request"
                break
            step, why = next_step(sv, delta, store.has_room, frozenset(m["group"] for m in moves))
            if step is None:
                break
            g, src = step.group, step.group.disk
            if not dry_run:
                try:
                    done = move_group(store, g.grp, step.target)
                except NoSpace as exc:
                    why = str(exc)
                    break
                copied = done.bytes
            else:
                copied = g.bytes
            apply(sv, step)
            moves.append({"group": g.grp, "from": src, "to": step.target, "bytes": copied,
                          "blocks": g.blocks, "heat": g.heat, "temperature": g.temperature})
            res.say(f"{'would move' if dry_run else 'moved'} group {g.grp} from disk {src} to disk "
                    f"{step.target}: {g.blocks} block(s), {human(copied)}, heat {g.heat:.1f} reads/s")
            progress.advance(1)
    res.say(f"stopped: {why}")
    res.say("disk heat after:")
    res.lines += _heat_lines(sv)
    moved = sum(m["bytes"] for m in moves)
    fmt = lambda r: "-" if r is None else f"{r:.2f}"
    res.say(f"{len(moves)} group(s) {'to move' if dry_run else 'moved'}, {human(moved)}; "
            f"hottest/mean disk heat {fmt(ratio_before)} -> {fmt(sv.ratio)}")
    res.figures = {"moves": moves, "bytes_moved": moved, "reason": why, "dry_run": dry_run,
                   "delta": delta, "ratio_before": ratio_before, "ratio_after": sv.ratio,
                   "disk_heat_before": before, "disk_heat_after": dict(sv.disk_heat)}
    return res


def background_step(store: Store, delta: float = DEFAULT_DELTA) -> None:
    """What the mount runs every ``cool_interval`` seconds: at most one move,
    as the paper's demon makes; nothing while another mover runs."""
    if not MOVER.acquire(blocking=False):
        return
    try:
        for line in finish_interrupted(store):
            log.info("cooling: %s", line)
        sv = survey(store)
        step, why = next_step(sv, delta, store.has_room)
        if step is None:
            log.debug("cooling: %s", why)
            return
        done = move_group(store, step.group.grp, step.target)
        log.info("cooling: moved group %s from disk %d to disk %d (%d block(s), %s, heat %.1f reads/s)",
                 step.group.grp, step.group.disk, step.target, step.group.blocks, human(done.bytes),
                 step.group.heat)
    finally:
        MOVER.release()


@admin.operation("heat")
def heat(store: Store, progress: Progress, top: int = 10) -> Result:
    """Per-disk heat, and the hottest groups with the pages in them (``webfs heat``)."""
    sv = survey(store)
    res = Result([f"disk heat (reads that reached the disk per second, last {store.heat.k} reads "
                  "of each group):"])
    res.lines += _heat_lines(sv)
    if sv.ratio is not None:
        res.say(f"  hottest/mean {sv.ratio:.2f}")
    hot = sorted(sv.groups, key=lambda g: -g.heat)[:top]
    if hot:
        res.say("hottest groups:")
    out = []
    for g in hot:
        pages = [percent_decode(name).decode("utf-8", "replace") or sig for sig, name in store.catalog.query(
            "SELECT sig, name FROM blocks WHERE grp=? ORDER BY id LIMIT 5", (g.grp,))]
        res.say(f"  {g.grp}  disk {g.disk}  {g.heat:8.1f} reads/s  {g.temperature * 1024:8.3f} per KiB  "
                f"{g.blocks} block(s), {human(g.bytes)}")
        for p in pages:
            res.say(f"      {p}")
        out.append({"group": g.grp, "disk": g.disk, "heat": g.heat, "temperature": g.temperature,
                    "bytes": g.bytes, "blocks": g.blocks, "pages": pages})
    res.figures = {"k": store.heat.k, "disk_heat": sv.disk_heat, "ratio": sv.ratio,
                   "mean": sv.mean, "groups": out}
    return res


# -- the benchmark ----------------------------------------------------------------

def measure(root: str, pages: int = 2000, disks: int = 4, delay: float = 0.005, requests: int = 3000,
            busy: float = 0.9, s: float = 1.0, hot_disk: Optional[int] = None, delta: float = 0.05,
            k: int = DEFAULT_K, seed: int = 1) -> dict:
    """Response time of a skewed read workload before and after cooling (for
    tools/bench; the paper's figure of merit).

    Makes an archive of ``disks`` disks under ``root`` holding ``pages`` web
    pages of 10-30 KB, then opens it with every disk serving one I/O at a
    time in ``delay`` seconds (``Archive.open`` delays), so a disk with more
    than its share of reads queues them. The workload is open: ``requests``
    page reads arrive at Poisson times, each page chosen by a Zipf law
    (exponent ``s``) over a seeded shuffle of the pages, at a rate that keeps
    the disk with the most popular pages ``busy`` (0.9: busy 90% of the
    time). With ``hot_disk``, the pages on that disk take the top ranks (a
    hot collection that landed on one disk); without, the skew among disks
    is only what hashing a Zipf law gives. The first run is also the heat's
    learning phase; ``webfs cool`` runs (with ``delta``); the same run (same
    seed) is made again. Returns the figures."""
    paths = [os.path.join(root, f"disk{i}") for i in range(disks)]
    archmod.mkfs(paths)
    rng = random.Random(seed)
    store = open_archive(paths[0], holder="webfs cooling benchmark")
    try:
        words = [bytes(rng.choice(b"abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 9)))
                 for _ in range(3000)]
        for i in range(pages):
            size = rng.randint(10_000, 30_000)
            text = b"<html><body>" + b" ".join(rng.choice(words) for _ in range(size // 6))
            store.store(text[:size], name=f"/bench/page-{i}.html".encode(), pin=True)
            if i % 500 == 499:
                store.commit()
        store.commit()
    finally:
        store.close()
    store = open_archive(paths[0], holder="webfs cooling benchmark", delays={i: delay for i in range(disks)}, heat_k=k)
    try:
        rows = list(store.catalog.blocks())
        rng.shuffle(rows)
        if hot_disk is not None:
            rows.sort(key=lambda r: r.disk != hot_disk)
        weights = list(itertools.accumulate(1 / (i + 1) ** s for i in range(len(rows))))
        share = Counter()
        for row, w in zip(rows, [1 / (i + 1) ** s for i in range(len(rows))]):
            share[row.disk] += w / weights[-1]
        rate = busy / (max(share.values()) * delay)
        before = _run_workload(store, rows, weights, rate, requests, seed)
        cooled = cool(store, Progress(), delta=delta).figures
        after = _run_workload(store, rows, weights, rate, requests, seed)
    finally:
        store.close()
    return {"pages": pages, "disks": disks, "delay_ms": delay * 1e3, "requests": requests,
            "zipf_s": s, "hot_disk": hot_disk, "rate_per_s": rate, "hottest_disk_busy": busy, "k": k, "delta": delta,
            "before": before, "after": after,
            "speedup_mean": before["mean_ms"] / after["mean_ms"] if after["mean_ms"] else None,
            "moves": len(cooled["moves"]), "bytes_moved": cooled["bytes_moved"],
            "heat_ratio_before": cooled["ratio_before"], "heat_ratio_after": cooled["ratio_after"]}


def _run_workload(store: Store, rows: list[BlockRow], weights: list[float], rate: float,
                  requests: int, seed: int) -> dict:
    """Open arrivals at ``rate`` per second; response time = arrival to answer."""
    rng = random.Random(seed)
    picks = rng.choices(range(len(rows)), cum_weights=weights, k=requests)
    gaps = [rng.expovariate(rate) for _ in range(requests)]
    times: list[float] = []
    per_disk: Counter = Counter()
    lock = threading.Lock()

    def serve(row: BlockRow, arrived: float) -> None:
        fresh = store.catalog.block_by_id(row.id)
        store.read(fresh)
        done = time.monotonic()
        with lock:
            times.append(done - arrived)
            per_disk[fresh.disk] += 1

    with ThreadPoolExecutor(max_workers=128) as pool:
        due = time.monotonic()
        for pick, gap in zip(picks, gaps):
            due += gap
            pause = due - time.monotonic()
            if pause > 0:
                time.sleep(pause)
            pool.submit(serve, rows[pick], due)
    times.sort()
    q = lambda f: times[min(len(times) - 1, int(f * len(times)))] * 1e3
    return {"mean_ms": sum(times) / len(times) * 1e3, "p50_ms": q(0.5), "p90_ms": q(0.9), "p99_ms": q(0.99),
            "reads_per_disk": {d: per_disk[d] for d in sorted(per_disk)}}
