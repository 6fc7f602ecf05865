"""The catalog as a file on a disk: whether a file is one (checked before
any open, reading only), a consistent copy of it taken while writers go
on (what an S3 disk keeps in its bucket), its pages asked into the
kernel's cache when a mount starts, its pages packed when a writer closes
it, and a full disk under it said as NoSpace, or seen coming
(``CatalogRoom``)."""
from __future__ import annotations

import logging
import os
import sqlite3
import tempfile
import time
import urllib.parse
from typing import Optional

from .backends.local import free_space
from .catalogengine import SQLITE
from .errors import CatalogUnreadable, NoSpace
from .volume import FreeSpace, own_database, reserve

log = logging.getLogger(__name__)


def consistent_copy(path: str) -> bytes:
    """The catalog file at ``path`` as one consistent database, taken with
    SQLite's backup API while writers may go on (S3QL's model): the copy an
    S3 disk keeps in its bucket (``webfs.backends.s3mirror``)."""
    fd, tmp = tempfile.mkstemp(prefix=".catalog-copy.", dir=os.path.dirname(path))
    os.close(fd)
    try:
        src = sqlite3.connect(f"file:{urllib.parse.quote(path)}?mode=ro", uri=True)
        dst = sqlite3.connect(tmp)
        try:
            src.backup(dst)
        finally:
            dst.close()
            src.close()
        with open(tmp, "rb") as f:
            return f.read()
    finally:
        os.unlink(tmp)


PACK_MIN_ROWS = 1000        # rows a connection must have written before its close packs the file
PACK_PAGES_PER_ROW = 4      # ... and at least one row for every 4 pages of the file
PACK_LIMIT = 1 << 30        # bytes: a larger file is not packed at a close (seconds of writing)


