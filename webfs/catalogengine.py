"""Which database engine holds the catalog, and the SQL that differs between them.

``SqliteEngine`` (the default) keeps the catalog in ``meta/catalog.db`` on
the catalog's disk: one file, one process writing. ``PostgresEngine`` keeps
it in a PostgreSQL database named by a URL (``webfs mkfs --catalog
postgresql://...``, then ``catalog_url`` in webfs.conf); files that live
beside the catalog (parity's intent log) stay in that disk's meta/ all the
same; the query index goes into the same database (webfs.pgindex).

The catalog's SQL is written once, in SQLite's dialect, and ``PgConnection``
(a connection with sqlite3's methods, over psycopg 3) rewrites each statement
once for PostgreSQL: ``?`` and ``?N`` parameters, INSERT OR REPLACE/IGNORE as
ON CONFLICT, scalar MAX/MIN as GREATEST/LEAST, a directory entry's rowid as
its explicit ``id`` column (its readdir offset), ``RETURNING id`` for a new
block's number. The schema is rewritten the same way (BIGINT, BYTEA, DOUBLE
PRECISION, identity columns); SQLite's triggers are PL/pgSQL functions here,
the one part CockroachDB does not accept (webfs-internals(7)).

Credentials are never in the URL: a password comes from the file the
command line names (``WEBFS_CATALOG_PASSWORD_FILE``), else from libpq's own
places (``PGPASSWORD``, ``PGPASSFILE``, ``~/.pgpass``).
"""
from __future__ import annotations

import functools
import logging
import re
import sqlite3
import urllib.parse
from typing import Callable, Optional

from . import lockorder
from .errors import CatalogUnreadable

SCHEMES = ("postgresql", "postgres")
# How often a transaction the server aborted (deadlock, serialization) is sent again.
REPLAYS = 5
# New blocks' ids taken from the identity's sequence at once while a mount is alone.
BLOCK_IDS = 64
_TAKE_BLOCK_IDS = "SELECT nextval(pg_get_serial_sequence('blocks', 'id')) FROM generate_series(1, %s)"

log = logging.getLogger("webfs.catalog")


class CatalogURLError(ValueError):
    """A --catalog URL webfs does not take."""


def check_catalog_url(url: str) -> str:
    """The catalog URL as recorded, or CatalogURLError saying what is wrong:
    only postgresql:// URLs that name a database and carry no password."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in SCHEMES:
        raise CatalogURLError(f"--catalog {redact(url)}: not a postgresql:// URL "
                              "(postgresql://[user@]host[:port]/database)")
    query = urllib.parse.parse_qs(parts.query)
    if parts.password is not None or "password" in query:
        raise CatalogURLError(f"--catalog {redact(url)}: the URL carries a password, which webfs would "
                              "record in webfs.conf on every disk; give the URL without it and the password "
                              "in a file named by WEBFS_CATALOG_PASSWORD_FILE (or in ~/.pgpass)")
    if parts.path.strip("/") == "" and "dbname" not in query:
        raise CatalogURLError(f"--catalog {redact(url)}: names no database "
                              "(postgresql://[user@]host[:port]/database)")
    return url


def redact(url: str) -> str:
    """A URL with any password in it replaced by '***' (for messages)."""
    parts = urllib.parse.urlsplit(url)
    netloc = parts.netloc
    if parts.password is not None:
        netloc = netloc.replace(":" + parts.password + "@", ":***@", 1)
    query = re.sub(r"(^|&)password=[^&]*", r"\1password=***", parts.query)
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


# -- the schema, rewritten for PostgreSQL ---------------------------------

# What SQLite's triggers (catalog.SCHEMA) do, as PL/pgSQL: a block that leaves
# a stripe or moves marks the stripe dirty in the same transaction.
PG_TRIGGERS = """
CREATE OR REPLACE FUNCTION webfs_block_stripe() RETURNS trigger AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        IF OLD.stripe IS NOT NULL THEN
            UPDATE stripes SET state='dirty', members=members-1, disks=disks & ~(1::BIGINT << OLD.disk::INT)
            WHERE id=OLD.stripe;
        END IF;
        RETURN OLD;
    END IF;
    IF OLD.stripe IS NOT NULL AND NEW.stripe IS NOT DISTINCT FROM OLD.stripe AND OLD.disk != NEW.disk THEN
        UPDATE stripes SET state='dirty',
            disks=(disks & ~(1::BIGINT << OLD.disk::INT)) | (1::BIGINT << NEW.disk::INT) WHERE id=OLD.stripe;
    ELSIF OLD.stripe IS NOT NULL AND NEW.stripe IS DISTINCT FROM OLD.stripe THEN
        UPDATE stripes SET state='dirty', members=members-1, disks=disks & ~(1::BIGINT << OLD.disk::INT)
        WHERE id=OLD.stripe;
    END IF;
    RETURN NEW;
