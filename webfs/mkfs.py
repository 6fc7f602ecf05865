"""Making an archive (``webfs mkfs``) and the root of a new disk (``add-disk``,
``rebuild``): the identity and configuration files every disk holds, a root
of mode 0700 (its blocks and catalog show every file, whatever its mode),
and refusing a directory that holds something else.
"""
from __future__ import annotations

import os
import shlex
import stat
import uuid as uuidmod
from typing import Optional

from . import FORMAT_VERSION
from .archive import DEFAULT_LEVEL, DEFAULT_MAX_BLOCK, Config, DiskInfo, local_side
from .backends import BackendOptions, is_url, normalize, open_backend
from .block import utc_timestamp
from .errors import ArchiveError
from .signature import DEFAULT_DEPTH
from .volume import BLOCKS, CONF_FILE, DISK_ID_FILE, META, PARITY


def disk_id_text(conf: Config, disk: DiskInfo) -> str:
    return (f"WEBFS-DISK {FORMAT_VERSION}\nArchive: {conf.uuid}\nDisk: {disk.uuid}\n"
            f"Index: {disk.index}\nLabel: {conf.label}\nCreated: {utc_timestamp()}\n")


def mkfs(paths: list[str], depth: int = DEFAULT_DEPTH, group_size: Optional[int] = None,
         label: str = "", codec: str = "gzip", level: int = DEFAULT_LEVEL,
         store_mode: str = "compare", max_block: int = DEFAULT_MAX_BLOCK,
         force: bool = False, options: Optional[BackendOptions] = None,
         catalog_url: str = "") -> Config:
    """Make a new archive on empty directories (created if absent), S3 disks
    with ``options`` (None: the defaults), the catalog in the PostgreSQL
    database ``catalog_url`` if given (webfs.catalogengine), else in SQLite.

    One disk gets group size 2 unless told otherwise: no parity while it is
    alone, parity as soon as ``webfs add-disk`` gives it a second disk."""
    try:
        roots = [normalize(p) for p in paths]
    except ValueError as exc:
        raise ArchiveError(str(exc)) from None
    if not roots:
        raise ArchiveError("mkfs needs at least one disk")
    if len(set(roots)) != len(roots):
        raise ArchiveError("the same directory is named twice")
    n = len(roots)
    g = max(2, min(n, 5)) if group_size is None else group_size
    if not (g == 1 or 2 <= g <= max(n, 2)):
        raise ArchiveError(f"--group-size must be between 2 and the number of disks ({n}), not {g}")
    conf = Config(uuid=uuidmod.uuid4().hex, label=label, depth=depth, group_size=g,
                  codec=codec, level=level, store_mode=store_mode, max_block=max_block,
                  created=utc_timestamp(), catalog_url=catalog_url,
                  disks=[DiskInfo(i, uuidmod.uuid4().hex, 1.0, root, default_domain(root))
                         for i, root in enumerate(roots)])
    conf.validate("mkfs")
    engine = catalog_engine(conf, options)
    check_new_catalog(engine)
    check_new_remote(roots, options)
    for root in roots:
        if is_url(root):
            continue
        check_root_link(root)
        if os.path.exists(root) and not os.path.isdir(root):
            raise ArchiveError(f"{root}: exists and is not a directory")
        if os.path.isdir(root) and os.listdir(root) and not force:
            what = ("an existing webfs disk" if os.path.exists(os.path.join(root, DISK_ID_FILE))
                    else "not empty")
            raise ArchiveError(f"{root}: {what}; refusing to make an archive here (use --force "
                               "to overwrite; what is there is left alone except webfs files)")
    for root in roots:
        if force and not is_url(root):
            _clear_webfs_files(root)
        make_disk_root(root, options)
    for d in conf.disks:
        be = open_backend(d.path, options=options)
        be.write_atomic(DISK_ID_FILE, disk_id_text(conf, d).encode(), fsync=True)
        be.write_atomic(CONF_FILE, conf.to_ini().encode(), fsync=True)
    from .catalog import ARCHIVE_META, Catalog, catalog_path
    from .catalogfile import consistent_copy
    cat = Catalog(catalog_path(local_side(conf.disks[conf.catalog].path, options=options)), engine)
    cat.set_meta("max_block", str(conf.max_block))   # pieces are found by offset // max_block
    cat.set_meta(ARCHIVE_META, conf.uuid)            # fsck tells a foreign catalog by it
    cat.commit()
    cat.close()
    for d in conf.disks:
        if is_url(d.path):
            open_backend(d.path, options=options).sync(consistent_copy)      # its meta/ (the new catalog) to the bucket
    return conf


def catalog_engine(conf: Config, options: Optional[BackendOptions] = None):
    """The engine of an archive's catalog (webfs.catalogengine): SQLite, or the
    PostgreSQL database of webfs.conf's catalog_url, with the password file
    the command line named; ArchiveError for a URL webfs does not take."""
    from .catalogengine import CatalogURLError, engine_of
    try:
        return engine_of(conf.catalog_url, (options or BackendOptions()).catalog_password_file)
    except CatalogURLError as exc:
        raise ArchiveError(str(exc)) from None


