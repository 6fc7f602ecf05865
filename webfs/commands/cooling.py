"""Disk cooling: moving the hottest placement groups off the hottest disk.

This module owns the cooling procedure of Scheuermann, Weikum & Zabback
("Disk Cooling in Parallel Disk Systems", seed 002, figure 1), the
``webfs cool`` and ``webfs heat`` operations, and the background step the
mount runs every ``cool_interval`` seconds.

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
(``webfs.commands.moves``), so members and parity stay on distinct
disks whatever the target. The paper's other cost test (no move while the
source disk has a queue) is not made: an on-demand cool should not refuse
because the disk it is asked to cool is busy.
"""
from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass
from typing import Optional

from ..admin import Progress, Result, human
from ..block import percent_decode
from ..catalog import BlockRow
from ..errors import NoSpace, WebfsError
from ..store import Store
from ..volume import search_order
from .moves import MOVER, finish_interrupted, move_group

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
        for grp, disk, n, nbytes in store.catalog.group_usage(chunk):
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


def _page_of(store: Store, row: BlockRow) -> str:
    """A block's Name: hint, read from its header (the catalog keeps none), or its signature."""
    for vol in search_order(store.archive.volumes, row.disk):
        try:
            name = vol.read_header(row.sig, row.overflow).name
        except (OSError, WebfsError):
            continue
        return percent_decode(name).decode("utf-8", "replace") or row.sig
    return row.sig


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
        pages = [_page_of(store, row) for row in store.catalog.group_samples(g.grp)]
        res.say(f"  {g.grp}  disk {g.disk}  {g.heat:8.1f} reads/s  {g.temperature * 1024:8.3f} per KiB  "
                f"{g.blocks} block(s), {human(g.bytes)}")
        for p in pages:
            res.say(f"      {p}")
        out.append({"group": g.grp, "disk": g.disk, "heat": g.heat, "temperature": g.temperature,
                    "bytes": g.bytes, "blocks": g.blocks, "pages": pages})
    res.figures = {"k": store.heat.k, "disk_heat": sv.disk_heat, "ratio": sv.ratio,
                   "mean": sv.mean, "groups": out}
    return res
