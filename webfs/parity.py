"""Declustered parity: blocks grouped into stripes, one XOR parity file per
stripe, kept current as blocks come and go, and blocks read back from their
stripe when their own disk cannot give them.

This module owns the parity file format (``WEBFS-PARITY 1``, see
webfs-format(5)), the ``stripes`` table, and the ``Parity`` protection the
store uses. Scrub (``webfs.commands.scrub``) and disk rebuild
(``webfs.commands.rebuild_disk``) build on it.

**Stripes.** A stripe holds up to G-1 blocks (G = ``group_size``) of one size
class (a quarter octave of the stored length, so zero-padding to the longest
member stays under 25 %), each on a different disk, and a parity file on a
disk that holds none of them. With G = C (disks) every stripe spans every
disk, like RAID-5; with G < C stripes are declustered (Golubchik & Muntz):
losing a disk costs each survivor only about (G-1)/(C-1) of a full read.

**Layout.** A new block joins the fullest open stripe of its class that has
no member and no parity on the block's disk, among those the one whose disks
share the fewest stripes with the block's disk; if none fits, it starts a
stripe whose parity goes to the disk sharing the fewest stripes with it
(then the one with the fewest parity files). That keeps every pair of disks
sharing about the same number of stripes and leaves few stripes open. The
counters live in memory and are recounted from the catalog at open.

**Crash safety.** A parity file's header lists exactly the members its
payload holds (the file is replaced atomically), so it never lies about
itself; it can only disagree with the catalog. That happens in two windows,
and both are marked before they open. (1) A new block's parity is rewritten
before the caller commits the catalog: its stripe id is first appended to
``meta/parity-intent`` (emptied once every such rewrite is done and
committed). (2) A released block leaves the catalog at a commit and its
parity afterwards: a trigger in the catalog marks the stripe ``dirty`` in
the same transaction. At open (when the archive is locked) every stripe in
the intent file or marked dirty is reconciled: members the parity lacks are
XOR-ed in, members the catalog no longer has are XOR-ed out (from their
block files), or the parity is recomputed from its members.

**Locks.** Order: a signature lock (the store's), the catalog lock, a stripe
lock, the intent log's lock. A stripe lock is never held while waiting for
the catalog lock.
"""
from __future__ import annotations

import itertools
import logging
import os
import re
import threading
import time
import uuid as uuidmod
from collections import Counter
from dataclasses import dataclass, replace
from contextlib import nullcontext
from typing import Callable, ContextManager, Iterable, Optional

from . import codecs, testkill
from . import signature as sigmod
from .archive import Archive
from .block import HEADER_SIZE
from .catalog import BLOCK_COLUMNS, BlockRow, Catalog
from .placement import domain_mask
from .errors import CorruptBlock, CorruptParity, DataLost, WebfsError
from .locks import KeyedLocks
from .protection import Protection
from .signature import ContentKey, SignatureFn
from .volume import META, PARITY, Volume, search_order

log = logging.getLogger(__name__)

MAGIC = "WEBFS-PARITY 1"
INTENT_FILE = f"{META}/parity-intent"
# Parity of a stripe that is not yet full is written behind, at most this many
# seconds after its last change (or when this much waits in memory): a stripe
# of G-1 small blocks costs one parity file write instead of G-1.
WRITE_BEHIND = 1.0
WRITE_BEHIND_BYTES = 64 << 20
REBUILD_MARKER = f"{META}/REBUILDING"       # on a disk whose rebuild has not finished
_HEADER_BYTES = re.compile(rb"WEBFS-PARITY 1\nHeader-Bytes: ([0-9]{1,9})\n")

Key = tuple[str, int]                       # (signature, overflow): one block
Gate = Callable[[int], ContextManager]      # disk -> held around each read of that disk


# -- the parity file format --------------------------------------------------

@dataclass(frozen=True)
class Member:
    """One block of a stripe, as its parity header lists it: enough to rebuild
    the block's header without the catalog (Refs aside)."""
    sig: str
    overflow: int
    disk: int
    stored: int
    size: int
    codec: str
    created: str
    name: str = ""

    @classmethod
    def of(cls, row: BlockRow) -> "Member":
        return cls(row.sig, row.overflow, row.disk, row.stored, row.size, row.codec,
                   row.created, row.name)

    @property
    def key(self) -> Key:
        return (self.sig, self.overflow)

    @property
    def block_name(self) -> str:
        return sigmod.block_name(self.sig, self.overflow)

    def line(self) -> str:
        return (f"Member: {self.block_name} {self.disk} {self.stored} {self.size} "
                f"{self.codec} {self.created} {self.name}").rstrip(" ")

    @classmethod
    def parse(cls, value: str, where: str) -> "Member":
        parts = value.split(" ")
        try:
            if len(parts) not in (6, 7):
                raise ValueError("wrong number of fields")
            key = ContentKey.parse(parts[0])
            disk, stored, size = int(parts[1]), int(parts[2]), int(parts[3])
            if key.disk is not None or min(disk, stored, size) < 0:
                raise ValueError("bad field")
        except ValueError:
            raise CorruptParity(f"{where}: bad Member line {value[:80]!r}") from None
        return cls(key.sig, key.overflow, disk, stored, size, parts[4], parts[5],
                   parts[6] if len(parts) == 7 else "")