def check_new_catalog(engine) -> None:
    """A PostgreSQL catalog's database must answer and hold no webfs catalog
    yet (one archive per database): else ArchiveError, before anything is written."""
    if not engine.url:
        return
    if engine.holds_catalog():
        raise ArchiveError(f"--catalog {engine.url}: the database holds a webfs catalog already "
                           "(one archive per database); name an empty database")


def default_domain(location: str) -> str:
    """A new disk's failure domain: its endpoint for an S3 disk, else its own."""
    if not is_url(location):
        return ""
    from .backends.s3 import DiskURL
    return DiskURL.parse(location).domain


def check_new_remote(locations: list[str], options: Optional[BackendOptions] = None) -> None:
    """Every S3 disk to be made must be reachable with our credentials and
    empty: else ArchiveError naming it, before anything is written anywhere."""
    from .backends.s3 import open_s3
    for location in locations:
        if is_url(location):
            why = open_s3(location, options, fetch=False).check_new()
            if why is not None:
                raise ArchiveError(f"{location}: {why}; refusing to make a disk there")


def not_empty(location: str, options: Optional[BackendOptions] = None) -> bool:
    """Does this directory, or bucket (prefix), hold anything? (ArchiveError if
    the bucket cannot be asked.)"""
    if not is_url(location):
        return os.path.isdir(location) and bool(os.listdir(location))
    from .backends.s3 import open_s3
    why = open_s3(location, options, fetch=False).check_new()
    if why is not None and not why.startswith(("not empty", "holds a webfs disk")):
        raise ArchiveError(f"{location}: {why}")
    return why is not None


def make_disk_root(location: str, options: Optional[BackendOptions] = None) -> None:
    """Make the place a new disk's files go: its directory and meta/, or its
    bucket (if absent) and a fresh state directory; either private (``make_private``)."""
    if is_url(location):
        from .backends.s3 import open_s3
        open_s3(location, options, fetch=False).create()         # its state directory is made 0700
    else:
        check_root_link(location)
        os.makedirs(location, exist_ok=True)
        own_directory(location, META)
        make_private(location)


def check_root_link(root: str) -> None:
    """A disk root that is a symlink is followed to its directory, which must
    exist: ArchiveError for a dangling one (nothing is made at its target)."""
    if os.path.islink(root) and not os.path.exists(root):
        raise ArchiveError(f"{root}: a symlink to a missing directory ({os.readlink(root)}); "
                           "make that directory first, or name another")


OWN_DIRECTORIES = (BLOCKS, PARITY, META)     # what webfs makes below a disk root


def own_directory(root: str, name: str) -> None:
    """``root/name`` a real directory (made if absent): never through a symlink,
    nor over a file; ArchiveError naming it if something else is there."""
    path = os.path.join(root, name)
    try:
        os.mkdir(path)
        return
    except FileExistsError:
        pass
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode):
        what = "a symlink" if stat.S_ISLNK(st.st_mode) else "not a directory"
        raise ArchiveError(f"{path}: {what} where webfs makes its own directory; "
                           "refusing to write through it (remove it)")


PRIVATE_MODE = 0o700


def make_private(root: str) -> None:
    """A disk root (or an S3 disk's state directory) of mode 0700: its blocks
    and catalog show every file and name, whatever their own modes say, so
    only the archive's owner may read or search it."""
    os.chmod(root, PRIVATE_MODE)


def private_note(location: str) -> str:
    """What a command that made a disk says of its mode."""
    return "its local state directory mode 0700" if is_url(location) else "mode 0700"


def open_to_others(root: str) -> Optional[str]:
    """Why a disk root (or state directory) is not private, as a message that
    says how to fix it; None when it is (group and others have no access)."""
    try:
        mode = os.stat(root).st_mode
    except OSError:
        return None                     # missing: the archive says so elsewhere
    if not mode & 0o077:
        return None
    return (f"{root}: other users can read this disk directly (mode {stat.S_IMODE(mode):04o}): its "
            "blocks and catalog show every file and name, whatever their own modes; make it "
            f"private with 'chmod 700 {shlex.quote(root)}' (mkfs, add-disk and rebuild do)")


def _clear_webfs_files(root: str) -> None:
    """What --force replaces: webfs's own names at the root. A symlink or file
    at one of its directories' names goes itself (never what it points at)."""
    import shutil
    for name in OWN_DIRECTORIES:
        path = os.path.join(root, name)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        elif os.path.lexists(path):
            os.unlink(path)
    for name in (DISK_ID_FILE, CONF_FILE):
        try:
            os.unlink(os.path.join(root, name))
        except FileNotFoundError:
            pass
