"""An archive: its configuration, its disks, how it is made and how it is found.

Every disk root holds ``WEBFS-DISK`` (who this disk is) and ``webfs.conf``
(the whole archive's configuration, the same on every disk), so any one
disk names the archive: the others are found at the paths the
configuration last recorded, or else beside the given disk. A disk that
cannot be found is *missing*; the archive opens without it (parity serves
its blocks). The archive lock (``meta/lock`` on every present disk, held
with flock) keeps two daemons or commands from working on one archive; on
an S3 disk a writer also holds the bucket's lease (``webfs.locks``), which
keeps two machines apart. Commands name a place in an unmounted archive
``DISK:/PATH`` (``archive_place``).
"""
from __future__ import annotations

import configparser
import fcntl
import io
import logging
import math
import os
import re
import shlex
from dataclasses import dataclass, field
from typing import Optional

from . import FORMAT_VERSION, lockorder
from .backends import BackendOptions, is_url, normalize, open_backend
from .errors import ArchiveBusy, ArchiveError, ConfigError
from .locks import BucketLease, remove_shared
from .machines import machine_id
from .settings import DEFAULT_DEPTH, DEFAULT_LEVEL, MAX_DEPTH, MIN_DEPTH, STORE_MODES
from .volume import CONF_FILE, DISK_ID_FILE, META, Volume, open_own

log = logging.getLogger(__name__)

DEFAULT_MAX_BLOCK = 4 << 20
LOCK_FILE = f"{META}/lock"
MAX_GROUP_SIZE = 62        # stripes keep their disks as bits of a 64-bit integer
MAX_DISK_INDEX = 62


# -- webfs.conf: every key, its type and allowed values, in one place ----------

@dataclass(frozen=True)
class ConfKey:
    """One key of webfs.conf: how to read it and what it may be."""
    name: str
    kind: str                       # int, float, choice, uuid, text
    low: float = 0
    high: float = 0
    choices: tuple = ()
    required: bool = False
    default: object = None

    def allowed(self) -> str:
        """The allowed values, as error messages and webfs-format(5) say them."""
        if self.kind == "int":
            return f"a whole number from {self.low} to {self.high}"
        if self.kind == "float":
            return f"a number from {self.low:g} to {self.high:g}"
        if self.kind == "choice":
            return " or ".join(self.choices)
        if self.kind == "uuid":
            return "32 lowercase hex digits"
        return "any text on one line"

    def parse(self, text: str, where: str, section: str = "archive"):
        """The value of ``key = text``, or ConfigError naming file, key, value and range."""
        text = text.strip()
        try:
            if self.kind == "int":
                value = int(text, 10)
            elif self.kind == "float":
                value = float(text)
                if not math.isfinite(value):
                    raise ValueError
            else:
                value = text
        except ValueError:
            raise self.error(text, where, section) from None
        self.check(value, where, section)
        return value

    def check(self, value, where: str, section: str = "archive") -> None:
        bad = False
        if self.kind in ("int", "float"):
            bad = isinstance(value, bool) or not isinstance(value, (int, float)) or \
                not self.low <= value <= self.high
        elif self.kind == "choice":
            bad = value not in self.choices
        elif self.kind == "uuid":
            bad = not isinstance(value, str) or re.fullmatch(r"[0-9a-f]{32}", value) is None
        elif self.kind == "text":
            bad = not isinstance(value, str) or not value.isprintable()
        if bad:
            raise self.error(value, where, section)

    def error(self, value, where: str, section: str) -> ConfigError:
        sect = "" if section == "archive" else f"[{section}] "
        return ConfigError(f"{where}: {sect}{self.name} = {_shown(value)} is not allowed; "
                           f"allowed: {self.allowed()}")


