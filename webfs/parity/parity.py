"""``Parity``: the store's ``Protection`` by declustered XOR parity.

It puts the pieces of this package together and keeps stripes current as
blocks come and go: a new block joins a stripe (``layout``) and is XOR-ed
into its parity, which waits in memory (``writebehind``) until the parity
writer thread writes it as the stripe fills, or a flush does (with ``-o
sync``, written at once by the storing thread); a removed
block is XOR-ed out after its commit (``reconcile``); a block its disk
cannot give is rebuilt from its stripe (``stripeio``).

Locks, in order: a signature lock (the store's), the catalog lock, a stripe
lock, the intent log's lock. A stripe lock is never held while waiting for
the catalog lock.
"""
from __future__ import annotations

import contextlib
import logging
import os
from typing import Optional

from .. import signature as sigmod
from .. import testkill
from ..archive import Archive
from ..catalog import BlockRow, Catalog
from ..errors import WebfsError
from ..locks import KeyedLocks
from ..protection import Placing, Protection
from ..signature import SignatureFn
from .format import Key, Member, ParityHeader, xor_payloads
from .intents import INTENT_FILE, IntentLog
from .layout import Placement, Stripe, StripeLayout
from .reconcile import Reconciler
from .status import parity_status
from .stripeio import Gate, StripeIO
from .writebehind import WRITE_BEHIND, ParityWriter, WriteBehind

log = logging.getLogger("webfs.parity")


