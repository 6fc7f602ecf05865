"""The query index in PostgreSQL: the index of an archive whose catalog is there.

This module owns the index's tables when the catalog is in PostgreSQL
(webfs.catalogengine): the schema ``webfs_index`` of the catalog's own
database, so that one server holds both. The rows are the SQLite index's
(webfs.index) and so is the interface (webfs.indexer's passes write it,
webfs.query reads it through ``run``, ``count`` and ``matching``):

- ``docs``: one row per distinct document (block signature), its words as a
  tsvector of lexemes without positions (``lexemes``): the words of its
  title and text as webfs.query.tokens cuts and folds them, so that both
  engines find the same words, and its title's words again, each after a
  ``_`` (which no word holds), for ``title:`` and the ranking; its
  out-links as an array of their url_hash numbers; a GIN index on each
  (without GIN's pending list: it left the index 3.7 times as large).
- ``files``: one row per file, as webfs.index's, with the url_hash of its
  URL as links keep it (``inlinks``) in place of that URL's text.
- ``meta``: version, watermark, and ``generation``, which moves with every
  commit that wrote (webfs.indexer's test for "another pass wrote").

The connection's search_path is the schema, so the SQL names the tables
alone, in SQLite's dialect (catalogengine.PgConnection rewrites it). A
process writing the index holds a session advisory lock for as long as its
connection lives: one pass at a time across processes and hosts, let go if
the process dies. Derived data: tables of another version, or some of them
missing, are dropped and made again.
"""
from __future__ import annotations

import contextlib
import functools
import itertools
import logging
from typing import Iterator, Optional

from . import query
from .errors import WebfsError
from .index import Index, url_hash

log = logging.getLogger(__name__)

SCHEMA_NAME = "webfs_index"
VERSION = "pg1"                 # another version is made again, not read (derived data)
TABLES = ("meta", "docs", "files")
INDEXES = ("docs_words", "docs_links", "files_doc")       # made again alone if dropped: the rows stay good
PASS_LOCK = 0x77656266735f6978  # pg_advisory_lock's key of the one writing pass ("webfs_ix")
TITLE = "_"                     # before a title's words among a document's lexemes
MAX_LEXEME = 2046               # bytes: PostgreSQL's longest lexeme
MAX_LEXEMES = 1_000_000         # bytes of lexemes in one tsvector (PostgreSQL's bound: 1 MiB)

SCHEMA = f"""
CREATE SCHEMA IF NOT EXISTS {SCHEMA_NAME};
SET search_path TO {SCHEMA_NAME};
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS docs (
    id    BIGINT PRIMARY KEY,           -- numbered by the one writing pass
    sig   TEXT NOT NULL UNIQUE,
    kind  TEXT NOT NULL,
    words TSVECTOR NOT NULL,
    links BIGINT[]);                    -- url_hash of each out-link, NULL: none
CREATE INDEX IF NOT EXISTS docs_words ON docs USING GIN (words) WITH (fastupdate = off);
CREATE INDEX IF NOT EXISTS docs_links ON docs USING GIN (links) WITH (fastupdate = off);
CREATE TABLE IF NOT EXISTS files (
    ino        BIGINT PRIMARY KEY,
    stamp      BIGINT NOT NULL,
    doc        BIGINT,
    url        TEXT,
    hash       BIGINT,                  -- url_hash of the URL as links keep it
    host       TEXT,
    collection TEXT NOT NULL,
    date       TEXT,
    mime       TEXT NOT NULL DEFAULT '',
    status     INTEGER,
    size       BIGINT NOT NULL);
CREATE INDEX IF NOT EXISTS files_doc ON files (doc);
"""

# The link terms of webfs.query on these tables.
TERMS = {"inlinks": "(SELECT count(*) FROM docs l WHERE l.links @> ARRAY[f.hash])",
         "links-to": "f.doc IN (SELECT l.id FROM docs l WHERE l.links @> ARRAY[?::BIGINT])"}


class IndexUnwritable(WebfsError):
    """The index's database refused a statement (or went away)."""


