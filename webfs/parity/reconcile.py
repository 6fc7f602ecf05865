"""Making parity files agree with the catalog, and crash recovery.

A parity file can disagree with the catalog in two windows, both marked
before they open. (1) A new block's parity is rewritten before the caller
commits the catalog: its stripe id is first appended to
``meta/parity-intent`` (emptied once every such rewrite is done and
committed). (2) A released block leaves the catalog at a commit and its
parity afterwards: a trigger in the catalog marks the stripe ``dirty`` in
the same transaction. At open (when the archive is locked) every stripe in
the intent file or marked dirty is reconciled: members the parity lacks are
XOR-ed in, members the catalog no longer has are XOR-ed out (from their
block files), or the parity is recomputed from its members.
"""
from __future__ import annotations

import logging
from typing import Optional

from ..errors import CorruptParity, DataLost, WebfsError
from .format import Key, Member, ParityHeader, xor_payloads
from .intents import IntentLog
from .layout import Stripe
from .stripeio import Gate, StripeIO

log = logging.getLogger("webfs.parity")


class Reconciler:
    """Brings stripes' parity files in line with the catalog (callers may hold
    the catalog lock; lock order: catalog, then stripe)."""

    def __init__(self, io: StripeIO, intents: IntentLog):
        self.io = io
        self.layout = io.layout
        self.catalog = io.layout.catalog
        self.intents = intents

    def reconcile(self, stripe_id: str, known: Optional[dict[Key, bytes]] = None,
                  force: bool = False) -> Optional[str]:
        """Make a stripe's parity file list exactly the members the catalog gives
        it: XOR in the ones it lacks, XOR out the ones it has but should not
        (their payload from ``known`` or their block file), or recompute it from
        the members (always, with ``force``). Returns what was done (None if
        nothing was needed); raises DataLost when a member it needs cannot be read."""
        with self.catalog.lock:
            stripe = self.layout.stripe(stripe_id)
            rows = self.layout.members(stripe_id)
            with self.io.locks(stripe_id):
                if stripe is None or not rows:
                    return self._drop(stripe_id, stripe)
                done = self._make_agree(stripe, [Member.of(r) for r in rows], known or {}, force)
            if done or stripe.state != "ok":
                self.layout.agreed(stripe_id, stripe.parity_disk, rows)
        return done

    def rebuild_parity(self, stripe_id: str, gate: Optional[Gate] = None) -> Optional[str]:
        """Write a stripe's parity file anew from its members (a rebuild of
        the disk it is on). The members are read without the catalog lock, so
        many stripes are done at once; the file is written only if the
        catalog still gives the same members, else ``reconcile`` does it all
        under the lock. None if the file there lists the members already."""
        with self.catalog.lock:
            stripe = self.layout.stripe(stripe_id)
            want = [Member.of(r) for r in self.layout.members(stripe_id)]
        if stripe is None or not want:
            return self.reconcile(stripe_id)
        vol = self.io.parity_volume(stripe_id, stripe.parity_disk)
        with self.io.locks(stripe_id):
            try:
                header, _ = self.io.read_parity_on(vol, stripe_id)
            except (OSError, CorruptParity):
                pass
            else:
                if set(header.members) == set(want) and stripe.state == "ok":
                    return None
            length = max(m.stored for m in want)
            want, payload = self._xor_of(want, gate)
        with self.catalog.lock:
            now = self.layout.stripe(stripe_id)
            rows = self.layout.members(stripe_id)
            if now is None or now.parity_disk != stripe.parity_disk or \
                    {Member.of(r) for r in rows} != set(want):
                return self.reconcile(stripe_id, force=True)
            with self.io.locks(stripe_id):
                self.io.write_parity(vol, ParityHeader(stripe_id, length, tuple(want)), payload)
            self.layout.agreed(stripe_id, now.parity_disk, rows)
        return "recomputed from its members"

    def _make_agree(self, stripe: Stripe, want: list[Member], known: dict[Key, bytes],
                    force: bool) -> Optional[str]:
        vol = self.io.parity_volume(stripe.id, stripe.parity_disk)
        length = max(m.stored for m in want)
        if force:
            want, payload = self._xor_of(want)
            self.io.write_parity(vol, ParityHeader(stripe.id, length, tuple(want)), payload)
            return "recomputed from its members"
        try:
            header, parity = self.io.read_parity_on(vol, stripe.id)
        except (OSError, CorruptParity) as exc:
            (want, payload), done = self._xor_of(want), f"parity file was unreadable ({exc}); recomputed it"
        else:
            if set(header.members) == set(want):
                return None
            have = {m.key: m for m in header.members}
            need = {m.key: m for m in want}
            extra = [m for k, m in have.items() if k not in need]
            lacking = [m for k, m in need.items() if k not in have]
            try:
                delta = [known.get(m.key) or self.io.read_member(m, verify=True) for m in extra]
                read = [self.io.read_named(m, verify=True) for m in lacking]
                payload = xor_payloads([parity, *delta, *(p for _, p in read)], length)
                # Name hints as the old header and the blocks read give them (the catalog has none).
                want = self.io.named(want, header.members + tuple(m for m, _ in read))
                done = (f"parity listed {len(extra)} block(s) the catalog does not and lacked "
                        f"{len(lacking)}; XOR-ed them out and in")
            except (OSError, WebfsError, OverflowError):
                (want, payload), done = self._xor_of(want), "parity disagreed with the catalog; recomputed it"
        self.io.write_parity(vol, ParityHeader(stripe.id, length, tuple(want)), payload)
        return done

    def _xor_of(self, members: list[Member], gate: Optional[Gate] = None) -> tuple[list[Member], bytes]:
        """Parity recomputed from the members, each read and checked against its
        signature; and the members with the name hints of their headers."""
        named, payloads = [], []
        for m in members:
            try:
                m, payload = self.io.read_named(m, verify=True, gate=gate)
            except (OSError, WebfsError) as exc:
                raise DataLost(f"cannot recompute the parity: block {m.block_name} on disk "
                               f"{m.disk} cannot be read ({exc})") from None
            named.append(m)
            payloads.append(payload)
        return named, xor_payloads(payloads, max(m.stored for m in members))

    def _drop(self, stripe_id: str, stripe: Optional[Stripe]) -> str:
        """Remove the parity of a stripe that has no member (or no catalog row)."""
        self.io.write_behind.forget(stripe_id)
        disks = [stripe.parity_disk] if stripe is not None else list(self.io.archive.volumes)
        for d in disks:
            vol = self.io.archive.volumes.get(d)
            if vol is not None:
                vol.backend.remove(vol.parity_path(stripe_id))
        if stripe is None:
            return "removed the parity file of a stripe the catalog does not know"
        self.layout.dropped(stripe)
        return "removed the parity file of an empty stripe"

    def reconcile_or_mark(self, stripe_id: str, known: Optional[dict[Key, bytes]] = None) -> Optional[str]:
        """Reconcile a stripe; if it cannot be done now, leave it marked dirty."""
        try:
            return self.reconcile(stripe_id, known)
        except (OSError, WebfsError) as exc:
            log.warning("stripe %s: parity cannot be brought up to date now (%s); "
                        "marked dirty for 'webfs fsck --repair' or 'webfs scrub --repair'", stripe_id, exc)
            with self.catalog.lock:
                self.layout.mark_dirty(stripe_id)
            return None

    def recover(self) -> list[tuple[str, str]]:
        """Reconcile the stripes an interrupted process may have left behind
        (the caller holds the archive lock); (stripe id, what was done) of each."""
        recovered = []
        with self.catalog.lock:
            stale = self.intents.listed() | set(self.layout.stripe_ids("state != 'ok'"))
            for stripe_id in sorted(stale):
                for vol in self.io.archive.volumes.values():
                    vol.backend.remove_leftovers(vol.parity_path(stripe_id))
                done = self.reconcile_or_mark(stripe_id)
                if done:
                    # One line per stripe is for the log; the caller sums them up.
                    log.info("stripe %s: %s (an interrupted update)", stripe_id, done)
                    recovered.append((stripe_id, done))
            if recovered:
                log.warning("%d parity stripe(s) left by an interrupted update made to agree with "
                            "their blocks", len(recovered))
            self.catalog.commit()
            self.intents.clear()
            if stale:
                self.layout.recount()
        return recovered
