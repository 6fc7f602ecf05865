"""A PostgreSQL catalog mounted by one machine alone (a real server,
tests/postgres.py; no FUSE mount): new blocks' rows under ids taken ahead,
not waited for, and a newcomer that goes on only once the mounts before it
know they are no longer alone, and an executemany of no rows that sends
nothing (webfs.machines, webfs.catalogengine)."""
from __future__ import annotations

import threading
import time

import pytest

from conftest import eventually
from webfs.catalog import Catalog
from webfs.catalogengine import BLOCK_IDS, PostgresEngine
from webfs.machines import MachineLease
from webfs.namespace.tree import Namespace

SIG, OTHER = "ab" * 16, "cd" * 16


def _block(cat: Catalog, sig: str):
    return cat.insert_block(sig, 0, 0, 10, 10, "identity", 1, 0, "2024-01-01T00:00:00Z", "", sig[:4])


@pytest.fixture
def catalog(tmp_path, postgres):
    db = postgres.new_database()
    cat = Catalog(str(tmp_path / "meta" / "catalog.db"), PostgresEngine(postgres.url(db)))
    yield cat, db
    cat.close()


def test_a_lone_mount_inserts_a_new_block_under_an_id_taken_ahead_without_waiting(catalog, postgres):
    cat, db = catalog
    cat.db.alone = lambda: True
    row = _block(cat, SIG)
    # The INSERT's result is still owed by the server: nothing was waited for.
    assert row is not None and len(cat.db._pipeline.result_queue) > 0
    second = _block(cat, OTHER)
    assert second.id == row.id + 1 and len(cat.db._block_ids) == BLOCK_IDS - 2
    cat.commit()
    assert postgres.psql(db, "SELECT id FROM blocks ORDER BY id").split() == [str(row.id), str(second.id)]


def test_with_others_mounted_a_new_block_is_waited_for_and_one_made_elsewhere_is_none(catalog, postgres):
    cat, db = catalog
    cat.db.alone = lambda: False
    postgres.psql(db, f"INSERT INTO blocks (sig, overflow, disk, size, stored, codec, refs, pins, created, grp) "
                      f"VALUES ('\\x{OTHER}', 0, 1, 10, 10, 'identity', 1, 0, 0, 'cdcd')")
    row = _block(cat, SIG)
    assert row is not None and len(cat.db._pipeline.result_queue) == 0
    assert _block(cat, OTHER) is None
    cat.commit()


def test_a_lone_mount_whose_block_another_made_fails_its_commit_rather_than_lose_the_row(catalog, postgres):
    """Alone, no ON CONFLICT: should another machine's row of the signature be
    there after all, the commit fails (the batch rolled back, EIO), where a
    silent conflict would leave a file naming a block that has no row."""
    import psycopg
    cat, db = catalog
    cat.db.alone = lambda: True
    postgres.psql(db, f"INSERT INTO blocks (sig, overflow, disk, size, stored, codec, refs, pins, created, grp) "
                      f"VALUES ('\\x{SIG}', 0, 1, 10, 10, 'identity', 1, 0, 0, 'abab')")
    _block(cat, SIG)
    with pytest.raises(psycopg.errors.UniqueViolation):
        cat.commit()
    cat.rollback()
    assert _block(cat, OTHER) is not None           # the connection goes on
    cat.commit()
    assert postgres.psql(db, "SELECT count(*) FROM blocks").strip() == "2"


def test_a_newcomer_waits_until_the_mount_before_it_knows_it_is_not_alone(catalog):
    """B's lease is taken only once A has renewed its row after B's was made:
    A's renewal counts the others, so from then on A checks names and waits
    for its blocks' rows. A's period is long: without its renewal B would wait."""
    cat, _ = catalog
    first = MachineLease(cat.engine, "machine-a", renew=60.0)
    first.take()
    assert not first.others_mounted
    second = MachineLease(cat.engine, "machine-b", renew=60.0)
    taken = threading.Event()
    thread = threading.Thread(target=lambda: (second.take(), taken.set()))
    thread.start()
    try:
        deadline = time.monotonic() + 60
        while first.others() == [] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert first.others() and not taken.is_set()     # B's row is there; B waits for A
        first.renew_once()
        assert first.others_mounted
        assert taken.wait(60) and second.others_mounted
    finally:
        thread.join(60)
        second.release(), first.release()


