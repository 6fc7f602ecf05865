"""Reference counts of blocks that other machines' mounts change too (a
PostgreSQL catalog, webfs.machines): what ``webfs.store`` does differently
there (a reference's release is decided the same way on both engines:
``Store.release``).

- ``vanished``: a duplicate's new reference (UPDATE refs=refs+1) that found
  no row, because another machine released the block to 0 at that moment;
  asked only while other machines are mounted (one round trip), and the
  document is then stored anew (``anew``), under an overflow number above
  the gone block's, whose file the other machine is about to remove.
- ``made_elsewhere``: the block another machine made of the same document
  at the same moment (its row committed first): shared.
- ``others_mounted``: whether a failed commit's new block files stay (the
  store's undo): another machine may be storing the same document under
  the same name, and fsck --repair removes an orphan.
"""
from __future__ import annotations

import logging
from .catalog import BlockRow, Catalog
from .errors import NoSuchBlock
from .piece import Piece

log = logging.getLogger(__name__)


def others_mounted(catalog: Catalog) -> bool:
    """May other machines' mounts be changing the catalog now (as of this
    mount's last renewal; webfs.machines)?"""
    numbers = catalog.inode_numbers
    return numbers is not None and numbers.checked


def vanished(catalog: Catalog, ids: list[int]) -> set[int]:
    """Of these blocks, whose counts this transaction just raised, those whose
    rows are gone (another machine released them to 0 first). Asked only
    while other machines are mounted."""
    if not ids or not others_mounted(catalog):
        return set()
    return set(ids) - {r[0] for r in catalog.query_in("SELECT id FROM blocks WHERE id IN ({})", ids)}


def anew(store, again: list[tuple[Piece, bytes, BlockRow]]) -> list[tuple[Piece, bytes, int]]:
    """Documents whose duplicate's block vanished (piece, name, the gone
    block's row), as new blocks to store (piece, name, overflow): each under
    an overflow number above every one of its signature in use, being
    removed, or gone."""
    sigs = list({p.sig for p, _, _ in again})
    found = store.catalog.blocks_with_sigs(sigs)
    with store.catalog.lock:
        leaving = store.leaving_blocks()
    taken: dict[str, set[int]] = {s: {r.overflow for r in found.get(s, []) + leaving if r.sig == s} for s in sigs}
    new = []
    for piece, name, gone in again:
        used = taken[piece.sig]
        used.add(gone.overflow)
        overflow = max(used) + 1
        used.add(overflow)
        log.info("block %s: released by another machine as this one added a reference; stored anew as ~%d",
                 gone.block_name, overflow)
        new.append((piece, name, overflow))
    return new


def made_elsewhere(store, mine: BlockRow, pin: bool) -> BlockRow:
    """The block another machine made of the same document at the same moment
    (its row committed first; this one's file, written over its own, holds
    the same payload): one more reference to it."""
    row = next((r for r in store.catalog.blocks_with_sigs([mine.sig]).get(mine.sig, [])
                if r.overflow == mine.overflow), None)
    if row is None or (row.size, row.sha256) != (mine.size, mine.sha256):
        raise NoSuchBlock(f"block {mine.block_name}: another machine stored another "
                          "document under this signature at the same moment")
    log.info("block %s: stored by another machine at the same moment; shared", row.block_name)
    return store.add_counted(row, pin)


__all__ = ["anew", "made_elsewhere", "others_mounted", "vanished"]
