"""The block file format (version 1): a 512-byte ASCII header, then the payload.

This module is the one source of truth for the header's layout; the man
page webfs-format(5) is checked against it by a test. A header reads::

    WEBFS-BLOCK 1
    Signature: xxh128:<32 hex digits>
    Size: <document length>
    Stored: <payload length>
    Codec: gzip|identity
    Refs: 0000000003
    Created: 2026-11-25T21:00:00Z
    Digest: sha256:<64 hex digits>
    Name: <first name, percent-encoded, cut to fit>

then spaces, and a newline as byte 511. ``Refs`` has a fixed width so it
can be rewritten in place. ``Digest`` (the document's SHA-256) came with the
format's growth: blocks written before it have none, and readers that do
not know it skip it, as they skip every key they do not know.
"""
from __future__ import annotations

import re
import time
from dataclasses import dataclass, replace
from typing import Optional

from .errors import CorruptBlock
from .signature import DIGEST_ALGORITHM, DIGEST_BYTES

HEADER_SIZE = 512
MAGIC = b"WEBFS-BLOCK 1\n"
REFS_WIDTH = 10
MAX_REFS = 10 ** REFS_WIDTH - 1
_FIELDS = ("Signature", "Size", "Stored", "Codec", "Refs", "Created", "Name")
_LINE = re.compile(rb"([A-Za-z-]+): ?(.*)")
_DIGEST = re.compile(f"{DIGEST_ALGORITHM}:([0-9a-f]{{{2 * DIGEST_BYTES}}})")


def utc_timestamp(seconds: float | None = None) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


_PLAIN_NAME = re.compile(rb"[\x21-\x24\x26-\x7e]*")     # what percent_encode leaves as it is


def percent_encode(name: bytes) -> str:
    """Every byte outside 0x21..0x7e, and '%', becomes %XX: the result is ASCII."""
    if _PLAIN_NAME.fullmatch(name):
        return name.decode("ascii")          # the common case, without a step per byte
    return "".join(chr(b) if 0x21 <= b <= 0x7e and b != 0x25 else f"%{b:02X}"
                   for b in name)


def percent_decode(text: str) -> bytes:
    out = bytearray()
    i = 0
    while i < len(text):
        if text[i] == "%" and _is_hex(text[i + 1:i + 3]):
            out.append(int(text[i + 1:i + 3], 16))
            i += 3
        else:
            out += text[i].encode("ascii", "replace")
            i += 1
    return bytes(out)


def _is_hex(text: str) -> bool:
    return len(text) == 2 and all(c in "0123456789abcdefABCDEF" for c in text)


def fit_encoded(text: str, room: int) -> str:
    """Cut a percent-encoded name to at most room characters, never inside an escape."""
    if len(text) <= room:
        return text
    cut = room
    if "%" in text[max(0, cut - 2):cut]:
        cut = text.rindex("%", max(0, cut - 2), cut)
    return text[:cut]


@dataclass(frozen=True)
class BlockHeader:
    signature: str
    size: int
    stored: int
    codec: str
    refs: int
    created: str
    name: str = ""          # percent-encoded already
    sha256: Optional[bytes] = None      # the content digest; None in blocks older than it

    def encode(self) -> bytes:
        if not 0 <= self.refs <= MAX_REFS:
            raise ValueError(f"refs out of range: {self.refs}")
        digest = f"Digest: {DIGEST_ALGORITHM}:{self.sha256.hex()}\n" if self.sha256 else ""
        head = (_head_to_refs(self.signature, self.size, self.stored, self.codec) +
                f"{self.refs:0{REFS_WIDTH}d}\nCreated: {self.created}\n{digest}Name: ")
        name = fit_encoded(self.name, HEADER_SIZE - len(head) - 2)
        text = (head + name + "\n").encode("ascii")
        return text + b" " * (HEADER_SIZE - 1 - len(text)) + b"\n"

    def with_refs(self, refs: int) -> "BlockHeader":
        return replace(self, refs=refs)

    @classmethod
    def parse(cls, raw: bytes, where: str = "block") -> "BlockHeader":
        if len(raw) < HEADER_SIZE:
            raise CorruptBlock(f"{where}: header truncated ({len(raw)} of {HEADER_SIZE} bytes)")
        if not raw.startswith(MAGIC):
            raise CorruptBlock(f"{where}: not a webfs block (no 'WEBFS-BLOCK 1' line)")
        fields: dict[str, str] = {}
        for line in raw[len(MAGIC):HEADER_SIZE].split(b"\n"):
            m = _LINE.fullmatch(line.rstrip(b" "))
            if m:
                try:
                    fields[m.group(1).decode()] = m.group(2).decode("ascii")
                except UnicodeDecodeError:
                    raise CorruptBlock(f"{where}: header holds non-ASCII bytes") from None
        missing = [f for f in _FIELDS[:-1] if f not in fields]
        if missing:
            raise CorruptBlock(f"{where}: header lacks {', '.join(missing)}")
        sig = fields["Signature"].removeprefix("xxh128:")
        try:
            size, stored, refs = (int(fields[k]) for k in ("Size", "Stored", "Refs"))
        except ValueError:
            raise CorruptBlock(f"{where}: Size, Stored or Refs is not a number") from None
        if not re.fullmatch(r"[0-9a-f]{32}", sig) or min(size, stored, refs) < 0:
            raise CorruptBlock(f"{where}: bad Signature, Size, Stored or Refs value")
        return cls(sig, size, stored, fields["Codec"], refs, fields["Created"],
                   fields.get("Name", ""), _parse_digest(fields.get("Digest"), where))


def _parse_digest(value: Optional[str], where: str) -> Optional[bytes]:
    """The SHA-256 of a Digest value; None without one, or of an algorithm
    this version does not know (a later version's: its blocks are then
    compared byte for byte, as blocks without a digest are)."""
    if value is None or not value.startswith(DIGEST_ALGORITHM + ":"):
        return None
    m = _DIGEST.fullmatch(value)
    if not m:
        raise CorruptBlock(f"{where}: bad Digest value")
    return bytes.fromhex(m.group(1))


def _head_to_refs(sig: str, size: int, stored: int, codec: str) -> str:
    return (f"WEBFS-BLOCK 1\nSignature: xxh128:{sig}\n"
            f"Size: {size}\nStored: {stored}\nCodec: {codec}\nRefs: ")


def refs_offset_of(sig: str, size: int, stored: int, codec: str) -> int:
    """Where the Refs digits are in the header of a block with these fields,
    so a reference count is rewritten without reading the header first."""
    return len(_head_to_refs(sig, size, stored, codec))


def refs_offset(raw_header: bytes) -> int:
    """Byte offset of the Refs digits inside an encoded header."""
    pos = raw_header.find(b"\nRefs: ", 0, HEADER_SIZE)
    if pos < 0:
        raise CorruptBlock("header lacks Refs")
    return pos + len(b"\nRefs: ")


def encode_refs(refs: int) -> bytes:
    return f"{refs:0{REFS_WIDTH}d}".encode()


def with_refs(raw: bytes, refs: int) -> bytes:
    """A whole block file's bytes with the Refs of its header set to refs."""
    at = refs_offset(raw)
    return raw[:at] + encode_refs(refs) + raw[at + REFS_WIDTH:]
