"""The catalog: an SQLite (WAL) index of the archive.

It holds the block table (signature, overflow number, disk, sizes, codec,
references, stripe), the placement-group map (group -> disk, heat), the
stripe table, and the namespace (inodes, directory entries, which blocks
make each file, symlink targets, xattrs). It is an index, not the only
record: block headers, parity headers and the plain-text MANIFEST and
JOURNAL let ``webfs fsck`` rebuild it.

One connection is shared by the threads of a process behind a lock; the caller
decides when to commit (a file's close, an admin step): batching saves commits.

With ``webfs mkfs --catalog postgresql://...`` the same tables live in a
PostgreSQL database instead (``webfs.catalogengine``: the engine layer and
the SQL that differs); files beside the catalog stay in the disk's meta/.
"""
from __future__ import annotations

import dataclasses
import logging
import os
import sqlite3
import urllib.parse
from dataclasses import dataclass
from typing import Callable, Iterator, Optional

from .block import HEADER_SIZE
from .catalogengine import SQLITE
from .catalogfile import CatalogRoom, full_is_nospace as _full_is_nospace, pack_at_rest
from .catalogkeys import created_of, hex_of, key, keys, seconds_of, sig_range
from .catalogmigration import migrate_file
from .errors import NoSpace
from .cataloggroups import PlacementGroups
from .catalogsigs import KnownSignatures
from .signature import block_name
from .volume import own_database
from . import lockorder

SCHEMA_VERSION = 6             # 2: blocks.sha256; 3: signatures and stripe ids as 16 bytes; 4: created as
                               # seconds, tables keyed by their primary key WITHOUT ROWID; 5: no blocks.name;
                               # 6: stripes WITHOUT ROWID
CATALOG_FILE = "meta/catalog.db"
ARCHIVE_META = "archive"        # meta key: the uuid of the archive the catalog indexes (absent before)
TOP_FREED = "top_freed_inode"   # meta key: the highest inode number freed while it was the highest (absent: none)
CACHE_KIB = 2048                # SQLite page cache of one connection, KiB
WAL_LIMIT = 8 << 20             # bytes of WAL kept after a checkpoint

# The tables below repeat one shape (a few columns, a composite primary key,
# an index): that is SQL declaring tables, not logic to share.
SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS blocks (
    id       INTEGER PRIMARY KEY,
    sig      BLOB NOT NULL,                -- 16 bytes (32 hex digits elsewhere: see key/hex_of)
    overflow INTEGER NOT NULL DEFAULT 0,
    disk     INTEGER NOT NULL,
    size     INTEGER NOT NULL,
    stored   INTEGER NOT NULL,
    codec    TEXT NOT NULL,
    refs     INTEGER NOT NULL,
    pins     INTEGER NOT NULL DEFAULT 0,   -- references held outside the namespace (webfs put)
    created  INTEGER NOT NULL,             -- seconds since 1970 (UTC); an odd header's text as it is
    grp      TEXT NOT NULL,
    stripe   BLOB,                         -- parity stripe id (16 bytes), NULL while unprotected
    sha256   BLOB,                         -- the document's SHA-256; NULL: written before schema 2
    UNIQUE (sig, overflow));
-- No index on blocks.disk, groups.disk or contents.block: only admin passes over
-- most of a table ask by them (query plans: webfs-internals(7)); none on blocks.grp:
-- a group is a range of signatures (catalogkeys.sig_range).
CREATE INDEX IF NOT EXISTS blocks_stripe ON blocks (stripe);
CREATE TABLE IF NOT EXISTS groups (
    grp      TEXT PRIMARY KEY,
    disk     INTEGER NOT NULL,
    home     INTEGER,                      -- rendezvous home when placed (NULL: disk); cooling moves away from it
    heat     REAL NOT NULL DEFAULT 0,      -- reads per second when last written (webfs.heat)
    accesses TEXT NOT NULL DEFAULT '')     -- times of the last k accesses, for the heat estimate
    WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS stripes (
    id          BLOB PRIMARY KEY,              -- 16 bytes
    parity_disk INTEGER NOT NULL,
    size_class  INTEGER NOT NULL,
    length      INTEGER NOT NULL DEFAULT 0,
    state       TEXT NOT NULL DEFAULT 'ok',    -- 'dirty': the parity file may disagree with the blocks
    members     INTEGER NOT NULL DEFAULT 0,
    disks       INTEGER NOT NULL DEFAULT 0)    -- bit i: disk i holds a member or the parity
    WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS stripes_open ON stripes (size_class, members);
