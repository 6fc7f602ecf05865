"""Reading and writing what stripes are made of: members' payloads, parity
files, and a block rebuilt from the rest of its stripe (reconstruction).

Every read of a member checks its header against the stripe (and, when
asked, its bytes against its signature); ``reads`` counts the bytes read
from each disk. A ``gate(disk)`` (a context manager) bounds the reads on
each disk when many threads read at once (scrub, rebuild).
"""
from __future__ import annotations

import threading
from collections import Counter
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from typing import Callable, ContextManager, Optional

from .. import codecs
from ..archive import Archive
from ..block import HEADER_SIZE
from ..catalog import BlockRow
from ..errors import CorruptBlock, CorruptParity, DataLost, WebfsError
from ..locks import KeyedLocks
from ..signature import SignatureFn
from ..volume import Volume, search_order
from .format import Member, ParityHeader, xor_payloads
from .layout import StripeLayout
from .writebehind import WriteBehind

Gate = Callable[[int], ContextManager]      # disk -> held around each read of that disk


@dataclass
class StripeIO:
    """The files of stripes on the disks, and parity still in memory."""
    archive: Archive
    layout: StripeLayout
    write_behind: WriteBehind
    locks: KeyedLocks                   # a stripe's: held while its parity is read or rewritten
    signature_fn: SignatureFn
    fsync: bool
    reads: Counter[int] = field(default_factory=Counter)
    _reads_lock: threading.Lock = field(default_factory=threading.Lock)

    def reconstruct(self, row: BlockRow, gate: Optional[Gate] = None) -> bytes:
        """A block's payload from the rest of its stripe: the XOR of the parity
        and every other member, cut to its stored length; the row gets its
        name hint from its Member line if it had none. ``gate(disk)`` (a
        context manager) bounds the reads on each disk when many threads
        reconstruct at once (rebuild)."""
        where = f"block {row.block_name} on disk {row.disk} cannot be read"
        if row.stripe is None:
            raise DataLost(f"{where}, and it is in no parity stripe")
        with self.layout.catalog.lock:
            stripe = self.layout.stripe(row.stripe)
            disks = {(r.sig, r.overflow): r.disk for r in self.layout.members(row.stripe)}
        if stripe is None:
            raise DataLost(f"{where}, and its stripe {row.stripe} is not in the catalog")
        vol = self.archive.volumes.get(stripe.parity_disk)
        if vol is None:
            raise DataLost(f"{where}, and the parity of its stripe {row.stripe} is on "
                           f"missing disk {stripe.parity_disk}")
        with self.locks(row.stripe):
            try:
                header, parity = self.read_parity_on(vol, row.stripe, gate)
            except (OSError, CorruptParity) as exc:
                raise DataLost(f"{where}, and neither can its stripe's parity: {exc}") from None
            if (row.sig, row.overflow) not in header.keys():
                raise DataLost(f"{where}, and its stripe's parity does not hold it "
                               "(an interrupted update; see 'webfs fsck --repair')")
            payloads = [parity]
            for m in header.members:
                if m.key == (row.sig, row.overflow):
                    if row.name is None:
                        row.name = m.name       # for the header of the block rebuilt (store.header_of)
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
        return self.read_named(m, verify, gate)[1]

    def read_named(self, m: Member, verify: bool = False,
                   gate: Optional[Gate] = None) -> tuple[Member, bytes]:
        """``read_member``, and the member with the name hint of the block's header
        if it had none (the catalog keeps no name hints)."""
        for vol in search_order(self.archive.volumes, m.disk):
            disk = vol.index
            try:
                with gate(disk) if gate else nullcontext():
                    header, payload = vol.read_block(m.sig, m.overflow)
            except FileNotFoundError:
                continue
            self.count_read(disk, HEADER_SIZE + len(payload))
            if header.stored != m.stored or header.codec != m.codec or header.size != m.size:
                raise CorruptBlock(f"disk {disk}: block {m.block_name}: header disagrees with its stripe "
                                   f"(Size {header.size}, Stored {header.stored}, Codec {header.codec}; "
                                   f"the stripe says {m.size}, {m.stored}, {m.codec})")
            if verify and not self.verified(m, payload):
                raise CorruptBlock(f"disk {disk}: block {m.block_name}: content does not match its signature")
            return (m if m.name is not None else replace(m, name=header.name)), payload
        state = "missing" if m.disk not in self.archive.volumes else "present"
        raise DataLost(f"block {m.block_name} is on no disk (its disk {m.disk} is {state})")

    def named(self, members: list[Member], listed: tuple[Member, ...] = ()) -> list[Member]:
        """The members, each with its name hint: as it had one, else as a parity
        header listed it (``listed``), else from its block's header ("" if that
        cannot be read: the hint is only a hint)."""
        hints = {m.key: m.name for m in listed if m.name is not None}
        return [m if m.name is not None else replace(m, name=hints.get(m.key) or self._header_name(m))
                for m in members]

    def _header_name(self, m: Member) -> str:
        for vol in search_order(self.archive.volumes, m.disk):
            try:
                return vol.read_header(m.sig, m.overflow).name
            except FileNotFoundError:
                continue
            except (OSError, WebfsError):
                return ""
        return ""

    def count_read(self, disk: int, n: int) -> None:
        with self._reads_lock:          # rebuild reads from several threads
            self.reads[disk] += n

    def verified(self, m: Member, payload: bytes) -> bool:
        try:
            codecs.decode_checked(m.codec, payload, m.size, m.sig, self.signature_fn)
        except WebfsError:
            return False
        return True

    def parity_volume(self, stripe_id: str, parity_disk: int) -> Volume:
        vol = self.archive.volumes.get(parity_disk)
        if vol is None:
            raise DataLost(f"stripe {stripe_id}: its parity disk {parity_disk} is missing")
        return vol

    def read_parity(self, stripe_id: str, parity_disk: int,
                    gate: Optional[Gate] = None) -> tuple[ParityHeader, bytes]:
        return self.read_parity_on(self.parity_volume(stripe_id, parity_disk), stripe_id, gate)

    def read_parity_on(self, vol: Volume, stripe_id: str,
                     gate: Optional[Gate] = None) -> tuple[ParityHeader, bytes]:
        waiting = self.write_behind.get(stripe_id)
        if waiting is not None:
            return waiting.header, waiting.payload
        path = vol.parity_path(stripe_id)
        where = f"disk {vol.index}: {path}"
        with gate(vol.index) if gate else nullcontext():
            raw = vol.backend.read(path)
        self.count_read(vol.index, len(raw))
        header, n = ParityHeader.parse(raw, where)
        if header.stripe != stripe_id:
            raise CorruptParity(f"{where}: header names stripe {header.stripe}")
        if len(raw) - n != header.length:
            raise CorruptParity(f"{where}: payload is {len(raw) - n} bytes, header says {header.length}")
        return header, raw[n:]

    def write_parity(self, vol: Volume, header: ParityHeader, payload: bytes, new: bool = False) -> None:
        """Write a stripe's parity file, replacing it atomically; ``new``: the
        stripe's first, created in place (no temporary file and rename), since
        a crash that cuts it short leaves its stripe in ``meta/parity-intent``
        and so recomputed at the next open."""
        write = vol.backend.write_new if new else vol.backend.write_atomic
        write(vol.parity_path(header.stripe), header.encode() + payload, fsync=self.fsync)
        if header.stripe in self.write_behind:
            self.write_behind.forget(header.stripe)
