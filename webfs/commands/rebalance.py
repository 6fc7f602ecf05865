"""Changing the set of disks: ``add-disk`` (a new, empty disk),
``rebalance`` (move exactly the groups whose rendezvous home changed: about
1/(C+1) of them when one disk joins; SWAP's rebalancing without the
doubling) and ``remove-disk`` (drain a disk onto the others, then forget
it). Groups move by ``webfs.commands.moves``, whose docstring says how a
move survives a kill at any point.
"""
from __future__ import annotations

import logging
import os
import uuid as uuidmod
from collections import Counter
from typing import Iterable

from ..admin import Progress, Result, human
from ..archive import DiskInfo, read_disk_id
from ..mkfs import check_new_remote, default_domain, disk_id_text, make_disk_root, private_note
from ..backends import is_url, normalize, open_backend
from ..errors import ArchiveError, NoSpace, WebfsError
from ..placement import home_disk
from ..store import Store
from .moves import MOVER, finish_interrupted, move_block, move_group
from ..volume import BLOCKS, CONF_FILE, DISK_ID_FILE, META, PARITY

log = logging.getLogger(__name__)

REMOVED_FILE = "WEBFS-DISK.removed"


# -- moving many groups ------------------------------------------------------------

def run_moves(store: Store, progress: Progress, moves: list[tuple[str, int, int]],
              what: str) -> tuple[Counter, Counter, int, bool]:
    """Move (group, from disk, to disk) in order, each to its new home.
    Returns groups and bytes per (from, to), blocks that failed, and whether
    it was stopped before the end."""
    groups: Counter = Counter()
    nbytes: Counter = Counter()
    failed = 0
    progress.set_total(len(moves), what)
    for grp, src, dst in moves:
        if progress.stopping:
            return groups, nbytes, failed, True
        try:
            done = move_group(store, grp, dst, home=dst)
        except NoSpace as exc:
            log.warning("%s", exc)
            failed += store.catalog.block_count(grp=grp)
            progress.advance(1)
            continue
        groups[src, dst] += 1
        nbytes[src, dst] += done.bytes
        failed += done.failed
        progress.advance(1)
    return groups, nbytes, failed, False


def _moves_lines(groups: Counter, nbytes: Counter, verb: str) -> list[str]:
    return [f"  disk {src} -> disk {dst}: {n} group(s), {human(nbytes[src, dst])} {verb}"
            for (src, dst), n in sorted(groups.items())]


# -- where groups are, and where they belong ---------------------------------------

def group_locations(store: Store) -> dict[str, Counter]:
    """group -> blocks per disk, for every group that holds a block."""
    out: dict[str, Counter] = {}
    for grp, disk, n, _ in store.catalog.group_usage():
        out.setdefault(grp, Counter())[disk] = n
    return out


def placement_disks(store: Store, without: Iterable[int] = ()) -> list[tuple[int, str, float]]:
    """(index, uuid, weight) of the disks rendezvous hashing may choose."""
    skip = set(without)
    return [(d.index, d.uuid, d.weight) for d in store.conf.disks if d.index not in skip]


def plan_rebalance(store: Store) -> tuple[list[tuple[str, int, int]], int]:
    """The groups whose rendezvous home is not the one they were placed for
    (a disk joined, left or changed weight), or whose blocks are not all on
    their mapped disk (an interrupted move): (group, disk now, new disk).
    Also returns how many groups hold blocks."""
    disks = placement_disks(store)
    mapped = store.catalog.group_homes()
    located = group_locations(store)
    moves = []
    for grp in sorted(located):
        where = located[grp]
        disk, home = mapped.get(grp) or (where.most_common(1)[0][0],) * 2
        new = home_disk(grp, disks)
        if new != home:
            moves.append((grp, disk, new))
        elif set(where) != {disk}:
            moves.append((grp, disk, disk))
    return moves, len(located)


# -- operations --------------------------------------------------------------------