ARCHIVE_KEYS: dict[str, ConfKey] = {k.name: k for k in (
    ConfKey("format", "int", FORMAT_VERSION, FORMAT_VERSION, required=True),
    ConfKey("uuid", "uuid", required=True),
    ConfKey("label", "text", default=""),
    ConfKey("created", "text", default=""),
    ConfKey("depth", "int", MIN_DEPTH, MAX_DEPTH, required=True),
    ConfKey("group_size", "int", 1, MAX_GROUP_SIZE, required=True),
    ConfKey("codec", "choice", choices=("gzip", "identity"), default="gzip"),
    ConfKey("level", "int", 1, 9, default=DEFAULT_LEVEL),
    ConfKey("store_mode", "choice", choices=STORE_MODES, default="compare"),
    ConfKey("max_block", "int", 4096, 256 << 20, default=DEFAULT_MAX_BLOCK),
    ConfKey("catalog", "int", 0, MAX_DISK_INDEX, default=0),
    ConfKey("generation", "int", 0, 2**63 - 1, default=0),
    ConfKey("catalog_url", "text", default=""),
)}
DISK_KEYS: dict[str, ConfKey] = {k.name: k for k in (
    ConfKey("uuid", "uuid", required=True),
    ConfKey("weight", "float", 0, 1e9, default=1.0),
    ConfKey("path", "text", default=""),
    ConfKey("domain", "text", default=""),
)}
DISK_INDEX = ConfKey("disk N", "int", 0, MAX_DISK_INDEX)


def _shown(value) -> str:
    """A value as an error message shows it: printable, short."""
    text = str(value)
    shown = text if text.isprintable() and text == text.strip() and text else repr(text)
    return shown if len(shown) <= 60 else shown[:57] + "..."


@dataclass
class DiskInfo:
    index: int
    uuid: str
    weight: float = 1.0
    path: str = ""
    domain: str = ""            # failure domain: "" is the disk's own; S3 disks: their endpoint

    @property
    def failure_domain(self) -> str:
        """The name of its failure domain: parity never puts two members of a stripe in one."""
        return self.domain or f"disk {self.index}"


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
    catalog_url: str = ""       # the PostgreSQL database that holds the catalog ("": the SQLite file)
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
            "generation": str(self.generation),
            **({"catalog_url": self.catalog_url} if self.catalog_url else {})}
        for d in sorted(self.disks, key=lambda d: d.index):
            cp[f"disk {d.index}"] = {"uuid": d.uuid, "weight": repr(d.weight), "path": d.path,
                                     **({"domain": d.domain} if d.domain else {})}
        out = io.StringIO()
        out.write("# webfs archive configuration; the same on every disk. See webfs-format(5).\n")
        cp.write(out)
        return out.getvalue()

    def validate(self, where: str) -> "Config":
        """Every value against ARCHIVE_KEYS and DISK_KEYS, and what ties them
        together (the catalog disk is a listed disk); ConfigError if not."""
        for key in ARCHIVE_KEYS.values():
            if key.name != "format":
                key.check(getattr(self, key.name), where)
        if not self.disks:
            raise ConfigError(f"{where}: lists no disks (no [disk N] section; cut short?); "
                              + _copy_advice(where))
        seen = set()
        for d in self.disks:
            DISK_INDEX.check(d.index, where, f"disk {d.index}")
            for key in DISK_KEYS.values():
                key.check(getattr(d, key.name), where, f"disk {d.index}")
            if d.index in seen:
                raise ConfigError(f"{where}: [disk {d.index}] is listed twice")
            seen.add(d.index)
        if not any(d.weight > 0 for d in self.disks):
            raise ConfigError(f"{where}: every disk has weight 0, so none may take a new block and every "
                              "write would fail for want of space; give at least one disk a weight above 0 "
                              "(weight = 1 in its [disk N] section, on every disk)")
        if self.catalog not in seen:
            raise ConfigError(f"{where}: catalog = {self.catalog} is not allowed; allowed: the index of "
                              f"a listed disk ({', '.join(map(str, sorted(seen)))})")
        return self

    @classmethod
    def from_ini(cls, text: str, where: str) -> "Config":
        """Parse webfs.conf; every value is checked (ARCHIVE_KEYS, DISK_KEYS)."""
        if "\x00" in text or "\ufffd" in text or not all(c.isprintable() or c in "\t\r\n" for c in text):
            raise ConfigError(f"{where}: not a webfs configuration (binary data); " + _copy_advice(where))
        cp = configparser.ConfigParser(interpolation=None)
        try:
            cp.read_string(text)
        except configparser.Error as exc:
            line = getattr(exc, "lineno", None) or (getattr(exc, "errors", None) or [(None,)])[0][0]
            what = {configparser.MissingSectionHeaderError: "no [archive] header",
                    configparser.ParsingError: "a line that is not 'key = value'",
                    configparser.DuplicateSectionError: "a section given twice",
                    configparser.DuplicateOptionError: "a key given twice"}.get(type(exc), "unreadable")
            raise ConfigError(f"{where}: not a webfs configuration ({what}"
                              + (f" at line {line}" if line else "") + "); " + _copy_advice(where)) from None
        if not cp.has_section("archive"):
            raise ConfigError(f"{where}: has no [archive] section; " + _copy_advice(where))
        a = cp["archive"]
        if "format" in a and a["format"].strip() != str(FORMAT_VERSION):
            raise ConfigError(f"{where}: format version {_shown(a['format'])} is not "
                              f"{FORMAT_VERSION}; this webfs cannot read it")
        values = _section_values(ARCHIVE_KEYS, a, "archive", where)
        del values["format"]
        conf = cls(**values)
        for sect in cp.sections():
            if sect.startswith("disk"):
                index = DISK_INDEX.parse(sect[4:], where, sect)
                s = cp[sect]
                fields = _section_values(DISK_KEYS, s, sect, where)
                conf.disks.append(DiskInfo(index, fields["uuid"], fields["weight"], fields["path"],
                                          fields["domain"]))
        conf.disks.sort(key=lambda d: d.index)
        return conf.validate(where)


