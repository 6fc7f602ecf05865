"""Stripe layout: which stripe a new block joins, and the ``stripes`` table.

A stripe holds up to G-1 blocks (G = ``group_size``) of one size class (a
quarter octave of the stored length, so zero-padding to the longest member
stays under 25 %), each on a different disk, and a parity file on a disk
that holds none of them. With G = C (disks) every stripe spans every disk,
like RAID-5; with G < C stripes are declustered (Golubchik & Muntz): losing
a disk costs each survivor only about (G-1)/(C-1) of a full read.

A new block joins the fullest open stripe of its class that has no member
and no parity on the block's disk, among those the one whose disks share
the fewest stripes with the block's disk; if none fits, it starts a stripe
whose parity goes to the disk sharing the fewest stripes with it (then the
one with the fewest parity files). That keeps every pair of disks sharing
about the same number of stripes and leaves few stripes open. The counters
live in memory and are recounted from the catalog at open.
"""
from __future__ import annotations

import itertools
import uuid as uuidmod
from collections import Counter
from dataclasses import astuple, dataclass
from typing import Callable, Iterable, NamedTuple, Optional

from .. import signature as sigmod
from ..archive import Archive
from ..block import HEADER_SIZE
from ..catalog import BLOCK_COLUMNS, BlockRow, Catalog, hex_of, key
from ..placement import domain_mask

STRIPE_COLUMNS = "id, parity_disk, size_class, length, state, members, disks"
STRIPES_PER_GROUP = 1024    # new stripes whose parity files share a directory
# The open stripes of size classes ({}: a list) a mount fills. IN, not BETWEEN:
# each class is then a range of the stripes_open index on members too, instead
# of every stripe of the classes (96 us -> 9 us).
OPEN_STRIPES = ("SELECT id, parity_disk, disks, members, size_class, length FROM stripes "
                "WHERE size_class IN ({}) AND members<? AND state='ok'")


def size_class(stored: int) -> int:
    """Quarter-octave class of a stored length: members of one class differ by < 25 %."""
    k = max(stored, 1).bit_length() - 1
    return 4 * k + ((stored >> (k - 2)) & 3 if k >= 2 else 0)


def _classes(stored: Iterable[int]) -> list[int]:
    """The size classes new blocks this long may join a stripe of."""
    return sorted({c + k for c in map(size_class, stored) for k in (-1, 0, 1)})


def bits(mask: int) -> list[int]:
    """The disks of a stripe's disk mask."""
    return [i for i in range(mask.bit_length()) if mask >> i & 1]


def pair(a: int, b: int) -> tuple[int, int]:
    return (a, b) if a < b else (b, a)


def disk_mask(parity_disk: int, rows: list[BlockRow]) -> int:
    """Bit i set: disk i holds a member or the parity."""
    disks = 1 << parity_disk
    for r in rows:
        disks |= 1 << r.disk
    return disks


@dataclass
class Stripe:
    id: str
    parity_disk: int
    size_class: int
    length: int
    state: str
    members: int
    disks: int          # bit i set: disk i holds a member or the parity


def add_stripes(catalog: Catalog, stripes: list[Stripe]) -> None:
    """Stripes written into the ``stripes`` table as they are (a catalog being
    rebuilt from parity headers); one already there is replaced."""
    catalog.stripe_changes += 1
    for s in stripes:
        catalog.execute(f"INSERT OR REPLACE INTO stripes ({STRIPE_COLUMNS}) VALUES (?,?,?,?,?,?,?)",
                        (key(s.id), *astuple(s)[1:]))


class Placement(NamedTuple):
    """Where a new block's parity goes."""
    stripe_id: str
    parity_disk: int
    new: bool           # a stripe started for it (no parity file yet)