def rebalance(store: Store, progress: Progress, dry_run: bool = False) -> Result:
    """Move the groups whose home changed to their new home."""
    res = Result()
    with MOVER:
        if not dry_run:
            res.lines += finish_interrupted(store)
        moves, total = plan_rebalance(store)
        absent = sorted({dst for _, _, dst in moves if dst not in store.archive.volumes})
        if absent:
            raise ArchiveError(f"disk(s) {', '.join(map(str, absent))} are missing; "
                               "the groups whose home they are cannot be moved there")
        if dry_run:
            sizes: Counter = Counter()
            for grp, _, _, group_bytes in store.catalog.group_usage():
                sizes[grp] += group_bytes
            groups = Counter((src, dst) for _, src, dst in moves)
            nbytes = Counter()
            for grp, src, dst in moves:
                nbytes[src, dst] += sizes.get(grp, 0)
            stopped, failed = False, 0
        else:
            groups, nbytes, failed, stopped = run_moves(store, progress, moves, "rebalance")
    n = sum(groups.values())
    verb = "to move" if dry_run else "moved"
    res.say(f"{n} of {total} groups {verb} ({100 * n / total if total else 0:.1f}%), "
            f"{human(sum(nbytes.values()))}")
    res.lines += _moves_lines(groups, nbytes, verb)
    if stopped:
        res.say("stopped before the end; run 'webfs rebalance' again to finish")
    if failed:
        res.say(f"{failed} block(s) could not be read and stay where they are; see 'webfs scrub'")
    res.exit_code = 4 if (stopped or failed) else 0
    res.figures = {"groups_total": total, "groups_moved": n, "fraction": n / total if total else 0.0,
                   "bytes_moved": sum(nbytes.values()), "failed_blocks": failed, "stopped": stopped,
                   "dry_run": dry_run,
                   "moves": [{"from": s, "to": d, "groups": g, "bytes": nbytes[s, d]}
                             for (s, d), g in sorted(groups.items())]}
    return res


def add_disk(store: Store, progress: Progress, path: str, weight: float = 1.0) -> Result:
    """Make the directory ``path`` a new disk of the archive."""
    if weight <= 0:
        raise ArchiveError(f"a new disk needs a weight above 0, not {weight}")
    archive = store.archive
    path = normalize(path)
    for d in archive.conf.disks:
        if d.index in archive.volumes and (d.path == path or os.path.realpath(archive.volumes[d.index].root)
                                           == os.path.realpath(path)):
            raise ArchiveError(f"{path} is disk {d.index} of this archive already")
    if is_url(path):
        check_new_remote([path], archive.backend_options)
    else:
        _check_new_disk(path, archive.conf.uuid)
    with MOVER:
        make_disk_root(path, archive.backend_options)
        info = DiskInfo(max(archive.disk_indexes + [-1]) + 1, uuidmod.uuid4().hex, weight, path,
                        default_domain(path))
        open_backend(path, options=archive.backend_options).write_atomic(
            DISK_ID_FILE, disk_id_text(archive.conf, info).encode(), fsync=True)
        archive.attach(info)
        archive.save_config()
    res = Result([f"added disk {info.index} at {path} (weight {weight:g}, {private_note(path)}); "
                  "'webfs rebalance' moves the groups whose home it now is"])
    res.figures = {"index": info.index, "uuid": info.uuid, "path": path, "weight": weight}
    return res


def _check_new_disk(path: str, archive_uuid: str) -> None:
    """A new disk must be an empty directory, or what an interrupted add-disk
    or a remove-disk of this archive left: its identity and metadata files,
    no block and no parity file."""
    if os.path.exists(path) and not os.path.isdir(path):
        raise ArchiveError(f"{path}: exists and is not a directory")
    if not os.path.isdir(path):
        return
    ours = {META, DISK_ID_FILE, REMOVED_FILE, CONF_FILE, BLOCKS, PARITY}
    strangers = sorted(set(os.listdir(path)) - ours)
    if strangers:
        raise ArchiveError(f"{path}: not empty ({strangers[0]}, ...); a new disk must be an empty directory")
    if any(files for sub in (BLOCKS, PARITY) for _, _, files in os.walk(os.path.join(path, sub))):
        raise ArchiveError(f"{path}: holds blocks or parity files; a new disk must be an empty directory")
    if os.path.exists(os.path.join(path, DISK_ID_FILE)) and \
            read_disk_id(path).get("Archive") != archive_uuid:
        raise ArchiveError(f"{path}: a disk of another webfs archive")


