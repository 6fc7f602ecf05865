"""A name made in a directory this mount made in the transaction still open,
while other machines' mounts share the PostgreSQL catalog (a real server,
tests/postgres.py; two archives' stores in this process stand for two
machines, no FUSE mount): no other machine sees the directory before that
commit, so none can have made the name, and its INSERT is not waited for
(``NamespaceRows.add_name``, ``NamespaceMemo.unseen_dir``); once committed,
the name is asked of the engine again, and another machine's gives EEXIST.
A create is one statement there (``NamespaceRows.add_named_inode``): the
inode, its name and its parent's times, or none of them."""
from __future__ import annotations

import errno
import stat

import pytest

from t2_pg_made_here import two  # noqa: F401  (the fixture: machines A and B)
from webfs.errors import FsError
from webfs.namespace import ROOT_INODE

DIR = stat.S_IFDIR | 0o755
FILE = stat.S_IFREG | 0o644


def _name_inserts(store) -> list[str]:
    """The open transaction's INSERTs of directory entries, as sent."""
    return [text for text, _, _ in store.catalog.db._writes if "INSERT INTO dentries" in text]


def test_names_in_a_directory_made_in_the_open_transaction_are_not_asked(two):  # noqa: F811
    (a, a_ns), _, _ = two
    d = a_ns.create(ROOT_INODE, b"crawl", DIR, 0, 0)
    sub = a_ns.create(d.id, b"sub", DIR, 0, 0)
    a_ns.create(sub.id, b"page.html", FILE, 0, 0)
    made = _name_inserts(a)
    assert len(made) == 3
    assert "ON CONFLICT" in made[0]                 # in the root, which B sees
    assert not any("ON CONFLICT" in text for text in made[1:])
    a.commit()
    assert [n for _, n, _ in a_ns.entries(sub.id)] == [b"page.html"]


def test_after_the_commit_another_machines_name_there_is_eexist(two):  # noqa: F811
    (a, a_ns), (b, b_ns), _ = two
    d = a_ns.create(ROOT_INODE, b"crawl", DIR, 0, 0)
    a.commit()                                      # B sees the directory from here on
    b_ns.create(b_ns.lookup(ROOT_INODE, b"crawl").id, b"page.html", FILE, 0, 0)
    b.commit()
    with pytest.raises(FsError) as made:            # (A heard no notice: its memo knows no such name)
        a_ns.create(d.id, b"page.html", FILE, 0, 0)
    assert made.value.errno == errno.EEXIST
    assert "ON CONFLICT" in _name_inserts(a)[-1]
    a.commit()


def _rows(postgres, db, sql: str) -> str:
    return postgres.psql(db, sql).strip()


def test_a_create_is_one_statement_with_all_its_rows(two, postgres):  # noqa: F811
    (a, a_ns), _, db = two
    root = a_ns.get(ROOT_INODE)
    sent = a.catalog.db.total_changes
    d = a_ns.create(ROOT_INODE, b"crawl", DIR, 7, 8)
    assert a.catalog.db.total_changes - sent == 1      # not an INSERT, an INSERT and an UPDATE
    f = a_ns.create(d.id, b"page.html", FILE, 7, 8)
    a.commit()
    assert _rows(postgres, db, f"SELECT mode, uid, gid, nlink, mtime_ns, ctime_ns FROM inodes WHERE id={d.id}") \
        == f"{DIR}|7|8|2|{f.mtime_ns}|{f.mtime_ns}"     # touched by the file's create
    assert _rows(postgres, db, f"SELECT parent, name, inode FROM dentries WHERE inode={f.id}") \
        == f"{d.id}|\\x{b'page.html'.hex()}|{f.id}"
    assert _rows(postgres, db, f"SELECT nlink, mtime_ns = {d.mtime_ns} FROM inodes WHERE id={ROOT_INODE}") \
        == f"{root.nlink + 1}|t"
    assert _rows(postgres, db, f"SELECT size, nlink FROM inodes WHERE id={f.id}") == "0|1"


def test_a_name_another_machine_made_leaves_no_inode_and_no_touched_parent(two, postgres):  # noqa: F811
    (a, a_ns), (b, b_ns), db = two
    b_ns.create(ROOT_INODE, b"page.html", FILE, 0, 0)
    b.commit()
    before = _rows(postgres, db, f"SELECT nlink, mtime_ns FROM inodes WHERE id={ROOT_INODE}")
    inodes = _rows(postgres, db, "SELECT count(*) FROM inodes")
    with pytest.raises(FsError) as made:            # A heard no notice: its memo knows no such name
        a_ns.create(ROOT_INODE, b"page.html", DIR, 0, 0)
    assert made.value.errno == errno.EEXIST
    a.commit()
    assert _rows(postgres, db, "SELECT count(*) FROM inodes") == inodes
    assert _rows(postgres, db, f"SELECT nlink, mtime_ns FROM inodes WHERE id={ROOT_INODE}") == before