def _section_values(keys: dict[str, ConfKey], section, name: str, where: str) -> dict:
    """The values of one section's keys (defaults for those left out), or
    ConfigError for a required key that is missing."""
    values = {}
    for key in keys.values():
        if key.name not in section:
            if key.required:
                raise ConfigError(f"{where}: [{name}] has no {key.name} (cut short?); " + _copy_advice(where))
            values[key.name] = key.default
        else:
            values[key.name] = key.parse(section[key.name], where, name)
    return values


def _copy_advice(where: str) -> str:
    """The next step for a damaged webfs.conf: every disk holds a copy."""
    root = os.path.dirname(where)
    try:
        archive_uuid = read_disk_id(root).get("Archive")
    except ArchiveError:
        archive_uuid = None
    parent = os.path.dirname(root)
    try:
        siblings = sorted(os.path.join(parent, n) for n in os.listdir(parent))
    except OSError:
        siblings = []
    for other in siblings:
        if other == root or not os.path.isfile(os.path.join(other, CONF_FILE)):
            continue
        try:
            if archive_uuid and read_disk_id(other).get("Archive") != archive_uuid:
                continue
            with open(os.path.join(other, CONF_FILE), "rb") as f:
                Config.from_ini(f.read().decode("utf-8", "replace"), os.path.join(other, CONF_FILE))
        except (ArchiveError, OSError):
            continue
        return (f"every disk holds a copy: copy webfs.conf from another disk of the archive "
                f"(cp {shlex.quote(os.path.join(other, CONF_FILE))} {shlex.quote(where)})")
    return ("every disk holds a copy: copy webfs.conf from another disk of the archive, "
            "or write it again as webfs-format(5) describes")


