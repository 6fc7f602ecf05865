"""What a PostgreSQL mount alone keeps instead of asking the catalog per new
block (a real server, tests/postgres.py; no FUSE mount): the placement
groups' disks, read once, its open stripes, kept from one placement to
the next, and its blocks' signatures, whose filter spares a lookup a new
document, and the counts its commits wrote, from which the duplicates' Refs
headers are written; and a second machine's mount ending them
(webfs.cataloggroups, webfs.parity.layout, webfs.catalogsigs,
webfs.refheaders, webfs.machines).

Each test changes the tables behind the mount's back, as no other machine
may while it is alone: what the mount then does shows whether it asked."""
from __future__ import annotations

import random
import threading

import psycopg
import pytest

from conftest import make_archive
from webfs import changes, machines
from webfs.assembly import open_archive
from webfs.background import Background
from webfs.catalogsigs import SignatureFilter
from webfs.parity.layout import bits
from webfs.signature import group_of
from webfs.store import Piece


@pytest.fixture
def lone(tmp_path, postgres):
    db = postgres.new_database()
    disks = make_archive(tmp_path, catalog_url=postgres.url(db))
    store = open_archive(str(disks[0]), holder="test", shared=True)
    lease = machines.lease_for(store.catalog, str(tmp_path / "state-a"), renew=60.0)
    assert not lease.others_mounted
    yield store, lease, db
    store.close()
    lease.release()


def _second_machine(store, lease) -> machines.MachineLease:
    """Another machine's lease, taken once this mount has heard of it (its renewal)."""
    other = machines.MachineLease(store.catalog.engine, "machine-b", renew=60.0)
    taking = threading.Thread(target=other.take)
    taking.start()
    while taking.is_alive():
        lease.renew_once()
        taking.join(0.05)
    assert lease.others_mounted
    return other


def _group_not_mapped(store) -> str:
    groups = {g for g, in store.catalog.query("SELECT grp FROM groups")}
    return next(g for g in (f"{i:04x}" for i in range(65536)) if g not in groups)


def test_a_lone_mount_reads_the_groups_once_and_a_second_machine_ends_it(lone, postgres):
    store, lease, db = lone
    store.store(b"a first document")
    store.commit()
    grp = _group_not_mapped(store)
    postgres.psql(db, f"INSERT INTO groups (grp, disk) VALUES ('{grp}', 3)")
    assert store.catalog.group_disk(grp) is None        # alone: asked nothing, not mapped
    other = _second_machine(store, lease)
    assert store.catalog.group_disk(grp) == 3           # others mounted: asked
    other.release()
    lease.renew_once()
    assert not lease.others_mounted
    later = _group_not_mapped(store)
    postgres.psql(db, f"INSERT INTO groups (grp, disk) VALUES ('{later}', 2)")
    # Alone again, but what it read before the other came is not trusted: read again.
    assert store.catalog.group_disk(later) == 2


def _joining(store, stripe_disks: int, size: int) -> bytes:
    """A document of this size whose block goes to a disk the stripe does not hold."""
    for i in range(1000):
        data = random.Random(i).randbytes(size)       # stored as it is: one size class
        grp = group_of(Piece(data).signed(store.signature_fn).sig, store.conf.depth)
        if store.home_disks(grp, {})[0] not in bits(stripe_disks):
            return data
    raise AssertionError("no document found for another disk")


def _stripe_of(store, data: bytes):
    row = store.store(data)
    store.commit()
    return row.stripe, store.protection.layout.stripe(row.stripe)


def test_a_lone_mount_keeps_its_open_stripes_until_a_second_machine_mounts(lone, postgres):
    store, lease, db = lone
    assert store.protection.layout.width >= 2
    first, stripe = _stripe_of(store, random.Random("x").randbytes(4000))
    # Taken out of the open stripes behind the mount's back.
    postgres.psql(db, f"UPDATE stripes SET state='dirty' WHERE id='\\x{first}'")
    joined, _ = _stripe_of(store, _joining(store, stripe.disks, 4000))
    assert joined == first                  # alone: its open stripes were not read again
    _second_machine(store, lease)
    stripe = store.protection.layout.stripe(first)
    placed, _ = _stripe_of(store, _joining(store, stripe.disks, 4000))
    assert placed != first                  # others mounted: read, and the dirty stripe left alone