END $$ LANGUAGE plpgsql;
DROP TRIGGER IF EXISTS blocks_stripe ON blocks;
CREATE TRIGGER blocks_stripe AFTER DELETE OR UPDATE OF disk, stripe ON blocks
    FOR EACH ROW EXECUTE FUNCTION webfs_block_stripe();
"""


def pg_schema(sqlite_schema: str) -> str:
    """The catalog's schema (written for SQLite) as PostgreSQL takes it."""
    sql = re.sub(r"CREATE TRIGGER.*?\nEND;\n", "", sqlite_schema, flags=re.S)
    sql = re.sub(r"--[^\n]*", "", sql)
    # blocks are numbered by the engine (a new block's id), inodes by webfs.
    sql = re.sub(r"(CREATE TABLE IF NOT EXISTS blocks \(\s*id\s+)INTEGER PRIMARY KEY",
                 r"\1BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY", sql)
    # A directory entry's rowid (its readdir offset) is a column of its own here.
    sql = re.sub(r"(CREATE TABLE IF NOT EXISTS dentries \()",
                 r"\1\n    id BIGINT GENERATED BY DEFAULT AS IDENTITY,", sql)
    sql = sql.replace("ON dentries (parent)", "ON dentries (parent, id)")
    sql = re.sub(r"\s*WITHOUT ROWID", "", sql)        # a table is kept by its primary key here anyway
    sql = re.sub(r"\bINTEGER\b", "BIGINT", sql)
    sql = re.sub(r"\bBLOB\b", "BYTEA", sql)
    sql = re.sub(r"\bREAL\b", "DOUBLE PRECISION", sql)
    return sql + PG_TRIGGERS


# -- statements, rewritten for PostgreSQL ---------------------------------

# The primary key of each table, for INSERT OR REPLACE's conflict target.
PRIMARY_KEYS = {"meta": "key", "groups": "grp", "stripes": "id", "inodes": "id", "symlinks": "inode",
                "xattrs": "inode, name", "dentries": "parent, name", "contents": "inode, piece",
                "blocks": "id"}
_INSERT_OR = re.compile(r"INSERT OR (REPLACE|IGNORE) INTO (\w+) \(([^)]*)\)(.*)", re.S)
_SCALAR_MINMAX = re.compile(r"\b(MAX|MIN)\(([^(),]+),([^(),]+)\)", re.I)
_PARAM = re.compile(r"'[^']*'|\?(\d*)")


def translate(sql: str) -> tuple[str, Optional[list[int]]]:
    """A statement in SQLite's dialect as PostgreSQL takes it, and for one
    with numbered parameters (?1, ?2) the order in which to pass its
    arguments (None: as given)."""
    sql = sql.replace("%", "%%")
    order: list[int] = []
    numbered = False

    def param(m: re.Match) -> str:
        nonlocal numbered
        if m.group(0).startswith("'"):
            return m.group(0)
        if m.group(1):
            numbered = True
            order.append(int(m.group(1)) - 1)
        else:
            order.append(len(order))
        return "%s"

    sql = _PARAM.sub(param, sql)
    m = _INSERT_OR.match(sql.strip())
    if m:
        how, table, columns, rest = m.groups()
        sql = f"INSERT INTO {table} ({columns}){rest}"
        if how == "IGNORE":
            sql += " ON CONFLICT DO NOTHING"
        else:
            keys = {k.strip() for k in PRIMARY_KEYS[table].split(",")}
            sets = ", ".join(f"{c}=excluded.{c}" for c in (c.strip() for c in columns.split(",")) if c not in keys)
            sql += f" ON CONFLICT ({PRIMARY_KEYS[table]}) DO " + (f"UPDATE SET {sets}" if sets else "NOTHING")
    sql = _SCALAR_MINMAX.sub(lambda m: ("GREATEST" if m.group(1).upper() == "MAX" else "LEAST")
                             + f"({m.group(2)},{m.group(3)})", sql)
    sql = re.sub(r"\browid\b", "id", sql)
    if re.match(r"\s*INSERT INTO blocks\b", sql) and "RETURNING" not in sql:
        sql += " RETURNING id"
    return sql, (order if numbered else None)


