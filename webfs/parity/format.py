"""The parity file format (``WEBFS-PARITY 1``, webfs-format(5)): its ASCII
header, the members it lists, and the XOR of their payloads.

A parity file's header lists exactly the members its payload holds (the file
is replaced whole), so it never lies about itself; it can only disagree with
the catalog, which ``webfs.parity.reconcile`` mends.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterable, Optional

from .. import signature as sigmod
from ..block import HEADER_SIZE
from ..catalog import BlockRow
from ..errors import CorruptParity
from ..signature import ContentKey
from ..volume import META, PARITY, Volume

MAGIC = "WEBFS-PARITY 1"
REBUILD_MARKER = f"{META}/REBUILDING"       # on a disk whose rebuild has not finished
_HEADER_BYTES = re.compile(rb"WEBFS-PARITY 1\nHeader-Bytes: ([0-9]{1,9})\n")

Key = tuple[str, int]                       # (signature, overflow): one block


@dataclass(frozen=True)
class Member:
    """One block of a stripe, as its parity header lists it: enough to rebuild
    the block's header without the catalog (Refs aside). Members are equal
    without their name hint: the catalog has none to compare (None: not known
    yet; StripeIO.named reads it from the block's header)."""
    sig: str
    overflow: int
    disk: int
    stored: int
    size: int
    codec: str
    created: str
    name: Optional[str] = field(default="", compare=False)

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
                f"{self.codec} {self.created} {self.name or ''}").rstrip(" ")

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


def parity_files(vol: Volume) -> Iterable[tuple[Optional[str], str]]:
    """(stripe id or None if the name is not one, relative path) of every file under parity/."""
    for rel in vol.backend.list(PARITY):
        parsed = sigmod.parse_location(rel[len(PARITY) + 1:])
        yield (parsed[0] if parsed and not parsed[1] else None), rel

