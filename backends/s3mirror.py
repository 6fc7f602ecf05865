"""The bucket's copy of an S3 disk's ``meta/``, and bringing it back.

``meta/`` (catalog, JOURNAL, intents, lock, log) needs appends, file
descriptors, flock and SQLite: it lives in the disk's local state directory.
``publish`` copies what changed of it to the bucket (each checkpoint and the
unmount): MANIFEST, JOURNAL, RECORDS and a consistent copy of the catalog
(made by the catalog layer: ``catalog_copy``), then the copy's number,
``meta/COPY``, last, so a copy cut short is not taken for a newer one.
``fetch`` brings the bucket's copy when the state directory has no catalog
or an older copy: so an archive whose disks are all in object stores mounts
on a new machine from its URLs alone.

One of several mounts (a PostgreSQL catalog: each machine has a state
directory of its own, and so records of its own) publishes its records
below ``meta/machines/MACHINE/`` instead, never over another machine's or
the one copy of ``meta/``; ``fetch`` reads only the one copy.
"""
from __future__ import annotations

import logging
import os
from typing import Callable, Optional

from .base import MACHINES
from .local import LocalBackend
from .s3client import ObjectClient

log = logging.getLogger(__name__)

PUBLISHED = ("meta/MANIFEST.gz", "meta/MANIFEST", "meta/JOURNAL", "meta/RECORDS")   # MANIFEST: plain, written before
CATALOG = "meta/catalog.db"
LOCAL_DIR = "meta/"
COPY = "meta/COPY"                      # the number of the last copy of meta/ to the bucket


class MetaMirror:
    """meta/ in the state directory (``local``) and its copy in the bucket (``client``)."""

    def __init__(self, local: LocalBackend, client: ObjectClient):
        self.local = local
        self.client = client
        self._published: dict[str, tuple] = {}      # meta/ file -> its stamp when last copied

    def _stamp(self, path: str) -> tuple:
        """What tells that a local meta/ file changed: size and mtime (with a catalog's WAL)."""
        stamp = []
        for name in (path, path + "-wal") if path == CATALOG else (path,):
            try:
                st = os.stat(os.path.join(self.local.root, name))
                stamp.append((st.st_size, st.st_mtime_ns))
            except FileNotFoundError:
                stamp.append(None)
        return tuple(stamp)

    def mark_published(self) -> None:
        """What is here now is what the bucket has (it was just fetched, or is ours alone)."""
        self._published = {path: self._stamp(path) for path in (*PUBLISHED, CATALOG)}

    def publish(self, catalog_copy: Optional[Callable[[str], bytes]], machine: Optional[str] = None) -> None:
        """Copy what changed since the last copy (or since it was fetched), then
        the copy's number. ``catalog_copy(path)``: the catalog file at path as
        one consistent database; without it nothing is copied (records newer
        than the bucket's catalog would be a copy that does not agree). With
        ``machine`` (one of several mounts) the records go below its own name."""
        if catalog_copy is None:
            return
        if machine is not None:
            self._copy_records(f"{MACHINES}{machine}/")
            return
        copied = self._copy_records(LOCAL_DIR)
        catalog = os.path.join(self.local.root, CATALOG)
        stamp = self._stamp(CATALOG)
        if os.path.exists(catalog) and self._published.get(CATALOG) != stamp:
            self.client.put(CATALOG, catalog_copy(catalog))
            self._published[CATALOG] = stamp
            copied = True
        if copied:
            mark = b"%d\n" % ((self.copy_number(self.local.read) or 0) + 1)
            self.client.put(COPY, mark)
            self.local.write_atomic(COPY, mark)

    def _copy_records(self, under: str) -> bool:
        """The records (not the catalog) that changed, to the bucket below
        ``under`` (``meta/``, or a machine's own place); any copied?"""
        copied = False
        for path in PUBLISHED:
            stamp = self._stamp(path)
            if self._published.get(path) == stamp:
                continue
            remote = under + path[len(LOCAL_DIR):]
            try:
                data = self.local.read(path)
            except FileNotFoundError:
                self.client.delete(remote)
            else:
                self.client.put(remote, data)
            self._published[path] = stamp
            copied = True
        return copied

    @staticmethod
    def copy_number(read: Callable[[str], bytes]) -> Optional[int]:
        """The number in meta/COPY (read by ``read``: local or remote), or None."""
        try:
            text = read(COPY).strip()
        except FileNotFoundError:
            return None
        return int(text) if text.isdigit() else None

    def fetch(self, wait: Optional[float] = None) -> None:
        """The bucket's copy of meta/ replaces ours when ours has no catalog or
        an older copy number (another machine mounted the archive since); each
        GET answered within ``wait`` seconds (None: the client's timeouts)."""
        try:
            self._fetch(lambda path: self.client.get(path, deadline=wait))
        finally:
            self.mark_published()

    def _fetch(self, get: Callable[[str], bytes]) -> None:
        remote = self.copy_number(get)
        here = self.copy_number(self.local.read)
        if self.local.exists(CATALOG) and (remote is None or (here is not None and here >= remote)):
            return
        # Without a copy number (never copied, or lost with the catalog) the
        # records that are there still name every file for fsck --rebuild-catalog.
        for path in (*PUBLISHED, CATALOG):
            try:
                data = get(path)
            except FileNotFoundError:
                self.local.remove(path)
                continue
            if path == CATALOG:
                for leftover in ("-wal", "-shm"):
                    self.local.remove(CATALOG + leftover)
            self.local.write_atomic(path, data)
        if remote is not None:
            self.local.write_atomic(COPY, b"%d\n" % remote)
        log.info("%s: meta/ fetched from the bucket (%s)", self.client.location,
                 f"copy {remote}" if remote is not None else "no meta/COPY: the records that are there")