class PgCursor:
    """What a statement gave: its rows (read at once), the id it made, and how
    many rows it changed (asked of the server only when wanted: a write in a
    pipeline is not waited for)."""
    __slots__ = ("rows", "lastrowid", "_rowcount")

    def __init__(self, rows: list, lastrowid: Optional[int], rowcount: Callable[[], int]):
        self.rows, self.lastrowid, self._rowcount = rows, lastrowid, rowcount

    @property
    def rowcount(self) -> int:
        if self.lastrowid is not None:      # rows returned: no need to ask
            return len(self.rows)
        return self._rowcount()

    def fetchone(self):
        return self.rows[0] if self.rows else None

    def fetchall(self) -> list:
        return self.rows

    def __iter__(self):
        return iter(self.rows)


class PgConnection:
    """A PostgreSQL connection with the methods of sqlite3's that the catalog
    uses, each statement rewritten once (``translate``) and kept. As sqlite3's,
    it begins a transaction before the first statement that writes and none
    for reads (each read is its own, so a failed one leaves nothing aborted
    and no transaction sits idle between commits). Within a transaction the
    statements go in one pipeline: a write is sent and not waited for, and a
    read or the commit waits for all before it at once (round trips, not SQL,
    were the cost: webfs-internals(7)). A snapshot's connection reads in one
    REPEATABLE READ transaction instead."""

    def __init__(self, url: str, password: Optional[str], read_only_snapshot: bool = False):
        self._url, self._password = url, password
        self.snapshot = read_only_snapshot
        # Session settings and locks (sql, args), taken again on a new connection (``_reconnect``).
        self._session: list[tuple[str, tuple]] = []
        self.conn = self._connect()
        self._sql: dict[str, tuple[str, Optional[list[int]], bool]] = {}
        self._lock = lockorder.rlock("catalog connection")
        self._pipeline = None
        self.in_transaction = False       # has it changed anything not yet committed?
        self.total_changes = 0            # statements that wrote (sqlite3's counts rows): moves with any write
        # (sql, args) sent before each COMMIT: a mount's lease checked in its
        # commit's transaction (webfs.machines); None: no check.
        self.fence: Optional[tuple[str, tuple]] = None
        # The writes of the open transaction as sent, to send again if the
        # server aborts it for another's sake (``_replay``).
        self._writes: list[tuple[str, object, bool]] = []
        self._replayed: list = []           # the cursors of the writes as last sent again
        self.replays = 0                  # transactions sent again, for tests and status
        self.reconnects = 0               # connections replaced after a pipeline left out of step
        # What tells the other mounts what this commit changed (webfs.changes); None: nothing.
        self.notice: Optional[Callable[[], Optional[tuple[str, tuple]]]] = None
        # Does no other machine's mount write the catalog now (webfs.machines)?
        # Then a new block's id is one taken ahead and its INSERT a write not
        # waited for (``_insert_block_ahead``). None: never.
        self.alone: Optional[Callable[[], bool]] = None
        self._block_ids: list[int] = []

    def _connect(self):
        import psycopg
        try:
            conn = psycopg.connect(self._url, autocommit=not self.snapshot,
                                   **({"password": self._password} if self._password else {}))
        except psycopg.OperationalError as exc:
            why = " ".join(str(exc).split())
            raise CatalogUnreadable(f"the catalog's database {redact(self._url)} does not answer: {why}") from None
        conn.adapters.register_loader("numeric", _numeric_loader())
        if self.snapshot:
            conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
            conn.read_only = True
        for sql, args in self._session:
            conn.execute(sql, args or None)
        return conn

    def session(self, sql: str, args: tuple = ()) -> None:
        """A session setting or lock (psycopg's SQL as it is), kept on any new connection."""
        with self._lock:
            self.conn.execute(sql, args or None)
            self._session.append((sql, args))

    def _reconnect(self) -> None:
        """A failed pipeline may leave results psycopg no longer expects, which
        poison later statements ("unexpected result status: PIPELINE_SYNC");
        the server rolls back what the old session had open, and a new one
        takes its settings again."""
        log.warning("catalog connection after a failed pipeline: connecting again")
        try:
            self.conn.close()
        finally:
            self.conn = self._connect()
            self.reconnects += 1

    def _prepared(self, sql: str) -> tuple[str, Optional[list[int]], bool]:
        found = self._sql.get(sql)
        if found is None:
            text, order = translate(sql)
            found = self._sql[sql] = (text, order, not text.lstrip().upper().startswith("SELECT"))
        return found

    def _begin(self) -> None:
        if not self.in_transaction and not self.snapshot:
            self._pipeline = enter_pipeline(self.conn)
            self.conn.execute("BEGIN")
            self.in_transaction = True
            self._writes = []
            self._replayed = []

    def _end(self, how: str) -> None:
        """COMMIT or ROLLBACK the transaction and leave its pipeline (where a
        queued write's error, if any, is raised). A COMMIT the server refused
        for another transaction's sake is sent again (``_retrying``)."""
        statements = [("ROLLBACK", None)]
        if how == "COMMIT":
            notice = self.notice() if self.notice is not None else None
            # The fence first: the notice's statement, which asks whether any
            # other machine is mounted, then reads after the lease row is
            # held (webfs.changes, NOTIFY_SQL).
            statements = [s for s in (self.fence, notice) if s is not None] + [("COMMIT", None)]

        def finish() -> None:
            for statement in statements:
                self.conn.execute(*statement)
            self._pipeline.sync()
        try:
            self._retrying(finish) if how == "COMMIT" else finish()
            self._close_pipeline(quiet=False, synced=True)
        except Exception as exc:
            self._close_pipeline()
            self._abandon(exc)
            raise

    def _close_pipeline(self, quiet: bool = True, synced: bool = False) -> None:
        """Leave the transaction's pipeline (``synced``: its last sync has just
        read every answer; ``_leave_pipeline``); ``quiet``: after its error was
        raised, and then on a new connection whatever libpq's state: a
        connection out of pipeline mode after a failed pipeline was seen
        answering a statement with another's result, and whether libpq is
        still in pipeline mode then depends on when the server's answers
        came in (make test, at load: no reconnect, so none of it is trusted)."""
        if quiet:
            self._drain()
        pipeline, self._pipeline = self._pipeline, None
        self.in_transaction = False
        self._writes = []
        if pipeline is None:
            return
        failed = False
        try:
            _leave_pipeline(self.conn, pipeline, synced)
        except Exception:
            failed = True           # its error raised here, not by a statement (make test, at load)
            if not quiet:
                raise
        finally:
            if quiet or failed or self.conn.pgconn.pipeline_status:     # or libpq still holds results of it
                self._reconnect()

    def _drain(self) -> None:
        """Fetch what a failed pipeline still owes. psycopg raises a
        pipeline's first error before it has read the results after it (the
        skipped statements', the sync's); left in the socket, they were read
        as the answers to the next transaction's statements: a replay
        aborted again by the same deadlock, or "unexpected result status:
        PIPELINE_SYNC". Each sync reads up to its own marker."""
        for _ in range(REPLAYS):
            if self._pipeline is None:
                return
            try:
                self._pipeline.sync()
                return
            except Exception:       # not only psycopg.Error: an out-of-step pipeline was seen failing
                continue            # psycopg's own checks (make test, at load); the connection goes next

    def _retrying(self, step: Callable[[], object]):
        """``step()`` of the open transaction; if the server aborted the
        transaction to break a deadlock (40P01) or a serialization failure
        (40001), which two machines writing at once can cause and no statement
        of this one is wrong, it is rolled back, its writes sent again in a new
        one, and the step run again: at most REPLAYS times. Nothing in memory
        took the aborted transaction as done (commit() had not returned)."""
        import psycopg
        for attempt in range(REPLAYS + 1):
            try:
                return step()
            except (psycopg.errors.DeadlockDetected, psycopg.errors.SerializationFailure) as exc:
                if attempt == REPLAYS or not self.in_transaction or None in self._writes:
                    raise
                log.info("catalog transaction aborted by the server (%s); sending it again",
                         str(exc).splitlines()[0])
                self._replay()

    def _replay(self) -> None:
        """The aborted transaction's writes sent again, on a new connection:
        after a pipeline's error the old one was found answering a statement
        with another's result even once libpq had left pipeline mode, so
        none of its socket is trusted (the server rolls the old session back)."""
        writes = self._writes
        self._close_pipeline()              # quiet: on a new connection
        replayed = self._replayed           # the transaction's own list, which its cursors hold
        self.replays += 1
        self._begin()
        replayed.clear()
        for text, args, many in writes:
            cur = self.conn.cursor()
            cur.executemany(text, args) if many else cur.execute(text, args)
            replayed.append(cur)
        self._writes, self._replayed = writes, replayed

    def _rowcount_of(self, cur, index: Optional[int]) -> Callable[[], int]:
        """How many rows the transaction's write number ``index`` changed, as
        PgCursor asks it: after the pipeline's sync, and from the statement as
        sent again if the transaction was replayed meanwhile (the first
        cursor's connection is gone; another machine may have changed the
        answer, as an ON CONFLICT DO NOTHING's)."""
        replayed = self._replayed

        def rowcount() -> int:
            self._sync()
            return (replayed[index] if index is not None and index < len(replayed) else cur).rowcount
        return rowcount

    def _abandon(self, exc: BaseException) -> None:
        """After a statement of the pipeline failed, the server skipped the rest
        (the COMMIT too) and the transaction is aborted: roll it back, so the
        next one can begin; a failed fence is LeaseLost (webfs.machines)."""
        import psycopg
        if self.conn.info.transaction_status == psycopg.pq.TransactionStatus.INERROR:
            self.conn.execute("ROLLBACK")
        if isinstance(exc, psycopg.errors.DivisionByZero) and self.fence is not None:
            from .machines import LeaseLost
            raise LeaseLost("this mount's lease was taken over by another machine: "
                            "nothing it wrote since its last commit is kept") from None

    def _sync(self) -> None:
        with self._lock:
            if self._pipeline is not None:      # the pipeline of the moment: a replay opens a new one
                self._retrying(lambda: self._pipeline.sync())

    def execute(self, sql: str, args=()) -> PgCursor:
        text, order, writes = self._prepared(sql)
        if order is not None:
            args = [args[i] for i in order]
        returning = writes and text.endswith(" RETURNING id")
        if returning and self.alone is not None and text.startswith("INSERT INTO blocks ") and self.alone():
            return self._insert_block_ahead(text, args)

        def run():
            cur = self.conn.execute(text, args or None)
            return cur, (cur.fetchall() if not writes or returning else [])
        with self._lock:
            if writes:
                self._begin()
                self.total_changes += 1
            cur, rows = self._retrying(run) if self.in_transaction else run()
            index = None                    # not a write of the transaction: never sent again
            if writes and self.in_transaction:
                index = len(self._writes)
                self._writes.append(_as_replayed(text, args, rows) if returning else (text, args or None, False))
            rowcount = self._rowcount_of(cur, index)
        lastrowid = rows[0][0] if rows and writes else None
        return PgCursor(rows, lastrowid, rowcount)

    def read_ahead(self, sql: str, args=()) -> Callable[[], list]:
        """A read sent now and its rows taken later (the returned call): in the
        open transaction's pipeline it is not waited for, so its answer comes
        with the next statement waited for (a new block's open stripes with its
        group: webfs-internals(7), A NEW BLOCK IN ONE ROUND TRIP). Outside a
        transaction it is read at once; once the transaction was sent again or
        the connection replaced, read again when taken."""
        with self._lock:
            if not self.in_transaction:
                got = self.execute(sql, args).rows
                return lambda: got
            text, order, _ = self._prepared(sql)
            sent = self.conn.execute(text, [args[i] for i in order] if order is not None else args or None)
            at = (self.replays, self.reconnects)

        def step() -> list:
            if at == (self.replays, self.reconnects):
                return sent.fetchall()
            return self.execute(sql, args).rows

        def taken() -> list:
            with self._lock:
                return self._retrying(step)
        return taken

    def _insert_block_ahead(self, text: str, args) -> PgCursor:
        """A new block's row under an id taken ahead, sent and not waited for.
        Without ON CONFLICT: alone, no other mount inserts its signature (the
        store looked it up in this transaction), and should one have, the
        commit fails rather than lose the row."""
        with self._lock:
            self._begin()
            self.total_changes += 1
            if not self._block_ids:
                take = lambda: self.conn.execute(_TAKE_BLOCK_IDS, (BLOCK_IDS,)).fetchall()     # noqa: E731
                self._block_ids = sorted((r[0] for r in self._retrying(take)), reverse=True)
            block_id = self._block_ids.pop()
            text, args = _with_id(text, keep_conflict=False), [block_id, *args]
            cur = self._retrying(lambda: self.conn.execute(text, args))
            self._writes.append((text, args, False))
        return PgCursor([(block_id,)], block_id, self._rowcount_of(cur, len(self._writes) - 1))

    def executemany(self, sql: str, rows) -> None:
        text, order, _ = self._prepared(sql)
        rows = [[r[i] for i in order] for r in rows] if order is not None else list(rows)
        if not rows:        # (as sqlite3's: nothing written, no transaction; two a placement, mostly)
            return
        with self._lock:
            self._begin()
            self.total_changes += 1
            run = lambda: self.conn.cursor().executemany(text, rows)     # noqa: E731
            self._retrying(run) if self.in_transaction else run()
            if self.in_transaction:
                self._writes.append((text, rows, True))

    def executescript(self, sql: str) -> None:
        """Statements without parameters, run at once (the schema): in autocommit,
        one implicit transaction."""
        with self._lock:
            self.conn.execute(sql)

    def commit(self) -> None:
        self._finish("COMMIT")

    def rollback(self) -> None:
        self._finish("ROLLBACK")

    def _finish(self, how: str) -> None:
        with self._lock:
            if self.in_transaction:
                self._end(how)
            elif self.snapshot:         # its one transaction, as psycopg began it
                (self.conn.commit if how == "COMMIT" else self.conn.rollback)()

    def close(self) -> None:
        self.conn.close()