def local_side(location: str, wait: Optional[float] = None,
               options: Optional[BackendOptions] = None) -> str:
    """The directory that holds a disk's identity files: the disk's own, or an
    S3 disk's state directory (filled from its bucket: ArchiveError, naming
    the disk, when the bucket cannot be reached or read, or does not answer
    within ``wait`` seconds if given; opened with ``options``)."""
    if not is_url(location):
        return location
    try:
        if wait is not None:
            from .backends.s3 import open_s3
            return open_s3(location, options, wait=wait).root
        return open_backend(location, options=options).root
    except ValueError as exc:
        raise ArchiveError(str(exc)) from None
    except OSError as exc:
        raise ArchiveError(f"{normalize(location)}: {exc.strerror or exc}") from None


def read_disk_id(root: str, wait: Optional[float] = None,
                 options: Optional[BackendOptions] = None) -> dict[str, str]:
    """The Key: value lines of a disk's WEBFS-DISK file (``wait``, ``options``: see ``local_side``)."""
    shown = root
    root = local_side(root, wait, options)
    path = os.path.join(root, DISK_ID_FILE)
    try:
        with open(path, "rb") as f:
            lines = f.read(4096).decode("ascii", "replace").splitlines()
    except FileNotFoundError:
        advice = None if shown != root else disk_id_advice(root)
        raise ArchiveError(advice or f"{shown}: not a webfs disk (no {DISK_ID_FILE}; "
                           "make one with 'webfs mkfs')") from None
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


def disk_id_advice(root: str, archive: str = "") -> Optional[str]:
    """If ``root`` is a disk of an archive that lost only its WEBFS-DISK (its webfs.conf
    names this directory), the one-line way to put it back; one of another archive than
    ``archive`` (a uuid, if given), which; else None. The catalog and blocks on such a
    disk are intact: rebuilding is not the cure."""
    root = os.path.abspath(root)
    try:
        if os.path.exists(os.path.join(root, DISK_ID_FILE)):
            other = read_disk_id(root).get("Archive", "?") if archive else archive
            return None if other == archive else f"at {root} is a disk of another archive ({other})"
        with open(os.path.join(root, CONF_FILE), "rb") as f:
            conf = Config.from_ini(f.read().decode("utf-8", "replace"), os.path.join(root, CONF_FILE))
    except (OSError, ArchiveError):
        return None
    disk = next((d for d in conf.disks if os.path.abspath(d.path) == root), None)
    if disk is None:
        return None
    what = "its catalog and blocks are intact" if disk.index == conf.catalog else "its blocks are intact"
    text = f"WEBFS-DISK {FORMAT_VERSION}\\nArchive: {conf.uuid}\\nDisk: {disk.uuid}\\nIndex: {disk.index}\\n"
    return (f"{root}: {DISK_ID_FILE} is missing, but its webfs.conf names it disk {disk.index} of "
            f"archive {conf.uuid} and {what}; put the file back (do not rebuild anything): "
            f"printf '{text}' > {shlex.quote(os.path.join(root, DISK_ID_FILE))}")