def test_two_mounts_waiting_for_each_other_go_on_without_waiting_to_the_end(catalog, caplog):
    """B waits for A's renewal while A, which has seen B's row, waits for B's
    (as two mounts made at once can): each renews its own row as it waits, so
    both go on at once instead of at the wait's end (30 s, a warning)."""
    cat, _ = catalog
    first, second = (MachineLease(cat.engine, f"machine-{n}", renew=60.0) for n in "ab")
    first.take()
    taken = threading.Event()
    thread = threading.Thread(target=lambda: (second.take(), taken.set(), second.renew_once()))
    thread.start()
    try:
        deadline = time.monotonic() + 60
        while first.others() == [] and time.monotonic() < deadline:
            time.sleep(0.05)
        first._count_others()
        first._until_others_heard()
        assert taken.wait(60) and "did not renew" not in caplog.text
    finally:
        thread.join(60)
        second.release(), first.release()


def test_the_row_is_renewed_by_a_thread_of_its_own_until_it_is_released(catalog, postgres):
    """Not by the daemon's loop: a loaded host held it up, and an unmount
    waiting for work in flight had ended it, for more than three periods;
    another mount then took the row over and refused the last commit."""
    cat, db = catalog
    lease = MachineLease(cat.engine, "machine-a", renew=0.1)
    lease.take()
    renewed = lambda: postgres.psql(db, "SELECT renewed_at FROM mounts WHERE machine = 'machine-a'").strip()  # noqa: E731
    seen = {renewed()}
    lease.keep_renewed()
    try:
        eventually(lambda: seen.add(renewed()) or len(seen) >= 3, "three renewals", 60, every=0.05)
    finally:
        lease.release()
    assert postgres.psql(db, "SELECT count(*) FROM mounts").strip() == "0"
    assert not lease._thread.is_alive()


def test_after_the_unmounts_last_call_the_renewals_take_nothing_over(catalog, postgres):
    """Machines taken over are handed to the mount (their stripes are its to
    see to) until its last writes begin; after those, its renewals only keep
    its own row: a machine taken over then would have no one to see to it."""
    cat, db = catalog
    dead = MachineLease(cat.engine, "machine-dead", renew=0.1)
    dead.take()
    lease = MachineLease(cat.engine, "machine-a", renew=0.1)
    lease.take()
    lease.keep_renewed()
    try:
        eventually(lambda: postgres.psql(db, "SELECT count(*) FROM mounts").strip() == "1", "the dead row taken", 60,
                   every=0.05)
        assert lease.taken_over() == ["machine-dead"] and lease.taken_over() == []
        assert lease.taken_over(last=True) == []
        again = MachineLease(cat.engine, "machine-dead", renew=0.1)
        again.take()                    # dies again, now as the mount unmounts
        first = postgres.psql(db, "SELECT renewed_at FROM mounts WHERE machine = 'machine-a'").strip()
        eventually(lambda: postgres.psql(db, "SELECT renewed_at FROM mounts WHERE machine = 'machine-a' AND "
                                             f"renewed_at > '{first}'::timestamptz + interval '0.5 s'").strip(),
                   "five periods of renewals", 60, every=0.05)
        assert postgres.psql(db, "SELECT count(*) FROM mounts").strip() == "2"
        assert lease.taken_over() == []
        again.release()
    finally:
        lease.release()
        dead.release()


