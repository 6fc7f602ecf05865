"""The catalog as a file on a disk: whether a file is one (checked before
any open, reading only), a consistent copy of it taken while writers go
on (what an S3 disk keeps in its bucket), and its pages asked into the
kernel's cache when a mount starts."""
from __future__ import annotations

import os
import sqlite3
import tempfile
import urllib.parse

from .errors import CatalogUnreadable


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


SQLITE_MAGIC = b"SQLite format 3\x00"


PREFETCH_BYTES = 64 << 20      # of the catalog file, read ahead at a mount's start


def prefetch(path: str) -> None:
    """Ask the kernel to read the catalog file (its first PREFETCH_BYTES,
    about 400 B a file) into its page cache, in the background: after a boot
    or a drop of the caches, the lookups of a cold reader each waited for a
    random read of an SQLite page; one sequential read ahead serves them
    all. Nothing is said if it cannot be (the mount goes on as before)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        os.posix_fadvise(fd, 0, PREFETCH_BYTES, os.POSIX_FADV_WILLNEED)
    except OSError:
        pass
    finally:
        os.close(fd)


def check_catalog_file(path: str) -> None:
    """Raise CatalogUnreadable, one line naming the file and the next step, unless
    ``path`` is an SQLite database with webfs's tables. Reads only (the file, and
    SQLite's read-only open); every command and the mount call it before using
    the catalog, and fsck may call it before anything else."""
    disk = os.path.dirname(os.path.dirname(os.path.abspath(path)))
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
