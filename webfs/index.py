"""The query index of an archive: an SQLite FTS5 database of derived data.

This module owns the index's file and tables. One row per distinct document
(``docs``, keyed by block signature: a page stored once and present in a
thousand crawls is indexed once), its words and title in a contentless FTS5
table (``docs_text``: the words are found there, the text itself stays in
the blocks; which column a word is in, not where: a phrase is checked
against its document, webfs.query), its resolved out-links (``links`` of
numbered ``urls``, each a hash of its URL, from which in-link counts per
URL are counted); and one row per file (``files``, keyed by inode): the
document it holds, its URL, host, collection, capture date, MIME type, HTTP
status, size, and the catalog's ctime it was indexed at (``stamp``: the
indexer's test for "changed since").

The index lives in ``index.db`` in its directory: by default the catalog's
own ``meta/`` directory, else the directory ``webfs reindex --index-dir``
recorded in the catalog (meta key ``index_dir``). Losing it loses nothing:
``webfs reindex`` rebuilds it from the catalog and the blocks.
"""
from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import logging
import os
import sqlite3
from typing import Callable, Iterator, Optional

from .volume import own_database

log = logging.getLogger(__name__)

INDEX_FILE = "index.db"
LOCK_FILE = "index.lock"        # held (flock) by the one process making a pass over the index
INDEX_VERSION = "2"             # another version is made again, not read (derived data)
INDEX_DIR_META = "index_dir"            # catalog meta key: where the index lives, if not beside the catalog
PENDING_CHARS = 8 << 20         # characters of documents' text held for one run of FTS5 inserts

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS docs (
    id    INTEGER PRIMARY KEY,
    sig   TEXT NOT NULL UNIQUE,          -- the block's signature (first piece)
    kind  TEXT NOT NULL);                -- html, text or other (webfs.extract)
CREATE VIRTUAL TABLE IF NOT EXISTS docs_text USING fts5(
    title, body, content='', detail=column, tokenize='unicode61 remove_diacritics 2');
