"""The rows of new blocks, inserted whole.

A row of the blocks table that grows after its insert, on a page that its
neighbours filled, splits that page: set afterwards, a block's stripe (16
bytes) and its second reference (SQLite stores the counts 0 and 1 in no bytes,
2 to 127 in one) left 11 % of the table unused. So the stripe of each
new block is chosen before its row is inserted (``Protection.place``), and the
rows of a chunk are inserted with a byte of room for the second reference
(``Catalog.narrow``); both under one hold of the catalog lock, so no other
thread sees a row without its stripe or with its count one too high.

In SQLite the rows of a chunk go in one statement (``Catalog.insert_blocks``), under
the ids SQLite would have given them one by one (past the highest): an
import's chunk of 64 blocks was 64 calls, each a Python frame, a cursor and
a row made from ``lastrowid``. Should that statement fail (the catalog's
disk full), the rows it inserted stay and the rest go one at a time, as
in PostgreSQL, where each is already a write sent and not waited for
(webfs.catalogengine), so each row gets its own outcome.
"""
from __future__ import annotations

from .catalog import BlockRow, Catalog
from .protection import Placing, Protection


def insert_new(catalog: Catalog, protection: Protection, volumes, staged: list[tuple[int, BlockRow, bytes]],
               out: list, pending: list[BlockRow]) -> tuple[list[tuple[BlockRow, bytes]], Placing, list]:
    """The rows of new blocks (id 0: not inserted; into ``out`` at their
    places) written to their disks, each inserted with its stripe, and added
    to ``pending`` (the store's rows not yet committed). Returns the rows
    inserted with their payloads and what was chosen for them (for
    ``Protection.blocks_added``), and (place in out, row) of those another
    machine inserted first."""
    added, chosen, elsewhere = [], [], []
    with catalog.lock:
        placing = protection.place([row for _, row, _ in staged])
        try:
            together = catalog.insert_blocks([row for _, row, _ in staged]) or []
            for (i, _, payload), new, placed in zip(staged, together, placing.chosen):
                out[i] = new
                added.append((new, payload))
                chosen.append(placed)
            for (i, row, payload), placed in zip(staged[len(together):], placing.chosen[len(together):]):
                try:
                    try:
                        new = catalog.insert_block(*_columns(row), room=True)
                    except BaseException:
                        protection.unplace(placing, row)
                        volumes[row.disk].remove_block(row.sig, row.overflow)
                        protection.blocks_added([], placing)    # (lets go what it holds)
                        raise
                except Exception as exc:
                    out[i] = exc
                    continue
                if new is None:
                    protection.unplace(placing, row)
                    elsewhere.append((i, row))
                    continue
                out[i] = new
                added.append((new, payload))
                chosen.append(placed)
        finally:
            catalog.narrow([row.id for row, _ in added])
        # (here: the catalog lock is not taken again while a new stripe's is held)
        pending.extend(row for row, _ in added)
    return added, Placing(chosen, placing.held, placing.gone), elsewhere


def _columns(row: BlockRow) -> tuple:
    """The row's values after its id, as ``Catalog.insert_block`` takes them
    (not ``dataclasses.astuple``: it deep-copies every field, under the
    catalog lock here)."""
    return (row.sig, row.overflow, row.disk, row.size, row.stored, row.codec, row.refs, row.pins,
            row.created, row.name, row.grp, row.stripe, row.sha256)
