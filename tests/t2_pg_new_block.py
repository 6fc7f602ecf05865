"""A new block's open stripes read ahead, with its group (a real server,
tests/postgres.py; no FUSE mount): with another machine mounted the store
sends the read of the open stripes before it waits for the groups, and the
placement takes that answer instead of asking again (webfs.parity.layout
``read_ahead``, webfs.catalogengine ``PgConnection.read_ahead``).

As in t2_pg_lone_mount, a stripe is taken out of the open ones behind the
mount's back (marked dirty, committed by another session): whether the
placement still joins it shows when the stripes were read."""
from __future__ import annotations

import random

from t2_pg_lone_mount import _joining, _second_machine, _stripe_of, lone  # noqa: F401 (a fixture)
from webfs.catalog import BlockRow
from webfs.signature import group_of
from webfs.store import Piece


def _row(store, data: bytes) -> BlockRow:
    """The row of a new block of this document, not inserted (id 0), on its home disk."""
    sig = Piece(data).signed(store.signature_fn).sig
    grp = group_of(sig, store.conf.depth)
    return BlockRow(0, sig, 0, store.home_disks(grp, {})[0], len(data), len(data), "identity", 1, 0,
                    "2026-11-28T00:00:00Z", "x", grp, None)


def _placed(store, data: bytes, ahead: bool, between=None) -> str:
    """The stripe a new block of this document is placed in, in an open
    transaction; ``ahead``: its open stripes read ahead first, ``between``
    run after that; nothing kept (rolled back)."""
    store.store(b"a write: the transaction is open")
    row = _row(store, data)
    if ahead:
        with store.catalog.lock:
            store.protection.read_ahead([row.stored])
    if between is not None:
        between()
    placing = store.protection.place([row])
    store.protection.unplace(placing, row)
    store.protection.blocks_added([], placing)
    store.catalog.rollback()
    return row.stripe


def test_with_others_mounted_the_placement_takes_the_stripes_read_ahead(lone, postgres):
    store, lease, db = lone
    first, stripe = _stripe_of(store, random.Random("a").randbytes(4000))
    _second_machine(store, lease)
    data = _joining(store, stripe.disks, 4000)
    dirty = lambda: postgres.psql(db, f"UPDATE stripes SET state='dirty' WHERE id='\\x{first}'")  # noqa: E731
    assert _placed(store, data, ahead=True, between=dirty) == first     # read before it was taken out
    assert _placed(store, data, ahead=False) != first                   # read at the placement


def test_a_stripe_changed_here_after_the_read_ahead_has_them_read_again(lone, postgres):
    store, lease, db = lone
    first, stripe = _stripe_of(store, random.Random("b").randbytes(4000))
    _second_machine(store, lease)

    def changed_here():
        postgres.psql(db, f"UPDATE stripes SET state='dirty' WHERE id='\\x{first}'")
        store.catalog.stripe_changes += 1       # as a block moved or deleted, a stripe reconciled
    assert _placed(store, _joining(store, stripe.disks, 4000), ahead=True, between=changed_here) != first


def test_a_read_ahead_is_taken_once(lone, postgres):
    store, lease, db = lone
    first, stripe = _stripe_of(store, random.Random("c").randbytes(4000))
    _second_machine(store, lease)
    data = _joining(store, stripe.disks, 4000)

    def placed_then_dirty():
        # Another placement (of another size class) takes the answer first.
        store.protection.place([_row(store, random.Random("d").randbytes(40))])
        postgres.psql(db, f"UPDATE stripes SET state='dirty' WHERE id='\\x{first}'")
    assert _placed(store, data, ahead=True, between=placed_then_dirty) != first


def test_a_lone_mount_reads_nothing_ahead(lone, postgres):
    store, lease, db = lone
    store.store(b"a write")
    with store.catalog.lock:
        store.protection.read_ahead([4000])
    assert store.protection.layout._ahead is None
    store.catalog.rollback()


def test_outside_a_transaction_the_read_ahead_is_read_at_once(lone, postgres):
    store, lease, db = lone
    first, stripe = _stripe_of(store, random.Random("e").randbytes(4000))
    _second_machine(store, lease)
    assert not store.catalog.db.in_transaction
    with store.catalog.lock:
        store.protection.read_ahead([4000])
    postgres.psql(db, f"UPDATE stripes SET state='dirty' WHERE id='\\x{first}'")
    row = _row(store, _joining(store, stripe.disks, 4000))
    placing = store.protection.place([row])
    assert row.stripe == first              # its rows were those of the read's moment
    store.protection.unplace(placing, row)
    store.protection.blocks_added([], placing)
    store.catalog.rollback()
