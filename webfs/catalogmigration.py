"""Migration of a catalog file written by an older webfs (schema 1 to 5)
to this one's schema (3: signatures and stripe ids as 16 bytes, not 32 hex
digits; no index on blocks.disk or groups.disk; 4: blocks.created as
seconds, not text; meta, groups, contents and xattrs WITHOUT ROWID; 5: no
blocks.name, the Name: hint being in the block's header and its stripe's
Member line; 6: stripes WITHOUT ROWID). A column the new schema lacks is
not copied.

The migrated catalog is written as a new file beside the old one and renamed
over it when complete, so a crash (or a full disk) at any point leaves
either the old catalog or the new one, whole; the new file is also compact
(as after VACUUM). Every table's rows are copied with their rowids: a
directory entry's rowid is its readdir offset.
"""
from __future__ import annotations

import logging
import os
import sqlite3
import urllib.parse

from .errors import NoSpace

log = logging.getLogger(__name__)

# Columns that schema 3 keeps as 16 bytes where schemas 1 and 2 kept hex text.
BINARY_IDS = {("blocks", "sig"), ("blocks", "stripe"), ("stripes", "id")}
# A block's Created text as seconds when it is in the form webfs writes
# (webfs.catalog.seconds_of does the same for a new row); else the text.
CREATED_SECONDS = ("CASE WHEN typeof(created) = 'text' AND strftime('%Y-%m-%dT%H:%M:%SZ', "
                   "strftime('%s', created), 'unixepoch') = created "
                   "THEN CAST(strftime('%s', created) AS INTEGER) ELSE created END")
SCHEMA_MIGRATED = 6     # the schema this module migrates to
TABLES = ("meta", "blocks", "groups", "stripes", "inodes", "dentries", "contents", "symlinks", "xattrs")


def needs_migration(path: str) -> bool:
    """Is the catalog file at ``path`` of a schema older than this one's?"""
    if not os.path.exists(path) or os.path.getsize(path) == 0:
        return False
    db = sqlite3.connect(f"file:{urllib.parse.quote(path)}?mode=ro", uri=True)
    try:
        if not db.execute("SELECT 1 FROM sqlite_master WHERE name='meta'").fetchone():
            return False        # not a catalog yet
        schema = db.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
    finally:
        db.close()
    return schema is not None and int(schema[0]) < SCHEMA_MIGRATED


def migrate_file(path: str, schema_sql: str, version: int) -> None:
    """Rewrite the catalog file at ``path`` in schema ``version`` (made by
    ``schema_sql``), if it is older. No process may have it open."""
    if not needs_migration(path):
        return
    old = sqlite3.connect(path)
    try:
        old.execute("PRAGMA wal_checkpoint(TRUNCATE)")      # every commit into the file itself
        was = old.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
    finally:
        old.close()
    tmp = path + ".migrating"
    for leftover in (tmp, tmp + "-journal"):
        if os.path.exists(leftover):
            os.unlink(leftover)           # a migration cut short before: it starts again
    try:
        _copy_into(tmp, path, schema_sql, version)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
    except sqlite3.OperationalError as exc:
        os.unlink(tmp)
        if "full" in str(exc):
            raise NoSpace(f"{path}: no room to migrate the catalog to schema {version} "
                          "(it needs as much free space as the catalog's size)") from None
        raise
    for side in ("-wal", "-shm"):
        if os.path.exists(path + side):
            os.unlink(path + side)          # empty after the checkpoint; the old file's
    os.rename(tmp, path)
    dir_fd = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    log.info("%s: catalog migrated from schema %s to %s", path, was[0] if was else "?", version)


def _copy_into(tmp: str, old_path: str, schema_sql: str, version: int) -> None:
    new = sqlite3.connect(f"file:{urllib.parse.quote(tmp)}", uri=True, isolation_level=None)
    try:
        new.executescript(schema_sql)
        new.create_function("to_key", 1, _to_key, deterministic=True)
        new.execute("ATTACH DATABASE ? AS old", (f"file:{urllib.parse.quote(old_path)}?mode=ro",))
        new.execute("BEGIN")
        for table in TABLES:
            _copy_table(new, table)
        new.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('schema', ?)", (str(version),))
        new.execute("COMMIT")
        new.execute("DETACH DATABASE old")
    finally:
        new.close()


def _to_key(value):
    """32 hex digits as 16 bytes (NULL stays NULL; bytes stay: a catalog
    part-way between schemas, as tests make one)."""
    return value if value is None or isinstance(value, bytes) else bytes.fromhex(value)


def _copy_table(new: sqlite3.Connection, table: str) -> None:
    have = [r[1] for r in new.execute(f"PRAGMA old.table_info({table})")]
    if not have:
        return                          # a table older schemas did not have
    wanted = [r[1] for r in new.execute(f"PRAGMA main.table_info({table})")]
    columns = [c for c in wanted if c in have]
    values = [f"to_key({c})" if (table, c) in BINARY_IDS else CREATED_SECONDS if (table, c) == ("blocks", "created")
              else c for c in columns]
    if _without_rowid(new, table):      # copied in the order of its key, so its pages are full
        new.execute(f"INSERT INTO main.{table} ({', '.join(columns)}) "
                    f"SELECT {', '.join(values)} FROM old.{table} ORDER BY {_key_of(new, table)}")
    else:
        new.execute(f"INSERT INTO main.{table} (rowid, {', '.join(columns)}) "
                    f"SELECT rowid, {', '.join(values)} FROM old.{table} ORDER BY rowid")


def _without_rowid(db: sqlite3.Connection, table: str) -> bool:
    sql = db.execute("SELECT sql FROM main.sqlite_master WHERE type='table' AND name=?", (table,)).fetchone()
    return "WITHOUT ROWID" in sql[0].upper()


def _key_of(db: sqlite3.Connection, table: str) -> str:
    """The primary key's columns of a table of the new schema, in order."""
    cols = sorted((r[5], r[1]) for r in db.execute(f"PRAGMA main.table_info({table})") if r[5])
    return ", ".join(name for _, name in cols)
