"""A file a mount made, given its first content while other machines'
mounts share the PostgreSQL catalog (a real server, tests/postgres.py; two
archives' stores in this process stand for two machines, no FUSE mount):
while the transaction that made it is open no other machine can see it, so
there is no old content to look up; once committed, another machine may
have given it blocks, which the content set here releases
(webfs.namespace.rows ``known_empty``, ``Catalog.commits``)."""
from __future__ import annotations

import stat
import threading

import pytest

from conftest import make_archive
from webfs import machines
from webfs.assembly import open_archive
from webfs.namespace import ROOT_INODE, Namespace


@pytest.fixture
def two(tmp_path, postgres):
    """Machine A's store, namespace and lease, and machine B's, each hearing of the other."""
    db = postgres.new_database()
    disks = make_archive(tmp_path, catalog_url=postgres.url(db))
    a = open_archive(str(disks[0]), holder="a", shared=True)
    a_lease = machines.lease_for(a.catalog, str(tmp_path / "state-a"), renew=60.0)
    b = open_archive(str(disks[0]), holder="b", shared=True)
    taken = []
    taking = threading.Thread(target=lambda: taken.append(machines.lease_for(b.catalog, str(tmp_path / "state-b"),
                                                                             renew=60.0)))
    taking.start()
    while taking.is_alive():
        a_lease.renew_once()
        taking.join(0.05)
    b_lease = taken[0]
    b_lease.renew_once()
    assert a_lease.others_mounted and b_lease.others_mounted
    a_ns, b_ns = Namespace(a), Namespace(b)
    a_ns.ensure_root()
    a.commit()
    yield (a, a_ns), (b, b_ns), db
    for store, lease in ((b, b_lease), (a, a_lease)):
        store.close()
        lease.release()


def _sent_contents_delete(store) -> bool:
    """Did the open transaction send a DELETE of a file's content rows (the
    writes a reconnect would send again)?"""
    return any(text.startswith("DELETE FROM contents") for text, _, _ in store.catalog.db._writes)


def test_a_file_made_in_the_open_transaction_has_no_old_content_to_look_up(two):
    (a, a_ns), _, _ = two
    f = a_ns.create(ROOT_INODE, b"page.html", stat.S_IFREG | 0o644, 0, 0)
    row = a.store(b"a page made on A", name=b"/page.html")
    a_ns.set_contents(f.id, [row], 16, 1)
    assert not _sent_contents_delete(a)
    a.commit()
    assert [r.id for r in a_ns.contents(f.id)] == [row.id]


def test_a_file_committed_then_written_by_another_machine_loses_that_content(two, postgres):
    (a, a_ns), (b, b_ns), db = two
    f = a_ns.create(ROOT_INODE, b"page.html", stat.S_IFREG | 0o644, 0, 0)
    a.commit()                                  # its name is seen by B from here on
    theirs = b.store(b"B's page, written first", name=b"/page.html")
    b_ns.set_contents(f.id, [theirs], 23, 1)
    b.commit()
    ours = a.store(b"A's page, written last", name=b"/page.html")
    a_ns.set_contents(f.id, [ours], 22, 2)
    assert _sent_contents_delete(a)
    a.commit()
    assert [r.id for r in a_ns.contents(f.id)] == [ours.id]
    # B's block lost the reference the file held: no file holds it any more.
    assert postgres.psql(db, f"SELECT count(*) FROM contents WHERE block={theirs.id}").strip() == "0"
    assert postgres.psql(db, f"SELECT coalesce(max(refs), 0) FROM blocks WHERE id={theirs.id}").strip() == "0"


def test_a_files_content_and_its_size_are_one_statement(two, postgres):
    """(``NamespaceRows.add_contents`` with the inode's columns: the content
    rows from an array, in piece order, and the UPDATE of the inode.)"""
    (a, a_ns), _, db = two
    f = a_ns.create(ROOT_INODE, b"page.html", stat.S_IFREG | 0o644, 0, 0)
    rows = [a.store(b"piece %d of a page" % i, name=b"/page.html") for i in range(3)]
    sent = a.catalog.db.total_changes
    a_ns.set_contents(f.id, rows, 54, 12345)
    assert a.catalog.db.total_changes - sent == 1          # not an INSERT of each piece and an UPDATE
    a.commit()
    assert postgres.psql(db, f"SELECT piece, block FROM contents WHERE inode={f.id} ORDER BY piece").split() \
        == [f"{i}|{r.id}" for i, r in enumerate(rows)]
    assert postgres.psql(db, f"SELECT size, mtime_ns FROM inodes WHERE id={f.id}").strip() == "54|12345"
    assert a_ns.get(f.id).size == 54