def remove_disk(store: Store, progress: Progress, disk: int) -> Result:
    """Drain disk ``disk`` onto the others (each group to its rendezvous home
    among them), then forget it."""
    archive = store.archive
    info = archive.conf.disk(disk)
    if disk == archive.first_volume.index:
        raise ArchiveError(f"disk {disk} holds the catalog and cannot be removed")
    if len(archive.conf.disks) < 2:
        raise ArchiveError("the archive's only disk cannot be removed")
    if not any(d.weight > 0 for d in archive.conf.disks if d.index != disk):
        raise ArchiveError(f"every other disk has weight 0: nothing could take disk {disk}'s blocks; "
                           "give one a weight above 0 in webfs.conf first")
    res = Result()
    with MOVER:
        res.lines += finish_interrupted(store)
        if info.weight:
            info.weight = 0.0                        # new groups no longer choose it
            archive.save_config()
        disks = placement_disks(store, without=[disk])
        on_disk = {g for g, where in group_locations(store).items() if disk in where}
        on_disk |= {g for g, (d, _) in store.catalog.group_homes().items() if d == disk}
        moves = [(g, disk, home_disk(g, disks)) for g in sorted(on_disk)]
        groups, nbytes, failed, stopped = run_moves(store, progress, moves, f"draining disk {disk}")
        if not stopped:
            stopped = _move_parity_off(store, progress, disk)
        left = store.catalog.block_count(disk=disk) + store.protection.files_on(disk)
        res.say(f"moved {sum(groups.values())} group(s), {human(sum(nbytes.values()))}, off disk {disk}")
        res.lines += _moves_lines(groups, nbytes, "moved")
        if stopped or left:
            why = "stopped before the end" if stopped else f"{left} block(s) could not be moved"
            res.say(f"{why}; disk {disk} takes no new blocks; run 'webfs remove-disk {disk}' again to finish")
            res.exit_code = 4
        else:
            _forget(store, disk)
            res.say(f"disk {disk} is no longer part of the archive; its directory {info.path} "
                    f"holds no blocks (its identity is kept in {REMOVED_FILE})")
    res.figures = {"disk": disk, "groups_moved": sum(groups.values()), "bytes_moved": sum(nbytes.values()),
                   "blocks_left": left, "failed_blocks": failed, "stopped": stopped}
    return res


def _move_parity_off(store: Store, progress: Progress, disk: int) -> bool:
    """Put the members of every stripe whose parity is on ``disk`` (which takes
    no new parity: its weight is 0) in other stripes; the emptied stripes'
    parity files go. Returns whether it was stopped before the end."""
    rows = list(store.catalog.blocks("stripe IN (SELECT id FROM stripes WHERE parity_disk=?)", (disk,)))
    progress.set_total(len(rows), f"moving parity off disk {disk}")
    for row in rows:
        if progress.stopping:
            return True
        try:
            move_block(store, row, row.disk, restripe=True)
        except (WebfsError, OSError) as exc:
            log.error("block %s keeps its stripe with parity on disk %d: %s", row.block_name, disk, exc)
        progress.advance(1)
    return False


def _forget(store: Store, disk: int) -> None:
    archive = store.archive
    vol = archive.volumes.get(disk)
    with store.catalog.lock:
        store.catalog.forget_groups_on(disk)
        store.commit()
    archive.detach(disk)
    archive.save_config()
    if vol is not None:
        try:
            ident = vol.backend.read(DISK_ID_FILE)
            vol.backend.write_atomic(REMOVED_FILE, ident + b"Removed: from the archive by webfs remove-disk\n")
            vol.backend.remove(DISK_ID_FILE)
            vol.backend.remove(CONF_FILE)
        except OSError as exc:
            log.warning("disk %d is forgotten, but its identity files could not be changed: %s", disk, exc)
