"""How the catalog stores what the rest of webfs keeps as text: signatures
and stripe ids as 16 bytes (32 hex digits elsewhere), a block's Created as
seconds, and a placement group as a range of signatures (its prefix).

The conversions happen at the catalog's edge, where rows are read and
parameters bound, so the formats on disk (headers, Member lines, MANIFEST)
never see them.
"""
from __future__ import annotations

import calendar
import functools
import time
from typing import Optional

CREATED_FORMAT = "%Y-%m-%dT%H:%M:%SZ"       # a block header's Created (webfs.block.utc_timestamp)
SIG_DIGITS = 32                             # hex digits of a signature


def key(hex_id: Optional[str]) -> Optional[bytes]:
    """A signature or stripe id (32 hex digits) as the catalog stores it: 16
    bytes."""
    return None if hex_id is None else bytes.fromhex(hex_id)


def hex_of(stored: Optional[bytes]) -> Optional[str]:
    """A signature or stripe id as stored (16 bytes) in webfs's hex text (as
    it is already when read from a catalog of schema 1 or 2 not migrated:
    one that 'fsck --rebuild-catalog' compares with the one it made)."""
    return stored.hex() if type(stored) is bytes else stored


def keys(hex_ids) -> list[bytes]:
    return [bytes.fromhex(h) for h in hex_ids]


def sig_range(prefix: str) -> tuple[bytes, bytes]:
    """The first and last stored signature that start with these hex digits
    (a placement group is its signatures' prefix: webfs.signature.group_of),
    so the signature's own index finds a group's blocks."""
    return (bytes.fromhex(prefix.ljust(SIG_DIGITS, "0")), bytes.fromhex(prefix.ljust(SIG_DIGITS, "f")))


@functools.lru_cache(maxsize=64)
def seconds_of(created: str):
    """A header's Created (2026-11-25T21:00:00Z) as the catalog stores it:
    seconds since 1970, UTC; a text in any other form is kept as it is, so
    the header a block is rebuilt with says what it said. Memoized: the
    blocks stored in one second share their Created, and strptime is slow."""
    try:
        seconds = calendar.timegm(time.strptime(created, CREATED_FORMAT))
    except (ValueError, OverflowError):
        return created
    return seconds if time.strftime(CREATED_FORMAT, time.gmtime(seconds)) == created else created


@functools.lru_cache(maxsize=64)
def created_of(stored) -> str:
    """The Created text of a stored ``created`` (seconds, or the text of a
    catalog of schema 3 and older, or an odd header's). Memoized as
    ``seconds_of``: every block row read makes one (a cold lookup, a
    read-ahead's listing), and strftime was 2% of a Zipf reader's loop."""
    return time.strftime(CREATED_FORMAT, time.gmtime(stored)) if type(stored) is int else stored