def _said(method):
    """A database error of the index's as IndexUnwritable, in one line: the
    passes of webfs.indexer say it and go on as for an unwritable index file."""
    @functools.wraps(method)
    def run(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except WebfsError:
            raise
        except Exception as exc:
            if _from_database(exc):
                why = " ".join(str(exc).split())
                raise IndexUnwritable(f"the query index in {SCHEMA_NAME}: {why}") from exc
            raise
    return run


def _from_database(exc: BaseException) -> bool:
    return type(exc).__module__.startswith("psycopg")


def lexemes(title: str, text: str) -> str:
    """A document's words as a tsvector's text: each distinct word once, a
    title's words twice (once after TITLE), without positions; words over
    PostgreSQL's bounds left out (a lexeme of 2 KiB, 1 MiB in all)."""
    in_title = set(query.tokens(title))
    words = sorted(in_title | set(query.tokens(text)) | {TITLE + w for w in in_title})
    kept, size = [], 0
    for w in words:
        n = len(w.encode("utf-8"))
        if n > MAX_LEXEME:
            continue
        size += n
        if size > MAX_LEXEMES:
            break
        kept.append(f"'{w}'")
    return " ".join(kept)


def tsquery(terms: list[tuple]) -> str:
    """The tsquery of webfs.query's word terms: every word, in its column."""
    return " & ".join(f"'{TITLE if column else ''}{w}'" for column, words in terms for w in words)


def _clean(text: Optional[str]) -> Optional[str]:
    """Text as PostgreSQL takes it (no NUL; bytes that were not UTF-8 as U+FFFD)."""
    if text is None:
        return None
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace").replace("\0", "\ufffd")


class PgIndex:
    """One connection to the index in the catalog's database (``catalog_engine``:
    a catalogengine.PostgresEngine). ``read_only``: for queries, and
    FileNotFoundError while there is no index of this version; else the
    writer, holding the pass lock until ``close``."""
    engine = "postgresql"
    _phrase_holds = Index._phrase_holds      # the same check and memo as SQLite's

    def __init__(self, catalog_engine, read_only: bool = False, phrases=None):
        self.db = catalog_engine.connect()
        self.phrases = phrases
        self._verdicts: dict[tuple[int, str], bool] = {}
        try:
            self.db.session(f"SET search_path TO {SCHEMA_NAME}")
            if read_only:
                if set(TABLES) & _missing(self.db) or self.get_meta("version") != VERSION:
                    raise FileNotFoundError(f"{SCHEMA_NAME} in {catalog_engine.url}")
            else:
                self.db.session("SELECT pg_advisory_lock(%s)", (PASS_LOCK,))
                self._made()
                self.next_doc = self.db.execute("SELECT coalesce(max(id), 0) + 1 FROM docs").fetchone()[0]
        except BaseException:
            self.db.close()
            raise

    def _made(self) -> None:
        """The tables, made if missing; made again if of another version or some
        are missing; an index that is missing, made again alone."""
        missing = _missing(self.db)
        tables = [t for t in TABLES if t in missing]
        why = None
        if 0 < len(tables) < len(TABLES):
            why = f"{len(tables)} of its tables missing"
        elif not tables and self.get_meta("version") != VERSION:
            why = f"index version {self.get_meta('version')}, this webfs writes {VERSION}"
        if why:
            log.warning("the query index in %s: %s; made again from the archive", SCHEMA_NAME, why)
            self.db.executescript(f"DROP SCHEMA {SCHEMA_NAME} CASCADE")
        if why or missing:
            self.db.executescript(SCHEMA)
        if why or tables:
            self.db.execute("INSERT INTO meta VALUES ('version', ?)", (VERSION,))
            self.db.commit()

    def close(self) -> None:
        """Close the connection; what a failed pass left uncommitted is rolled
        back first, which ends its pipeline too."""
        try:
            self.db.rollback()
        except Exception as exc:        # the connection broken: closing it is all there is to do
            if not _from_database(exc):
                raise
        finally:
            self.db.close()

    @_said
    def get_meta(self, key: str) -> Optional[str]:
        row = self.db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return row[0] if row else None

    @_said
    def set_meta(self, key: str, value: str) -> None:
        self.db.execute("INSERT INTO meta VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                        (key, value))

    @_said
    def commit(self) -> None:
        if self.db.in_transaction:
            self.db.execute("INSERT INTO meta VALUES ('generation', '1') ON CONFLICT (key) DO UPDATE "
                            "SET value = (meta.value::BIGINT + 1)::TEXT")
        self.db.commit()

    # -- what webfs.indexer's passes write -----------------------------------

    @_said
    def stamps(self, since_ns: Optional[int] = None) -> dict[int, int]:
        if since_ns is None:
            return dict(self.db.execute("SELECT ino, stamp FROM files").fetchall())
        return dict(self.db.execute("SELECT ino, stamp FROM files WHERE stamp >= ?", (since_ns,)).fetchall())

    @_said
    def file_count(self) -> int:
        return self.db.execute("SELECT count(*) FROM files").fetchone()[0]

    @_said
    def doc(self, sig: str) -> Optional[tuple[int, str]]:
        row = self.db.execute("SELECT id, kind FROM docs WHERE sig=?", (sig,)).fetchone()
        return None if row is None else tuple(row)

    @_said
    def doc_key(self, doc: int) -> Optional[tuple[str, str]]:
        row = self.db.execute("SELECT sig, kind FROM docs WHERE id=?", (doc,)).fetchone()
        return None if row is None else tuple(row)

    @_said
    def add_doc(self, sig: str, kind: str, title: str, text: str, links: list[str]) -> int:
        """Index a document once (its signature names it); its id. Sent, not
        waited for: the pipeline's next read or the commit waits."""
        doc, self.next_doc = self.next_doc, self.next_doc + 1
        self.db.execute("INSERT INTO docs (id, sig, kind, words, links) VALUES (?, ?, ?, ?::TSVECTOR, ?::BIGINT[])",
                        (doc, sig, kind, lexemes(title, text), sorted({url_hash(u) for u in links}) or None))
        return doc

    @_said
    def put_file(self, ino: int, stamp: int, doc: Optional[int], facts: dict) -> None:
        key = facts.get("key") or facts.get("url")
        self.db.execute(
            "INSERT INTO files (ino, stamp, doc, url, hash, host, collection, date, mime, status, size)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (ino) DO UPDATE SET stamp = excluded.stamp,"
            " doc = excluded.doc, url = excluded.url, hash = excluded.hash, host = excluded.host,"
            " collection = excluded.collection, date = excluded.date, mime = excluded.mime,"
            " status = excluded.status, size = excluded.size",
            (ino, stamp, doc, _clean(facts.get("url")), url_hash(key) if key else None, _clean(facts.get("host")),
             _clean(facts["collection"]), facts.get("date"), _clean(facts.get("mime", "")), facts.get("status"),
             facts["size"]))

    @_said
    def drop_files(self, inos: list[int]) -> None:
        if inos:
            self.db.execute("DELETE FROM files WHERE ino = ANY(?)", (inos,))

    @_said
    def drop_unused_docs(self) -> int:
        """Forget documents no file holds any more, and their words and links."""
        return len(self.db.execute(
            "DELETE FROM docs WHERE NOT EXISTS (SELECT 1 FROM files WHERE files.doc = docs.id) RETURNING id").rows)

    @_said
    def counts(self) -> dict[str, int]:
        one = lambda sql: self.db.execute(sql).fetchone()[0]          # noqa: E731
        return {"documents": one("SELECT count(*) FROM docs"), "files": one("SELECT count(*) FROM files"),
                "links": one("SELECT coalesce(sum(cardinality(links)), 0) FROM docs")}

    # -- what webfs.query asks -----------------------------------------------

    def run(self, text: str, limit: int, offset: int = 0) -> list[tuple]:
        """(inode, url, date, mime, size) of the answers, best first (as webfs.query.run)."""
        q = query.compile_query(text, terms=TERMS)
        start = offset if q.phrases else 0          # with phrases, the window is taken here
        with contextlib.closing(self._answers(q, "f.ino, f.url, f.date, f.mime, f.size", ranked=True,
                                              window=None if q.phrases else (limit, offset))) as rows:
            return [r[:5] for r in itertools.islice(rows, start, start + limit)]

    def count(self, text: str) -> int:
        q = query.compile_query(text, terms=TERMS)
        if q.phrases:
            return sum(1 for _ in self._answers(q, "f.ino", ranked=False))
        return next(self._answers(q, "count(*)", ranked=False), (0,))[0]

    def matching(self, text: str) -> set[int]:
        """The inodes of every file that answers a query, unranked."""
        return {r[0] for r in self._answers(query.compile_query(text, terms=TERMS), "f.ino", ranked=False)}

    def _answers(self, q: query.Compiled, cols: str, ranked: bool,
                 window: Optional[tuple] = None) -> Iterator[tuple]:
        """The rows of ``cols`` of the files that answer ``q``, in a ``window``
        (limit, offset) of them; with phrases, each candidate whose document
        holds them (each one read: phrase_holds), one by one, the document last."""
        where, params, order = ["f.collection != ''"] + q.where, list(q.params), []
        tables = "files f"
        if q.terms:
            tables += " JOIN docs d ON d.id = f.doc"
            where.insert(0, "d.words @@ ?::TSQUERY")
            params.insert(0, tsquery(q.terms))
            if ranked:
                order.append("d.words @@ ?::TSQUERY DESC")              # a title holds one of the words
                params.append(" | ".join(f"'{TITLE}{w}'" for w in q.words))
        if ranked:
            order.append("coalesce(f.date, '') DESC, f.ino")
        sql = f"SELECT {cols}{', f.doc' * bool(q.phrases)} FROM {tables} WHERE {' AND '.join(where)}"
        if order:
            sql += f" ORDER BY {', '.join(order)}"
        if window is not None:
            sql += " LIMIT ? OFFSET ?"
            params += list(window)
        if not q.phrases:
            return (r for r in self._rows(sql, params))
        return self._holding(sql, params, q.phrases)

    def _rows(self, sql: str, params: list) -> list:
        try:
            return self.db.execute(sql, params).fetchall()
        except Exception as exc:
            if type(exc).__name__ == "UndefinedTable":
                return []           # the first pass is making (or remaking) the index right now
            raise

    def _holding(self, sql: str, params: list, phrases: list[str]) -> Iterator[tuple]:
        """The rows of ``sql`` (its last column a document) whose document holds
        every phrase, read from the server a thousand at a time."""
        from .catalogengine import translate
        with self.db.conn.transaction(), self.db.conn.cursor(name="webfs_phrase_candidates") as cur:
            cur.itersize = 1000
            cur.execute(translate(sql)[0], params)
            for row in cur:
                if all(self._phrase_holds(row[-1], p) for p in phrases):
                    yield row


def _missing(db) -> set[str]:
    """The index's tables and indexes that the database does not have."""
    names = TABLES + INDEXES
    found = db.execute("SELECT " + ", ".join(f"to_regclass('{SCHEMA_NAME}.{t}')" for t in names)).fetchone()
    return {name for name, there in zip(names, found) if there is None}


def remove(catalog_engine) -> None:
    """Drop the index in the catalog's database, if there is one (under the pass lock)."""
    db = catalog_engine.connect()
    try:
        db.execute("SELECT pg_advisory_lock(?)", (PASS_LOCK,))
        db.executescript(f"DROP SCHEMA IF EXISTS {SCHEMA_NAME} CASCADE")
    finally:
        db.close()


def generation(catalog_engine) -> Optional[tuple]:
    """What moves when a pass writes the index or its tables go (webfs.indexer's
    test for "the index is as this process's last pass left it")."""
    db = catalog_engine.connect()
    try:
        missing = _missing(db)
        if missing:
            return (sorted(missing), None)
        return ((), db.execute(f"SELECT value FROM {SCHEMA_NAME}.meta WHERE key = 'generation'").fetchone())
    finally:
        db.close()