class Parity(Protection):
    """Declustered XOR parity over the disks of an archive.

    With ``recover`` (the caller holds the archive lock) it reconciles at
    open the stripes an interrupted process left behind; ``recovered`` says
    which. ``reads`` counts the bytes read from each disk through stripes.
    """

    def __init__(self, archive: Archive, catalog: Catalog,
                 signature_fn: SignatureFn = sigmod.signature, fsync: bool = False,
                 recover: bool = True):
        self.archive = archive
        self.catalog = catalog
        self.fsync = fsync
        self.locks = KeyedLocks("stripe")
        self.intents = IntentLog(os.path.join(os.path.dirname(catalog.path),
                                              os.path.basename(INTENT_FILE)), fsync)
        self.write_behind = WriteBehind(self.intents)
        self.layout = StripeLayout(archive, catalog)
        self.io = StripeIO(archive, self.layout, self.write_behind, self.locks, signature_fn, fsync)
        self.reconciler = Reconciler(self.io, self.intents)
        self.writer = ParityWriter(self._write_full)     # full stripes' files, off the storing thread
        self.recovered: list[tuple[str, str]] = self.reconciler.recover() if recover else []

    # -- what callers read of it --------------------------------------------------

    @property
    def has_parity(self) -> bool:
        return True

    @property
    def width(self) -> int:
        return self.layout.width

    @property
    def reads(self):
        return self.io.reads

    def stripe(self, stripe_id: str) -> Optional[Stripe]:
        return self.layout.stripe(stripe_id)

    def members(self, stripe_id: str) -> list[BlockRow]:
        return self.layout.members(stripe_id)

    def stripe_ids(self, where: str = "", args=()) -> list[str]:
        return self.layout.stripe_ids(where, args)

    def pair_counts(self) -> dict[tuple[int, int], int]:
        return self.layout.pair_counts()

    def read_member(self, m: Member, verify: bool = False, gate: Optional[Gate] = None) -> bytes:
        return self.io.read_member(m, verify, gate)

    def verified(self, m: Member, payload: bytes) -> bool:
        return self.io.verified(m, payload)

    def read_parity(self, stripe_id: str, parity_disk: int,
                    gate: Optional[Gate] = None) -> tuple[ParityHeader, bytes]:
        return self.io.read_parity(stripe_id, parity_disk, gate)

    def reconstruct(self, row: BlockRow, gate: Optional[Gate] = None) -> bytes:
        return self.io.reconstruct(row, gate)

    def reconcile(self, stripe_id: str, known: Optional[dict[Key, bytes]] = None,
                  force: bool = False) -> Optional[str]:
        return self.reconciler.reconcile(stripe_id, known, force)

    def rebuild_parity(self, stripe_id: str, gate: Optional[Gate] = None) -> Optional[str]:
        return self.reconciler.rebuild_parity(stripe_id, gate)

    def locked(self, stripe_id: str):
        """Hold a stripe still (no parity rewrite) while it is looked at."""
        return self.locks(stripe_id)

    def busy(self, stripe_id: str) -> bool:
        """Is a new block's parity update of this stripe under way?"""
        return self.intents.busy(stripe_id)

    def interrupted(self) -> set[str]:
        """Stripes listed in ``meta/parity-intent``: updates an interrupted process left."""
        return self.intents.listed()

    @property
    def unwritten_blocks(self) -> int:
        """Blocks whose parity is still only in memory."""
        return self.write_behind.blocks

    def files_on(self, disk: int) -> int:
        return len(self.layout.stripe_ids("parity_disk=?", (disk,)))

    def parity_disks(self) -> dict[str, int]:
        """stripe id -> the disk of its parity file, of every stripe."""
        return self.layout.parity_disks()

    def out_of_date(self) -> int:
        return len(self.layout.stripe_ids("state != 'ok'"))

    def reconcile_stale(self) -> int:
        done = 0
        for stripe_id in self.layout.stripe_ids("state != 'ok'"):
            if self.busy(stripe_id):
                continue                # a new block's update is under way: it reconciles
            self.reconciler.reconcile_or_mark(stripe_id)
            with self.catalog.lock:
                stripe = self.layout.stripe(stripe_id)
            done += stripe is None or stripe.state == "ok"
        return done

    def status(self) -> dict:
        return parity_status(self.archive, self.catalog, self.layout, self.write_behind)

    # -- a new block ---------------------------------------------------------

    def place(self, rows: list[BlockRow]) -> Placing:
        if self.width < 1 or not rows:
            return Placing([None] * len(rows), {}, [])
        held: dict[str, contextlib.ExitStack] = {}
        with self.catalog.lock:
            chosen = self.layout.place(rows)
            for placed in chosen:
                if placed is not None and placed.new and placed.stripe_id not in held:
                    # The stripe is in the catalog from here on, its parity not
                    # yet anywhere: hold its lock (nobody else can) before the
                    # catalog's goes, so a block that joins it meanwhile waits
                    # for this parity instead of finding none (and then having
                    # its own overwritten by this one).
                    held[placed.stripe_id] = contextlib.ExitStack()
                    held[placed.stripe_id].enter_context(self.locks(placed.stripe_id, fresh=True))
            # every intent before any parity is written, as one append for the chunk
            self.intents.begin_many([placed.stripe_id for placed in chosen if placed is not None])
        return Placing(chosen, held, [])

    def read_ahead(self, stored: list[int]) -> None:
        if self.width >= 1 and stored:
            self.layout.read_ahead(stored)

    def unplace(self, placing: Placing, row: BlockRow) -> None:
        if row.stripe is not None:
            with self.catalog.lock:
                self.layout.unplace(row)
                self.intents.done(row.stripe)
            placing.gone.append(row.stripe)     # reconciled (or dropped, left empty) by blocks_added

    def blocks_added(self, added: list[tuple[BlockRow, bytes]], placing: Optional[Placing] = None,
                     here: bool = False) -> None:
        if self.width < 1 or not (added or placing):
            return
        if placing is None:
            placing = self.place([row for row, _ in added])
        stripes: dict[str, tuple[Placement, list[tuple[Member, bytes]]]] = {}
        for (row, payload), placed in zip(added, placing.chosen):
            if placed is not None:
                stripes.setdefault(placed.stripe_id, (placed, []))[1].append((Member.of(row), payload))
        held = dict(placing.held)
        failed = list(placing.gone)
        full = []
        try:
            # The new stripes first, whose locks are held: no lock is waited for
            # while another is held, so two threads adding blocks cannot deadlock.
            for stripe_id in sorted(stripes, key=lambda s: s not in held):
                placed, members = stripes[stripe_id]
                with held.pop(stripe_id, None) or self.locks(stripe_id):
                    kept = 0
                    try:
                        kept = self._xor_in(placed, members)
                        waiting = self.write_behind.get(stripe_id)
                        if kept and waiting is not None and len(waiting.header.members) >= self.width:
                            full.append(stripe_id)
                    except (OSError, WebfsError) as exc:
                        log.warning("stripe %s: cannot add %d block(s) to its parity on disk %d "
                                    "(%s); recomputing it", stripe_id, len(members),
                                    placed.parity_disk, exc)
                        failed.append(stripe_id)
                    finally:
                        for _ in range(len(members) - kept):
                            self.intents.done(stripe_id)
        finally:
            for stack in held.values():
                stack.close()
        # Full: their files are made by the parity writer, not by the storing
        # thread (an import's); their intents stay listed until then, as
        # written-behind parity's. ``here`` (the loop's store of a small
        # file): made now by the caller, no stripe lock held, no wake-up.
        self.writer.due(full, here)
        for stripe_id in dict.fromkeys(failed):
            self.reconciler.reconcile_or_mark(stripe_id)

    def _xor_in(self, placed: Placement, members: list[tuple[Member, bytes]]) -> int:
        """XOR new members into their stripe's parity; how many of their intents
        the parity holds (it waits in memory, written behind) until it is written."""
        stripe_id = placed.stripe_id
        vol = self.io.parity_volume(stripe_id, placed.parity_disk)
        header, parity = (ParityHeader(stripe_id, 0), b"") if placed.new else \
            self.io.read_parity_on(vol, stripe_id)
        members = [(m, p) for m, p in members if m.key not in header.keys()]   # a reconcile got here first
        if not members:
            return 0
        # A row read from the catalog (a block protected later) has no name hint: its header's.
        members = list(zip(self.io.named([m for m, _ in members]), (p for _, p in members)))
        header = ParityHeader(stripe_id, max(header.length, *(m.stored for m, _ in members)),
                              header.members + tuple(m for m, _ in members))
        payload = xor_payloads((parity, *(p for _, p in members)), header.length)
        if self.fsync:      # -o sync: no write-behind
            self.io.write_parity(vol, header, payload, new=placed.new)
            return 0
        self.write_behind.hold(stripe_id, vol, header, payload, len(members), new=placed.new)
        return len(members)

    def protect(self, row: BlockRow, payload: bytes) -> bool:
        """Put an unprotected block (one stored while no other disk could take
        its parity) into a stripe; the caller commits. True if it now is."""
        self.blocks_added([(row, payload)])
        return row.stripe is not None

    def flush(self, older_than: float = 0.0) -> None:
        """Write the parity files waiting in memory (those older than some seconds)."""
        for stripe_id in self.write_behind.due(older_than):
            self._write_waiting(stripe_id)

    def _write_full(self, stripe_id: str) -> None:
        self._write_waiting(stripe_id, "parity-full")

    def _write_waiting(self, stripe_id: str, kill_prefix: str = "parity") -> None:
        """Write a stripe's parity that waits in memory (if it still does)."""
        with self.locks(stripe_id):
            waiting = self.write_behind.get(stripe_id)
            if waiting is None:
                return
            try:
                testkill.point(f"{kill_prefix}-before-write")
                self.io.write_parity(waiting.volume, waiting.header, waiting.payload, new=waiting.new)
                testkill.point(f"{kill_prefix}-after-write")
            except OSError as exc:
                log.warning("stripe %s: cannot write its parity on disk %d (%s); marked dirty",
                            stripe_id, waiting.volume.index, exc)
                self.write_behind.forget(stripe_id)
                with self.catalog.lock:
                    self.layout.mark_dirty(stripe_id)

    # -- a block leaves ------------------------------------------------------

    def block_removed(self, row: BlockRow, payload: Optional[bytes]) -> None:
        """Called after the commit that removed the block's row (the trigger has
        marked its stripe dirty in that commit)."""
        if row.stripe is None:
            return
        with self.catalog.lock:
            self.layout.member_left(row)
            member = Member.of(row)
            known = {member.key: payload} if payload is not None and self.io.verified(member, payload) else {}
            self.reconciler.reconcile_or_mark(row.stripe, known)

    def rolled_back(self, rows: list[BlockRow]) -> None:
        for stripe_id in sorted({r.stripe for r in rows if r.stripe}):
            self.reconciler.reconcile_or_mark(stripe_id)
        with self.catalog.lock:
            self.layout.recount()

    def committed(self) -> None:
        self.intents.committed()

    def flush_due(self) -> None:
        self.flush(older_than=WRITE_BEHIND)

    def close(self) -> None:
        self.writer.close()
        self.flush()
        self.intents.committed()
        self.intents.close()
