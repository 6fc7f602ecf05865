"""Disks that go away during a mount and come back.

A disk whose directory vanishes or whose endpoint stops answering is taken
out of use (``Archive.lose``); while it is away, ``Missed`` keeps what it
missed: Refs headers behind the catalog, files of blocks released
meanwhile. ``check_disks`` notices both ways (``ask_again``, before a sync
or an unmount, at once), and a disk that answers again is taken back and
``catch_up`` puts right what it missed, without a remount. The store
records what is missed; this module owns the rest.
"""
from __future__ import annotations

import logging

from . import lockorder

log = logging.getLogger(__name__)


class Missed:
    """What disks away during a mount missed, per disk, in memory: blocks whose
    Refs header is behind the catalog, and files of released blocks still
    there (the stripes they touched are marked dirty in the catalog). A
    daemon killed meanwhile forgets it: ``webfs scrub --repair`` mends the
    Refs and stripes, ``webfs fsck --repair`` the orphan blocks."""

    def __init__(self) -> None:
        self._lock = lockorder.lock("missed")
        self._refs: dict[int, set[int]] = {}                    # disk -> block ids
        self._released: dict[int, set[tuple[str, int]]] = {}    # disk -> (sig, overflow)

    def refs(self, disk: int, block_id: int) -> None:
        with self._lock:
            self._refs.setdefault(disk, set()).add(block_id)

    def released(self, disk: int, sig: str, overflow: int) -> None:
        with self._lock:
            self._released.setdefault(disk, set()).add((sig, overflow))

    def take(self, disk: int) -> tuple[set[int], set[tuple[str, int]]]:
        with self._lock:
            return self._refs.pop(disk, set()), self._released.pop(disk, set())


def check_disks(store, ask: bool = True) -> None:
    """Notice disks that vanished (unplugged, their directory removed, an
    endpoint down), and take back those that return (an endpoint that
    answers again), putting right what they missed (``catch_up``). Without
    ``ask``, only what is known already (``webfs status``: never waits)."""
    for index, vol in list(store.archive.volumes.items()):
        if not (vol.backend.present() if ask else vol.backend.known_present()):
            store.archive.lose(index, "its root directory is gone" if vol.backend.bounded
                              else "its endpoint does not answer")
    for index, vol in list(store.archive.lost.items()) if ask else ():
        if vol.backend.present():
            take_back(store, index)


def ask_again(store) -> None:
    """Before a sync's or an unmount's writes: each endpoint found down a moment
    ago (one late read is enough) is asked again now, not at its next probe,
    and a lost disk that answers is taken back; else that disk would miss the
    MANIFEST, the catalog's copy and the lease's release. One that does not
    answer is left to the sync (which fails on what it owes the disk, or gives
    it up)."""
    for vol in list(store.archive.volumes.values()):
        if not vol.backend.known_present():
            vol.backend.answers_now()
    for index, vol in list(store.archive.lost.items()):
        if vol.backend.answers_now():
            take_back(store, index)


def take_back(store, index: int) -> None:
    """A lost disk that answers again in use again, what it missed put right."""
    store.catching_up.add(index)     # status says so until the catch-up is done
    try:
        if store.archive.regain(index) is not None:     # else taken back meanwhile, by another check
            log.warning("disk %d: %s", index, catch_up(store, index))
    finally:
        store.catching_up.discard(index)

def catch_up(store, disk: int) -> str:
    """Put right what a disk that is back missed (``Missed``): each Refs header
    from the catalog, the files of blocks released meanwhile removed, the
    stripes marked dirty reconciled; what was done, in words. A removal that
    fails now is remembered again for the next return."""
    vol = store.archive.volumes.get(disk)
    if vol is None:
        return "nothing: it is gone again"
    refs, released = store.missed.take(disk)
    headers = removed = 0
    for block_id in sorted(refs):
        with store.catalog.lock:
            row = store.catalog.block_by_id(block_id)
        if row is not None and row.disk == disk and store.mirror_refs(row):
            headers += 1
    for sig, overflow in sorted(released):
        with store.catalog.lock:
            row = store.catalog.block(sig, overflow)
            if row is not None and row.disk == disk:
                continue                # stored again since (a new block of that content)
        try:
            vol.remove_block(sig, overflow)
            removed += 1
        except OSError as exc:
            log.warning("disk %d: cannot remove released block %s~%d: %s", disk, sig, overflow, exc)
            store.missed.released(disk, sig, overflow)
    stripes = store.protection.reconcile_stale()
    store.commit()
    return (f"{headers} Refs header(s) written from the catalog, {removed} released block(s) removed, "
            f"{stripes} parity stripe(s) brought up to date")