def pack_at_rest(db: sqlite3.Connection, path: str) -> None:
    """VACUUM the catalog file ``path`` as its writer ``db`` closes it, if
    that connection wrote enough rows to have split pages: rows inserted out
    of their key's order (a directory's names, random signatures and stripe
    ids) leave each b-tree's pages part empty, about 20 B a file after a
    ``cp -r`` of small pages, which a VACUUM gives back (about 0.2 s for
    100,000 files); the next writes split pages again, so it is done at rest
    only. SQLite's VACUUM is one transaction and keeps every rowid (a
    directory entry's is its readdir offset). If it cannot be done (a full
    disk or temporary directory, another writer), the file stays as it was
    and one warning says why."""
    try:
        size = os.path.getsize(path)
    except OSError:
        return
    if size > PACK_LIMIT or db.total_changes < max(PACK_MIN_ROWS, size // 4096 // PACK_PAGES_PER_ROW):
        return
    try:
        db.execute("VACUUM")
    except sqlite3.Error as exc:
        log.warning("%s: the catalog was not packed at its close (%s); it stays as it was", path, exc)


class _FullIsNospace:
    """A full catalog disk as NoSpace. A class, not a @contextmanager: every
    write of the catalog enters it, and a generator per statement was a tenth
    of a small-page import's catalog time."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind, exc, tb) -> bool:
        if kind is not None and issubclass(kind, sqlite3.OperationalError) and "full" in str(exc):
            raise NoSpace("the disk that holds the catalog is full") from None
        return False


full_is_nospace = _FullIsNospace()

# Bytes of the catalog's WAL and JOURNAL one change that adds rows takes, at
# most (measured: about 900 a name, the WAL 690 of them, in a run of mkdirs).
CHANGE_COST = 2048
SAY_EVERY = 60.0        # seconds between the log's lines of refusals


class CatalogRoom:
    """Room on the disk that holds the catalog, asked before a change that
    adds rows (a name, an xattr, a file's content) is made. A mount answers
    such a change at once and commits it within a second; a commit that finds
    the disk full is rolled back whole, taking with it changes already
    answered. So a change is refused (NoSpace: ENOSPC) once the disk's free
    space is below half its catalog reserve (``volume.reserve``; blocks and
    parity stop at all of it) plus what the changes not yet committed will
    take. Removals, renames and attributes add no rows and are not asked:
    they commit into what is left, as ZFS lets rm into its slop space. A
    bulk import asks once a batch, for the batch, and stops whole when
    refused (webfs.ingest). A catalog in PostgreSQL is on the server's disk:
    not asked."""

    def __init__(self, catalog):
        self.catalog = catalog
        self.where = os.path.dirname(catalog.path)
        self.free = FreeSpace(lambda: free_space(self.where))
        self._commits = -1
        self._pending = 0       # changes asked since the last commit
        self._said = -SAY_EVERY     # when the log last said a refusal

    def state(self) -> Optional[dict]:
        """What ``webfs status`` says of it: the free space of the catalog's disk,
        and under how much free space a new change is refused (with none
        waiting for a commit); None on PostgreSQL."""
        if self.catalog.engine is not SQLITE:
            return None
        free, total = free_space(self.where)
        return {"free_bytes": free, "refused_below": CHANGE_COST + _kept(total, 0)}

    def check(self, changes: int = 1) -> None:
        """Room for ``changes`` more changes, or NoSpace saying where room is wanted."""
        cat = self.catalog
        if cat.engine is not SQLITE:
            return
        if cat.commits != self._commits:
            self._commits, self._pending = cat.commits, 0
        pending = self._pending
        if not self.free.has_room(changes * CHANGE_COST, lambda total: _kept(total, pending)):
            free, total = self.free.asked
            full = NoSpace(f"the disk that holds the catalog ({self.where}) is nearly full: "
                           f"{free >> 10} KiB free, under the "
                           f"{(changes * CHANGE_COST + _kept(total, pending)) >> 10} KiB kept for "
                           "the commit of changes already made and for removals; make room there")
            if time.monotonic() - self._said >= SAY_EVERY:
                log.warning("new names, xattrs and file contents refused (ENOSPC): %s", full)
                self._said = time.monotonic()
            raise full
        self._pending += changes


def _kept(total: int, pending: int) -> int:
    """Bytes of the catalog's disk (``total`` in all) a new change must leave
    free: half its reserve, and what ``pending`` changes not yet committed take."""
    return reserve(total, True) // 2 + pending * CHANGE_COST


SQLITE_MAGIC = b"SQLite format 3\x00"


PREFETCH_BYTES = 64 << 20      # of the catalog file, read ahead at a mount's start


def prefetch(path: str) -> None:
    """Ask the kernel to read the catalog file (its first PREFETCH_BYTES,
    about 400 B a file) into its page cache, in the background: after a boot
    or a drop of the caches, the lookups of a cold reader each waited for a
    random read of an SQLite page; one sequential read ahead serves them
    all. Nothing is said if it cannot be (the mount goes on as before).

    The descriptor stays open for the process's life: closing any descriptor
    of a file drops every POSIX lock this process holds on it, SQLite's
    among them (its "How To Corrupt" section 2.2), and the mount's
    connections are open by then, and another process would take the
    catalog for unused (the suspected cause of a reading command's
    "database disk image is malformed" once in make test)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return
    _KEPT_OPEN.append(fd)
    try:
        os.posix_fadvise(fd, 0, PREFETCH_BYTES, os.POSIX_FADV_WILLNEED)
    except OSError:
        pass


_KEPT_OPEN: list[int] = []      # prefetch's descriptors: never closed (see there)


def check_catalog_file(path: str) -> None:
    """Raise CatalogUnreadable, one line naming the file and the next step, unless
    ``path`` is an SQLite database with webfs's tables. Reads only (the file, and
    SQLite's read-only open); every command and the mount call it before using
    the catalog, and fsck may call it before anything else."""
    disk = os.path.dirname(os.path.dirname(os.path.abspath(path)))
    own_database(path)
    try:
        with open(path, "rb") as f:
            head = f.read(len(SQLITE_MAGIC))
    except FileNotFoundError:
        raise CatalogUnreadable(_catalog_advice(path, disk, "missing")) from None
    except OSError as exc:
        raise CatalogUnreadable(f"{path}: cannot read the catalog: {exc.strerror}") from None
    if not head:
        raise CatalogUnreadable(_catalog_advice(path, disk, "empty: 0 bytes"))
    if head != SQLITE_MAGIC:
        raise CatalogUnreadable(_catalog_advice(path, disk, "not an SQLite database: overwritten or damaged"))
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            names = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            if not {"meta", "blocks", "inodes", "dentries"} <= names:
                raise CatalogUnreadable(_catalog_advice(path, disk, "an SQLite database without webfs's tables"))
            db.execute("SELECT value FROM meta WHERE key='schema'").fetchall()
        finally:
            db.close()
    except sqlite3.DatabaseError as exc:
        raise CatalogUnreadable(_catalog_advice(path, disk, f"damaged: {exc}")) from None


def _catalog_advice(path: str, disk: str, why: str) -> str:
    return (f"{path}: the catalog is {why}; put back a copy if you have one, else move it aside "
            f"and run 'webfs fsck --rebuild-catalog --repair {disk}' (names, sizes, modes, mtimes, owners, "
            "xattrs and hard links come back from the records on the disks)")
