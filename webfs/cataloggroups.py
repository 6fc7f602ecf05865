"""The ``groups`` table of the catalog: which disk each placement group is
mapped to, and the part of it kept in memory (``PlacementGroups``, a part of
``webfs.catalog.Catalog``).

Every new block asks the disk of its group. The map is kept as read, at
most GROUP_CACHE groups. A mount alone (``Catalog.solo``: SQLite's one
writer, or a PostgreSQL mount with no other machine's lease) reads the whole
table once, when it fits, and then takes a group it does not hold for one
not mapped: nobody else maps groups meanwhile, so a new block asks the
catalog nothing (a round trip each with PostgreSQL: webfs-internals(7),
POSTGRESQL ROUND TRIPS, AGAIN). The whole table holds only while the token
``solo`` gave at the read is given again: another machine's mount, once
seen, ends it for good (it may have mapped groups), and a rollback or a
change made by a statement that picks the disk itself ends it until the
next read.
"""
from __future__ import annotations

from typing import Callable, Optional

from .catalogfile import full_is_nospace
from .catalogkeys import sig_range

GROUP_CACHE = 8192        # groups whose disk is kept in memory (of 65,536 at depth 3)


class PlacementGroups:
    """The catalog's methods on placement groups (a mixin of ``Catalog``,
    which gives ``lock``, ``query``, ``query_in``, ``scalar``, ``execute``
    and ``db``)."""

    solo: Callable[[], Optional[int]]

    def forget_group_disks(self) -> None:
        """Nothing of the map kept (at the open, and after a rollback)."""
        self._groups: dict[str, Optional[int]] = {}     # group -> disk (None: not mapped), as read
        self._groups_whole: Optional[int] = None         # solo()'s token when the whole table was read
        self._groups_many = False                        # the table was found over GROUP_CACHE

    def _whole(self) -> bool:
        """Does memory hold every mapped group? Read now, if this mount is
        alone and the table was not found too large."""
        token = self.solo()
        if token is None or self._groups_many:
            return False
        if self._groups_whole == token:
            return True
        rows = self.query("SELECT grp, disk FROM groups LIMIT ?", (GROUP_CACHE + 1,))
        if len(rows) > GROUP_CACHE:
            self._groups_many = True
            return False
        self._groups = dict(rows)
        self._groups_whole = token
        return True

    def group_disk(self, grp: str) -> Optional[int]:
        """The disk a group is mapped to (None: its rendezvous home). Kept in
        memory as read: every new block asks, and only this class changes it."""
        with self.lock:
            try:
                return self._groups[grp]
            except KeyError:
                if self._whole():
                    return self._groups.get(grp)    # (read just now, or not mapped)
                if len(self._groups) >= GROUP_CACHE:
                    self.forget_group_disks()
                disk = self._groups[grp] = self.scalar("SELECT disk FROM groups WHERE grp=?", (grp,))
                return disk

    def read_groups(self, groups: set[str]) -> None:
        """Read the disks of these groups into memory at once (a chunk of new
        blocks is about to ask ``group_disk`` of each)."""
        with self.lock:
            if self._whole():
                return
            todo = [g for g in groups if g not in self._groups][:GROUP_CACHE]
            if len(self._groups) + len(todo) > GROUP_CACHE:
                self.forget_group_disks()
            found = dict(self.query_in("SELECT grp, disk FROM groups WHERE grp IN ({})", todo))
            for g in todo:
                self._groups[g] = found.get(g)

    def set_group_disk(self, grp: str, disk: int, home: Optional[int] = None) -> None:
        """Map a group to a disk. With a home, that is its new rendezvous home
        (a rebalance); without, it keeps the home it had (cooling moves it away)."""
        self.set_group_disks([(grp, disk, home)])

    def set_group_disks(self, maps: list[tuple[str, int, Optional[int]]]) -> None:
        """Map groups to disks, (group, disk, home) as ``set_group_disk``, in one
        statement: a chunk of new blocks maps most of its groups (a fresh
        archive's blocks each start one), and a statement each was a twentieth
        of an import's storing thread (webfs-internals(7), WARC IMPORT SPEED,
        AGAIN)."""
        if not maps:
            return
        self.executemany("INSERT INTO groups (grp, disk, home) VALUES (?, ?, ?) "
                         "ON CONFLICT (grp) DO UPDATE SET disk=excluded.disk, "
                         "home=COALESCE(excluded.home, groups.home, groups.disk)", maps)
        with self.lock:
            self._groups.update((grp, disk) for grp, disk, _ in maps)
            if len(self._groups) > GROUP_CACHE and self._groups_whole is not None:
                self.forget_group_disks()       # the whole table no longer fits: asked per group again
                self._groups_many = True

    def group_homes(self) -> dict[str, tuple[int, int]]:
        """group -> (disk, rendezvous home when placed) of every mapped group."""
        return {g: (d, d if h is None else h)
                for g, d, h in self.query("SELECT grp, disk, home FROM groups")}

    def forget_groups_on(self, disk: int) -> None:
        """Drop the map entries of a disk that leaves the archive."""
        self.execute("DELETE FROM groups WHERE disk=?", (disk,))
        with self.lock:
            self.forget_group_disks()

    def group_accesses(self) -> list[tuple[str, str]]:
        """(group, access times as saved by set_group_heats) of every group read so far."""
        return [tuple(r) for r in self.query("SELECT grp, accesses FROM groups WHERE accesses != ''")]

    def set_group_heats(self, rows: list[tuple[str, float, str]]) -> None:
        """(group, heat, access times) of groups that hold a block; a group
        not yet mapped is mapped to the disk of one of its blocks."""
        with self.lock, full_is_nospace:
            self.db.executemany(
                "INSERT INTO groups (grp, disk, heat, accesses) "
                "SELECT ?1, disk, ?2, ?3 FROM blocks WHERE sig BETWEEN ?4 AND ?5 AND grp=?1 LIMIT 1 "
                "ON CONFLICT (grp) DO UPDATE SET heat=excluded.heat, accesses=excluded.accesses",
                [(*row, *sig_range(row[0])) for row in rows])
            if self._groups_whole is not None:
                self.forget_group_disks()       # a group not held was not mapped: now it may be
            for row in rows:
                if self._groups.get(row[0], 0) is None:
                    del self._groups[row[0]]        # mapped now, to the disk of a block
