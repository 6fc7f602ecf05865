"""An archive: its configuration, its disks, how it is made and how it is found.

Every disk root holds ``WEBFS-DISK`` (who this disk is) and ``webfs.conf``
(the whole archive's configuration, the same on every disk), so any one
disk names the archive: the others are found at the paths the
configuration last recorded, or else beside the given disk. A disk that
cannot be found is *missing*; the archive opens without it (parity serves
its blocks). The archive lock (``meta/lock`` on every present disk, held
with flock) keeps two daemons or commands from working on one archive.
"""
from __future__ import annotations

import configparser
import fcntl
import io
import logging
import os
import uuid as uuidmod
from dataclasses import dataclass, field
from typing import Optional

from . import FORMAT_VERSION
from .backends import open_backend
from .block import utc_timestamp
from .errors import ArchiveBusy, ArchiveError
from .signature import DEFAULT_DEPTH, check_depth
from .volume import CONF_FILE, DISK_ID_FILE, META, Volume

log = logging.getLogger(__name__)

STORE_MODES = ("force-new", "regular", "compare")
DEFAULT_LEVEL = 3          # zlib-ng gzip level: see README "Compression level"
DEFAULT_MAX_BLOCK = 4 << 20
LOCK_FILE = f"{META}/lock"


@dataclass
class DiskInfo:
    index: int
    uuid: str
    weight: float = 1.0
    path: str = ""


@dataclass
class Config:
    """The contents of webfs.conf."""
    uuid: str
    label: str = ""
    depth: int = DEFAULT_DEPTH
    group_size: int = 4
    codec: str = "gzip"
    level: int = DEFAULT_LEVEL
    store_mode: str = "compare"
    max_block: int = DEFAULT_MAX_BLOCK
    created: str = ""
    catalog: int = 0            # the disk whose meta/catalog.db is the catalog
    generation: int = 0         # bumped at each save: the newest copy on the disks wins
    disks: list[DiskInfo] = field(default_factory=list)

    def disk(self, index: int) -> DiskInfo:
        for d in self.disks:
            if d.index == index:
                return d
        raise ArchiveError(f"archive has no disk {index}")

    def to_ini(self) -> str:
        cp = configparser.ConfigParser(interpolation=None)
        cp["archive"] = {
            "format": str(FORMAT_VERSION), "uuid": self.uuid, "label": self.label,
            "created": self.created, "depth": str(self.depth),
            "group_size": str(self.group_size), "codec": self.codec,
            "level": str(self.level), "store_mode": self.store_mode,
            "max_block": str(self.max_block), "catalog": str(self.catalog),
            "generation": str(self.generation)}
        for d in sorted(self.disks, key=lambda d: d.index):
            cp[f"disk {d.index}"] = {"uuid": d.uuid, "weight": repr(d.weight), "path": d.path}
        out = io.StringIO()
        out.write("# webfs archive configuration; the same on every disk. See webfs-format(5).\n")
        cp.write(out)
        return out.getvalue()

    @classmethod
    def from_ini(cls, text: str, where: str) -> "Config":
        cp = configparser.ConfigParser(interpolation=None)
        try:
            cp.read_string(text)
            a = cp["archive"]
            if int(a.get("format", "0")) != FORMAT_VERSION:
                raise ArchiveError(f"{where}: format version {a.get('format')} is not "
                                   f"{FORMAT_VERSION}; this webfs cannot read it")
            conf = cls(uuid=a["uuid"], label=a.get("label", ""), depth=check_depth(a.getint("depth")),
                       group_size=a.getint("group_size"), codec=a.get("codec", "gzip"),
                       level=a.getint("level", DEFAULT_LEVEL),
                       store_mode=a.get("store_mode", "compare"),
                       max_block=a.getint("max_block", DEFAULT_MAX_BLOCK),
                       created=a.get("created", ""), catalog=a.getint("catalog", 0),
                       generation=a.getint("generation", 0))
            for sect in cp.sections():
                if sect.startswith("disk "):
                    s = cp[sect]
                    conf.disks.append(DiskInfo(int(sect.split()[1]), s["uuid"],
                                               s.getfloat("weight", 1.0), s.get("path", "")))
        except ArchiveError:
            raise
        except (configparser.Error, KeyError, ValueError) as exc:
            raise ArchiveError(f"{where}: unreadable configuration: {exc}") from None
        conf.disks.sort(key=lambda d: d.index)
        return conf


def read_disk_id(root: str) -> dict[str, str]:
    """The Key: value lines of a disk's WEBFS-DISK file."""
    path = os.path.join(root, DISK_ID_FILE)
    try:
        with open(path, "rb") as f:
            lines = f.read(4096).decode("ascii", "replace").splitlines()
    except FileNotFoundError:
        raise ArchiveError(f"{root}: not a webfs disk (no {DISK_ID_FILE}; make one with 'webfs mkfs')") from None
    except OSError as exc:
        raise ArchiveError(f"{root}: cannot read {DISK_ID_FILE}: {exc.strerror}") from None
    if not lines or lines[0].strip() != f"WEBFS-DISK {FORMAT_VERSION}":
        raise ArchiveError(f"{path}: not a webfs disk of format {FORMAT_VERSION}")
    fields = {}
    for line in lines[1:]:
        key, sep, value = line.partition(":")
        if sep:
            fields[key.strip()] = value.strip()
    return fields


