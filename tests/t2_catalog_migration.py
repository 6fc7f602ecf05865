"""The catalog's migration to schema 6 (webfs.catalogmigration) where it can
go wrong: a migration cut short before (its new file left beside the old
catalog) starts again; a disk without room for the new file says so in one
line and leaves the old catalog as it was. (The migration of an archive
written by the previous version's own code: t4_catalog_migration.)"""
from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

from webfs.assembly import open_archive
from webfs.errors import NoSpace

from conftest import make_archive, tmpfs_disks


def fill(disk: Path, docs: int) -> list:
    store = open_archive(str(disk))
    rows = [(store.store(b"<html>page %d</html>" % i * 40, pin=True), b"<html>page %d</html>" % i * 40)
            for i in range(docs)]
    store.commit()
    store.close()
    return rows


def as_schema_2(disk: Path) -> None:
    """The catalog as schema 2 kept its ids: hex text (the tables made again)."""
    db = sqlite3.connect(disk / "meta" / "catalog.db")
    db.create_function("hex_text", 1, lambda v: None if v is None else v.hex())
    for table, columns in (("blocks", ("sig", "stripe")), ("stripes", ("id",))):
        info = db.execute(f"PRAGMA table_info({table})").fetchall()
        defs = ", ".join(f"{c[1]} {'TEXT' if c[1] in columns else c[2]}"
                         + (" PRIMARY KEY" if c[5] and table == "stripes" else "")
                         + (" PRIMARY KEY" if c[5] and table == "blocks" else "") for c in info)
        values = ", ".join(f"hex_text({c[1]})" if c[1] in columns else c[1] for c in info)
        db.execute(f"CREATE TABLE {table}_2 ({defs})")
        db.execute(f"INSERT INTO {table}_2 SELECT {values} FROM {table}")
        db.execute(f"DROP TABLE {table}")
        db.execute(f"ALTER TABLE {table}_2 RENAME TO {table}")
    db.execute("UPDATE meta SET value='2' WHERE key='schema'")
    db.commit()
    db.close()


def schema_of(disk: Path) -> str:
    db = sqlite3.connect(disk / "meta" / "catalog.db")
    try:
        return db.execute("SELECT value FROM meta WHERE key='schema'").fetchone()[0]
    finally:
        db.close()


def test_a_migration_cut_short_starts_again(tmp_path):
    disks = make_archive(tmp_path, disks=2)
    rows = fill(disks[0], 30)
    as_schema_2(disks[0])
    (disks[0] / "meta" / "catalog.db.migrating").write_bytes(b"half a database, from a crash")
    store = open_archive(str(disks[0]))
    try:
        assert [store.read(store.catalog.block(r.sig)) for r, _ in rows] == [d for _, d in rows]
        assert store.catalog.get_meta("schema") == "6"
    finally:
        store.close()
    assert not (disks[0] / "meta" / "catalog.db.migrating").exists()


def test_no_room_for_the_migrated_catalog_is_one_line_and_keeps_the_old(tmp_path):
    with tmpfs_disks(tmp_path, 2, "2m") as disks:
        rows = fill(disks[0], 300)
        as_schema_2(disks[0])
        catalog = disks[0] / "meta" / "catalog.db"
        old = catalog.read_bytes()
        free = os.statvfs(disks[0]).f_bavail * os.statvfs(disks[0]).f_frsize
        ballast = disks[0] / "ballast"
        ballast.write_bytes(b"\0" * max(free - len(old) // 4, 0))
        with pytest.raises(NoSpace, match="no room to migrate the catalog to schema 6") as exc:
            open_archive(str(disks[0]))
        assert "\n" not in str(exc.value)
        assert catalog.read_bytes() == old and schema_of(disks[0]) == "2"
        assert not list(catalog.parent.glob("catalog.db.migrating*"))
        ballast.unlink()
        store = open_archive(str(disks[0]))
        try:
            assert store.read(store.catalog.block(rows[-1][0].sig)) == rows[-1][1]
        finally:
            store.close()
        assert schema_of(disks[0]) == "6"


def test_created_is_kept_as_seconds_and_an_odd_text_as_it_is(tmp_path):
    """A block's Created in the form webfs writes is stored as seconds and
    read back as the same text; any other text (a hand-made header's) is
    stored and read back as it is, in a new row and in a migrated one."""
    disks = make_archive(tmp_path, 3)
    rows = fill(disks[0], 2)
    store = open_archive(str(disks[0]))
    try:
        odd = store.catalog.insert_block("ab" * 16, 0, 0, 1, 1, "identity", 0, 1, "yesterday", "", "abab")
        store.commit()
    finally:
        store.close()
    db = sqlite3.connect(disks[0] / "meta" / "catalog.db")
    stored = db.execute("SELECT typeof(created) FROM blocks ORDER BY id").fetchall()
    db.execute("UPDATE blocks SET created='2026-11-25T21:00:00Z' WHERE id=?", (rows[0][0].id,))
    db.execute("UPDATE blocks SET created='2026-11-25 21:00:00' WHERE id=?", (rows[1][0].id,))
    db.commit()
    db.close()
    assert stored == [("integer",), ("integer",), ("text",)]
    as_schema_2(disks[0])
    store = open_archive(str(disks[0]))
    try:
        assert store.catalog.block_by_id(odd.id).created == "yesterday"
        assert store.catalog.block_by_id(rows[0][0].id).created == "2026-11-25T21:00:00Z"
        assert store.catalog.block_by_id(rows[1][0].id).created == "2026-11-25 21:00:00"
    finally:
        store.close()
    db = sqlite3.connect(disks[0] / "meta" / "catalog.db")
    assert db.execute("SELECT created FROM blocks ORDER BY id").fetchall() == [
        (1795640400,), ("2026-11-25 21:00:00",), ("yesterday",)]
    db.close()
