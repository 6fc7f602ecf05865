"""The catalog file packed when its writer closes it (webfs.catalogfile.
pack_at_rest): the pages that inserts out of key order left part empty are
given back, every rowid kept (a directory entry's is its readdir offset);
a close that wrote little does not rewrite the file; a disk without room
for the pack leaves the catalog as it was, with one warning."""
from __future__ import annotations

import logging
import os
import random
import sqlite3
from pathlib import Path

from webfs.assembly import open_archive
from webfs.catalog import Catalog
from webfs.catalogfile import PACK_MIN_ROWS, consistent_copy

from conftest import tmpfs_disks


def unused_share(path: Path) -> float:
    """The share of the directory entries' b-trees' bytes that none of their
    rows uses (SQLite's dbstat; the other tables here hold a page or two)."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        unused, total = db.execute("SELECT sum(unused), sum(pgsize) FROM dbstat WHERE name IN "
                                   "('dentries', 'sqlite_autoindex_dentries_1', 'dentries_inode', "
                                   "'dentries_parent')").fetchone()
        return unused / total
    finally:
        db.close()


def names_in_random_order(cat: Catalog, count: int, seed: int) -> None:
    """Directory entries inserted in a random order of their key, some then
    removed: the (parent, name) key's pages split and left part empty."""
    names = [b"page-%06d.html" % i for i in range(count)]
    random.Random(seed).shuffle(names)
    for name in names:
        cat.execute("INSERT INTO dentries (parent, name, inode) VALUES (1, ?, ?)", (name, len(name)))
    cat.execute("DELETE FROM dentries WHERE rowid % 3 = 0")
    cat.commit()


def entries(path: Path) -> list:
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return db.execute("SELECT rowid, parent, name, inode FROM dentries ORDER BY rowid").fetchall()
    finally:
        db.close()


def test_a_close_after_many_writes_packs_the_file_and_keeps_every_rowid(tmp_path):
    path = tmp_path / "catalog.db"
    cat = Catalog(str(path))
    names_in_random_order(cat, 6 * PACK_MIN_ROWS, seed=1)
    (tmp_path / "before.db").write_bytes(consistent_copy(str(path)))
    split = unused_share(tmp_path / "before.db")
    cat.close()
    assert not os.path.exists(f"{path}-wal")
    assert entries(path) == entries(tmp_path / "before.db")
    print(f"unused {split:.3f} -> {unused_share(path):.3f}")
    assert split > 0.2 and unused_share(path) < split / 2
    assert path.stat().st_size < 0.8 * (tmp_path / "before.db").stat().st_size
    check = sqlite3.connect(path)
    assert check.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    check.close()


def test_a_close_after_few_writes_leaves_the_file_as_it_is(tmp_path):
    path = tmp_path / "catalog.db"
    cat = Catalog(str(path))
    names_in_random_order(cat, 6 * PACK_MIN_ROWS, seed=2)
    cat.close()
    cat = Catalog(str(path))
    names = [b"late-%04d" % i for i in range(PACK_MIN_ROWS // 2)]
    random.Random(3).shuffle(names)
    for name in names:
        cat.execute("INSERT INTO dentries (parent, name, inode) VALUES (2, ?, 5)", (name,))
    cat.commit()
    (tmp_path / "before.db").write_bytes(consistent_copy(str(path)))
    cat.close()
    assert path.stat().st_size == (tmp_path / "before.db").stat().st_size
    assert unused_share(path) == unused_share(tmp_path / "before.db") > 0


def test_no_room_to_pack_leaves_the_catalog_as_it_was_with_one_warning(tmp_path, caplog):
    with tmpfs_disks(tmp_path, 2, "4m") as disks:
        store = open_archive(str(disks[0]))
        names_in_random_order(store.catalog, 6 * PACK_MIN_ROWS, seed=4)
        docs = [b"<html>page %d</html>" % i * 20 for i in range(50)]
        rows = [store.store(d, pin=True) for d in docs]
        store.commit()
        catalog = disks[0] / "meta" / "catalog.db"
        before = entries(catalog)
        free = os.statvfs(disks[0]).f_bavail * os.statvfs(disks[0]).f_frsize
        (disks[0] / "ballast").write_bytes(b"\0" * max(free - catalog.stat().st_size // 4, 0))
        with caplog.at_level(logging.WARNING, logger="webfs.catalogfile"):
            store.close()
        warned = [r.getMessage() for r in caplog.records if r.name == "webfs.catalogfile"]
        assert len(warned) == 1 and "not packed" in warned[0] and "\n" not in warned[0], warned
        (disks[0] / "ballast").unlink()
        assert entries(catalog) == before
        store = open_archive(str(disks[0]))
        try:
            assert [store.read(store.catalog.block(r.sig)) for r in rows] == docs
        finally:
            store.close()