def test_a_change_to_the_stripes_other_than_a_placement_has_them_read_again(lone, postgres):
    store, lease, db = lone
    first, stripe = _stripe_of(store, random.Random("y").randbytes(4000))
    postgres.psql(db, f"UPDATE stripes SET state='dirty' WHERE id='\\x{first}'")
    store.catalog.stripe_changes += 1       # as a block moved or deleted, a stripe reconciled
    placed, _ = _stripe_of(store, _joining(store, stripe.disks, 4000))
    assert placed != first



def _row_behind_its_back(store, postgres, db, data: bytes) -> None:
    """A block row of this document's signature, overflow 0, put in behind the
    mount's back (no file, no digest: a lookup that finds it reads the block
    back, fails, and takes overflow 1)."""
    sig = Piece(data).signed(store.signature_fn).sig
    postgres.psql(db, "INSERT INTO blocks (sig, overflow, disk, size, stored, codec, refs, created, grp) "
                      f"VALUES ('\\x{sig}', 0, 0, {len(data)}, {len(data)}, 'identity', 1, 0, "
                      f"'{group_of(sig, store.conf.depth)}')")


def test_a_lone_mount_asks_no_signature_its_filter_rules_out(lone, postgres):
    store, lease, db = lone
    store.store(b"a first document")        # the filter is read here
    store.commit()
    assert store.catalog.sig_filter_reads == 1
    data = random.Random("behind").randbytes(3000)
    _row_behind_its_back(store, postgres, db, data)
    row = store.store(data)
    assert row.overflow == 0                # alone: not asked, so not seen
    with pytest.raises(psycopg.errors.UniqueViolation):
        store.commit()                      # and the commit refuses the twin row rather than lose it
    other = _second_machine(store, lease)
    row = store.store(data)
    assert row.overflow == 1                # others mounted: asked, found, not its bytes
    store.commit()
    other.release()


def test_a_lone_mount_still_finds_every_duplicate(lone):
    store, lease, db = lone
    data = random.Random("twice").randbytes(5000)
    first = store.store(data)
    store.commit()
    again = store.store(data)               # inserted by this mount: in its filter
    store.commit()
    assert (again.id, again.refs) == (first.id, 2)
    store.catalog.forget_signatures()       # as a new mount: read from the table
    third = store.store(data)
    store.commit()
    assert (third.id, third.refs) == (first.id, 3)
    assert store.catalog.sig_filter_reads == 1      # (counted since it was forgotten)


def test_a_full_filter_is_read_again_larger(lone):
    store, lease, db = lone
    store.store(b"a first document")
    store.commit()
    made = store.catalog._sig_filter
    for i in range(made.capacity):         # as many inserts as it has room for
        made.add(i.to_bytes(16, "little"))
    assert made.full
    store.store(b"another document")
    store.commit()
    assert store.catalog.sig_filter_reads == 2


def test_the_filter_has_no_false_negative_and_few_false_positives():
    made = SignatureFilter(10000)
    rng = random.Random(1)
    held = [rng.randbytes(16) for _ in range(10000)]
    for k in held:
        made.add(k)
    assert all(made.may_hold(k) for k in held)
    assert not made.full
    others = sum(made.may_hold(rng.randbytes(16)) for _ in range(10000))
    assert others < 300                     # (about 1 in 100 when full)


def _committed_then(store, data: bytes, behind, header_of=None) -> int:
    """Store ``data`` (again) and commit, the header jobs held back until
    ``behind`` (a change of the tables behind the mount's back) is done;
    the Refs the header of ``header_of`` (the block stored) then has."""
    gate = threading.Event()
    store.background = Background("test-held-headers")
    store.background.submit(gate.wait)
    row = store.store(data)
    store.commit()
    row = header_of or row
    behind(row)
    gate.set()
    store.background.drain()
    return store.archive.volumes[row.disk].read_header(row.sig, row.overflow).refs


def _counted(postgres, db, n):
    return lambda row: postgres.psql(db, f"UPDATE blocks SET refs={n} WHERE id={row.id}")


def test_a_lone_mount_writes_a_duplicates_header_from_the_count_it_committed(lone, postgres):
    store, lease, db = lone
    data = random.Random("refs").randbytes(5000)
    store.store(data)
    store.commit()
    assert _committed_then(store, data, _counted(postgres, db, 9)) == 2       # alone: the catalog not read
    assert store.headers.reads == 0
    _second_machine(store, lease)
    assert _committed_then(store, data, _counted(postgres, db, 20)) == 20     # others mounted: read
    assert store.headers.reads == 1