CREATE INDEX IF NOT EXISTS stripes_dirty ON stripes (state) WHERE state != 'ok';
-- A block that leaves a stripe (or moves) marks it dirty in the same transaction,
-- so a crash before its parity is updated is found at the next open (webfs.parity).
CREATE TRIGGER IF NOT EXISTS blocks_leave_stripe AFTER DELETE ON blocks WHEN OLD.stripe IS NOT NULL
BEGIN
    UPDATE stripes SET state='dirty', members=members-1, disks=disks & ~(1 << OLD.disk)
    WHERE id=OLD.stripe;
END;
CREATE TRIGGER IF NOT EXISTS blocks_move_in_stripe AFTER UPDATE OF disk ON blocks
WHEN OLD.stripe IS NOT NULL AND NEW.stripe IS OLD.stripe AND OLD.disk != NEW.disk
BEGIN
    UPDATE stripes SET state='dirty', disks=(disks & ~(1 << OLD.disk)) | (1 << NEW.disk)
    WHERE id=OLD.stripe;
END;
CREATE TRIGGER IF NOT EXISTS blocks_change_stripe AFTER UPDATE OF stripe ON blocks
WHEN OLD.stripe IS NOT NULL AND NEW.stripe IS NOT OLD.stripe
BEGIN
    UPDATE stripes SET state='dirty', members=members-1, disks=disks & ~(1 << OLD.disk)
    WHERE id=OLD.stripe;
