"""Which disk is a placement group's home: weighted rendezvous hashing.

A placement group (one leaf directory of the signature tree) goes to the
disk with the highest score ``weight / -ln(u)``, where ``u`` in (0, 1) is
a hash of the group and the disk's uuid (weighted highest-random-weight
hashing). Adding a disk moves only the groups that now score highest on it
(about 1/(C+1) of them for equal weights); removing one moves only its own.
The catalog's group map records where each group actually is; cooling may
move a group away from its home.
"""
from __future__ import annotations

import math
from typing import Iterable, Optional, Sequence

import xxhash

from .signature import group_dir


def score(group: str, disk_uuid: str, weight: float) -> float:
    h = xxhash.xxh3_64_intdigest(f"{group}/{disk_uuid}".encode())
    u = (h + 0.5) / 2.0 ** 64          # in (0, 1), never 0 or 1
    return weight / -math.log(u)


def ranked_disks(group: str, disks: Iterable[tuple[int, str, float]]) -> list[int]:
    """Disk indexes in order of preference for a group: (index, uuid, weight) in."""
    scored = [(score(group, uuid, weight), index) for index, uuid, weight in disks if weight > 0]
    return [index for _, index in sorted(scored, reverse=True)]


def first_disk(ranked: list[int], mapped: Optional[int], present) -> Optional[int]:
    """Where a new block of a group goes: the disk the catalog maps the group
    to, else the first present disk of its ranking (its home, while present)."""
    return mapped if mapped is not None else next((d for d in ranked if d in present), None)


def home_disks(group: str, disks: Iterable[tuple[int, str, float]], mapped: Optional[int], present,
               maps: dict[str, int]) -> list[int]:
    """The present disks for a new block of a group, best first: the disk the
    catalog maps it to (``mapped``) or this chunk did (``maps``), then its
    ranking. A group not mapped whose block goes to its home is mapped there,
    in ``maps``: the caller writes a chunk's at once (``set_group_disks``)."""
    ranked = ranked_disks(group, disks)
    mapped = maps.get(group) if mapped is None else mapped
    first = first_disk(ranked, mapped, present)
    if mapped is None and first is not None and first == ranked[0]:
        maps[group] = first
    order = ([first] if first is not None else []) + [d for d in ranked if d != first]
    return [d for d in order if d in present]


def home_disk(group: str, disks: Sequence[tuple[int, str, float]]) -> int:
    ranked = ranked_disks(group, disks)
    if not ranked:
        raise ValueError("no disk with a positive weight")
    return ranked[0]


def domain_mask(disks: Iterable, index: int) -> int:
    """Bit i set for every disk i in the failure domain of disk ``index`` (itself
    included): a parity stripe takes at most one of them (``DiskInfo`` in)."""
    disks = list(disks)
    mine = next((d.failure_domain for d in disks if d.index == index), None)
    return sum(1 << d.index for d in disks if d.failure_domain == mine) | 1 << index


__all__ = ["score", "ranked_disks", "first_disk", "home_disk", "domain_mask", "group_dir"]
