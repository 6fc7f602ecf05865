"""Opening an archive: the one place where its parts are put together.

``open_archive`` opens the archive a disk belongs to, locks it, opens its
catalog and gives the store its protection (declustered parity). The store
and parity know each other only through ``webfs.protection.Protection``.

``OpenArchive`` is what an admin command is given: the store, and when a
mount's daemon runs the command, the mount's namespace and journal, whether
it is read-only, and what tells the kernel that names changed under it.
Nothing is hung on the ``Store`` from outside; the context travels in this.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Optional

from . import signature as sigmod
from .archive import Archive
from .backends import BackendOptions
from .mkfs import catalog_engine, open_to_others
from .catalogengine import SQLITE
from .catalog import Catalog, catalog_path
from .catalogfile import check_catalog_file
from .catalogmigration import needs_migration
from .errors import ArchiveBusy, ArchiveError
from .parity import Parity
from .store import Store

if TYPE_CHECKING:
    from .manifest import Journal
    from .namespace import Namespace


@dataclass(frozen=True)
class KernelHooks:
    """What a mount's daemon does for an admin command that changes names under
    the mount: the kernel forgets inodes and entries, and the looked-up misses
    in directories that got names; an inode that lost its last name is freed
    on the event loop unless it is open."""
    invalidate_inode: Callable[[int], None]
    invalidate_entry: Callable[[int, bytes], None]
    forget_misses: Callable[[set], None]
    free_unused: Callable[[int], None]


@dataclass(frozen=True)
class OpenArchive:
    """An open archive as an admin command sees it. ``namespace`` and
    ``journal`` are a mount's (None: unmounted, and a command that makes names
    opens them with ``webfs.recovery.names``); ``kernel`` is None unmounted;
    ``after_import``, a mount's: told when an import made names, for what the
    mount keeps up to date in the background (the query index); ``warc_views``,
    a mount's: the views of .webfs/warc (webfs.warcview)."""
    store: Store
    namespace: Optional["Namespace"] = None
    journal: Optional["Journal"] = None
    read_only: bool = False
    kernel: Optional[KernelHooks] = None
    after_import: Optional[Callable[[], None]] = None
    warc_views: Optional[Any] = None       # webfs.warcview.WarcViews (imported there, above this layer)


def _open_catalog(archive: Archive, path: str, holder: str, locked: bool) -> Catalog:
    """The catalog, rewritten first if an older webfs wrote it: only under the
    archive's lock, which a reader takes for that (an older webfs's mount
    may have the file open, and would go on writing the old one)."""
    if locked or not needs_migration(path):
        return Catalog(path)
    try:
        archive.lock(holder)
    except ArchiveBusy as exc:
        raise ArchiveBusy(f"{exc}; its catalog is an older webfs's, which this version rewrites in its own "
                          "schema only with the archive's lock: unmount it, then run this again") from None
    try:
        return Catalog(path)
    finally:
        archive.unlock()


def open_archive(path: str, holder: str = "webfs", lock: bool = True,
                 delays: Optional[dict[int, float]] = None, private: bool = False,
                 wait: Optional[float] = None, options: Optional[BackendOptions] = None,
                 shared: bool = False, **kwargs) -> Store:
    """Open the archive that a disk belongs to, lock it and open its catalog.
    ``delays`` gives disks a simulated service time per I/O (benchmarks);
    ``wait`` bounds how long an S3 disk may take to answer at open (status);
    ``private`` refuses disks others can read (``open_to_others``), as a mount
    does; ``options``, the command line's settings of S3 disks and leases
    (kept as ``archive.backend_options``: None, the defaults); the other
    arguments go to ``Store`` (``protection`` replaces parity). ``shared``
    (a mount): with a PostgreSQL catalog, other mounts may hold the archive
    too (``webfs.machines`` keeps them apart)."""
    archive = Archive.open(path, delays=delays, wait=wait, options=options)
    if private:
        for vol in archive.volumes.values():
            why = open_to_others(vol.root)
            if why:
                raise ArchiveError(f"{why}; not mounted")
    if lock:
        archive.lock(holder, shared=shared and bool(archive.conf.catalog_url))
    try:
        primary = archive.volumes.get(archive.conf.catalog)
        if primary is None:
            why = archive.missing.get(archive.conf.catalog, "")
            raise ArchiveError(
                why if "WEBFS-DISK is missing" in why else
                f"disk {archive.conf.catalog}, which holds the catalog, is missing or has lost it; "
                f"'webfs fsck --rebuild-catalog --repair {path}' rebuilds it from the other disks")
        engine = catalog_engine(archive.conf, archive.backend_options)
        if engine is SQLITE:
            check_catalog_file(catalog_path(primary.root))
            catalog = _open_catalog(archive, catalog_path(primary.root), holder, locked=lock)
        else:
            catalog = Catalog(catalog_path(primary.root), engine)
        _check_max_block(archive, catalog, write=lock)
        if "protection" not in kwargs:
            kwargs["protection"] = Parity(archive, catalog, kwargs.get("signature_fn", sigmod.signature),
                                          kwargs.get("fsync", False), recover=lock)
    except BaseException:
        archive.unlock()
        raise
    return Store(archive, catalog, **kwargs)


def _check_max_block(archive: Archive, catalog: Catalog, write: bool) -> None:
    """Pieces of split files are found by offset // max_block, so the value the
    files were stored with must stay: refuse a webfs.conf that changed it."""
    stored = catalog.get_meta("max_block")
    if stored is None:
        if write:                   # archives made before the catalog kept it
            catalog.set_meta("max_block", str(archive.conf.max_block))
            catalog.commit()
    elif int(stored) != archive.conf.max_block:
        conf = os.path.join(archive.opened_from, "webfs.conf")
        raise ArchiveError(f"{conf}: max_block = {archive.conf.max_block}, but the archive's files were "
                           f"stored in pieces of {stored} bytes; put back max_block = {stored} on every "
                           "disk (it cannot change once files are stored)")