-- Out-links by number: a URL is kept once however many pages link to it, as
-- a 64-bit hash of it (url_hash), not its text: links-to and inlinks ask by URL.
CREATE TABLE IF NOT EXISTS urls (id INTEGER PRIMARY KEY, hash INTEGER NOT NULL UNIQUE);
CREATE TABLE IF NOT EXISTS links (url INTEGER NOT NULL, doc INTEGER NOT NULL, PRIMARY KEY (url, doc)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS files (
    ino        INTEGER PRIMARY KEY,
    stamp      INTEGER NOT NULL,         -- the inode's ctime_ns when indexed
    doc        INTEGER,                  -- NULL: empty, or not read (larger than one block)
    url        TEXT,                     -- as recorded (WARC-Target-URI, or the path's URL)
    key        TEXT,                     -- the URL as links are kept (extract.link_key), NULL: as url
    host       TEXT,
    collection TEXT NOT NULL,
    date       TEXT,                     -- 14 digits, the capture's date
    mime       TEXT NOT NULL DEFAULT '',
    status     INTEGER,
    size       INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS files_doc ON files (doc);
-- No index on host: host: matches subdomains (LIKE '%.host'), a scan in any case.
DROP INDEX IF EXISTS files_host;
"""


def remove(directory: str) -> None:
    """Remove the index kept in ``directory`` (its WAL files too), if there is one."""
    for suffix in ("", "-wal", "-shm"):
        try:
            os.remove(os.path.join(directory, INDEX_FILE + suffix))
        except FileNotFoundError:
            pass


@contextlib.contextmanager
def pass_lock(directory: str) -> Iterator[None]:
    """Be the one process writing the index in ``directory`` (a mount's
    indexing process and a ``webfs search`` in its daemon take turns): an
    flock on its lock file, which the kernel lets go if the holder dies."""
    os.makedirs(directory, exist_ok=True)
    fd = os.open(os.path.join(directory, LOCK_FILE), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def index_dir(catalog_file: str, recorded: Optional[str]) -> str:
    """Where the index of the archive whose catalog is ``catalog_file`` lives."""
    return recorded or os.path.dirname(catalog_file)


@functools.lru_cache(maxsize=1 << 16)       # the pages of a site link to the same URLs
def url_hash(url: str) -> int:
    """The number a URL is kept as in ``urls``: 64 bits of its BLAKE2b, so that
    two URLs of an archive share one by a chance of about 3 in 10,000 at
    10^8 distinct URLs (their in-links would then count together)."""
    return int.from_bytes(hashlib.blake2b(url.encode("utf-8", "surrogateescape"), digest_size=8).digest(),
                          "big", signed=True)


# The highest document number ever given (the number a document had stays in
# the contentless docs_text when the document is dropped: never given again).
_TOP_DOC = ("max(coalesce((SELECT max(id) FROM docs), 0), "
            "coalesce((SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'top_doc'), 0))")


# Whether a phrase (as webfs.query writes it) is in a document (by its id), in order.
PhraseCheck = Callable[[int, str], bool]


class Index:
    """One connection to an index database (one thread at a time). ``phrases``:
    how a phrase is checked against its document's words in order (SQL
    ``phrase_holds``); without it, a phrase matches the documents that hold
    all of its words."""
    engine = "sqlite"           # webfs.query asks: webfs.pgindex's is "postgresql"

    def __init__(self, directory: str, read_only: bool = False, phrases: Optional[PhraseCheck] = None):
        self.path = os.path.join(directory, INDEX_FILE)
        if read_only:
            if not os.path.exists(self.path):
                raise FileNotFoundError(self.path)
            self.db = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, check_same_thread=False)
            if self._version() != INDEX_VERSION:        # an older index: the next pass makes it again
                self.db.close()
                raise FileNotFoundError(self.path)
        else:
            os.makedirs(directory, exist_ok=True)
            try:
                self._open()
            except sqlite3.OperationalError:
                raise                   # not opened at all (a directory in its place): not its content's fault
            except sqlite3.DatabaseError as exc:
                # Derived data: a damaged index, or one of another version, is made again, not repaired.
                log.warning("%s: %s; made again from the archive", self.path, exc)
                self.db.close()
                remove(directory)
                self._open()
        self.phrases = phrases
        self._texts: list[tuple[int, str, str]] = []      # (doc, title, text) not yet in docs_text
        self._links: list[tuple[int, list[int]]] = []     # (doc, its out-links' url_hash) not yet in links
        self._pending_chars = 0
        self._verdicts: dict[tuple[int, str], bool] = {}
        self.db.create_function("url_hash", 1, url_hash, deterministic=True)
        self.db.create_function("phrase_holds", 2, self._phrase_holds)

    def _version(self) -> Optional[str]:
        try:
            return self.get_meta("version")
        except sqlite3.OperationalError:            # no meta table: a new file
            return None

    def _open(self) -> None:
        self.db = sqlite3.connect(own_database(self.path), check_same_thread=False, timeout=30)
        version = self._version()
        if version not in (None, INDEX_VERSION):
            raise sqlite3.DatabaseError(f"index version {version}, this webfs writes {INDEX_VERSION}")
        self.db.execute("PRAGMA auto_vacuum=INCREMENTAL")  # a new file's: free_pages_back gives them back
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")      # derived data: a lost tail is caught up again
        self.db.executescript(SCHEMA)
        self.db.execute("INSERT OR IGNORE INTO meta VALUES ('version', ?)", (INDEX_VERSION,))
        self.db.commit()

    def _phrase_holds(self, doc: Optional[int], spec: str) -> bool:
        """SQL phrase_holds(doc, spec): the phrase (webfs.query) is in the document, in order."""
        if self.phrases is None or doc is None:
            return doc is not None
        verdict = self._verdicts.get((doc, spec))
        if verdict is None:
            verdict = self.phrases(doc, spec)
            if len(self._verdicts) > 65536:
                self._verdicts.clear()
            self._verdicts[(doc, spec)] = verdict
        return verdict

    def doc_key(self, doc: int) -> Optional[tuple[str, str]]:
        """(signature key, kind) of a document by its id."""
        return self.db.execute("SELECT sig, kind FROM docs WHERE id=?", (doc,)).fetchone()

    def close(self) -> None:
        self.db.close()

    def get_meta(self, key: str) -> Optional[str]:
        row = self.db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return row[0] if row else None

    def set_meta(self, key: str, value: str) -> None:
        self.db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, value))

    def stamps(self, since_ns: Optional[int] = None) -> dict[int, int]:
        """inode -> the ctime it was indexed at, for every indexed file (or those
        indexed at ``since_ns`` or later: one scan, where a list of inodes was a
        query of thousands of parameters)."""
        if since_ns is None:
            return dict(self.db.execute("SELECT ino, stamp FROM files"))
        return dict(self.db.execute("SELECT ino, stamp FROM files WHERE stamp >= ?", (since_ns,)))

    def file_count(self) -> int:
        return self.db.execute("SELECT count(*) FROM files").fetchone()[0]

    def doc(self, sig: str) -> Optional[tuple[int, str]]:
        """(id, kind) of the document with this signature, if indexed."""
        return self.db.execute("SELECT id, kind FROM docs WHERE sig=?", (sig,)).fetchone()

    def add_doc(self, sig: str, kind: str, title: str, text: str, links: list[str]) -> int:
        """Index a document once (its signature names it); its id. Its words
        and links are written at the next commit (or when ``PENDING_CHARS``
        of text wait): FTS5 writes out what it holds in memory as a segment of
        its own before every other statement of the transaction, so inserting
        each document's words between the files' rows made a segment a
        document, and merging them was most of the index's writing."""
        doc = self.db.execute(f"INSERT INTO docs (id, sig, kind) VALUES ({_TOP_DOC} + 1, ?, ?)", (sig, kind)).lastrowid
        if title or text:
            self._texts.append((doc, title, text))
            self._pending_chars += len(title) + len(text)
        if links:
            self._links.append((doc, [url_hash(u) for u in links]))
        if self._pending_chars > PENDING_CHARS:
            self._write_pending()
        return doc

    def _write_pending(self) -> None:
        """The words and links of the documents added since the last commit:
        the words in one run of FTS5 inserts, the links by URL number."""
        if self._texts:
            self.db.executemany("INSERT INTO docs_text (rowid, title, body) VALUES (?, ?, ?)", self._texts)
        if self._links:
            ids = self._url_ids({h for _, hashes in self._links for h in hashes})
            self.db.executemany("INSERT OR IGNORE INTO links VALUES (?, ?)",
                                sorted({(ids[h], doc) for doc, hashes in self._links for h in hashes}))
        self._texts, self._links, self._pending_chars = [], [], 0

    def _url_ids(self, hashes: set[int]) -> dict[int, int]:
        """hash -> number in ``urls`` of these URL hashes, numbering the new ones."""
        hashes = sorted(hashes)
        self.db.executemany("INSERT OR IGNORE INTO urls (hash) VALUES (?)", [(h,) for h in hashes])
        ids: dict[int, int] = {}
        for i in range(0, len(hashes), 500):
            part = hashes[i:i + 500]
            ids.update(self.db.execute(f"SELECT hash, id FROM urls WHERE hash IN ({','.join('?' * len(part))})",
                                       part))
        return ids

    def put_file(self, ino: int, stamp: int, doc: Optional[int], facts: dict) -> None:
        self.db.execute(
            "INSERT OR REPLACE INTO files (ino, stamp, doc, url, key, host, collection, date, mime, status, size)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (ino, stamp, doc, facts.get("url"), None if facts.get("key") == facts.get("url") else facts.get("key"),
             facts.get("host"), facts["collection"],
             facts.get("date"), facts.get("mime", ""), facts.get("status"), facts["size"]))

    def drop_files(self, inos: list[int]) -> None:
        self.db.executemany("DELETE FROM files WHERE ino=?", [(i,) for i in inos])

    def drop_unused_docs(self) -> int:
        """Forget documents no file holds any more (their links stop counting);
        their words stay in the contentless FTS table, unreachable, until a reindex."""
        gone = [r[0] for r in self.db.execute(
            "SELECT id FROM docs WHERE NOT EXISTS (SELECT 1 FROM files WHERE files.doc = docs.id)")]
        if gone:
            self._write_pending()
            # Their words stay in docs_text: a number given again would give them to a new document.
            self.db.execute(f"INSERT OR REPLACE INTO meta VALUES ('top_doc', {_TOP_DOC})")
            self.db.execute("CREATE TEMP TABLE IF NOT EXISTS gone (id INTEGER PRIMARY KEY)")
            self.db.execute("DELETE FROM gone")
            self.db.executemany("INSERT INTO gone VALUES (?)", [(d,) for d in gone])
            self.db.execute("DELETE FROM links WHERE doc IN (SELECT id FROM gone)")      # one scan
            self.db.execute("DELETE FROM docs WHERE id IN (SELECT id FROM gone)")
        return len(gone)

    def commit(self) -> None:
        self._write_pending()
        self.db.commit()

    def free_pages_back(self) -> None:
        """Give the file's free pages back (auto_vacuum=INCREMENTAL): FTS5's
        segment merges as passes add batches leave a twentieth of the file
        free (a 10,000-page import: 9.8 MB, 9.4 MB after this, for 3 ms)."""
        self.commit()
        self.db.executescript("PRAGMA incremental_vacuum")     # (execute frees one page)

    def compact(self) -> None:
        """Merge the words' segments into one, then give the free pages back
        (after webfs reindex: 9.2 MB instead of 9.4 for 0.07 s of CPU; the
        merge rewrites all the words, so it is not done after every pass).
        A VACUUM (8.9 MB) wrote the whole file twice through the WAL."""
        self.commit()
        self.db.execute("INSERT INTO docs_text (docs_text) VALUES ('optimize')")
        self.free_pages_back()

    def counts(self) -> dict[str, int]:
        one = lambda sql: self.db.execute(sql).fetchone()[0]          # noqa: E731
        return {"documents": one("SELECT count(*) FROM docs"), "files": one("SELECT count(*) FROM files"),
                "links": one("SELECT count(*) FROM links")}