END;
CREATE TABLE IF NOT EXISTS inodes (
    id       INTEGER PRIMARY KEY,
    mode     INTEGER NOT NULL,
    uid      INTEGER NOT NULL,
    gid      INTEGER NOT NULL,
    size     INTEGER NOT NULL DEFAULT 0,
    nlink    INTEGER NOT NULL DEFAULT 1,
    atime_ns INTEGER NOT NULL,
    mtime_ns INTEGER NOT NULL,
    ctime_ns INTEGER NOT NULL,
    rdev     INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS dentries (
    parent INTEGER NOT NULL,
    name   BLOB NOT NULL,
    inode  INTEGER NOT NULL,
    PRIMARY KEY (parent, name));
CREATE INDEX IF NOT EXISTS dentries_inode ON dentries (inode);
CREATE INDEX IF NOT EXISTS dentries_parent ON dentries (parent);   -- readdir in rowid order
CREATE TABLE IF NOT EXISTS contents (
    inode INTEGER NOT NULL,
    piece INTEGER NOT NULL,
    block INTEGER NOT NULL,
    PRIMARY KEY (inode, piece)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS symlinks (inode INTEGER PRIMARY KEY, target BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS xattrs (
    inode INTEGER NOT NULL,
    name  BLOB NOT NULL,
    value BLOB NOT NULL,
    PRIMARY KEY (inode, name)) WITHOUT ROWID;
"""

BLOCK_COLUMNS = "id, sig, overflow, disk, size, stored, codec, refs, pins, created, grp, stripe, sha256"
# Rows read under their locks, those another transaction holds skipped (webfs.refheaders).
LOCKED_BLOCKS_SQL = f"SELECT {BLOCK_COLUMNS} FROM blocks WHERE id = ANY(%s) ORDER BY id FOR UPDATE SKIP LOCKED"


@dataclass
class BlockRow:
    id: int
    sig: str
    overflow: int
    disk: int
    size: int
    stored: int
    codec: str
    refs: int
    pins: int
    created: str
    # The Name: hint (percent-encoded, as in the header). The catalog does not
    # keep it (schema 5): None in a row read from it, until a reconstruction
    # takes it from the stripe's Member line; the row of a block just stored has it.
    name: Optional[str]
    grp: str
    stripe: Optional[str]
    sha256: Optional[bytes] = None      # the content digest (None: a block older than digests)

    @staticmethod
    def of(r) -> "BlockRow":
        """The row of a SELECT of BLOCK_COLUMNS (its ids as stored: 16 bytes)."""
        return BlockRow(r[0], hex_of(r[1]), *r[2:9], created_of(r[9]), None, r[10], hex_of(r[11]), r[12])

    @property
    def block_name(self) -> str:
        return block_name(self.sig, self.overflow)

    def copy(self) -> "BlockRow":
        """A row of its own with the same values (an import copies one per
        duplicate: dataclasses.replace costs 9 times as much)."""
        row = object.__new__(BlockRow)
        row.__dict__.update(self.__dict__)
        return row


class SignatureLookup:
    """Which of some signatures a block has (and where some placement groups
    are mapped), asked of a catalog file read only by another process
    (import-warc's reading process, to encode only new documents and make
    their directories): it sees what the catalog's writer has committed. Any SQLite
    error makes it answer "none" from then on (the caller then does the work)."""

    def __init__(self, path: str):
        try:
            self.db: Optional[sqlite3.Connection] = sqlite3.connect(
                f"file:{urllib.parse.quote(path)}?mode=ro", uri=True, timeout=30)
        except sqlite3.Error:
            self.db = None

    def having(self, sigs: list[str]) -> set[str]:
        return {sig.hex() for sig, in self._ask("SELECT sig FROM blocks WHERE sig IN ({})", keys(sigs))}

    def group_disks(self, groups: list[str]) -> dict[str, int]:
        """group -> the disk it is mapped to, of the groups that are."""
        return dict(self._ask("SELECT grp, disk FROM groups WHERE grp IN ({})", groups))

    def _ask(self, sql: str, keys: list[str]) -> list:
        if self.db is None or not keys:
            return []
        try:
            return self.db.execute(sql.format(",".join("?" * len(keys))), keys).fetchall()
        except sqlite3.Error:
            self.db = None
            return []


class Catalog(PlacementGroups, KnownSignatures):
    """The catalog of one archive: an SQLite file, or with ``engine`` a
    PostgreSQL database (webfs.catalogengine rewrites the SQL below for it)."""

    def __init__(self, path: str, engine=SQLITE):
        self.path = path                # the file, or where files beside the catalog go (engine: PostgreSQL)
        self.engine = engine
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if engine is SQLITE:
            migrate_file(own_database(path), SCHEMA, SCHEMA_VERSION)
        self.db = engine.connect(path, CACHE_KIB, WAL_LIMIT)
        self.lock = lockorder.rlock("catalog")
        self.forget_group_disks()
        self.forget_signatures()
        # The namespace's rows kept in memory (webfs.namespace.NamespaceMemo),
        # made by the first NamespaceRows over this catalog; a rollback clears it.
        self.memo = None
        self.inode_numbers = None       # where new inode numbers come from (webfs.machines); None: max + 1
        self.own_stripes = ""           # SQL that keeps a mount to its own open stripes (webfs.machines)
        # Is this process the catalog's one writer? A token that stays the same
        # while it is (what it knows of the tables then holds), or None.
        # SQLite's flock makes it always so; a PostgreSQL mount's lease says
        # (webfs.machines: no other machine's mount since the token was given).
        self.solo: Callable[[], Optional[int]] = (lambda: 0) if engine is SQLITE else (lambda: None)
        # Changes to stripes other than a placement's (a block moved or deleted,
        # the stripes' own triggers; a rollback): what the parity layout keeps
        # of a lone mount's open stripes holds while this stays.
        self.stripe_changes = 0
        # Commits asked of the connection: a row written since the last one is
        # seen by no other machine's mount yet (PostgreSQL's READ COMMITTED).
        self.commits = 0
        self.room = CatalogRoom(self)   # asked before a change adds rows
        engine.create_schema(self.db, SCHEMA)
        with self.lock:
            self._migrate()

    def _migrate(self) -> None:
        """Record the schema of a new catalog (an older SQLite file was
        rewritten in this schema before it was opened: webfs.catalogmigration;
        a PostgreSQL database is altered here)."""
        schema = self.get_meta("schema")
        if schema is not None and int(schema) < SCHEMA_VERSION:
            self.engine.migrate(self.db, int(schema))     # PostgreSQL's: in place
        if schema is None or int(schema) < SCHEMA_VERSION:
            self.set_meta("schema", str(SCHEMA_VERSION))
        self.commit()

    def close(self) -> None:
        with self.lock:
            self.db.commit()
            if self.engine is SQLITE:
                pack_at_rest(self.db, self.path)
            self.db.close()

    def write_count(self) -> int:
        """Rows written through this catalog since it opened (rolled back or not):
        the same at two moments, nothing was written between them through it."""
        return self.db.total_changes

    @staticmethod
    def reader(path: str, engine=SQLITE, snapshot: bool = False, cache_kib: int = 0) -> "Catalog":
        """A read-only connection to the catalog file ``path`` (for fsck, a private copy: even a
        read-only open of a WAL database makes files beside it), its page cache ``cache_kib``
        (0: SQLite's default); with PostgreSQL, a connection of its own in one snapshot."""
        view = Catalog.__new__(Catalog)
        view.path = path
        view.engine = engine
        view.lock = lockorder.rlock("catalog snapshot")
        view.forget_group_disks()
        view.forget_signatures()
        view.memo = None
        view.inode_numbers = None
        view.own_stripes = ""
        view.solo = lambda: None
        view.stripe_changes = 0
        if engine is SQLITE:
            view.db = sqlite3.connect(f"file:{urllib.parse.quote(path)}?mode=ro", uri=True,
                                      check_same_thread=False)
            if cache_kib:
                view.db.execute(f"PRAGMA cache_size=-{cache_kib}")
        else:
            view.db = engine.connect(snapshot=snapshot)
        return view

    def snapshot(self) -> "Catalog":
        """A read-only view of the catalog as it is now (a WAL read transaction;
        PostgreSQL: a REPEATABLE READ one), for long reads such as writing the
        MANIFEST while the mount goes on. Take it under the lock, right after a
        commit; close it when done."""
        view = Catalog.reader(self.path, self.engine, snapshot=True)
        if self.engine is SQLITE:
            view.db.execute("BEGIN")
        view.db.execute("SELECT COUNT(*) FROM inodes").fetchone()     # the snapshot starts here
        return view

    def commit(self) -> None:
        with self.lock, _full_is_nospace:
            self.commits += 1
            self.db.commit()

    def checkpoint(self) -> None:
        """Copy the WAL into the database file, as far as no reader holds it back
        (PostgreSQL: nothing to do, the server checkpoints)."""
        if self.engine is not SQLITE:
            return
        with self.lock:
            try:
                self.db.execute("PRAGMA wal_checkpoint(PASSIVE)")
            except sqlite3.OperationalError as exc:
                if "full" not in str(exc):
                    raise
                # Harmless: every commit is in the WAL still; a later checkpoint copies it.
                logging.getLogger(__name__).warning("%s: catalog checkpoint put off: the disk is full",
                                                    self.path)

    @property
    def uncommitted(self) -> bool:
        """Does the connection hold changes not yet committed?"""
        return self.db.in_transaction

    def rollback(self) -> None:
        with self.lock:
            self.db.rollback()
            self.forget_group_disks()
            self.stripe_changes += 1
            if self.memo is not None:
                self.memo.clear()

    def execute(self, sql: str, args=()) -> sqlite3.Cursor:
        with self.lock, _full_is_nospace:
            return self.db.execute(sql, args)

    def executemany(self, sql: str, rows) -> None:
        with self.lock, _full_is_nospace:
            self.db.executemany(sql, rows)

    def query(self, sql: str, args=()) -> list:
        with self.lock:
            return self.db.execute(sql, args).fetchall()

    def query_in(self, sql: str, keys: list, args=()) -> list:
        """The rows of ``sql``, whose ``{}`` is a list of ``keys``, asked 500 keys at
        a time (under SQLite's bound on parameters); ``args`` follow the keys."""
        rows = []
        for i in range(0, len(keys), 500):
            part = keys[i:i + 500]
            rows += self.query(sql.format(",".join("?" * len(part))), (*part, *args))
        return rows

    def read_ahead(self, sql: str, keys: list, args=()) -> Callable[[], list]:
        """``query_in``'s rows (up to 500 keys), sent now and taken by the call
        returned: PostgreSQL's answer comes with the next statement waited for
        (``PgConnection.read_ahead``); SQLite's, read now."""
        sql, args = sql.format(",".join("?" * len(keys))), (*keys, *args)
        with self.lock:
            ahead = getattr(self.db, "read_ahead", None)
            if ahead is not None:
                return ahead(sql, args)
            rows = self.query(sql, args)
        return lambda: rows

    def scalar(self, sql: str, args=()):
        with self.lock:
            row = self.db.execute(sql, args).fetchone()
        return None if row is None else row[0]

    # -- meta ----------------------------------------------------------------

    def get_meta(self, key: str) -> Optional[str]:
        return self.scalar("SELECT value FROM meta WHERE key=?", (key,))

    def set_meta(self, key: str, value: str) -> None:
        self.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, value))

    # -- blocks --------------------------------------------------------------

    def blocks_with_sigs(self, sigs: list[str]) -> dict[str, list[BlockRow]]:
        """The blocks of each of these signatures that has any."""
        with self.lock:     # (what a lone PostgreSQL mount knows: webfs.catalogsigs)
            found, asked = self.known_blocks(keys(sigs))
        for r in self.query_in(f"SELECT {BLOCK_COLUMNS} FROM blocks WHERE sig IN ({{}})", asked):
            row = BlockRow.of(r)
            found.setdefault(row.sig, []).append(row)
        for rows in found.values():
            if len(rows) > 1:           # (here, not ORDER BY: a sort of every row found)
                rows.sort(key=lambda r: r.overflow)
        return found

    def block(self, sig: str, overflow: int = 0) -> Optional[BlockRow]:
        try:
            stored = key(sig)
        except ValueError:
            return None         # not hex (a name typed under .webfs/blocks): no block has it
        rows = self.query(f"SELECT {BLOCK_COLUMNS} FROM blocks WHERE sig=? AND overflow=?",
                          (stored, overflow))
        return BlockRow.of(rows[0]) if rows else None

    def group_prefix_exists(self, prefix: str) -> bool:
        """Whether any block's placement group starts with these hex digits."""
        return bool(self.scalar("SELECT 1 FROM blocks WHERE sig BETWEEN ? AND ? LIMIT 1", sig_range(prefix)))

    def group_prefixes(self, prefix: str, length: int) -> list[str]:
        """The distinct first ``length`` hex digits of the groups under a prefix, in order."""
        return [r[0] for r in self.query(
            "SELECT DISTINCT substr(grp, 1, ?) FROM blocks WHERE sig BETWEEN ? AND ? ORDER BY 1",
            (length, *sig_range(prefix)))]

    def blocks_in_group(self, grp: str) -> list[tuple[str, int]]:
        """(signature, overflow) of every block of one placement group, in order."""
        return [(sig.hex(), overflow) for sig, overflow in self.query(
            "SELECT sig, overflow FROM blocks WHERE sig BETWEEN ? AND ? AND grp=? ORDER BY sig, overflow",
            (*sig_range(grp), grp))]

    def _where(self, grp: Optional[str], disk: Optional[int], unprotected: bool) -> tuple[str, tuple]:
        conds, args = [], []
        if grp is not None:
            conds.append("sig BETWEEN ? AND ? AND grp=?")
            args += [*sig_range(grp), grp]
        if disk is not None:
            conds.append("disk=?")
            args.append(disk)
        if unprotected:
            conds.append("stripe IS NULL")
        return (" WHERE " + " AND ".join(conds) if conds else ""), tuple(args)

    def block_count(self, *, grp: Optional[str] = None, disk: Optional[int] = None,
                    unprotected: bool = False) -> int:
        """Blocks of a placement group, on a disk, in no parity stripe (any that apply)."""
        where, args = self._where(grp, disk, unprotected)
        return self.scalar(f"SELECT COUNT(*) FROM blocks{where}", args)

    def block_ids(self, *, disk: Optional[int] = None, unprotected: bool = False) -> list[int]:
        """Ids of the blocks on a disk, or in no parity stripe, in id order."""
        where, args = self._where(None, disk, unprotected)
        return [r[0] for r in self.query(f"SELECT id FROM blocks{where} ORDER BY id", args)]

    def group_usage(self, groups: Optional[list[str]] = None) -> list[tuple[str, int, int, int]]:
        """(group, disk, blocks, bytes with their headers) of the given groups (all if None)."""
        sql = f"SELECT grp, disk, COUNT(*), SUM(stored) + {HEADER_SIZE} * COUNT(*) FROM blocks"
        if groups is None:
            return [tuple(r) for r in self.query(sql + " GROUP BY grp, disk")]
        return [tuple(r) for g in groups for r in self.query(
            sql + " WHERE sig BETWEEN ? AND ? AND grp=? GROUP BY grp, disk", (*sig_range(g), g))]

    def group_samples(self, grp: str, most: int = 5) -> list[BlockRow]:
        """A group's first blocks, to show what it holds (their Name: hints are in their headers)."""
        return [BlockRow.of(r) for r in self.query(
            f"SELECT {BLOCK_COLUMNS} FROM blocks WHERE sig BETWEEN ? AND ? AND grp=? ORDER BY id LIMIT ?",
            (*sig_range(grp), grp, most))]

    def block_by_id(self, block_id: int) -> Optional[BlockRow]:
        rows = self.query(f"SELECT {BLOCK_COLUMNS} FROM blocks WHERE id=?", (block_id,))
        return BlockRow.of(rows[0]) if rows else None

    def block_again(self, row: BlockRow) -> Optional[BlockRow]:
        """The block of a row read earlier, as the catalog has it now; None if it
        was freed since, even when its id went to a block stored after (SQLite
        gives the highest id again): that block is not the one the row named."""
        fresh = self.block_by_id(row.id)
        return fresh if fresh is not None and (fresh.sig, fresh.overflow) == (row.sig, row.overflow) else None

    def blocks(self, where: str = "", args=()) -> Iterator[BlockRow]:
        """Every block (matching a WHERE clause), read in chunks so memory stays flat."""
        last = 0
        while True:
            cond = f"id > ? {'AND (' + where + ')' if where else ''}"
            rows = self.query(f"SELECT {BLOCK_COLUMNS} FROM blocks WHERE {cond} ORDER BY id LIMIT 1000",
                              (last, *args))
            if not rows:
                return
            for r in rows:
                yield BlockRow.of(r)
            last = rows[-1][0]

    def insert_block(self, sig: str, overflow: int, disk: int, size: int, stored: int,
                     codec: str, refs: int, pins: int, created: str, name: str, grp: str,
                     stripe: Optional[str] = None, sha256: Optional[bytes] = None,
                     room: bool = False) -> Optional[BlockRow]:
        """A new block row; with a stripe (a catalog rebuilt from parity headers,
        or chosen first), already its member. The name hint is not stored, only kept in the row
        returned (for its stripe's Member line). None if another machine's row of this signature and
        overflow was committed first (a shared engine). ``room``: see ``narrow``."""
        wide = room and self.engine is SQLITE
        cur = self.execute(
            "INSERT INTO blocks (sig, overflow, disk, size, stored, codec, refs, pins, created, grp,"
            " stripe, sha256) VALUES (?,?,?,?,?,?,?,?,?,?,?,?) ON CONFLICT (sig, overflow) DO NOTHING",
            (key(sig), overflow, disk, size, stored, codec, refs + wide, pins, seconds_of(created), grp,
             key(stripe), sha256))
        if not cur.rowcount:
            return None
        row = BlockRow(cur.lastrowid, sig, overflow, disk, size, stored, codec, refs, pins,
                       created, name, grp, stripe, sha256)
        self.block_added(row)
        return row

    def insert_blocks(self, rows: list[BlockRow]) -> Optional[list[BlockRow]]:
        """SQLite's: new rows (with their stripes, each with ``narrow``\'s room)
        in one statement, numbered past the highest id as SQLite numbers a row
        given none; the rows inserted, as inserted: all of them, or, if the
        statement failed (the catalog's disk full), those before the row it
        failed on (SQLite undoes that row's insert alone), the rest for
        insert_block each. None: another engine (insert_block each).
        No savepoint is opened for the failure: its journal took a copy of
        every index page the statement changed, past 64 KiB to a temporary
        file (22.8 MB of writes an import of the bench's WARC)."""
        if self.engine is not SQLITE or len(rows) < 2:
            return None
        with self.lock:
            top = self.scalar("SELECT max(id) FROM blocks") or 0
            made = [dataclasses.replace(row, id=top + n) for n, row in enumerate(rows, 1)]
            try:
                self.executemany(
                    "INSERT INTO blocks (id, sig, overflow, disk, size, stored, codec, refs, pins, created, grp,"
                    " stripe, sha256) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                    [(r.id, key(r.sig), r.overflow, r.disk, r.size, r.stored, r.codec, r.refs + 1, r.pins,
                      seconds_of(r.created), r.grp, key(r.stripe), r.sha256) for r in made])
            except (sqlite3.Error, NoSpace):
                made = made[:self.scalar("SELECT count(*) FROM blocks WHERE id > ?", (top,))]
            for r in made:
                self.block_added(r)
        return made

    def narrow(self, ids: list[int]) -> None:
        """The counts of rows inserted with ``room`` (one too high, so that their
        page keeps a byte for a second reference: webfs.blockrows) set right."""
        if self.engine is SQLITE:
            self.executemany("UPDATE blocks SET refs=refs-1 WHERE id=?", [(i,) for i in ids])

    def set_sha256(self, row: BlockRow, sha256: bytes, replace: bool = False) -> None:
        """Record the digest of a block that had none (its bytes were just
        compared with a document of this digest), or with ``replace`` one that
        fsck found wrong. The row is matched by its signature too: an id can
        be given to a new block once its own is gone."""
        self.execute("UPDATE blocks SET sha256=? WHERE id=? AND sig=? AND overflow=?"
                     + ("" if replace else " AND sha256 IS NULL"), (sha256, row.id, key(row.sig), row.overflow))

    def set_refs(self, block_id: int, refs: int, pins: int) -> None:
        self.forget_rows()          # (a count set, not counted: the rows a lone mount keeps, stale)
        self.execute("UPDATE blocks SET refs=?, pins=? WHERE id=?", (refs, pins, block_id))

    def add_refs_of(self, changes: list[tuple[int, int, int]]) -> None:
        """(block id, refs added, pins added) of several blocks, in one statement:
        counted by the engine, so two machines' changes to one count both hold."""
        self.executemany("UPDATE blocks SET refs=refs+?2, pins=pins+?3 WHERE id=?1", sorted(changes))

    def blocks_by_ids(self, ids: list[int]) -> list[BlockRow]:
        """The rows of those of these blocks that exist."""
        return [BlockRow.of(r) for r in self.query_in(f"SELECT {BLOCK_COLUMNS} FROM blocks WHERE id IN ({{}})", ids)]

    def set_block_disk(self, block_id: int, disk: int) -> None:
        self.stripe_changes += 1            # (its stripe's disks: a trigger)
        self.execute("UPDATE blocks SET disk=? WHERE id=?", (disk, block_id))

    def move_block(self, block_id: int, disk: int) -> None:
        """Record a block on another disk and out of its parity stripe. The stripe
        is marked dirty in the same transaction, so if its parity is not brought
        up to date (the mover does that next) the next open reconciles it."""
        self.stripe_changes += 1
        self.execute("UPDATE stripes SET state='dirty' WHERE id=(SELECT stripe FROM blocks WHERE id=?)",
                     (block_id,))
        self.execute("UPDATE blocks SET stripe=NULL WHERE id=?", (block_id,))
        self.execute("UPDATE blocks SET disk=? WHERE id=?", (disk, block_id))

    def drop_ref(self, block_id: int, pin: bool) -> None:
        """One reference (and a pin) fewer, counted by the engine (webfs.sharedrefs)."""
        self.execute("UPDATE blocks SET refs=refs-1, pins=pins-? WHERE id=?", (int(pin), block_id))

    def delete_unused_block(self, block_id: int) -> None:
        """Delete a block's row if the engine's count of it is 0 when the DELETE runs."""
        self.stripe_changes += 1            # (its stripe's members: a trigger)
        self.execute("DELETE FROM blocks WHERE id=? AND refs<=0", (block_id,))

    def quick_check(self) -> str:
        """SQLite's quick_check of the file: "ok", or its first complaint
        (PostgreSQL checks its own pages: "ok" once it answers)."""
        if self.engine is not SQLITE:
            return "ok" if self.scalar("SELECT 1") == 1 else "no answer"
        return self.scalar("PRAGMA quick_check")

    def block_refs(self) -> dict[tuple[str, int], tuple[int, int]]:
        """(signature, overflow) -> (references, pins) of every block row."""
        return {(hex_of(sig), overflow): (refs, pins)
                for sig, overflow, refs, pins in self.query("SELECT sig, overflow, refs, pins FROM blocks")}

    def namespace_refs(self) -> dict[int, int]:
        """Block id -> references the namespace holds on it."""
        # A file with n names holds n references; an open file with no name, one.
        return dict(self.query("SELECT c.block, SUM(MAX(i.nlink, 1)) FROM contents c "
                               "JOIN inodes i ON i.id = c.inode GROUP BY c.block"))

    # -- figures -------------------------------------------------------------

    def block_totals(self) -> dict[str, int]:
        row = self.query("SELECT COUNT(*), COALESCE(SUM(size),0), COALESCE(SUM(stored),0),"
                         " COALESCE(SUM(size*refs),0), COALESCE(SUM(refs),0) FROM blocks")[0]
        return dict(zip(("blocks", "distinct_bytes", "stored_bytes", "logical_bytes", "refs"), row))

    def disk_totals(self) -> dict[int, tuple[int, int]]:
        """disk -> (blocks, payload bytes)."""
        return {d: (n, b) for d, n, b in self.query(
            "SELECT disk, COUNT(*), COALESCE(SUM(stored),0) FROM blocks GROUP BY disk")}

    # -- what the query index reads (webfs.indexer), on a reader of its own --

    REGULAR = f"(mode & {0o170000}) = {0o100000} AND nlink > 0"

    def file_stamps(self, since_ns: Optional[int] = None) -> dict[int, int]:
        """inode -> ctime_ns of the regular files (changed since ``since_ns``)."""
        if since_ns is None:
            return dict(self.query(f"SELECT id, ctime_ns FROM inodes WHERE {self.REGULAR}"))
        return dict(self.query(f"SELECT id, ctime_ns FROM inodes WHERE {self.REGULAR} AND ctime_ns >= ?",
                               (since_ns,)))

    def file_totals(self) -> tuple[int, int]:
        """(number of regular files, their latest ctime_ns)."""
        n, top = self.query(f"SELECT count(*), max(ctime_ns) FROM inodes WHERE {self.REGULAR}")[0]
        return n, top or 0

    def a_name_of(self, ino: int) -> Optional[tuple[int, bytes]]:
        """(parent, name) of one of an inode's names, None if it has none."""
        rows = self.query("SELECT parent, name FROM dentries WHERE inode=? LIMIT 1", (ino,))
        return (rows[0][0], bytes(rows[0][1])) if rows else None

    def index_batch(self, inos: list[int], names: tuple[bytes, ...]) -> dict[int, tuple]:
        """inode -> (size, mtime_ns, (parent, name) of a name or None, {xattr
        of ``names``: value}, BlockRow of its one piece or None) of a batch of
        files: what an index pass reads of each, in five queries a batch."""
        inos = tuple(inos)
        marks = ",".join("?" * len(inos))
        rows = {i: [s, m, None, {}, None] for i, s, m in self.query(
            f"SELECT id, size, mtime_ns FROM inodes WHERE id IN ({marks})", inos)}
        for ino, parent, name in self.query(
                f"SELECT inode, parent, name FROM dentries WHERE inode IN ({marks})", inos):
            rows[ino][2] = rows[ino][2] or (parent, bytes(name))
        for ino, name, value in self.query(f"SELECT inode, name, value FROM xattrs WHERE inode IN ({marks}) "
                                           f"AND name IN ({','.join('?' * len(names))})", (*inos, *names)):
            rows[ino][3][bytes(name)] = bytes(value)
        one = {ino: block for ino, n, block in self.query(
            f"SELECT inode, count(*), min(block) FROM contents WHERE inode IN ({marks}) GROUP BY inode",
            inos) if n == 1}
        wanted = tuple(set(one.values()))
        blocks = {r[0]: BlockRow.of(r) for r in self.query(
            f"SELECT {BLOCK_COLUMNS} FROM blocks WHERE id IN ({','.join('?' * len(wanted))})",
            wanted)} if wanted else {}
        for ino, block in one.items():
            rows[ino][4] = blocks.get(block)
        return {ino: tuple(r) for ino, r in rows.items()}

    def files_in_group_order(self, top_ino: int, after: tuple[str, int], most: int) -> list[tuple[str, int]]:
        """(placement group of the first block, inode) of the regular files
        numbered up to ``top_ino``, in that order, past ``after``: an order that
        moving a group to another disk does not change (webfs.stream)."""
        return self.query(_STREAM_FILES + "AND (coalesce(b.grp, ''), i.id) > (?, ?) "
                          "ORDER BY coalesce(b.grp, ''), i.id LIMIT ?", (top_ino, after[0], after[1], most))

    def groups_of_files(self, inos: list[int], top_ino: int) -> list[tuple[str, int]]:
        """(placement group of the first block, inode) of those of ``inos`` that
        are regular files numbered up to ``top_ino`` (a subset's, webfs.stream)."""
        out: list[tuple[str, int]] = []
        for i in range(0, len(inos), 500):
            part = inos[i:i + 500]
            out += self.query(_STREAM_FILES + f"AND i.id IN ({','.join('?' * len(part))})", (top_ino, *part))
        return [tuple(r) for r in out]

    def top_inode(self) -> int:
        """The highest inode number ever used: the highest there, or one freed
        after it (``TOP_FREED``). Numbers are never given twice, across restarts
        too, so a stream's snapshot (webfs.stream) stays the files it named."""
        return max(self.scalar("SELECT max(id) FROM inodes") or 0, int(self.get_meta(TOP_FREED) or 0))

    def data_version(self) -> int:
        """Moves when another connection commits (SQLite's PRAGMA data_version;
        PostgreSQL: the regular files' number and latest change, a scan)."""
        if self.engine is not SQLITE:
            return hash(self.file_totals())
        return self.scalar("PRAGMA data_version")


# The regular files numbered up to a stream's top inode, with the placement
# group of their first block (webfs.stream's order).
_STREAM_FILES = ("SELECT coalesce(b.grp, ''), i.id FROM inodes i LEFT JOIN contents c ON c.inode = i.id "
                 f"AND c.piece = 0 LEFT JOIN blocks b ON b.id = c.block WHERE (i.mode & {0o170000}) = {0o100000} "
                 "AND i.nlink > 0 AND i.id <= ? ")


def catalog_path(disk_root: str) -> str:
    return os.path.join(disk_root, CATALOG_FILE)