@dataclass(frozen=True)
class ParityHeader:
    """The ASCII header of a parity file; ``length`` is the payload's length."""
    stripe: str
    length: int
    members: tuple[Member, ...] = ()

    def keys(self) -> set[Key]:
        return {m.key for m in self.members}

    def encode(self) -> bytes:
        body = f"Stripe: {self.stripe}\nLength: {self.length}\n" + \
            "".join(m.line() + "\n" for m in self.members)
        size = HEADER_SIZE
        while True:
            text = f"{MAGIC}\nHeader-Bytes: {size}\n{body}"
            if len(text) < size:
                return (text + " " * (size - 1 - len(text)) + "\n").encode("ascii")
            size = (len(text) // HEADER_SIZE + 1) * HEADER_SIZE

    @classmethod
    def parse(cls, raw: bytes, where: str) -> tuple["ParityHeader", int]:
        """The header at the start of raw, and its length in bytes."""
        m = _HEADER_BYTES.match(raw)
        if not m:
            raise CorruptParity(f"{where}: not a webfs parity file (no '{MAGIC}' and "
                                "'Header-Bytes:' lines)")
        n = int(m.group(1))
        if n < HEADER_SIZE or n % HEADER_SIZE or n > len(raw) or raw[n - 1:n] != b"\n":
            raise CorruptParity(f"{where}: bad Header-Bytes {n} (file is {len(raw)} bytes)")
        try:
            lines = raw[m.end():n].decode("ascii").split("\n")
        except UnicodeDecodeError:
            raise CorruptParity(f"{where}: header holds non-ASCII bytes") from None
        fields: dict[str, str] = {}
        members = []
        for line in lines:
            line = line.rstrip(" ")
            if not line:
                continue
            key, sep, value = line.partition(": ")
            if not sep:
                raise CorruptParity(f"{where}: bad header line {line[:80]!r}")
            if key == "Member":
                members.append(Member.parse(value, where))
            else:
                fields[key] = value
        try:
            stripe, length = fields["Stripe"], int(fields["Length"])
        except (KeyError, ValueError):
            raise CorruptParity(f"{where}: header lacks a Stripe or a numeric Length") from None
        header = cls(stripe, length, tuple(members))
        if len(header.keys()) != len(members) or length != max((m.stored for m in members), default=0):
            raise CorruptParity(f"{where}: Length {length} is not the longest member, "
                                "or a member is listed twice")
        return header, n


def xor_payloads(payloads: Iterable[bytes], length: int) -> bytes:
    """The XOR of payloads, each zero-padded to length (OverflowError if one is longer)."""
    acc = 0
    for p in payloads:
        acc ^= int.from_bytes(p, "little")
    return acc.to_bytes(length, "little")


def size_class(stored: int) -> int:
    """Quarter-octave class of a stored length: members of one class differ by < 25 %."""
    k = max(stored, 1).bit_length() - 1
    return 4 * k + ((stored >> (k - 2)) & 3 if k >= 2 else 0)


def _bits(mask: int) -> list[int]:
    return [i for i in range(mask.bit_length()) if mask >> i & 1]


def _pair(a: int, b: int) -> tuple[int, int]:
    return (a, b) if a < b else (b, a)


@dataclass
class Stripe:
    id: str
    parity_disk: int
    size_class: int
    length: int
    state: str
    members: int
    disks: int          # bit i set: disk i holds a member or the parity


STRIPE_COLUMNS = "id, parity_disk, size_class, length, state, members, disks"


# -- the intent log ------------------------------------------------------------

class IntentLog:
    """``meta/parity-intent``: stripes whose parity file may be ahead of the
    committed catalog, one id per line. An id is appended before a parity
    rewrite for a block the catalog has not committed; the file is emptied
    once no rewrite is running and every rewrite since has been committed."""

    def __init__(self, path: str, fsync: bool):
        self.path = path
        self.fsync = fsync
        self._lock = threading.Lock()
        self._fd: Optional[int] = None
        self._written = False
        self._inflight: Counter[str] = Counter()
        self._uncommitted: set[str] = set()

    def listed(self) -> set[str]:
        try:
            with open(self.path, "r", encoding="ascii", errors="replace") as f:
                return {line for line in f.read().split() if sigmod.is_signature(line)}
        except FileNotFoundError:
            return set()

    def begin(self, stripe_id: str) -> None:
        with self._lock:
            if self._fd is None:
                self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            os.write(self._fd, f"{stripe_id}\n".encode())
            if self.fsync:
                os.fsync(self._fd)
            self._written = True
            self._inflight[stripe_id] += 1
            self._uncommitted.add(stripe_id)

    def done(self, stripe_id: str) -> None:
        with self._lock:
            self._inflight[stripe_id] -= 1
            if not self._inflight[stripe_id]:
                del self._inflight[stripe_id]
            self._settle()

    def busy(self, stripe_id: str) -> bool:
        """Is a parity rewrite of this stripe under way?"""
        with self._lock:
            return stripe_id in self._inflight

    def committed(self) -> None:
        with self._lock:
            self._uncommitted.clear()
            self._settle()

    def _settle(self) -> None:
        if self._written and not self._inflight and not self._uncommitted:
            os.ftruncate(self._fd, 0)
            self._written = False

    def clear(self) -> None:
        with self._lock:
            if os.path.exists(self.path):
                os.truncate(self.path, 0)
            self._written = False

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None


# -- the protection ------------------------------------------------------------

class Parity(Protection):
    """Declustered XOR parity over the disks of an archive.

    ``recover`` (when the caller holds the archive lock) reconciles the
    stripes an interrupted process left behind; ``recovered`` says which.
    ``reads`` counts the bytes read from each disk to reconstruct blocks.
    """

    def __init__(self, archive: Archive, catalog: Catalog,
                 signature_fn: SignatureFn = sigmod.signature, fsync: bool = False,
                 recover: bool = True):
        self.archive = archive
        self.catalog = catalog
        self.signature_fn = signature_fn
        self.fsync = fsync
        self.reads: Counter[int] = Counter()
        self._reads_lock = threading.Lock()
        self.recovered: list[tuple[str, str]] = []      # (stripe id, what was done)
        self._locks = KeyedLocks()
        # Parity of open stripes, written behind: stripe -> (volume, header,
        # payload, intents it holds, since when). A stripe's file is written when
        # it fills, when it has waited WRITE_BEHIND seconds, or at sync and close;
        # until then its intent stays listed, so a crash recomputes it at open.
        self._unwritten: dict[str, tuple[Volume, ParityHeader, bytes, int, float]] = {}
        self._unwritten_bytes = 0
        self._unwritten_lock = threading.Lock()
        self._intents = IntentLog(os.path.join(os.path.dirname(catalog.path),
                                               os.path.basename(INTENT_FILE)), fsync)
        # Stripes per pair of disks and parity files per disk, by size class (so
        # balanced counts are balanced bytes), and bytes over all classes (to
        # break ties in classes too sparse to balance on their own).
        self._pairs: dict[int, Counter[tuple[int, int]]] = {}
        self._parities: dict[int, Counter[int]] = {}
        self._pair_bytes: Counter[tuple[int, int]] = Counter()
        self._parity_bytes: Counter[int] = Counter()
        self._count_layout()
        if recover:
            self._recover()

    @property
    def width(self) -> int:
        """Most members a stripe takes: G-1, and fewer than the disks."""
        return min(self.archive.conf.group_size, len(self.archive.conf.disks)) - 1

    # -- catalog -------------------------------------------------------------

    def stripe(self, stripe_id: str) -> Optional[Stripe]:
        rows = self.catalog.query(f"SELECT {STRIPE_COLUMNS} FROM stripes WHERE id=?", (stripe_id,))
        return Stripe(*rows[0]) if rows else None

    def members(self, stripe_id: str) -> list[BlockRow]:
        return [BlockRow(*r) for r in self.catalog.query(
            f"SELECT {BLOCK_COLUMNS} FROM blocks WHERE stripe=? ORDER BY id", (stripe_id,))]

    def stripe_ids(self, where: str = "", args=()) -> list[str]:
        return [r[0] for r in self.catalog.query(
            f"SELECT id FROM stripes {'WHERE ' + where if where else ''} ORDER BY id", args)]

    def _count_layout(self) -> None:
        """Recount, from the catalog, the stripes each pair of disks shares and
        the parity files on each disk, per size class."""
        for counter in (self._pairs, self._parities, self._pair_bytes, self._parity_bytes):
            counter.clear()
        for cls, disks, parity_disk, n, length in self.catalog.query(
                "SELECT size_class, disks, parity_disk, COUNT(*), SUM(length) FROM stripes "
                "GROUP BY size_class, disks, parity_disk"):
            pairs, parities = self._counters(cls)
            for pair in itertools.combinations(_bits(disks), 2):
                pairs[pair] += n
                self._pair_bytes[pair] += length
            parities[parity_disk] += n
            self._parity_bytes[parity_disk] += length

    def _counters(self, cls: int) -> tuple[Counter[tuple[int, int]], Counter[int]]:
        return self._pairs.setdefault(cls, Counter()), self._parities.setdefault(cls, Counter())

    def pair_counts(self) -> dict[tuple[int, int], int]:
        """Stripes shared by each pair of configured disks."""
        total: Counter[tuple[int, int]] = sum(self._pairs.values(), Counter())
        return {p: total[p] for p in itertools.combinations(self.archive.disk_indexes, 2)}

    # -- a new block ---------------------------------------------------------

    def block_added(self, row: BlockRow, payload: bytes) -> None:
        if self.width < 1:
            return
        with self.catalog.lock:
            placed = self._place(row)
            if placed is None:
                return
            stripe_id, parity_disk, new = placed
            self._intents.begin(stripe_id)
        held = False
        try:
            with self._locks(stripe_id):
                held = self._xor_in(stripe_id, parity_disk, Member.of(row), payload, new)
        except (OSError, WebfsError) as exc:
            log.warning("stripe %s: cannot add block %s to its parity on disk %d (%s); recomputing it",
                        stripe_id, row.block_name, parity_disk, exc)
            self._reconcile_or_mark(stripe_id)
        finally:
            if not held:
                self._intents.done(stripe_id)

    def _place(self, row: BlockRow) -> Optional[tuple[str, int, bool]]:
        """Choose the stripe a new block joins (or start one) and record it in
        the catalog; None when no other disk can take its parity."""
        d, cls = row.disk, size_class(row.stored)
        volumes = self.archive.volumes
        pairs, parities = self._counters(cls)

        def shared(disks: int) -> tuple[int, int]:
            return (sum(pairs[_pair(d, x)] for x in _bits(disks)),
                    sum(self._pair_bytes[_pair(d, x)] for x in _bits(disks)))

        best = None
        draining = {i.index for i in self.archive.conf.disks if i.weight <= 0}
        same = domain_mask(self.archive.conf.disks, d)      # one member per failure domain
        # Its own size class first; a neighbouring one rather than a new stripe.
        for stripe_id, parity_disk, disks, members, their_cls in self.catalog.query(
                "SELECT id, parity_disk, disks, members, size_class FROM stripes "
                "WHERE size_class BETWEEN ? AND ? AND members<? AND state='ok'",
                (cls - 1, cls + 1, self.width)):
            if disks & same or parity_disk not in volumes or parity_disk in draining:
                continue
            rank = (abs(their_cls - cls), -members, shared(disks), stripe_id)
            if (best is None or rank < best[0]) and _has_room(volumes[parity_disk], row.stored):
                best = (rank, stripe_id, parity_disk, disks)
        if best is not None:
            _, stripe_id, parity_disk, disks = best
            self.catalog.execute(
                "UPDATE stripes SET members=members+1, disks=disks|?, length=MAX(length, ?) "
                "WHERE id=?", (1 << d, row.stored, stripe_id))
            new = False
        else:
            # Fewest stripes shared with this disk first: that puts parity where
            # blocks are scarce, so every disk ends up in as many stripes (blocks
            # plus parity files) as another; fewest parity files breaks ties.
            candidates = sorted((pairs[_pair(d, p)], parities[p], self._pair_bytes[_pair(d, p)],
                                 self._parity_bytes[p], p)
                                for p in volumes if not same >> p & 1 and p not in draining)
            parity_disk = next((c[-1] for c in candidates if _has_room(volumes[c[-1]], row.stored)), None)
            if parity_disk is None:
                return None
            stripe_id, disks = uuidmod.uuid4().hex, 1 << parity_disk
            self.catalog.execute(
                "INSERT INTO stripes (id, parity_disk, size_class, length, members, disks) "
                "VALUES (?, ?, ?, ?, 1, ?)", (stripe_id, parity_disk, cls, row.stored, disks | 1 << d))
            parities[parity_disk] += 1
            self._parity_bytes[parity_disk] += row.stored
            new = True
        for x in _bits(disks):
            pairs[_pair(d, x)] += 1
            self._pair_bytes[_pair(d, x)] += row.stored
        self.catalog.execute("UPDATE blocks SET stripe=? WHERE id=?", (stripe_id, row.id))
        row.stripe = stripe_id
        return stripe_id, parity_disk, new

    def _xor_in(self, stripe_id: str, parity_disk: int, member: Member, payload: bytes,
                new: bool) -> bool:
        """XOR a member into its stripe's parity; True if the parity waits in
        memory (written behind) and holds the member's intent until written."""
        vol = self._parity_volume(stripe_id, parity_disk)
        header, parity = (ParityHeader(stripe_id, 0), b"") if new else self._read_parity(vol, stripe_id)
        if member.key in header.keys():
            return False            # a reconcile got here first
        header = ParityHeader(stripe_id, max(header.length, member.stored), header.members + (member,))
        payload = xor_payloads((parity, payload), header.length)
        if len(header.members) >= self.width or self.fsync:     # -o sync: no write-behind
            self._write_parity(vol, header, payload)
            return False
        with self._unwritten_lock:
            held, since = 0, time.monotonic()
            old = self._unwritten.pop(stripe_id, None)
            if old is not None:
                held, since = old[3], old[4]
                self._unwritten_bytes -= len(old[2])
            self._unwritten[stripe_id] = (vol, header, payload, held + 1, since)
            self._unwritten_bytes += len(payload)
        return True

    def flush(self, older_than: float = 0.0) -> None:
        """Write the parity files waiting in memory (those older than some seconds)."""
        now = time.monotonic()
        with self._unwritten_lock:
            due = [sid for sid, entry in self._unwritten.items()
                   if now - entry[4] >= older_than or self._unwritten_bytes > WRITE_BEHIND_BYTES]
        for stripe_id in due:
            with self._locks(stripe_id):
                entry = self._unwritten.get(stripe_id)
                if entry is None:
                    continue
                vol, header, payload = entry[:3]
                try:
                    testkill.point("parity-before-write")
                    self._write_parity(vol, header, payload)
                    testkill.point("parity-after-write")
                except OSError as exc:
                    log.warning("stripe %s: cannot write its parity on disk %d (%s); marked dirty",
                                stripe_id, vol.index, exc)
                    self._forget_unwritten(stripe_id)
                    with self.catalog.lock:
                        self.catalog.execute("UPDATE stripes SET state='dirty' WHERE id=?", (stripe_id,))

    def _forget_unwritten(self, stripe_id: str) -> None:
        """The parity in memory is on its disk now (or given up): release its intents."""
        with self._unwritten_lock:
            entry = self._unwritten.pop(stripe_id, None)
            if entry is not None:
                self._unwritten_bytes -= len(entry[2])
        for _ in range(entry[3] if entry else 0):
            self._intents.done(stripe_id)

    @property
    def unwritten_blocks(self) -> int:
        """Blocks whose parity is still only in memory."""
        with self._unwritten_lock:
            return sum(len(e[1].members) for e in self._unwritten.values())

    def protect(self, row: BlockRow, payload: bytes) -> bool:
        """Put an unprotected block (one stored while no other disk could take
        its parity) into a stripe; the caller commits. True if it now is."""
        self.block_added(row, payload)
        return row.stripe is not None

    # -- a block leaves ------------------------------------------------------

    def block_removed(self, row: BlockRow, payload: Optional[bytes]) -> None:
        """Called after the commit that removed the block's row (the trigger has
        marked its stripe dirty in that commit)."""
        if row.stripe is None:
            return
        with self.catalog.lock:
            stripe = self.stripe(row.stripe)
            if stripe is not None:
                pairs, _ = self._counters(stripe.size_class)
                for x in _bits(stripe.disks):
                    pairs[_pair(row.disk, x)] -= 1
                    self._pair_bytes[_pair(row.disk, x)] -= row.stored
            member = Member.of(row)
            known = {member.key: payload} if payload is not None and self.verified(member, payload) else {}
            self._reconcile_or_mark(row.stripe, known)

    def rolled_back(self, rows: list[BlockRow]) -> None:
        for stripe_id in sorted({r.stripe for r in rows if r.stripe}):
            self._reconcile_or_mark(stripe_id)
        with self.catalog.lock:
            self._count_layout()

    def committed(self) -> None:
        self._intents.committed()

    def flush_due(self) -> None:
        self.flush(older_than=WRITE_BEHIND)

    def close(self) -> None:
        self.flush()
        self._intents.committed()
        self._intents.close()

    # -- making a parity file agree with the catalog ---------------------------

    def reconcile(self, stripe_id: str, known: Optional[dict[Key, bytes]] = None,
                  force: bool = False) -> Optional[str]:
        """Make a stripe's parity file list exactly the members the catalog gives
        it: XOR in the ones it lacks, XOR out the ones it has but should not
        (their payload from ``known`` or their block file), or recompute it from
        the members (always, with ``force``). Returns what was done (None if
        nothing was needed); raises DataLost when a member it needs cannot be read."""
        with self.catalog.lock:
            stripe = self.stripe(stripe_id)
            rows = self.members(stripe_id)
            with self._locks(stripe_id):
                if stripe is None or not rows:
                    return self._drop(stripe_id, stripe)
                done = self._make_agree(stripe, [Member.of(r) for r in rows], known or {}, force)
            if done or stripe.state != "ok":
                disks = 1 << stripe.parity_disk
                for r in rows:
                    disks |= 1 << r.disk
                self.catalog.execute(
                    "UPDATE stripes SET state='ok', length=?, members=?, disks=? WHERE id=?",
                    (max(r.stored for r in rows), len(rows), disks, stripe_id))
        return done

    def rebuild_parity(self, stripe_id: str, gate: Optional[Gate] = None) -> Optional[str]:
        """Write a stripe's parity file anew from its members (a rebuild of
        the disk it is on). The members are read without the catalog lock, so
        many stripes are done at once; the file is written only if the
        catalog still gives the same members, else ``reconcile`` does it all
        under the lock. None if the file there lists the members already."""
        with self.catalog.lock:
            stripe = self.stripe(stripe_id)
            want = [Member.of(r) for r in self.members(stripe_id)]
        if stripe is None or not want:
            return self.reconcile(stripe_id)
        vol = self._parity_volume(stripe_id, stripe.parity_disk)
        with self._locks(stripe_id):
            try:
                header, _ = self._read_parity(vol, stripe_id)
            except (OSError, CorruptParity):
                pass
            else:
                if set(header.members) == set(want) and stripe.state == "ok":
                    return None
            payloads = []
            for m in want:
                try:
                    payloads.append(self.read_member(m, verify=True, gate=gate))
                except (OSError, WebfsError) as exc:
                    raise DataLost(f"cannot recompute the parity: block {m.block_name} on disk "
                                   f"{m.disk} cannot be read ({exc})") from None
            length = max(m.stored for m in want)
            payload = xor_payloads(payloads, length)
        with self.catalog.lock:
            now = self.stripe(stripe_id)
            rows = self.members(stripe_id)
            if now is None or now.parity_disk != stripe.parity_disk or \
                    {Member.of(r) for r in rows} != set(want):
                return self.reconcile(stripe_id, force=True)
            with self._locks(stripe_id):
                self._write_parity(vol, ParityHeader(stripe_id, length, tuple(want)), payload)
            disks = 1 << now.parity_disk
            for r in rows:
                disks |= 1 << r.disk
            self.catalog.execute(
                "UPDATE stripes SET state='ok', length=?, members=?, disks=? WHERE id=?",
                (length, len(rows), disks, stripe_id))
        return "recomputed from its members"

    def _make_agree(self, stripe: Stripe, want: list[Member], known: dict[Key, bytes],
                    force: bool) -> Optional[str]:
        vol = self._parity_volume(stripe.id, stripe.parity_disk)
        length = max(m.stored for m in want)
        if force:
            self._write_parity(vol, ParityHeader(stripe.id, length, tuple(want)), self._xor_of(want))
            return "recomputed from its members"
        try:
            header, parity = self._read_parity(vol, stripe.id)
        except (OSError, CorruptParity) as exc:
            payload, done = self._xor_of(want), f"parity file was unreadable ({exc}); recomputed it"
        else:
            if set(header.members) == set(want):
                return None
            have = {m.key: m for m in header.members}
            need = {m.key: m for m in want}
            extra = [m for k, m in have.items() if k not in need]
            lacking = [m for k, m in need.items() if k not in have]
            try:
                delta = [known.get(m.key) or self.read_member(m, verify=True) for m in extra + lacking]
                payload = xor_payloads([parity, *delta], length)
                done = (f"parity listed {len(extra)} block(s) the catalog does not and lacked "
                        f"{len(lacking)}; XOR-ed them out and in")
            except (OSError, WebfsError, OverflowError):
                payload, done = self._xor_of(want), "parity disagreed with the catalog; recomputed it"
        self._write_parity(vol, ParityHeader(stripe.id, length, tuple(want)), payload)
        return done

    def _xor_of(self, members: list[Member]) -> bytes:
        """Parity recomputed from the members, each read and checked against its signature."""
        payloads = []
        for m in members:
            try:
                payloads.append(self.read_member(m, verify=True))
            except (OSError, WebfsError) as exc:
                raise DataLost(f"cannot recompute the parity: block {m.block_name} on disk "
                               f"{m.disk} cannot be read ({exc})") from None
        return xor_payloads(payloads, max(m.stored for m in members))

    def _drop(self, stripe_id: str, stripe: Optional[Stripe]) -> str:
        """Remove the parity of a stripe that has no member (or no catalog row)."""
        self._forget_unwritten(stripe_id)
        disks = [stripe.parity_disk] if stripe is not None else list(self.archive.volumes)
        for d in disks:
            vol = self.archive.volumes.get(d)
            if vol is not None:
                vol.backend.remove(vol.parity_path(stripe_id))
        if stripe is None:
            return "removed the parity file of a stripe the catalog does not know"
        self.catalog.execute("DELETE FROM stripes WHERE id=?", (stripe_id,))
        self._counters(stripe.size_class)[1][stripe.parity_disk] -= 1
        self._parity_bytes[stripe.parity_disk] -= stripe.length
        return "removed the parity file of an empty stripe"

    def _reconcile_or_mark(self, stripe_id: str, known: Optional[dict[Key, bytes]] = None) -> Optional[str]:
        """Reconcile a stripe; if it cannot be done now, leave it marked dirty."""
        try:
            return self.reconcile(stripe_id, known)
        except (OSError, WebfsError) as exc:
            log.warning("stripe %s: parity cannot be brought up to date now (%s); "
                        "marked dirty for 'webfs fsck --repair' or 'webfs scrub --repair'", stripe_id, exc)
            with self.catalog.lock:
                self.catalog.execute("UPDATE stripes SET state='dirty' WHERE id=?", (stripe_id,))
            return None

    def _recover(self) -> None:
        """Reconcile the stripes an interrupted process may have left behind."""
        with self.catalog.lock:
            stale = self._intents.listed() | set(self.stripe_ids("state != 'ok'"))
            for stripe_id in sorted(stale):
                for vol in self.archive.volumes.values():
                    vol.backend.remove_leftovers(vol.parity_path(stripe_id))
                done = self._reconcile_or_mark(stripe_id)
                if done:
                    # One line per stripe is for the log; the caller sums them up.
                    log.info("stripe %s: %s (an interrupted update)", stripe_id, done)
                    self.recovered.append((stripe_id, done))
            if self.recovered:
                log.warning("%d parity stripe(s) left by an interrupted update made to agree with "
                            "their blocks", len(self.recovered))
            self.catalog.commit()
            self._intents.clear()
            if stale:
                self._count_layout()

    # -- reading -------------------------------------------------------------

    def reconstruct(self, row: BlockRow, gate: Optional[Gate] = None) -> bytes:
        """A block's payload from the rest of its stripe: the XOR of the parity
        and every other member, cut to its stored length. ``gate(disk)`` (a
        context manager) bounds the reads on each disk when many threads
        reconstruct at once (rebuild)."""
        where = f"block {row.block_name} on disk {row.disk} cannot be read"
        if row.stripe is None:
            raise DataLost(f"{where}, and it is in no parity stripe")
        with self.catalog.lock:
            stripe = self.stripe(row.stripe)
            disks = {(r.sig, r.overflow): r.disk for r in self.members(row.stripe)}
        if stripe is None:
            raise DataLost(f"{where}, and its stripe {row.stripe} is not in the catalog")
        vol = self.archive.volumes.get(stripe.parity_disk)
        if vol is None:
            raise DataLost(f"{where}, and the parity of its stripe {row.stripe} is on "
                           f"missing disk {stripe.parity_disk}")
        with self._locks(row.stripe):
            try:
                header, parity = self._read_parity(vol, row.stripe, gate)
            except (OSError, CorruptParity) as exc:
                raise DataLost(f"{where}, and neither can its stripe's parity: {exc}") from None
            if (row.sig, row.overflow) not in header.keys():
                raise DataLost(f"{where}, and its stripe's parity does not hold it "
                               "(an interrupted update; see 'webfs fsck --repair')")
            payloads = [parity]
            for m in header.members:
                if m.key == (row.sig, row.overflow):
                    continue
                m = replace(m, disk=disks.get(m.key, m.disk))
                try:
                    payloads.append(self.read_member(m, gate=gate))
                except (OSError, WebfsError) as exc:
                    raise DataLost(f"{where}, and neither can {m.block_name} on disk {m.disk} "
                                   f"of the same stripe {row.stripe} ({exc})") from None
        return xor_payloads(payloads, header.length)[:row.stored]

    def read_member(self, m: Member, verify: bool = False, gate: Optional[Gate] = None) -> bytes:
        """A member's payload from its disk (or another, after an interrupted move)."""
        for vol in search_order(self.archive.volumes, m.disk):
            disk = vol.index
            try:
                with gate(disk) if gate else nullcontext():
                    header, payload = vol.read_block(m.sig, m.overflow)
            except FileNotFoundError:
                continue
            self._count_read(disk, HEADER_SIZE + len(payload))
            if header.stored != m.stored or header.codec != m.codec or header.size != m.size:
                raise CorruptBlock(f"disk {disk}: block {m.block_name}: header disagrees with its stripe "
                                   f"(Size {header.size}, Stored {header.stored}, Codec {header.codec}; "
                                   f"the stripe says {m.size}, {m.stored}, {m.codec})")
            if verify and not self.verified(m, payload):
                raise CorruptBlock(f"disk {disk}: block {m.block_name}: content does not match its signature")
            return payload
        state = "missing" if m.disk not in self.archive.volumes else "present"
        raise DataLost(f"block {m.block_name} is on no disk (its disk {m.disk} is {state})")

    def _count_read(self, disk: int, n: int) -> None:
        with self._reads_lock:          # rebuild reads from several threads
            self.reads[disk] += n

    def verified(self, m: Member, payload: bytes) -> bool:
        try:
            data = codecs.get(m.codec).decode(payload)
        except WebfsError:
            return False
        return len(data) == m.size and self.signature_fn(data) == m.sig

    def _parity_volume(self, stripe_id: str, parity_disk: int) -> Volume:
        vol = self.archive.volumes.get(parity_disk)
        if vol is None:
            raise DataLost(f"stripe {stripe_id}: its parity disk {parity_disk} is missing")
        return vol

    def read_parity(self, stripe_id: str, parity_disk: int,
                    gate: Optional[Gate] = None) -> tuple[ParityHeader, bytes]:
        return self._read_parity(self._parity_volume(stripe_id, parity_disk), stripe_id, gate)

    def _read_parity(self, vol: Volume, stripe_id: str,
                     gate: Optional[Gate] = None) -> tuple[ParityHeader, bytes]:
        entry = self._unwritten.get(stripe_id)
        if entry is not None:
            return entry[1], entry[2]
        path = vol.parity_path(stripe_id)
        where = f"disk {vol.index}: {path}"
        with gate(vol.index) if gate else nullcontext():
            raw = vol.backend.read(path)
        self._count_read(vol.index, len(raw))
        header, n = ParityHeader.parse(raw, where)
        if header.stripe != stripe_id:
            raise CorruptParity(f"{where}: header names stripe {header.stripe}")
        if len(raw) - n != header.length:
            raise CorruptParity(f"{where}: payload is {len(raw) - n} bytes, header says {header.length}")
        return header, raw[n:]

    def _write_parity(self, vol: Volume, header: ParityHeader, payload: bytes) -> None:
        vol.backend.write_atomic(vol.parity_path(header.stripe), header.encode() + payload,
                                 fsync=self.fsync)
        if header.stripe in self._unwritten:
            self._forget_unwritten(header.stripe)

    def locked(self, stripe_id: str):
        """Hold a stripe still (no parity rewrite) while it is looked at."""
        return self._locks(stripe_id)

    def busy(self, stripe_id: str) -> bool:
        """Is a new block's parity update of this stripe under way?"""
        return self._intents.busy(stripe_id)

    def interrupted(self) -> set[str]:
        """Stripes whose update an interrupted process left in the intent log
        (an open with ``recover=False`` leaves them for the caller to report)."""
        return self._intents.listed()

    # -- figures -------------------------------------------------------------

    def status(self) -> dict:
        cat = self.catalog
        stripes, open_, dirty, parity_bytes = cat.query(
            "SELECT COUNT(*), COALESCE(SUM(members < ?), 0), COALESCE(SUM(state != 'ok'), 0), "
            "COALESCE(SUM(length), 0) FROM stripes", (self.width,))[0]
        protected, protected_bytes = cat.query(
            "SELECT COUNT(*), COALESCE(SUM(stored), 0) FROM blocks WHERE stripe IS NOT NULL")[0]
        unprotected = cat.scalar("SELECT COUNT(*) FROM blocks WHERE stripe IS NULL")
        per_disk = {d: {"parity_files": n, "parity_bytes": b} for d, n, b in cat.query(
            "SELECT parity_disk, COUNT(*), COALESCE(SUM(length), 0) FROM stripes GROUP BY parity_disk")}
        missing = sorted(self.archive.missing)
        lost = self._lost_blocks(missing)
        pairs = [n for n in self.pair_counts().values()]
        return {
            "kind": "parity", "group_size": self.archive.conf.group_size,
            "stripes": stripes, "open_stripes": open_, "dirty_stripes": dirty,
            "protected_blocks": protected, "unprotected_blocks": unprotected,
            "written_behind_blocks": self.unwritten_blocks,
            "can_protect": bool(unprotected and self.width >= 1 and len(self.archive.volumes) >= 2),
            "parity_bytes": parity_bytes,
            "parity_overhead": round(parity_bytes / protected_bytes, 4) if protected_bytes else None,
            "expected_overhead": round(1 / self.width, 4) if self.width >= 1 else None,
            "parity_per_disk": per_disk,
            "pair_balance": round(max(pairs) / min(pairs), 3) if pairs and min(pairs) else None,
            "missing_disks": missing,
            "lost_blocks": lost["names"], "lost_count": lost["count"],
            "degraded_count": lost["degraded"], "unguarded_count": lost["unguarded"],
            "rebuilding": sorted(d for d, v in self.archive.volumes.items()
                                 if v.backend.exists(REBUILD_MARKER)),
            "last_scrub": cat.get_meta("last_scrub"),
        }

    def _lost_blocks(self, missing: list[int], most: int = 20) -> dict:
        """Blocks the missing disks took with them: on a missing disk and in no
        stripe, or with their parity or another member of their stripe missing
        too. Also how many can be rebuilt (degraded) and how many present blocks
        lost their parity (unguarded)."""
        if not missing:
            return {"names": [], "count": 0, "degraded": 0, "unguarded": 0}
        marks = ",".join("?" * len(missing))
        gone = (f"b.stripe IS NULL OR s.parity_disk IN ({marks}) OR EXISTS (SELECT 1 FROM blocks o "
                f"WHERE o.stripe = b.stripe AND o.id != b.id AND o.disk IN ({marks}))")
        base = f"FROM blocks b LEFT JOIN stripes s ON s.id = b.stripe WHERE b.disk IN ({marks})"
        rows = self.catalog.query(f"SELECT b.sig, b.overflow, b.disk {base} AND ({gone}) ORDER BY b.id",
                                  (*missing, *missing, *missing))
        on_missing = self.catalog.scalar(f"SELECT COUNT(*) {base}", missing)
        unguarded = self.catalog.scalar(
            f"SELECT COUNT(*) FROM blocks b JOIN stripes s ON s.id = b.stripe "
            f"WHERE s.parity_disk IN ({marks}) AND b.disk NOT IN ({marks})", (*missing, *missing))
        return {"names": [f"{ContentKey(s, o, d)}" for s, o, d in rows[:most]], "count": len(rows),
                "degraded": on_missing - len(rows), "unguarded": unguarded}


def _has_room(vol: Volume, stored: int) -> bool:
    """Room for a parity file of this length, leaving what the store leaves for metadata."""
    free, total = vol.backend.free_space()
    return free >= stored + HEADER_SIZE + min(64 << 20, total // 50)


def parity_files(vol: Volume) -> Iterable[tuple[Optional[str], str]]:
    """(stripe id or None if the name is not one, relative path) of every file under parity/."""
    for rel in vol.backend.list(PARITY):
        parsed = sigmod.parse_location(rel[len(PARITY) + 1:])
        yield (parsed[0] if parsed and not parsed[1] else None), rel


__all__ = ["Parity", "ParityHeader", "Member", "IntentLog", "xor_payloads", "size_class",
           "parity_files", "REBUILD_MARKER"]