def enter_pipeline(conn):
    """psycopg's pipeline entered on ``conn``, as ``conn.pipeline()`` enters
    it but without its context manager, whose exit always sends a Sync and
    waits for its answer: a second round trip after each COMMIT's own
    (webfs-internals(7), POSTGRESQL COPY-IN, AGAIN)."""
    import psycopg
    pipeline = conn._pipeline = psycopg.Pipeline(conn)
    pipeline.__enter__()
    return pipeline


def _leave_pipeline(conn, pipeline, synced: bool) -> None:
    """Leave the pipeline ``enter_pipeline`` entered. ``synced``: its last
    sync just read the answers of all it sent; with nothing queued since,
    libpq leaves pipeline mode at once (it refuses while any answer is
    owed: the caller then connects again). Otherwise psycopg's exit: a Sync,
    and every answer still owed read (the first error raised)."""
    try:
        if synced and not pipeline.command_queue and not pipeline.result_queue:
            conn.pgconn.exit_pipeline_mode()
        else:
            pipeline.__exit__(None, None, None)
    finally:
        conn._pipeline = None


def _as_replayed(text: str, args, rows: list) -> Optional[tuple[str, object, bool]]:
    """A new row's INSERT .. RETURNING id as sent again: with the id it was
    given (the caller holds it; a sequence never gives it to another). None
    for any other statement that returned rows (a DELETE .. RETURNING: sent
    again it could return others, which its caller would not see): its
    transaction is not sent again."""
    if not rows:
        return text, args or None, False
    if not _INSERT_RETURNING.match(text):
        return None
    return _with_id(text, keep_conflict=True), [rows[0][0], *args], False


