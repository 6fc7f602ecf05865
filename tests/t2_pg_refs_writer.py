"""The Refs header writer of a PostgreSQL catalog with other machines
mounted (a real server, tests/postgres.py; no FUSE mount): a batch reads its
blocks' counts under their rows' locks and writes the headers, on a
connection of its own kept in pipeline mode, a round trip a batch; its
COMMIT is sent, not waited for, so the rows' locks go at once; a connection
the server dropped is replaced at the next batch (webfs.refheaders
``UnderRowLock``)."""
from __future__ import annotations

import random

import psycopg
import pytest

from t2_pg_lone_mount import _second_machine, lone  # noqa: F401  (the fixture: a mount, its lease)


def _duplicate_committed(store, data: bytes):
    """``data`` stored again and committed, its header job run: the row."""
    row = store.store(data)
    store.commit()
    store.background.drain()
    return row


def _header_refs(store, row) -> int:
    return store.archive.volumes[row.disk].read_header(row.sig, row.overflow).refs


def test_a_batch_leaves_no_row_locked(lone, postgres):  # noqa: F811
    store, lease, db = lone
    _second_machine(store, lease)
    data = random.Random("locks").randbytes(5000)
    _duplicate_committed(store, data)
    row = _duplicate_committed(store, data)
    assert store.headers.reads == 1 and _header_refs(store, row) == 2
    # Another machine's count of the block does not wait for the header writer
    # (the lock timeout only bounds a failure: a lock left held fails the test).
    postgres.psql(db, f"SET lock_timeout = '60s'; UPDATE blocks SET refs = refs + 1 WHERE id = {row.id}")
    assert postgres.psql(db, f"SELECT refs FROM blocks WHERE id = {row.id}").strip() == "3"


def test_a_connection_the_server_dropped_is_replaced(lone, postgres):  # noqa: F811
    store, lease, db = lone
    _second_machine(store, lease)
    data = random.Random("dropped").randbytes(5000)
    _duplicate_committed(store, data)
    _duplicate_committed(store, data)
    pid = store.headers._db.conn.info.backend_pid
    postgres.psql(db, f"SELECT pg_terminate_backend({pid}, 60000)")     # (returns once it is gone)
    with pytest.raises(psycopg.OperationalError):   # its batch meets the dropped connection (the
        _duplicate_committed(store, data)           # tests' jobs run inline; a daemon's logs it)
    row = _duplicate_committed(store, data)
    assert _header_refs(store, row) == 4
    assert store.headers._db.conn.info.backend_pid != pid