def test_a_count_changed_before_a_rollback_or_a_move_is_read(lone, postgres):
    store, lease, db = lone
    data = random.Random("moved").randbytes(5000)
    store.store(data)
    store.commit()

    def moved_then_counted(row):        # (as a block moved or deleted since the count changed)
        store.catalog.stripe_changes += 1
        _counted(postgres, db, 7)(row)
    assert _committed_then(store, data, moved_then_counted) == 7
    rolled = store.store(data)          # counted 8, then rolled back: its header is due still
    store.catalog.rollback()
    store._undo_pending()
    assert rolled.refs == 8
    other = random.Random("other").randbytes(3000)
    assert _committed_then(store, other, _counted(postgres, db, 11), rolled) == 11
    assert store.headers.reads == 3


def test_a_lone_mount_answers_a_duplicate_of_a_block_it_inserted_from_its_row(lone, postgres):
    store, lease, db = lone
    data = random.Random("kept").randbytes(5000)
    first = store.store(data)
    store.commit()
    postgres.psql(db, f"UPDATE blocks SET refs=9 WHERE id={first.id}")    # behind its back
    again = store.store(data)
    store.commit()
    assert (again.id, again.refs) == (first.id, 2)      # alone: its kept row, not asked
    store.catalog.stripe_changes += 1                   # (as a block moved or deleted)
    assert store.store(data).refs == 11                 # asked: the catalog's count (10), one more
    store.commit()
    other = random.Random("other").randbytes(4000)
    made = store.store(other)
    store.commit()
    postgres.psql(db, f"UPDATE blocks SET refs=5 WHERE id={made.id}")
    _second_machine(store, lease)
    assert store.store(other).refs == 6                 # others mounted: asked
    store.commit()


def test_a_count_set_by_recovery_or_fsck_drops_the_rows_kept(lone):
    store, lease, db = lone
    data = random.Random("set").randbytes(5000)
    first = store.store(data)
    store.commit()
    store.correct_refs(first, 5)            # (crash recovery, fsck --repair)
    store.commit()
    assert store.store(data).refs == 6
    store.commit()


def _told(store, lease, postgres, db):
    """The mount's commits telling what they changed (as the daemon wires
    them), and a connection listening for it as another machine's does."""
    told = changes.ChangeLog(lease.machine)
    store.catalog.db.notice = told.notice
    listening = psycopg.connect(postgres.url(db), autocommit=True)
    listening.execute(f"LISTEN {changes.CHANNEL}")
    return told, listening


def _commit_changing(store, told, ino: int) -> None:
    store.store(random.Random(ino).randbytes(3000))
    told.inode(ino)
    store.commit()


def test_a_lone_mount_sends_no_notice_and_a_second_machine_hears_them(lone, postgres):
    store, lease, db = lone
    told, listening = _told(store, lease, postgres, db)
    _commit_changing(store, told, 5)
    # A notice sent before this commit's own (none, alone) would be read first.
    listening.execute("SELECT pg_notify(%s, 'marker')", (changes.CHANNEL,))
    assert [n.payload for n in listening.notifies(timeout=60, stop_after=1)] == ["marker"]
    other = _second_machine(store, lease)
    _commit_changing(store, told, 6)
    assert [n.payload for n in listening.notifies(timeout=60, stop_after=1)] == [f"{lease.machine} 6"]
    other.release()
    listening.close()


def test_a_machine_mounting_while_a_commit_holds_the_lease_row_hears_it(lone, postgres):
    """The notice asks whether others are mounted after the fence holds the
    lease row: a newcomer's row committed while this commit's fence waits
    for that row (held here by a renewal in flight) is seen, and told."""
    store, lease, db = lone
    told, listening = _told(store, lease, postgres, db)
    store.store(random.Random(7).randbytes(3000))
    told.inode(7)
    renewal = psycopg.connect(postgres.url(db))
    renewal.execute("UPDATE mounts SET renewed_at = now() WHERE machine = %s", (lease.machine,))
    committing = threading.Thread(target=store.commit)
    committing.start()
    pid = store.catalog.db.conn.info.backend_pid
    while postgres.psql(db, f"SELECT count(*) FROM pg_locks WHERE pid={pid} AND NOT granted").strip() != "1":
        committing.join(0.02)
    newcomer = psycopg.connect(postgres.url(db), autocommit=True)
    newcomer.execute("INSERT INTO mounts (machine, host, pid, token, renew) VALUES ('machine-b', 'b', 1, 0, 60)")
    renewal.commit()
    committing.join(60)
    assert [n.payload for n in listening.notifies(timeout=60, stop_after=1)] == [f"{lease.machine} 7"]
    for conn in (renewal, newcomer, listening):
        conn.close()