_INSERT_RETURNING = re.compile(r"\s*INSERT INTO (\w+) \(([^)]*)\) VALUES \(([^)]*)\)(.*) RETURNING id$", re.S)


@functools.lru_cache(maxsize=64)
def _with_id(text: str, keep_conflict: bool) -> str:
    """An INSERT .. RETURNING id as it is sent with the id given: its
    ON CONFLICT clause kept or dropped."""
    table, columns, values, rest = _INSERT_RETURNING.match(text).groups()
    if not keep_conflict:
        rest = re.sub(r"\s*ON CONFLICT .*", "", rest, flags=re.S)
    return f"INSERT INTO {table} (id, {columns}) VALUES (%s, {values}){rest}"


def _numeric_loader():
    """SUM() of BIGINT is NUMERIC in PostgreSQL: read back as int (as SQLite gives) when whole."""
    from psycopg.adapt import Loader

    class NumericLoader(Loader):
        def load(self, data):
            text = bytes(data).decode()
            try:
                return int(text)
            except ValueError:
                return float(text)
    return NumericLoader


# -- the engines ----------------------------------------------------------

class SqliteEngine:
    """The catalog in an SQLite file (WAL) on the catalog's disk."""
    name = "sqlite"
    url = ""

    def connect(self, path: str, cache_kib: int, wal_limit: int) -> sqlite3.Connection:
        db = sqlite3.connect(path, check_same_thread=False, timeout=30)
        db.execute("PRAGMA journal_mode=WAL")
        # NORMAL: a commit survives a killed process (it is in the OS's hands);
        # fsync of the WAL happens at checkpoints and at 'webfs sync'.
        db.execute("PRAGMA synchronous=NORMAL")
        # A small page cache: it was the daemon's memory that grew with the
        # archive, and pages beyond it come from the OS's cache (measured:
        # webfs-internals(7), "Memory that does not grow with the archive").
        db.execute(f"PRAGMA cache_size=-{cache_kib}")
        # The WAL is cut back to this after a checkpoint that left it longer.
        db.execute(f"PRAGMA journal_size_limit={wal_limit}")
        return db

    def create_schema(self, db: sqlite3.Connection, sqlite_schema: str) -> None:
        db.executescript(sqlite_schema)

    def migrate(self, db: sqlite3.Connection, schema: int) -> None:
        """Nothing: an older catalog file was rewritten before it was opened
        (webfs.catalogmigration)."""


