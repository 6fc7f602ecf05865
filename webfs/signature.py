"""Document signatures and where they live in the signature tree.

A signature is the xxh3-128 digest of a document's bytes, written as 32
lowercase hex digits. A tree of depth n keeps a block at
``blocks/<byte 1>/.../<byte n-1>/<remaining hex digits>`` (Webstore's
sig2location); its leaf directory is the block's *placement group*. Overflow
blocks (fake duplicates: other documents with the same signature) add
``~1``, ``~2``, ... to the file name. A *contentkey* names one block and,
optionally, the disk that holds it: ``<sig>[~n][@disk]``.

A signature places a document and finds its block fast, but xxh3-128
collisions can be made on purpose. A block also keeps the *content digest*
of its document, SHA-256, which cannot: two documents with the same
signature, size and digest are the same document, so the store decides a
duplicate without reading the stored block back.
"""
from __future__ import annotations

import hashlib
import re
from typing import Callable, NamedTuple, Optional

import xxhash

from .settings import DEFAULT_DEPTH, MAX_DEPTH, MIN_DEPTH  # noqa: F401 (the tree's depths, named here too)

SIG_HEX_DIGITS = 32

SignatureFn = Callable[[bytes], str]
DIGEST_ALGORITHM = "sha256"     # how a block header names its content digest
DIGEST_BYTES = 32

_SIG_RE = re.compile(r"[0-9a-f]{32}")
_KEY_RE = re.compile(r"(?:xxh128:)?([0-9a-f]{32})(?:~([0-9]+))?(?:@([0-9]+))?")


def signature(data: bytes) -> str:
    """The signature of a document: xxh3-128 of its bytes, 32 hex digits."""
    return xxhash.xxh3_128_hexdigest(data)


def content_digest(data: bytes) -> bytes:
    """The content digest of a document: SHA-256 of its bytes (32 bytes). Chosen
    over BLAKE3 (faster above 16 KB here) for being in the standard library and
    in coreutils (``sha256sum``), so a person can check a block without webfs;
    both are far faster than the compression a new block needs."""
    return hashlib.sha256(data).digest()


def new_hasher():
    """An incremental hasher whose hexdigest() equals signature() of the data fed."""
    return xxhash.xxh3_128()


def is_signature(text: str) -> bool:
    return bool(_SIG_RE.fullmatch(text))


def check_depth(depth: int) -> int:
    if not MIN_DEPTH <= depth <= MAX_DEPTH:
        raise ValueError(f"tree depth must be {MIN_DEPTH}..{MAX_DEPTH}, not {depth}")
    return depth


def group_of(sig: str, depth: int) -> str:
    """The placement group of a signature: its first depth-1 bytes in hex."""
    return sig[: 2 * (depth - 1)]


def group_dir(group: str) -> str:
    """The relative directory of a placement group: 'abcd' -> 'ab/cd'."""
    return "/".join(group[i:i + 2] for i in range(0, len(group), 2))


def block_name(sig: str, overflow: int = 0) -> str:
    """How MANIFEST, parity headers and logs name a block: 'sig', or 'sig~N' for
    an overflow block (a different document with the same signature)."""
    return sig + (f"~{overflow}" if overflow else "")


def location(sig: str, depth: int, overflow: int = 0) -> str:
    """Relative path of a block (or parity file) below blocks/ (or parity/)."""
    cut = 2 * (depth - 1)
    return f"{group_dir(sig[:cut])}/{block_name(sig, overflow)[cut:]}"


def parse_location(relpath: str) -> Optional[tuple[str, int]]:
    """Inverse of location(): 'ab/cd/ef..~2' -> (sig, 2), or None if not one."""
    parts = relpath.split("/")
    name, _, ovf = parts[-1].partition("~")
    sig = "".join(parts[:-1]) + name
    if not is_signature(sig) or any(len(p) != 2 for p in parts[:-1]):
        return None
    if ovf and not ovf.isdigit():
        return None
    return sig, int(ovf or 0)


class ContentKey(NamedTuple):
    """Names one block: its signature, overflow number and (if known) disk."""
    sig: str
    overflow: int = 0
    disk: Optional[int] = None

    def __str__(self) -> str:
        return self.block_name if self.disk is None else f"{self.block_name}@{self.disk}"

    @property
    def block_name(self) -> str:
        """The key without the disk: what MANIFEST and parity headers record."""
        return block_name(self.sig, self.overflow)

    @classmethod
    def parse(cls, text: str) -> "ContentKey":
        m = _KEY_RE.fullmatch(text.strip().lower())
        if not m:
            raise ValueError(
                f"not a contentkey: {text!r} (expected 32 hex digits, "
                "optionally followed by ~N and @DISK)")
        return cls(m.group(1), int(m.group(2) or 0),
                   None if m.group(3) is None else int(m.group(3)))