class Archive:
    """The disks of one archive, opened from any one of them."""

    def __init__(self, conf: Config, volumes: dict[int, Volume], missing: dict[int, str],
                 opened_from: str, options: Optional[BackendOptions] = None):
        self.conf = conf
        self.backend_options = options or BackendOptions()     # every disk it opens, and the leases
        self.volumes = volumes
        self.missing = missing
        self.lost: dict[int, Volume] = {}   # went away while in use, may come back (``regain``)
        self._losing = lockorder.lock("disk lost")     # two readers finding a disk gone say it once
        self.opened_from = opened_from
        self._lock_fds: list[int] = []
        self._leases: list[BucketLease] = []
        self._shared = False
        self._holder = ""
        self.writer = False             # holds the lock to write: no other process writes its catalog

    @classmethod
    def open(cls, path: str, delays: Optional[dict[int, float]] = None,
             wait: Optional[float] = None, options: Optional[BackendOptions] = None) -> "Archive":
        """The archive a disk belongs to, its disks found and opened (an S3 disk
        that does not answer within ``wait`` seconds, if given, is missing;
        S3 disks with ``options``, None: the defaults)."""
        try:
            root = normalize(path)
        except ValueError as exc:
            raise ArchiveError(str(exc)) from None
        conf = _read_conf(root, wait, options)
        # A disk given away from its recorded path was moved, or is a copy (its
        # recorded path holds it too): the others are looked for beside it first.
        home = None if is_url(root) else next((d for d in conf.disks if _holds(root, conf, d)), None)
        moved = home is not None and not is_url(home.path) and not _same_dir(root, home.path)
        original = home.path if moved and _holds(home.path, conf, home, wait, options) else None
        # A disk that was away while the archive changed has an older webfs.conf:
        # the newest one among the disks found is the archive's.
        for d in conf.disks:
            found = _find_disk(conf, d, root, moved, wait, options)
            if found is not None and found != root:
                try:
                    other = _read_conf(found, wait, options)
                except ArchiveError as exc:
                    log.warning("%s; using %s", exc, os.path.join(root, CONF_FILE))
                    continue
                if other.generation > conf.generation:
                    conf = other
        delays = delays or {}
        volumes, missing = {}, {}
        for d in conf.disks:
            found = _find_disk(conf, d, root, moved, wait, options)
            if found is None:
                missing[d.index] = disk_id_advice(d.path, conf.uuid) or f"not found at {d.path} nor beside {root}"
                # Without the catalog's disk the caller stops and says why; else a warning.
                (log.info if d.index == conf.catalog else log.warning)(
                    "disk %d (%s) is missing: %s", d.index, d.uuid, missing[d.index])
                continue
            if original and found != root and _same_dir(found, d.path):
                raise ArchiveError(
                    f"{root} is a copy of disk {home.index}, which is still at {original}; the archive's "
                    f"disk {d.index} is only at its own place, {found}: opening the copy with it would change "
                    "the original. Give the original's disk, or copy every disk into one directory")
            d.path = found
            volumes[d.index] = Volume(open_backend(found, delays.get(d.index, 0.0), options),
                                      d.index, d.uuid, conf.depth)
        return cls(conf, volumes, missing, root, options)

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

    @property
    def first_volume(self) -> Volume:
        """The disk that holds the catalog, or else the present disk with the lowest index."""
        if not self.volumes:
            raise ArchiveError("no disk of the archive is present")
        return self.volumes.get(self.conf.catalog) or self.volumes[min(self.volumes)]

    def has_room(self, disk: int, needed: int) -> bool:
        """Can a present disk take this many more bytes of blocks or parity? Room
        is left for metadata: more on the disk that holds the catalog, whose
        commits must never be the ones to find it full."""
        return self.volumes[disk].has_room(needed, holds_catalog=disk == self.conf.catalog)

    # -- the lock ------------------------------------------------------------

    def lock(self, holder: str, write: bool = True, shared: bool = False) -> None:
        """Take the archive lock on every present disk, or raise ArchiveBusy.

        flock is dropped by the kernel when a process dies, so the lock of a
        killed daemon is never stale; the file's text only says who held it.
        Without ``write`` (a check that writes nothing) the lock files are
        opened read-only and their text is left alone; a disk without one has
        never been held, so there is nothing to take there. With ``write``,
        every S3 disk's lease is taken too (after the flocks, so a lease
        left by a dead mount of this state directory is known to be dead).
        ``shared`` (the mounts of an archive whose catalog is in PostgreSQL)
        takes the flocks shared with other such mounts, which keep apart by
        their rows in the catalog (``webfs.machines``), and each S3 disk's
        lease as this machine's shared one (``webfs.locks``).
        """
        taken, leases = [], []
        try:
            for vol in self.volumes.values():
                fd = _flock(vol.root, write, shared)
                if fd is not None:
                    taken.append(fd)
            for fd in taken if write else ():
                _say_holder(fd, holder)
            machine = machine_id(self.backend_options.state_base()) if shared else None
            for vol in self.volumes.values() if write else ():
                leases += _lease(vol, holder, self.backend_options, machine)
        except BaseException:
            for lease in leases:
                lease.release()
            for fd in taken:
                os.close(fd)
            raise
        self._lock_fds = taken
        self._leases = leases
        self._holder = holder
        self._shared = shared
        self.writer = write

    def attach(self, disk: DiskInfo) -> Volume:
        """Bring a new disk into the open archive (``webfs add-disk``): its
        volume, and the archive lock on it if the archive is locked. The
        caller writes the configuration (``save_config``)."""
        vol = Volume(open_backend(disk.path, options=self.backend_options), disk.index, disk.uuid, self.conf.depth)
        if self._lock_fds:
            fd = _flock(vol.root, shared=self._shared)
            _say_holder(fd, self._holder)
            self._lock_fds.append(fd)
            machine = machine_id(self.backend_options.state_base()) if self._shared else None
            self._leases += _lease(vol, self._holder, self.backend_options, machine)
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
        self.lost = {i: v for i, v in self.lost.items() if i != index}

    def sync_disks(self, catalog_copy) -> None:
        """Every present disk's ``Backend.sync``; the first failure raised once
        all were tried. A disk whose endpoint died unnoticed (no request since)
        and is owed nothing is missing from now on, as a read would find."""
        failed = []
        for vol in self.volumes.values():
            try:
                vol.backend.sync(catalog_copy)
            except OSError as exc:
                if vol.backend.known_present() or vol.backend.waiting():
                    failed.append(exc)      # written, and not where it belongs
                else:
                    self.lose(vol.index, f"{exc.strerror or exc}")
        if failed:
            raise failed[0]

    def lose(self, index: int, why: str) -> None:
        """A disk vanished while in use (unplugged, its directory removed): from
        now on it is missing, and its blocks are read through parity."""
        with self._losing:
            vol = self.volumes.get(index)
            if vol is None:
                return                      # said already
            back = vol.backend.comes_back()
            if back:
                self.lost = {**self.lost, index: vol}
            self.missing = {**self.missing, index: why}
            self.volumes = {i: v for i, v in self.volumes.items() if i != index}
        log.error("disk %d is gone (%s); treating it as missing%s", index, why,
                  " until its endpoint answers again" if back else "")

    def regain(self, index: int) -> Optional[Volume]:
        """A disk lost while in use is there again (its endpoint answers): it is
        present from now on. The caller puts right what it missed; None when
        another caller took it back already."""
        with self._losing:
            vol = self.lost.get(index)
            if vol is None:
                return None
            self.lost = {i: v for i, v in self.lost.items() if i != index}
            self.volumes = {**self.volumes, index: vol}
            self.missing = {i: why for i, why in self.missing.items() if i != index}
        log.warning("disk %d is back (%s); taken back into use", index, vol.backend.location)
        return vol

    def unlock(self) -> None:
        for lease in self._leases:
            lease.release()
        self._leases = []
        for fd in self._lock_fds:
            os.close(fd)
        self._lock_fds = []
        self.writer = False

    def forget_machines(self, machines: list[str]) -> None:
        """Machines whose mounts were taken over (they died): their S3 disks'
        shared leases go, so an exclusive writer is not kept waiting by them."""
        for vol in self.volumes.values():
            if is_url(vol.backend.location):
                for machine in machines:
                    remove_shared(vol.backend, machine)

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


