"""Moving a placement group's blocks from disk to disk: the one way a block
changes disk, which cooling, ``webfs rebalance`` and ``webfs remove-disk``
all use.

**A move**, group by group: the group is first written to ``meta/moves``
and mapped to the target (so new blocks of it go there), then each block,
under its signature lock (storing, linking and releasing wait):

1. its file is copied byte for byte to the target (atomic write, fsync),
   after checking it against its signature;
2. one catalog commit records it on the target and out of its parity
   stripe, marking that stripe dirty;
3. the old stripe's parity drops it and the protection puts it in a
   stripe again (so members and parity stay on distinct disks), commit;
4. the source copy is removed.

Readers never miss a block: ``Store.read_payload`` tries the catalog's
disk and then every other, and the source copy goes only after the target
copy is whole. **Killed at any point**, every block still has a whole copy
where the catalog says, or on the source: an extra copy (before 2 or
before 4) is removed by the next run, which reads ``meta/moves`` and moves
the group again (each step is skipped when already done), or by ``webfs
fsck --repair`` (its ``duplicate`` finding); a stripe left dirty is
reconciled when the archive is next opened; a block left out of any
stripe is put back in one by the next run.
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass, replace
from typing import Optional

from ..admin import human
from ..backends.local import TMP_SUFFIX
from ..block import HEADER_SIZE, with_refs
from ..catalog import BlockRow
from ..errors import ArchiveError, NoSpace, WebfsError
from ..signature import group_dir
from ..store import Store
from ..volume import BLOCKS, META
from .. import lockorder

log = logging.getLogger(__name__)

MOVES_FILE = f"{META}/moves"       # on the catalog's disk: "<group> <target disk>" of a move under way
MOVER = lockorder.lock("mover")    # one mover at a time in a process (the archive lock covers processes)


@dataclass
class Moved:
    blocks: int = 0
    bytes: int = 0
    failed: int = 0                 # blocks that could not be read anywhere; left where they are


def move_group(store: Store, grp: str, target: int, home: Optional[int] = None) -> Moved:
    """Move every block of a placement group to disk ``target`` and map the
    group there (with ``home``, its new rendezvous home; without, it keeps
    the one it had). Safe while the mount serves readers and writers, and
    against a kill at any point (see the module's docstring)."""
    if target not in store.archive.volumes:
        raise ArchiveError(f"cannot move group {grp} to disk {target}: the disk is not present")
    rows = list(store.catalog.blocks("grp=?", (grp,)))
    needed = sum(HEADER_SIZE + r.stored for r in rows if r.disk != target)
    if needed and not store.has_room(target, needed):
        raise NoSpace(f"disk {target} has no room for group {grp} ({human(needed)})")
    journal = store.archive.first_volume.backend
    journal.write_atomic(MOVES_FILE, f"{grp} {target}\n".encode(), fsync=True)
    with store.catalog.lock:
        store.catalog.set_group_disk(grp, target, home)
        store.commit()
    done = Moved()
    failed: set[int] = set()
    # A second pass catches a block that a writer put on the old disk while
    # the first ran (it chose the disk before the group's map changed).
    for _ in range(2):
        for row in rows:
            try:
                n = move_block(store, row, target)
            except (WebfsError, OSError) as exc:
                log.error("block %s of group %s stays on disk %d: %s", row.block_name, grp, row.disk, exc)
                failed.add(row.id)
                continue
            if n:
                done.blocks += 1
                done.bytes += n
        rows = [r for r in store.catalog.blocks("grp=?", (grp,)) if r.disk != target and r.id not in failed]
        if not rows:
            break
    done.failed = len(failed)
    journal.remove(MOVES_FILE)
    return done


def move_block(store: Store, row: BlockRow, target: int, restripe: bool = False) -> int:
    """Put one block on disk ``target`` (steps 1-4 of the module's docstring);
    finish what an interrupted move left (a stray copy, a block out of any
    stripe). With ``restripe``, a block already there changes stripe too
    (its stripe's parity is on a disk being removed). Returns the bytes copied."""
    cat = store.catalog
    vol = store.archive.volumes[target]
    with store.block_lock(row.sig):
        fresh = cat.block_again(row)
        if fresh is None:
            return 0                                    # released meanwhile (its number maybe another's now)
        copied = b""
        if fresh.disk != target or not vol.has_block(fresh.sig, fresh.overflow):
            # Its count as the catalog has it: a Refs written behind the commit may not be there yet.
            copied = with_refs(store.copy_of(fresh), fresh.refs)
            vol.write_raw(fresh.sig, fresh.overflow, copied, fsync=True)
        payload = copied[HEADER_SIZE:] if copied else None
        if fresh.disk != target or (restripe and fresh.stripe is not None):
            payload = payload or vol.read_block(fresh.sig, fresh.overflow)[1]
            with cat.lock:
                cat.move_block(fresh.id, target)
                store.commit()
            store.protection.block_removed(fresh, payload)
            fresh = replace(fresh, disk=target, stripe=None)
        if fresh.stripe is None:
            payload = payload or vol.read_block(fresh.sig, fresh.overflow)[1]
            store.protection.blocks_added([(fresh, payload)])
            store.commit()
        for disk, other in store.archive.volumes.items():
            if disk != target and other.has_block(fresh.sig, fresh.overflow):
                other.remove_block(fresh.sig, fresh.overflow)
        return len(copied)


def finish_interrupted(store: Store) -> list[str]:
    """Finish the group move a killed run left in ``meta/moves``."""
    backend = store.archive.first_volume.backend
    try:
        line = backend.read(MOVES_FILE).decode("ascii", "replace").strip()
    except FileNotFoundError:
        return []
    grp, _, target = line.partition(" ")
    # The copy the killed process was writing (its temporary file; not ours).
    for vol in store.archive.volumes.values():
        for rel in list(vol.backend.list(f"{BLOCKS}/{group_dir(grp)}")):
            if rel.endswith(TMP_SUFFIX) and not rel.endswith(f".{os.getpid()}{TMP_SUFFIX}"):
                vol.backend.remove(rel)
    if not target.isdigit() or int(target) not in store.archive.volumes:
        backend.remove(MOVES_FILE)
        return [f"forgot an interrupted move of group {grp!r} to disk {target!r}, which is not present"]
    done = move_group(store, grp, int(target))
    return [f"finished an interrupted move of group {grp} to disk {target} "
            f"({done.blocks} block(s) copied)"]
