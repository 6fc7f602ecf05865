"""What the store asks of redundancy: the ``Protection`` interface.

The store calls it as blocks come and go; ``webfs.parity`` implements it with
declustered parity stripes, and the base class here protects nothing (an
archive of one disk, tests). Neither the store nor parity imports the other:
``webfs.assembly.open_archive`` puts them together.
"""
from __future__ import annotations

from typing import NamedTuple, Optional

from .catalog import BlockRow
from .errors import DataLost


class Placing(NamedTuple):
    """What ``Protection.place`` chose for each row (None: nothing), what it
    holds until ``blocks_added`` (parity: the locks of stripes it started),
    and what ``unplace`` left for ``blocks_added`` to mend."""
    chosen: list
    held: dict
    gone: list


class Protection:
    """What the store asks of redundancy; this one protects nothing.

    ``webfs.parity`` implements it with declustered parity stripes.
    """

    @property
    def has_parity(self) -> bool:
        """Does the archive have parity stripes: something fsck checks, scrub
        reads against and a disk rebuild rebuilds from? Only when it says so do
        those commands use the stripes' own methods (``webfs.parity.Parity``)."""
        return False

    def place(self, rows: list[BlockRow]) -> Placing:
        """Choose the redundancy of new blocks whose rows are not yet inserted
        (id 0), setting each row's ``stripe``, under the catalog lock that the
        caller holds until it has inserted them: a row inserted whole does
        not grow on a full page of the catalog and split it. Hand it to
        ``blocks_added``, which releases what it holds."""
        return Placing([None] * len(rows), {}, [])

    def read_ahead(self, stored: list[int]) -> None:
        """New blocks this long are about to be placed: what ``place`` will
        read may be asked now, its answer waited for with the next statement
        (under the catalog lock, which the caller holds)."""

    def unplace(self, placing: Placing, row: BlockRow) -> None:
        """A block ``place`` chose for whose row was not inserted after all."""

    def blocks_added(self, added: list[tuple[BlockRow, bytes]], placing: Optional[Placing] = None,
                     here: bool = False) -> None:
        """New blocks (their rows and payloads), stored but not yet committed;
        ``placing``: what ``place`` chose for them (in their order), if it was
        asked first; ``here``: the caller (the event loop's store of a small
        file) holds no lock and writes the parity files they make due itself."""

    def block_removed(self, row: BlockRow, payload: Optional[bytes]) -> None:
        pass

    def rolled_back(self, rows: list[BlockRow]) -> None:
        """New blocks whose catalog rows a failed commit undid; their files are gone."""

    def reconstruct(self, row: BlockRow) -> bytes:
        """The payload of a block that its disk cannot give, or DataLost."""
        raise DataLost(f"block {row.block_name} on disk {row.disk} cannot be read and has no parity")

    # Stripes an interrupted process left, made to agree at open: (stripe id, what was done).
    recovered: tuple[tuple[str, str], ...] = ()

    def protect(self, row: BlockRow, payload: bytes) -> bool:
        """Give redundancy to a block stored without it (no other disk could
        take it then); the caller commits. True if the block now has it."""
        return False

    def flush(self, older_than: float = 0.0) -> None:
        """Write whatever redundancy still waits in memory (that has waited
        ``older_than`` seconds)."""

    def committed(self) -> None:
        """The catalog's changes so far are durable."""

    def flush_due(self) -> None:
        """Write the redundancy that has waited long enough (after a commit, in
        the store's background worker)."""

    def files_on(self, disk: int) -> int:
        """How many files of redundancy (parity files) a disk holds."""
        return 0

    def out_of_date(self) -> int:
        """How many units of redundancy (parity stripes) are known to be stale."""
        return 0

    def reconcile_stale(self) -> int:
        """Bring the redundancy marked out of date up to date now (a disk is
        back after an outage); how many units (stripes) were."""
        return 0

    def close(self) -> None:
        pass

    def status(self) -> dict:
        return {"kind": "none"}