class PostgresEngine:
    """The catalog in a PostgreSQL database (one archive per database)."""
    name = "postgresql"

    def __init__(self, url: str, password_file: Optional[str] = None):
        self.url = check_catalog_url(url)
        self.password_file = password_file

    def password(self) -> Optional[str]:
        if not self.password_file:
            return None
        try:
            with open(self.password_file) as f:
                return f.readline().rstrip("\n")
        except OSError as exc:
            raise CatalogUnreadable(f"{self.password_file}: cannot read the catalog's password: "
                                    f"{exc.strerror}") from None

    def connect(self, path: str = "", cache_kib: int = 0, wal_limit: int = 0,
                snapshot: bool = False) -> PgConnection:
        return PgConnection(self.url, self.password(), read_only_snapshot=snapshot)

    def holds_catalog(self, db: Optional[PgConnection] = None) -> bool:
        """Does the database have the catalog's tables (made by a mkfs)?"""
        conn = db or self.connect()
        try:
            return conn.execute("SELECT to_regclass('meta')").fetchone()[0] is not None
        finally:
            if db is None:
                conn.close()

    def create_schema(self, db: PgConnection, sqlite_schema: str) -> None:
        """The tables, made once: a database that has them is only read (a
        read-only check writes nothing, not even a trigger's function)."""
        if not self.holds_catalog(db):
            db.executescript(pg_schema(sqlite_schema))
            db.commit()

    def migrate(self, db: PgConnection, schema: int) -> None:
        """Bring a database of an older schema to this one (3 -> 4: a block's
        created as seconds; a Created text in another form than webfs writes,
        which only a hand-made header has, becomes 0; no index on grp; 4 -> 5:
        no name column, the Name: hint being in block and parity headers)."""
        if schema < 4:
            db.execute("DROP INDEX IF EXISTS blocks_grp")
            db.execute("ALTER TABLE blocks ALTER COLUMN created TYPE BIGINT USING CASE WHEN created ~ "
                       "'^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z$' THEN "
                       "extract(epoch FROM created::timestamptz)::BIGINT ELSE 0 END")
        if schema < 5:
            db.execute("ALTER TABLE blocks DROP COLUMN IF EXISTS name")


SQLITE = SqliteEngine()


def engine_of(catalog_url: str, password_file: Optional[str] = None):
    """The engine an archive's webfs.conf names (its catalog_url; "": SQLite)."""
    return PostgresEngine(catalog_url, password_file) if catalog_url else SQLITE


def database_error(exc: BaseException) -> bool:
    """Is this an error of the catalog's engine (either one)?"""
    if isinstance(exc, sqlite3.Error):
        return True
    mod = type(exc).__module__ or ""
    return mod.startswith("psycopg")


__all__ = ["SQLITE", "CatalogURLError", "PostgresEngine", "SqliteEngine", "check_catalog_url",
           "database_error", "engine_of", "pg_schema", "redact", "translate"]