def disk_id_text(conf: Config, disk: DiskInfo) -> str:
    return (f"WEBFS-DISK {FORMAT_VERSION}\nArchive: {conf.uuid}\nDisk: {disk.uuid}\n"
            f"Index: {disk.index}\nLabel: {conf.label}\nCreated: {utc_timestamp()}\n")


def mkfs(paths: list[str], depth: int = DEFAULT_DEPTH, group_size: Optional[int] = None,
         label: str = "", codec: str = "gzip", level: int = DEFAULT_LEVEL,
         store_mode: str = "compare", max_block: int = DEFAULT_MAX_BLOCK,
         force: bool = False) -> Config:
    """Make a new archive on empty directories (created if absent)."""
    check_depth(depth)
    roots = [os.path.abspath(p) for p in paths]
    if not roots:
        raise ArchiveError("mkfs needs at least one disk")
    if len(set(roots)) != len(roots):
        raise ArchiveError("the same directory is named twice")
    n = len(roots)
    g = min(n, 5) if group_size is None else group_size
    if not (n == 1 and g == 1) and not 2 <= g <= n:
        raise ArchiveError(f"--group-size must be between 2 and the number of disks ({n}), not {g}")
    if store_mode not in STORE_MODES:
        raise ArchiveError(f"store mode must be one of {', '.join(STORE_MODES)}")
    for root in roots:
        if os.path.exists(root) and not os.path.isdir(root):
            raise ArchiveError(f"{root}: exists and is not a directory")
        if os.path.isdir(root) and os.listdir(root) and not force:
            what = ("an existing webfs disk" if os.path.exists(os.path.join(root, DISK_ID_FILE))
                    else "not empty")
            raise ArchiveError(f"{root}: {what}; refusing to make an archive here (use --force "
                               "to overwrite; what is there is left alone except webfs files)")
    conf = Config(uuid=uuidmod.uuid4().hex, label=label, depth=depth, group_size=g,
                  codec=codec, level=level, store_mode=store_mode, max_block=max_block,
                  created=utc_timestamp(),
                  disks=[DiskInfo(i, uuidmod.uuid4().hex, 1.0, root) for i, root in enumerate(roots)])
    for root in roots:
        if force:
            _clear_webfs_files(root)
        os.makedirs(os.path.join(root, META), exist_ok=True)
    for d in conf.disks:
        be = open_backend(d.path)
        be.write_atomic(DISK_ID_FILE, disk_id_text(conf, d).encode(), fsync=True)
        be.write_atomic(CONF_FILE, conf.to_ini().encode(), fsync=True)
    from .catalog import Catalog, catalog_path
    Catalog(catalog_path(conf.disks[conf.catalog].path)).close()
    return conf


def _clear_webfs_files(root: str) -> None:
    import shutil
    for name in ("blocks", "parity", META):
        shutil.rmtree(os.path.join(root, name), ignore_errors=True)
    for name in (DISK_ID_FILE, CONF_FILE):
        try:
            os.unlink(os.path.join(root, name))
        except FileNotFoundError:
            pass