class StripeLayout:
    """The ``stripes`` table and the counters that balance it: stripes shared
    by each pair of disks and parity files on each disk, per size class (so
    balanced counts are balanced bytes), and bytes over all classes (to break
    ties in classes too sparse to balance on their own). Callers hold the
    catalog lock."""

    def __init__(self, archive: Archive, catalog: Catalog):
        self.archive = archive
        self.catalog = catalog
        self.pairs: dict[int, Counter[tuple[int, int]]] = {}
        self.parities: dict[int, Counter[int]] = {}
        self.pair_bytes: Counter[tuple[int, int]] = Counter()
        self.parity_bytes: Counter[int] = Counter()
        self._group, self._ids_left = "", 0         # see new_stripe_id
        # A lone mount's open stripes by size class, as placements left them,
        # and (catalog.solo(), catalog.stripe_changes) when they were read
        # (``_open_stripes``).
        self._open: dict[int, dict[str, list]] = {}
        self._open_at: Optional[tuple[int, int, int]] = None
        self._ahead: Optional[tuple[tuple, Callable[[], list]]] = None     # see read_ahead
        self.recount()

    @property
    def width(self) -> int:
        """Most members a stripe takes: G-1, and fewer than the disks."""
        return min(self.archive.conf.group_size, len(self.archive.conf.disks)) - 1

    def stripe(self, stripe_id: str) -> Optional[Stripe]:
        rows = self.catalog.query(f"SELECT {STRIPE_COLUMNS} FROM stripes WHERE id=?", (key(stripe_id),))
        return Stripe(stripe_id, *rows[0][1:]) if rows else None

    def members(self, stripe_id: str) -> list[BlockRow]:
        return [BlockRow.of(r) for r in self.catalog.query(
            f"SELECT {BLOCK_COLUMNS} FROM blocks WHERE stripe=? ORDER BY id", (key(stripe_id),))]

    def stripe_ids(self, where: str = "", args=()) -> list[str]:
        # Sorted here, not by ORDER BY id: with it SQLite walks every stripe in
        # id order rather than the partial index stripes_dirty (webfs-internals(7)).
        return sorted(hex_of(r[0]) for r in self.catalog.query(
            f"SELECT id FROM stripes {'WHERE ' + where if where else ''}", args))

    def parity_disks(self) -> dict[str, int]:
        return {hex_of(i): disk for i, disk in self.catalog.query("SELECT id, parity_disk FROM stripes")}

    def mark_dirty(self, stripe_id: str) -> None:
        """Its parity may disagree with the catalog: reconciled at the next open or repair."""
        self.changed()
        self.catalog.execute("UPDATE stripes SET state='dirty' WHERE id=?", (key(stripe_id),))

    def agreed(self, stripe_id: str, parity_disk: int, rows: list[BlockRow]) -> None:
        """Its parity file now lists exactly these members."""
        self.changed()
        self.catalog.execute(
            "UPDATE stripes SET state='ok', length=?, members=?, disks=? WHERE id=?",
            (max(r.stored for r in rows), len(rows), disk_mask(parity_disk, rows), key(stripe_id)))

    def dropped(self, stripe: Stripe) -> None:
        """A stripe with no member left goes (its parity file is removed by the caller)."""
        self.changed()
        self.catalog.execute("DELETE FROM stripes WHERE id=?", (key(stripe.id),))
        self.counters(stripe.size_class)[1][stripe.parity_disk] -= 1
        self.parity_bytes[stripe.parity_disk] -= stripe.length

    def member_left(self, row: BlockRow) -> None:
        """A member leaves its stripe: its disk shares the stripe with the others no more."""
        stripe = self.stripe(row.stripe)
        if stripe is not None:
            pairs, _ = self.counters(stripe.size_class)
            for x in bits(stripe.disks):
                pairs[pair(row.disk, x)] -= 1
                self.pair_bytes[pair(row.disk, x)] -= row.stored

    def recount(self) -> None:
        """Recount, from the catalog, the stripes each pair of disks shares and
        the parity files on each disk, per size class."""
        self.changed()
        for counter in (self.pairs, self.parities, self.pair_bytes, self.parity_bytes):
            counter.clear()
        for cls, disks, parity_disk, n, length in self.catalog.query(
                "SELECT size_class, disks, parity_disk, COUNT(*), SUM(length) FROM stripes "
                "GROUP BY size_class, disks, parity_disk"):
            pairs, parities = self.counters(cls)
            for p in itertools.combinations(bits(disks), 2):
                pairs[p] += n
                self.pair_bytes[p] += length
            parities[parity_disk] += n
            self.parity_bytes[parity_disk] += length

    def counters(self, cls: int) -> tuple[Counter[tuple[int, int]], Counter[int]]:
        pairs = self.pairs.get(cls)
        if pairs is None:               # not setdefault: two new Counters per new block otherwise
            pairs = self.pairs[cls] = Counter()
            self.parities[cls] = Counter()
        return pairs, self.parities[cls]

    def pair_counts(self) -> dict[tuple[int, int], int]:
        """Stripes shared by each pair of configured disks."""
        total: Counter[tuple[int, int]] = sum(self.pairs.values(), Counter())
        return {p: total[p] for p in itertools.combinations(self.archive.disk_indexes, 2)}

    def place(self, rows: list[BlockRow]) -> list[Optional[Placement]]:
        """Choose the stripe each new block joins (or start one), in order, and
        record it in the catalog; None for a block no other disk can take the
        parity of. The open stripes are read once and the catalog written once
        per table, however many blocks come (a chunk of an import)."""
        width, volumes = self.width, self.archive.volumes
        draining = {i.index for i in self.archive.conf.disks if i.weight <= 0}
        room = self.archive.has_room        # for a parity file: its length and a header
        open_ = self._open_stripes(_classes(r.stored for r in rows), width)
        joined: dict[str, list] = {}        # existing stripes: [members, disks, length] added
        started: dict[str, list] = {}       # new stripes, as open_ has them
        placed: list[Optional[Placement]] = []
        try:
            for row in rows:
                placed.append(self._place(row, open_, joined, started, volumes, draining, room))
                if placed[-1] is not None:
                    row.stripe = placed[-1].stripe_id
            self._record(rows, placed, joined, started)
        except BaseException:
            self._open_at = None        # placed in memory, maybe not in the catalog: read again
            raise
        return placed

    def _record(self, rows: list[BlockRow], placed: list[Optional[Placement]], joined: dict[str, list],
                started: dict[str, list]) -> None:
        """``place``'s choices written into the catalog, once per table."""
        # (A statement with no rows is not sent: a small file's block joins a
        # stripe or starts one, and its row is inserted after, so one of three.)
        changes = (
            ("UPDATE stripes SET members=members+?, disks=disks|?, length=MAX(length, ?) WHERE id=?",
             [(*added, key(stripe_id)) for stripe_id, added in joined.items()]),
            ("INSERT INTO stripes (id, parity_disk, size_class, length, members, disks) VALUES (?, ?, ?, ?, ?, ?)",
             [(key(stripe_id), p, cls, length, members, disks)
              for stripe_id, (p, disks, members, cls, length) in started.items()]),
            ("UPDATE blocks SET stripe=? WHERE id=?",       # (id 0: not inserted yet)
             [(key(r.stripe), r.id) for r, p in zip(rows, placed) if p is not None and r.id]))
        for sql, values in changes:
            if values:
                self.catalog.executemany(sql, values)

    def read_ahead(self, stored: list[int]) -> None:
        """With another machine mounted, the open stripes that ``place`` of
        new blocks this long reads, sent now: their answer comes with the
        next statement the catalog waits for (the blocks' groups), a round
        trip a new block fewer (webfs-internals(7), A NEW BLOCK IN ONE ROUND
        TRIP). The next ``place`` takes them if it asks those classes and no
        stripe changed here meanwhile (another placement takes them first,
        or ``stripe_changes`` moved): then it reads them itself."""
        if self.catalog.solo() is None:
            classes = _classes(stored)
            self._ahead = ((self.catalog.stripe_changes, self.width, classes),
                           self.catalog.read_ahead(OPEN_STRIPES + self.catalog.own_stripes, classes, (self.width,)))

    def _open_stripes(self, classes: list[int], width: int) -> dict[int, dict[str, list]]:
        """The open stripes of these classes: [parity disk, disks, members,
        class, length] by id, for ``place`` to update as it fills them. A
        mount alone keeps them from one placement to the next: its own
        placements are the only change to them until ``catalog.stripe_changes``
        moves (a block moved or deleted, a stripe reconciled, a rollback) or
        another machine mounts; then they are read again. A round trip a new
        block fewer with PostgreSQL (webfs-internals(7))."""
        token = self.catalog.solo()
        at = None if token is None else (token, self.catalog.stripe_changes, width)
        ahead, self._ahead = self._ahead, None
        if at is None or at != self._open_at:
            self._open, self._open_at = {}, at
        missing = [c for c in classes if c not in self._open]
        for c in missing:
            self._open[c] = {}
        if missing:
            if ahead is not None and ahead[0] == (self.catalog.stripe_changes, width, missing):
                rows = ahead[1]()
            else:
                rows = self.catalog.query_in(OPEN_STRIPES + self.catalog.own_stripes, missing, (width,))
            for stripe_id, parity_disk, disks, members, cls, length in rows:
                self._open[cls][stripe_id.hex()] = [parity_disk, disks, members, cls, length]
        return self._open

    def changed(self) -> None:
        """Stripes changed other than by a placement: what ``_open_stripes`` keeps is read again."""
        self.catalog.stripe_changes += 1

    def unplace(self, row: BlockRow) -> None:
        """A block placed before its row was inserted, whose insert failed (or
        another machine's came first): its stripe counts it no more and is
        marked dirty, as when a member's row is deleted (the blocks_leave_stripe
        trigger), for the reconciler (``Parity.blocks_added``)."""
        self.changed()
        self.catalog.execute("UPDATE stripes SET state='dirty', members=members-1, disks=disks & ~(1 << ?) "
                             "WHERE id=?", (row.disk, key(row.stripe)))

    def new_stripe_id(self) -> str:
        """32 hex digits, random but for the first ones (the directories of its
        parity file), which a run of STRIPES_PER_GROUP new stripes shares: a
        new stripe's parity file then seldom starts a directory, which on
        ext4 costs as much again as writing the file."""
        if not self._ids_left:
            self._group = sigmod.group_of(uuidmod.uuid4().hex, self.archive.conf.depth)
            self._ids_left = STRIPES_PER_GROUP
        self._ids_left -= 1
        return self._group + uuidmod.uuid4().hex[len(self._group):]

    def _place(self, row: BlockRow, open_: dict[int, dict[str, list]], joined: dict[str, list],
               started: dict[str, list], volumes, draining: set[int], room) -> Optional[Placement]:
        """``place`` for one block, on the open stripes as the blocks before it left them."""
        d, cls = row.disk, size_class(row.stored)
        pairs, parities = self.counters(cls)

        pair_bytes = self.pair_bytes

        def shared(disks: int) -> tuple[int, int]:
            stripes = nbytes = 0
            for x in bits(disks):
                p = pair(d, x)
                stripes += pairs[p]
                nbytes += pair_bytes[p]
            return stripes, nbytes

        best = None
        same = domain_mask(self.archive.conf.disks, d)      # one member per failure domain
        # Its own size class first; a neighbouring one rather than a new stripe.
        # The stripes shared are counted only for a stripe as near and as full
        # as the best so far (they only break its ties): a few a block, not one
        # per open stripe.
        for their_cls in (cls - 1, cls, cls + 1):
            for stripe_id, (parity_disk, disks, members, _, _) in open_[their_cls].items():
                if disks & same or parity_disk not in volumes or parity_disk in draining:
                    continue
                near = (abs(their_cls - cls), -members)
                if best is not None and near > best[0][:2]:
                    continue
                rank = (*near, shared(disks), stripe_id)
                if (best is None or rank < best[0]) and room(parity_disk, row.stored + HEADER_SIZE):
                    best = (rank, stripe_id, parity_disk, their_cls)
        if best is not None:
            _, stripe_id, parity_disk, their_cls = best
            entry = open_[their_cls][stripe_id]
            disks = entry[1]
            entry[1] |= 1 << d
            entry[2] += 1
            entry[4] = max(entry[4], row.stored)
            if entry[2] >= self.width:
                del open_[their_cls][stripe_id]
            if stripe_id not in started:
                added = joined.setdefault(stripe_id, [0, 0, 0])
                added[0] += 1
                added[1] |= 1 << d
                added[2] = max(added[2], row.stored)
            new = stripe_id in started
        else:
            # Fewest stripes shared with this disk first: that puts parity where
            # blocks are scarce, so every disk ends up in as many stripes (blocks
            # plus parity files) as another; fewest parity files breaks ties.
            candidates = sorted((pairs[pair(d, p)], parities[p], self.pair_bytes[pair(d, p)],
                                 self.parity_bytes[p], p)
                                for p in volumes if not same >> p & 1 and p not in draining)
            parity_disk = next((c[-1] for c in candidates if room(c[-1], row.stored + HEADER_SIZE)), None)
            if parity_disk is None:
                return None
            stripe_id, disks = self.new_stripe_id(), 1 << parity_disk
            entry = [parity_disk, disks | 1 << d, 1, cls, row.stored]
            started[stripe_id] = entry
            if self.width > 1:
                open_[cls][stripe_id] = entry       # the same list: later members update both
            parities[parity_disk] += 1
            self.parity_bytes[parity_disk] += row.stored
            new = True
        for x in bits(disks):
            pairs[pair(d, x)] += 1
            self.pair_bytes[pair(d, x)] += row.stored
        return Placement(stripe_id, parity_disk, new)