def test_a_renewal_that_finds_the_row_taken_over_ends_the_renewals(catalog, postgres, caplog):
    cat, db = catalog
    lease = MachineLease(cat.engine, "machine-a", renew=0.1)
    lease.take()
    lease.keep_renewed()
    try:
        postgres.psql(db, "UPDATE mounts SET token = token + 1000")
        eventually(lambda: lease.lost, "the renewals finding the row taken", 60, every=0.05)
        lease._thread.join(60)
        assert not lease._thread.is_alive() and "read-only from now on" in caplog.text
    finally:
        lease.release()


def test_a_path_is_walked_up_to_the_root_in_one_query(catalog):
    # Namespace.path_of's recursive query (webfs.namespace.paths), in PostgreSQL's dialect:
    # a namespace that keeps no path finds every level, a directory's and a file's.
    cat, _ = catalog
    ns = Namespace(None, catalog=cat)
    ns.ensure_root()
    a = ns.create(1, b"a", 0o40755, 0, 0)
    b = ns.create(a.id, b"b c", 0o40755, 0, 0)
    page = ns.create(b.id, b"page.html", 0o100644, 0, 0)
    cat.commit()
    fresh = Namespace(None, catalog=cat)
    assert fresh.path_of(page.id) == b"/a/b c/page.html"
    assert fresh.paths.dirs == {a.id: b"/a", b.id: b"/a/b c"}
    assert Namespace(None, catalog=cat).path_of(b.id) == b"/a/b c"
    assert Namespace(None, catalog=cat).path_of(10 ** 9) == b""


def test_an_empty_executemany_sends_nothing_and_begins_no_transaction(catalog):
    cat, db = catalog
    cat.commit()
    changes = cat.write_count()
    # As a placement with no new stripe asks (webfs.parity.layout): no rows.
    cat.executemany("INSERT INTO stripes (id, parity_disk, size_class, length, members, disks) "
                    "VALUES (?, ?, ?, ?, ?, ?)", [])
    assert not cat.db.in_transaction and cat.db._pipeline is None
    assert cat.write_count() == changes


def test_a_commit_waits_for_the_server_once(catalog, postgres, monkeypatch):
    """The COMMIT's sync reads every answer of the transaction; leaving the
    pipeline then sends no second Sync (psycopg's exit of a pipeline does:
    a round trip more each commit), and the connection goes on out of
    pipeline mode, its next transactions and reads answered as their own."""
    import psycopg
    cat, db = catalog
    syncs = []
    enqueue = psycopg.Pipeline._enqueue_sync
    monkeypatch.setattr(psycopg.Pipeline, "_enqueue_sync", lambda self: (syncs.append(1), enqueue(self))[1])
    for sig in (SIG, OTHER):
        _block(cat, sig)
        cat.commit()
    assert len(syncs) == 2
    assert cat.db._pipeline is None and cat.db.conn._pipeline is None
    assert cat.db.conn.pgconn.pipeline_status == psycopg.pq.PipelineStatus.OFF
    assert [r[0] for r in cat.query("SELECT count(*) FROM blocks")] == [2]
    assert cat.db.reconnects == 0
    assert postgres.psql(db, "SELECT count(*) FROM blocks").strip() == "2"


def test_a_pipeline_with_an_answer_owed_after_its_sync_is_not_left_as_done(catalog, postgres):
    """Should libpq still owe an answer when the COMMIT's sync has read all
    psycopg asked for (here a query sent behind psycopg's back after it),
    leaving pipeline mode fails: the commit says so (the server made it, as
    any commit whose answer is in doubt), the connection is replaced, and the
    next transactions read their own answers."""
    cat, db = catalog
    _block(cat, SIG)
    pipeline = cat.db._pipeline
    sync = pipeline.sync
    pipeline.sync = lambda: (sync(), cat.db.conn.pgconn.send_query_params(b"SELECT 1", None))
    with pytest.raises(Exception, match="pipeline"):
        cat.commit()
    assert cat.db.reconnects == 1
    _block(cat, OTHER)
    cat.commit()
    assert [r[0] for r in cat.query("SELECT count(*) FROM blocks")] == [2]
    assert postgres.psql(db, "SELECT count(*) FROM blocks").strip() == "2"