class Archive:
    """The disks of one archive, opened from any one of them."""

    def __init__(self, conf: Config, volumes: dict[int, Volume], missing: dict[int, str],
                 opened_from: str):
        self.conf = conf
        self.volumes = volumes
        self.missing = missing
        self.opened_from = opened_from
        self._lock_fds: list[int] = []
        self._holder = ""

    @classmethod
    def open(cls, path: str, delays: Optional[dict[int, float]] = None) -> "Archive":
        root = os.path.abspath(path)
        conf = _read_conf(root)
        # A disk that was away while the archive changed has an older webfs.conf:
        # the newest one among the disks found is the archive's.
        for d in conf.disks:
            found = _find_disk(conf, d, root)
            if found is not None and found != root:
                try:
                    other = _read_conf(found)
                except ArchiveError:
                    continue
                if other.generation > conf.generation:
                    conf = other
        delays = delays or {}
        volumes, missing = {}, {}
        for d in conf.disks:
            found = _find_disk(conf, d, root)
            if found is None:
                missing[d.index] = f"not found at {d.path} nor beside {root}"
                log.warning("disk %d (%s) is missing: %s", d.index, d.uuid, missing[d.index])
                continue
            d.path = found
            volumes[d.index] = Volume(open_backend(found, delays.get(d.index, 0.0)),
                                      d.index, d.uuid, conf.depth)
        return cls(conf, volumes, missing, root)

    # -- configuration --------------------------------------------------------

    def save_config(self) -> None:
        """Write webfs.conf to every present disk (after adding or removing one)."""
        self.conf.generation += 1
        text = self.conf.to_ini().encode()
        for vol in self.volumes.values():
            vol.backend.write_atomic(CONF_FILE, text, fsync=True)

    @property
    def disk_indexes(self) -> list[int]:
        return [d.index for d in self.conf.disks]

    def volume(self, index: int) -> Optional[Volume]:
        return self.volumes.get(index)

    @property
    def first_volume(self) -> Volume:
        """The disk that holds the catalog, or else the present disk with the lowest index."""
        if not self.volumes:
            raise ArchiveError("no disk of the archive is present")
        return self.volumes.get(self.conf.catalog) or self.volumes[min(self.volumes)]

    # -- the lock ------------------------------------------------------------

    def lock(self, holder: str) -> None:
        """Take the archive lock on every present disk, or raise ArchiveBusy.

        flock is dropped by the kernel when a process dies, so the lock of a
        killed daemon is never stale; the file's text only says who held it.
        """
        taken = []
        try:
            for vol in self.volumes.values():
                taken.append(_flock(vol.root))
            for fd in taken:
                _say_holder(fd, holder)
        except BaseException:
            for fd in taken:
                os.close(fd)
            raise
        self._lock_fds = taken
        self._holder = holder

    def attach(self, disk: DiskInfo) -> Volume:
        """Bring a new disk into the open archive (``webfs add-disk``): its
        volume, and the archive lock on it if the archive is locked. The
        caller writes the configuration (``save_config``)."""
        vol = Volume(open_backend(disk.path), disk.index, disk.uuid, self.conf.depth)
        if self._lock_fds:
            fd = _flock(disk.path)
            _say_holder(fd, self._holder)
            self._lock_fds.append(fd)
        # Replace the lists whole: readers in other threads iterate them.
        self.conf.disks = sorted([*self.conf.disks, disk], key=lambda d: d.index)
        self.volumes = {**self.volumes, disk.index: vol}
        return vol

    def detach(self, index: int) -> None:
        """Forget a disk (``webfs remove-disk``, once nothing is left on it).
        The caller writes the configuration. Its lock is let go at unlock."""
        self.conf.disks = [d for d in self.conf.disks if d.index != index]
        self.volumes = {i: v for i, v in self.volumes.items() if i != index}
        self.missing = {i: why for i, why in self.missing.items() if i != index}

    def lose(self, index: int, why: str) -> None:
        """A disk vanished while in use (unplugged, its directory removed): from
        now on it is missing, and its blocks are read through parity."""
        if index in self.volumes:
            log.error("disk %d is gone (%s); treating it as missing", index, why)
            self.volumes = {i: v for i, v in self.volumes.items() if i != index}
            self.missing = {**self.missing, index: why}

    def unlock(self) -> None:
        for fd in self._lock_fds:
            os.close(fd)
        self._lock_fds = []

    def holder(self) -> Optional[str]:
        """Who holds the lock, or None if it is free."""
        for vol in self.volumes.values():
            path = os.path.join(vol.root, LOCK_FILE)
            try:
                fd = os.open(path, os.O_RDONLY)
            except FileNotFoundError:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                fcntl.flock(fd, fcntl.LOCK_UN)
            except BlockingIOError:
                return os.pread(fd, 4096, 0).decode("utf-8", "replace").strip() or "unknown"
            finally:
                os.close(fd)
        return None


def _flock(root: str) -> int:
    """The archive lock file of one disk, locked, or ArchiveBusy."""
    path = os.path.join(root, LOCK_FILE)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        who = os.pread(fd, 4096, 0).decode("utf-8", "replace").strip() or "another process"
        os.close(fd)
        raise ArchiveBusy(f"the archive is in use ({who}); "
                          "give its mount point instead, or unmount it first") from None
    return fd


def _say_holder(fd: int, holder: str) -> None:
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{holder}, pid {os.getpid()}\n".encode(), 0)


def _read_conf(root: str) -> Config:
    ident = read_disk_id(root)
    try:
        with open(os.path.join(root, CONF_FILE), "rb") as f:
            conf = Config.from_ini(f.read().decode("utf-8", "replace"), os.path.join(root, CONF_FILE))
    except FileNotFoundError:
        raise ArchiveError(f"{root}: has {DISK_ID_FILE} but no {CONF_FILE}") from None
    if ident.get("Archive") != conf.uuid:
        raise ArchiveError(f"{root}: {DISK_ID_FILE} and {CONF_FILE} name different archives")
    return conf


def _find_disk(conf: Config, disk: DiskInfo, given: str) -> Optional[str]:
    """Where a disk of the archive is now: its recorded path, or a sibling of the given disk."""
    candidates = [given, disk.path]
    parent = os.path.dirname(given)
    try:
        candidates += sorted(os.path.join(parent, n) for n in os.listdir(parent))
    except OSError:
        pass
    for cand in candidates:
        if not cand or not os.path.isdir(cand):
            continue
        try:
            ident = read_disk_id(cand)
        except ArchiveError:
            continue
        if ident.get("Archive") == conf.uuid and ident.get("Disk") == disk.uuid:
            return os.path.abspath(cand)
    return None