def _flock(root: str, write: bool = True, shared: bool = False) -> Optional[int]:
    """The archive lock file of one disk, locked (``shared``: with other
    shared holders), or ArchiveBusy; without ``write``, opened read-only and
    None when there is none."""
    path = os.path.join(root, LOCK_FILE)
    if write:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd = open_own(path, os.O_RDWR | os.O_CREAT)
    else:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        except FileNotFoundError:
            return None
    try:
        fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
    except BlockingIOError:
        who = os.pread(fd, 4096, 0).decode("utf-8", "replace").strip() or "another process"
        os.close(fd)
        raise ArchiveBusy(f"the archive is in use ({who}); "
                          "give its mount point instead, or unmount it first") from None
    return fd


def _lease(vol: Volume, holder: str, options: BackendOptions, machine: Optional[str] = None) -> list[BucketLease]:
    """The lease taken on an S3 disk ([] for a directory, which flock alone
    guards): ``machine``'s shared one, or the exclusive one."""
    if not is_url(vol.backend.location):
        return []
    lease = BucketLease(vol.backend, holder, renew=options.lease_renew, take_over=options.take_lease,
                        machine=machine)
    lease.take()
    return [lease]


def _say_holder(fd: int, holder: str) -> None:
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{holder}, pid {os.getpid()}\n".encode(), 0)


