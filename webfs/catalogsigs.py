"""The signatures a lone PostgreSQL mount knows no block has (``KnownSignatures``,
a part of ``webfs.catalog.Catalog``): a Bloom filter of the blocks' signatures.

Every document stored asks the catalog for the blocks of its signature (any
document may be a duplicate); with PostgreSQL that is a round trip a file,
half of a lone mount's waits in a copy (webfs-internals(7), POSTGRESQL
CLOSE). A mount alone (``Catalog.solo``) is the only one adding blocks, so
the signatures it read once, plus those it inserted since, are all there
are: a signature the filter has no bit of has no block, and the lookup is
not sent. A signature the filter may hold (a block's, or a false positive,
about 1 in 100) is asked as before, so dedup stays exact.

The filter holds while the token ``solo`` gave at its read is given again
(another machine's mount, once seen, may have added blocks: it is read
anew); it is made again, twice the size, when this mount's own inserts
have filled it. A rollback leaves it: the blocks it forgets are then
signatures the filter says may be there, which only costs a lookup.
SQLite's lookups are local and cheap: its catalog keeps none.

The rows of the blocks a lone mount inserted are kept too (``known_blocks``):
a document stored again (a duplicate of one stored since the mount) is
answered from them, with no lookup (webfs-internals(7), POSTGRESQL WAITS A
FILE). A signature is kept when its block is inserted while the filter has
no bit of it (then that block is its only one), and its later blocks are
added to it; the counts follow the store's changes (``blocks_counted``).
They are dropped together when the token or ``stripe_changes`` moves (a
rollback, a block moved or deleted), or past MAX_ROWS signatures.
"""
from __future__ import annotations

from typing import Callable, Optional

from .catalogengine import SQLITE
from .catalogkeys import key

BITS_PER_BLOCK = 16        # the filter's bits a block, when full (then about 1 false positive in 100)
HASHES = 3                 # bits set a signature
MIN_BLOCKS = 4096          # blocks the smallest filter holds
MAX_BLOCKS = 1 << 20       # a catalog with more blocks keeps no filter (4 MB at this bound)
READ_PAGE = 20000          # signatures read a query when the filter is made
MAX_ROWS = 65536           # signatures whose rows a lone mount keeps


class SignatureFilter:
    """A Bloom filter of 16-byte signatures (as the catalog stores them),
    room for ``capacity`` of them."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self.count = 0
        bits = 1 << max(capacity * BITS_PER_BLOCK - 1, 1).bit_length()
        self._mask = bits - 1
        self._bits = bytearray(bits >> 3)

    def _places(self, key: bytes):
        h = int.from_bytes(key, "little")
        for _ in range(HASHES):
            yield h & self._mask
            h >>= 40

    def add(self, key: bytes) -> None:
        for i in self._places(key):
            self._bits[i >> 3] |= 1 << (i & 7)
        self.count += 1

    def may_hold(self, key: bytes) -> bool:
        return all(self._bits[i >> 3] & (1 << (i & 7)) for i in self._places(key))

    @property
    def full(self) -> bool:
        return self.count > self.capacity


class KnownSignatures:
    """The catalog's filter of its blocks' signatures (a mixin of ``Catalog``,
    which gives ``lock``, ``query``, ``scalar``, ``engine``, ``solo`` and
    ``stripe_changes``)."""

    solo: Callable[[], Optional[int]]

    def forget_signatures(self) -> None:
        self._sig_filter: Optional[SignatureFilter] = None
        self._sig_token: Optional[int] = None       # solo()'s token when the filter was read
        self._sigs_many = False                      # the catalog was found over MAX_BLOCKS
        self.sig_filter_reads = 0                    # filters made since, for tests
        self.forget_rows()

    def _filter(self) -> Optional[SignatureFilter]:
        """The filter, made now if this mount is alone and it is not
        (or no longer) good; None: every signature is asked."""
        token = self.solo()
        if token is None or self.engine is SQLITE or self._sigs_many:
            return None
        if self._sig_token == token and not self._sig_filter.full:
            return self._sig_filter
        blocks = self.scalar("SELECT COUNT(*) FROM blocks")
        if blocks > MAX_BLOCKS:
            self._sigs_many = True
            return None
        made = SignatureFilter(max(2 * blocks, MIN_BLOCKS))
        last = b""
        while True:
            rows = self.query("SELECT sig FROM blocks WHERE sig > ? ORDER BY sig LIMIT ?", (last, READ_PAGE))
            for (sig,) in rows:
                made.add(bytes(sig))
            if len(rows) < READ_PAGE:
                break
            last = bytes(rows[-1][0])
        self._sig_filter, self._sig_token = made, token
        self.sig_filter_reads += 1
        return made

    def _kept_rows(self) -> dict[bytes, list]:
        """The rows kept, emptied first if what they hold under moved."""
        at = (self.solo(), self.stripe_changes)
        if at != self._rows_at:
            self._rows, self._rows_at = {}, at
        return self._rows

    def forget_rows(self) -> None:
        """Drop the rows kept (and a count set other than by the store's changes)."""
        self._rows: dict[bytes, list] = {}           # signature (as stored) -> every block row of it
        self._rows_at: Optional[tuple] = None        # (solo()'s token, stripe_changes) they hold under

    def known_blocks(self, keys: list[bytes]) -> tuple[dict[str, list], list[bytes]]:
        """Of these signatures (as stored): the rows of those whose every block
        is kept (copies, by signature), and those to ask the catalog for, which the filter
        may hold (all, without a filter; caller holds the lock)."""
        made = self._filter()
        if made is None:
            return {}, keys
        kept = self._kept_rows()
        known = {kept[k][0].sig: [r.copy() for r in kept[k]] for k in keys if k in kept}
        return known, [k for k in keys if k not in kept and made.may_hold(k)]

    def block_added(self, row) -> None:
        """This mount inserted a block (its row as inserted)."""
        stored = key(row.sig)
        with self.lock:
            if self._sig_filter is None:
                return
            kept, as_read = self._kept_rows(), row.copy()
            as_read.name = None         # (not kept by the catalog: None in a row read from it)
            if stored in kept:
                kept[stored].append(as_read)
            elif self._rows_at[0] is not None and not self._sig_filter.may_hold(stored) and len(kept) < MAX_ROWS:
                kept[stored] = [as_read]
            self._sig_filter.add(stored)

    def blocks_counted(self, rows: list) -> None:
        """These blocks' counts changed in the open transaction (rows as they are now)."""
        kept = self._kept_rows()
        for row in rows:
            held = kept.get(key(row.sig), ())
            for n, r in enumerate(held):
                if r.overflow == row.overflow:
                    held[n] = row.copy()