def _read_conf(root: str, wait: Optional[float] = None, options: Optional[BackendOptions] = None) -> Config:
    ident = read_disk_id(root, wait, options)
    root = local_side(root, wait, options)
    try:
        with open(os.path.join(root, CONF_FILE), "rb") as f:
            conf = Config.from_ini(f.read().decode("utf-8", "replace"), os.path.join(root, CONF_FILE))
    except FileNotFoundError:
        raise ArchiveError(f"{root}: has {DISK_ID_FILE} but no {CONF_FILE}") from None
    if ident.get("Archive") != conf.uuid:
        raise ArchiveError(f"{root}: {DISK_ID_FILE} and {CONF_FILE} name different archives")
    return conf


def _find_disk(conf: Config, disk: DiskInfo, given: str, beside_first: bool, wait: Optional[float] = None,
               options: Optional[BackendOptions] = None) -> Optional[str]:
    """Where a disk of the archive is now: the given disk itself, its recorded
    path or a sibling of the given disk; the siblings before the recorded
    path when ``beside_first`` (the given disk is not at its own recorded
    path: moved, or a copy, whose disks are its own copies beside it)."""
    parent = os.path.dirname(given)
    siblings = []
    try:
        if not is_url(given):
            siblings = sorted(os.path.join(parent, n) for n in os.listdir(parent))
    except OSError:
        pass
    for cand in [given] + siblings + [disk.path] if beside_first else [given, disk.path] + siblings:
        if cand and (is_url(cand) or os.path.isdir(cand)) and _holds(cand, conf, disk, wait, options):
            return cand if is_url(cand) else os.path.abspath(cand)
    return None


def _holds(path: str, conf: Config, disk: DiskInfo, wait: Optional[float] = None,
           options: Optional[BackendOptions] = None) -> bool:
    """Does ``path`` hold this disk of this archive (its WEBFS-DISK says so)?"""
    try:
        ident = read_disk_id(path, wait, options)
    except ArchiveError as exc:
        if is_url(path):
            log.warning("%s", exc)
        return False
    return ident.get("Archive") == conf.uuid and ident.get("Disk") == disk.uuid


def _same_dir(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def archive_place(text: str) -> Optional[tuple[str, str]]:
    """(disk, path from the archive's root) when ``text`` is ``DISK:/PATH`` (or
    ``DISK:``) of an archive, DISK a directory holding WEBFS-DISK or a disk URL
    (whose own colon is not the one that ends it); else None."""
    url = re.fullmatch(r"(s3(?:\+http)?://[^/]+/[^:]+):(/.*)?", text)
    if url:
        return url.group(1), url.group(2) or "/"
    disk, sep, path = text.partition(":")
    if sep and not is_url(text) and os.path.isfile(os.path.join(disk, "WEBFS-DISK")):
        return disk, path or "/"
    return None
