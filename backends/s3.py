"""The S3 backend: a disk is a bucket, or a prefix in one, on an S3-compatible
object store (SeaweedFS, Ceph RGW, Garage, AWS S3), named by a disk URL::

    s3://HOST:PORT/BUCKET[/PREFIX]        (HTTPS)
    s3+http://HOST:PORT/BUCKET[/PREFIX]   (plain HTTP)

This module owns the disk URL and ``S3Backend`` (its settings, a
``BackendOptions``, come from ``options``):
which side of the disk a path is on, and opening, syncing and making a disk.
Its parts, each a module: the requests (``s3client``), the endpoint's health
and hedged reads (``s3endpoint``), recently read objects (``objectcache``),
the bucket's copy of meta/ (``s3mirror``) and write-behind (``staging``).

Objects have the names files have on a local disk (``WEBFS-DISK``,
``blocks/ab/cd/<rest>``, ``parity/...``, ``meta/...``): a bucket copied to
a directory with any S3 tool is a disk that ``tools/webfs-recover`` reads.

**Two sides.** Blocks, parity files and the identity files live in the
bucket. ``meta/`` lives in a local *state directory* (``root``), and a
consistent copy of it goes to the bucket at every ``sync()`` (``s3mirror``).
Opening the disk fetches ``WEBFS-DISK`` and ``webfs.conf`` (which also
proves the endpoint, the credentials and the bucket), and the ``meta/`` copy
when the state directory has no catalog or an older copy. Some ``meta/``
objects live in the bucket only: ``meta/MOUNTED``, the lease of the writer
(``webfs.locks``), read past the cache and created with ``write_if_absent``,
and ``meta/machines/``: the shared leases of several mounts (a PostgreSQL
catalog), and each one's copy of its records.

**Credentials** come from botocore's usual chain (``AWS_ACCESS_KEY_ID``...,
``~/.aws/credentials``, ``AWS_PROFILE``) or from the file named by the mount
option ``s3_credentials=FILE`` (``WEBFS_S3_CREDENTIALS``): an AWS credentials
file whose section ``[HOST:PORT]`` (else ``[default]``) is used. A URL with a
user or password is refused: URLs end up in webfs.conf, logs and status.

**Blocks and parity files are written behind** (``staging``): a write lands
in the state directory's ``staging/`` and is PUT by uploader threads;
``sync()`` waits for the uploads before it copies meta/, and opening the disk
uploads what a killed daemon left staged before anything else. One of
several mounts (``machine``: it holds a shared lease) writes them through
instead: what it closed is in the bucket, not in a state directory that
dies with its machine.

**An endpoint that is down** fails fast (``s3endpoint``); a read of a block
or parity file late by ``HEDGE_SECONDS`` counts as down. Once a probe finds
it answering, ``present()`` is true again and the mount takes the disk back
(``outages.check_disks``).
"""
from __future__ import annotations

import configparser
import errno
import fcntl
import heapq
import logging
import os
import re
import urllib.parse
from dataclasses import dataclass
from typing import Callable, Iterator, Optional

from ..locks import SYSTEM_CLOCK, Clock
from .base import LEASE, MACHINES, Backend
from .local import LocalBackend
from .objectcache import ObjectCache
from .options import BackendOptions
from .s3client import ObjectClient
from .s3endpoint import HEDGE_SECONDS, PRESENT_SECONDS
from .s3mirror import MetaMirror
from .staging import Staging
from .. import lockorder

log = logging.getLogger(__name__)

SCHEMES = {"s3": "https", "s3+http": "http"}
LOCAL_PREFIX = "meta/"                  # lives in the state directory
IDENTITY = ("WEBFS-DISK", "webfs.conf")  # in the bucket, mirrored in the state directory
STAGING = "staging"                     # in the state directory: objects written, not yet PUT
STAGED = ("blocks/", "parity/")         # the objects written behind
ARCHIVE_LOCK = "meta/lock"              # the archive's flock file (webfs.archive.LOCK_FILE)
ROOM = 1 << 60                          # an object store has no fixed size: "free space" it reports

class DiskURLError(ValueError):
    """A disk URL that cannot name an S3 disk (the message says why)."""


@dataclass(frozen=True)
class DiskURL:
    """A parsed disk URL: never with credentials in it."""
    scheme: str
    host: str
    port: int
    bucket: str
    prefix: str

    @classmethod
    def parse(cls, text: str) -> "DiskURL":
        parts = urllib.parse.urlsplit(text)
        if parts.scheme not in SCHEMES:
            raise DiskURLError(f"{text}: a disk URL starts with s3:// or s3+http://")
        if "@" in parts.netloc:
            raise DiskURLError(f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}{parts.path}: "
                               "no credentials in a disk URL (it is written to webfs.conf and logs); "
                               "use the environment, ~/.aws/credentials or -o s3_credentials=FILE")
        if parts.query or parts.fragment:
            raise DiskURLError(f"{text}: a disk URL has no ?query or #fragment")
        try:
            port = parts.port or (443 if SCHEMES[parts.scheme] == "https" else 80)
        except ValueError:
            raise DiskURLError(f"{text}: the port is not a number") from None
        if not parts.hostname:
            raise DiskURLError(f"{text}: no host (s3://HOST:PORT/BUCKET[/PREFIX])")
        path = parts.path.strip("/")
        bucket, _, prefix = path.partition("/")
        if not re.fullmatch(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]", bucket):
            raise DiskURLError(f"{text}: {bucket!r} is not a bucket name (3-63 of a-z 0-9 . -)")
        prefix = prefix.strip("/")
        if any(p in ("", ".", "..") for p in prefix.split("/")) and prefix:
            raise DiskURLError(f"{text}: the prefix has an empty, '.' or '..' part")
        return cls(parts.scheme, parts.hostname, port, bucket, prefix)

    @property
    def endpoint(self) -> str:
        return f"{SCHEMES[self.scheme]}://{self.host}:{self.port}"

    @property
    def domain(self) -> str:
        """The failure domain a disk of this URL is in by default: its endpoint."""
        return f"{self.host}:{self.port}"

    def __str__(self) -> str:
        return f"{self.scheme}://{self.host}:{self.port}/{self.bucket}" + (f"/{self.prefix}" if self.prefix else "")


def state_dir(url: DiskURL, options: BackendOptions) -> str:
    """The local directory that holds this disk's ``meta/`` side."""
    return os.path.join(options.state_base(), "s3", f"{url.host}_{url.port}", url.bucket,
                        urllib.parse.quote(url.prefix, safe="") or "_")


def _credentials(url: DiskURL, options: BackendOptions) -> dict[str, str]:
    """Keys from the s3_credentials file, if one is named: section [HOST:PORT], else [default]."""
    path = options.s3_credentials
    if not path:
        return {}
    cp = configparser.ConfigParser(interpolation=None)
    try:
        with open(path) as f:
            cp.read_file(f)
    except (OSError, configparser.Error) as exc:
        raise DiskURLError(f"{path}: cannot read the S3 credentials file: {exc}") from None
    for section in (url.domain, url.host, "default"):
        if cp.has_section(section) and cp.has_option(section, "aws_access_key_id"):
            s = cp[section]
            return {"aws_access_key_id": s["aws_access_key_id"],
                    "aws_secret_access_key": s.get("aws_secret_access_key", ""),
                    **({"aws_session_token": s["aws_session_token"]} if "aws_session_token" in s else {})}
    raise DiskURLError(f"{path}: no [{url.domain}] or [default] section with aws_access_key_id")



class S3Backend(Backend):
    """A disk in a bucket (or a prefix of one); ``meta/`` in a local state directory.
    Which side a path is on, staging and the cache: the requests are the
    ``client``'s, the endpoint's health its ``endpoint``, meta/'s copy the ``mirror``'s."""

    location: str = ""          # plain attributes here, not the base class's properties
    domain: str = ""
    bounded = False

    def __init__(self, url: DiskURL, options: BackendOptions, clock: Clock = SYSTEM_CLOCK):
        self.url = url
        self.options = options
        self.location = str(url)
        self.domain = url.domain
        self.root = state_dir(url, options)
        self.local = LocalBackend(self.root)
        requests = options.s3_requests
        self.client = ObjectClient(url, _credentials(url, options), requests, options.region,
                                   ec2_metadata=options.ec2_metadata, clock=clock)
        self.endpoint = self.client.endpoint
        self.cache = ObjectCache(options.block_cache)
        self.mirror = MetaMirror(self.local, self.client)
        self.fetched = False                        # identity and meta/ brought from the bucket
        self.made = False                           # a new disk (create()): ours is the only side
        # The bucket's mount lease (webfs.locks.BucketLease) while this process
        # holds it: meta/ is copied to the bucket only under it, or on a disk just made.
        self.lease = None
        # Half the requests at most for uploads: reads keep the other half.
        self.staging = Staging(os.path.join(self.root, STAGING), self._put, max(1, requests // 2),
                               options.s3_staging, self.location, clock)

    def __repr__(self) -> str:
        return f"S3Backend({self.location!r})"


    def _get(self, path: str, offset: int = 0, size: int = -1) -> bytes:
        return self.client.get(path, offset, size, self._deadline(path))

    def _put(self, path: str, data: bytes) -> None:
        self.cache.forget(path)
        self.client.put(path, data)
        if not self._is_local(path) and not self._is_leases(path):
            self.cache.keep(path, bytes(data))      # write-through: read back soon (see objectcache)

    def _delete(self, path: str) -> None:
        self.client.delete(path)
        self.cache.forget(path)

    def _head(self, path: str) -> int:
        return self.client.head(path, self._deadline(path))

    def _deadline(self, path: str) -> Optional[float]:
        """How long a read of this object may take to start answering: blocks and
        parity files have redundancy to fall back on (HEDGE_SECONDS); the rest
        (identity, meta/, the lease) waits for the client's own timeouts."""
        return HEDGE_SECONDS if self._is_staged(path) else None

    # -- the Backend interface -----------------------------------------------------

    @staticmethod
    def _is_leases(path: str) -> bool:
        """A lease, or a machine's place (in the bucket only: another machine
        may change it, so never cached)."""
        return path == LEASE or path.startswith(MACHINES) or path == MACHINES.rstrip("/")

    @classmethod
    def _is_local(cls, path: str) -> bool:
        if cls._is_leases(path):
            return False
        return path.startswith(LOCAL_PREFIX) or path == LOCAL_PREFIX.rstrip("/")

    @property
    def machine(self) -> Optional[str]:
        """The machine whose shared lease this process holds (one of several
        mounts: a PostgreSQL catalog), or None."""
        return self.lease.machine if self.lease is not None else None

    @staticmethod
    def _is_staged(path: str) -> bool:
        return path.startswith(STAGED)

    def read(self, path: str, offset: int = 0, size: int = -1) -> bytes:
        if self._is_local(path) or path in IDENTITY:
            return self.local.read(path, offset, size)
        if self._is_leases(path):
            return self._get(path, offset, size)    # another machine may have changed it
        data = self.staging.read(path) if self._is_staged(path) else None
        if data is None:
            data = self.cache.get(path)
        if data is None:
            if offset or size >= 0:
                return self._get(path, offset, size)
            data = self._get(path)
            self.cache.keep(path, data)
        return data[offset:] if size < 0 else data[offset:offset + size]

    def write_atomic(self, path: str, data: bytes, fsync: bool = False) -> None:
        if self._is_local(path):
            return self.local.write_atomic(path, data, fsync)
        if self._is_staged(path):
            self.client.check_up(path)
            self.cache.forget(path)
            if self.machine is None:
                return self.staging.put(path, data, fsync)      # PUT behind (see staging)
        # One of several mounts writes through: what it has written is in the
        # bucket, not in a staging area that dies with its machine.
        self._put(path, data)               # a PUT replaces an object whole
        if path in IDENTITY:
            self.local.write_atomic(path, data, fsync)

    def write_new(self, path: str, data: bytes, fsync: bool = False) -> None:
        self.write_atomic(path, data, fsync)

    def write_if_absent(self, path: str, data: bytes) -> None:
        """Create an object only if there is none (a conditional PUT,
        ``If-None-Match: *``; atomic on stores that honour it: SeaweedFS,
        AWS S3, Ceph RGW), else FileExistsError."""
        self.cache.forget(path)
        self.client.put(path, bytes(data), create=True)

    def write_at(self, path: str, offset: int, data: bytes, fsync: bool = False) -> None:
        if self._is_local(path):
            return self.local.write_at(path, offset, data, fsync)
        # Objects cannot be patched: read, change, put back (the Refs field of a block).
        whole = bytearray(self.read(path))
        if offset + len(data) > len(whole):
            raise OSError(errno.EINVAL, "write past the end of an object", f"{self.location}/{path}")
        whole[offset:offset + len(data)] = data
        self.write_atomic(path, bytes(whole))

    def open_append(self, path: str) -> int:
        if not self._is_local(path):
            raise OSError(errno.ENOTSUP, "only meta/ files can be appended to by descriptor",
                          f"{self.location}/{path}")
        return self.local.open_append(path)

    def rename(self, src: str, dst: str) -> None:
        if self._is_local(src) and self._is_local(dst):
            return self.local.rename(src, dst)
        self.write_atomic(dst, self.read(src))
        self.remove(src)

    def remove(self, path: str) -> None:
        if self._is_local(path):
            return self.local.remove(path)
        self.staging.discard(path)
        self._delete(path)                  # deleting a missing object is not an error in S3
        if path in IDENTITY:
            self.local.remove(path)

    def exists(self, path: str) -> bool:
        if self._is_local(path) or path in IDENTITY:
            return self.local.exists(path)
        try:
            self.size(path)
            return True
        except FileNotFoundError:
            return False

    def size(self, path: str) -> int:
        if self._is_local(path) or path in IDENTITY:
            return self.local.size(path)
        staged = self.staging.size(path)
        if staged is not None:
            return staged
        data = self.cache.get(path)
        if data is not None:
            return len(data)
        return self._head(path)

    def list(self, prefix: str) -> Iterator[str]:
        if self._is_local(prefix + "/"):
            yield from self.local.list(prefix)
            return
        last = None
        prefix = prefix.rstrip("/") + "/" if prefix else ""
        staged = self.staging.names(prefix)
        for name in heapq.merge(self.client.list(prefix), staged):
            if name != last:
                yield name
            last = name

    def remove_leftovers(self, path: str) -> list[str]:
        if self._is_local(path):
            return self.local.remove_leftovers(path)
        return []                           # a PUT never leaves half an object

    def free_space(self) -> tuple[int, int]:
        return ROOM, ROOM

    def present(self) -> bool:
        """Reachable: not known down (a probe asks a down endpoint again, in the
        background), and answering now, within PRESENT_SECONDS: one listing of an
        empty "directory" of the bucket, through obstore (the mount asks every
        half second; a HEAD of the bucket through boto3 cost a cold read half its CPU)."""
        if self.endpoint.down:
            return self.endpoint.up()
        try:
            next(self.client.list(IDENTITY[0] + "/", limit=1, deadline=PRESENT_SECONDS), None)
        except OSError:
            return False
        return True

    def comes_back(self) -> bool:
        return True

    def known_present(self) -> bool:
        """Reachable as far as the last request knows (asks nothing: status)."""
        return not self.endpoint.down

    def answers_now(self) -> bool:
        """A down endpoint probed now, in the caller, not at its next probe."""
        return self.endpoint.ask_now() if self.endpoint.down else self.present()

    def waiting(self) -> int:
        return self.staging.pending

    def sync(self, catalog_copy: Optional[Callable[[str], bytes]] = None) -> None:
        """Every staged object to the bucket (meta/'s copy names none it lacks),
        then meta/ (``MetaMirror.publish``); only by the lease's holder (or a new
        disk's maker): never over the copy of a machine that took the lease.
        One of several mounts whose shared lease was taken over (it stood still
        so long that another machine took it for dead) still copies its records
        to its own place, which no other machine writes: else the names it
        committed since its last copy would be in no bucket. What it staged
        stays staged, as a dead machine's does (the next mount uploads it)."""
        if self.lease is None and not self.made:
            return
        if self.lease is not None and not self.lease.held():
            if self.machine is None:
                log.error("%s: the lease was taken over by another mount; meta/ is not copied to the bucket",
                          self.location)
                return
            log.error("%s: machine %s's lease was taken over by another mount; only its records are copied "
                      "to the bucket, to its own place", self.location, self.machine)
        else:
            self.staging.drain()
        self.mirror.publish(catalog_copy, self.machine)

    def close(self, catalog_copy: Optional[Callable[[str], bytes]] = None) -> None:
        try:
            self.sync(catalog_copy)
        except OSError as exc:
            log.error("%s: cannot copy meta/ to the bucket: %s (the next sync or mount does)",
                      self.location, exc.strerror or exc)
        self.staging.close()

    # -- opening, and making a new disk -------------------------------------------

    def fetch(self, wait: Optional[float] = None) -> None:
        """Upload what a killed daemon left staged; then bring the identity
        files, and meta/ when ours is missing or older, from the bucket. With
        ``wait`` (a look that reads no block: status) each request is answered
        within that many seconds, else EndpointDown, and what is staged stays
        for the next open (its uploads would wait on a hung server)."""
        replayed = 0 if wait is not None or self._locked_elsewhere() else self.staging.replay()
        if replayed:
            self.staging.drain()
            log.warning("%s: %d objects left staged by an earlier mount are uploaded", self.location, replayed)
        os.makedirs(self.root, mode=0o700, exist_ok=True)     # private, as a disk root is (webfs.archive)
        os.makedirs(os.path.join(self.root, "meta"), exist_ok=True)
        for path in IDENTITY:
            try:
                data = self.client.get(path, deadline=wait)
            except FileNotFoundError:
                self.local.remove(path)
                continue
            self.local.write_atomic(path, data)
        if self.local.exists(IDENTITY[0]):
            self.mirror.fetch(wait)

    def _locked_elsewhere(self) -> bool:
        """Does another process hold the archive's lock in this state directory
        (a mount: what is staged is its to upload, and it may write it again)?"""
        try:
            fd = os.open(os.path.join(self.root, ARCHIVE_LOCK), os.O_RDONLY)
        except FileNotFoundError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            fcntl.flock(fd, fcntl.LOCK_UN)
            return False
        except BlockingIOError:
            return True
        finally:
            os.close(fd)

    def check_new(self) -> Optional[str]:
        """Why this bucket (prefix) cannot become a new disk, or None: it must be
        reachable with our credentials and hold nothing. Writes nothing."""
        try:
            self.client.bucket_call("head_bucket")
        except FileNotFoundError:
            return None                     # made by create()
        except OSError as exc:
            return exc.strerror
        first = next(iter(self.client.list("", limit=1)), None)
        if first is None:
            return None
        if self.exists_remote(IDENTITY[0]):
            return "holds a webfs disk already"
        return f"not empty (holds {first})"

    def exists_remote(self, path: str) -> bool:
        try:
            self._head(path)
            return True
        except FileNotFoundError:
            return False

    def create(self) -> None:
        """Make the bucket if it is not there, and an empty state directory."""
        try:
            self.client.bucket_call("head_bucket")
        except FileNotFoundError:
            self.client.bucket_call("create_bucket")
        self.fetched = self.made = True             # a new disk: ours is the only side
        import shutil
        shutil.rmtree(self.root, ignore_errors=True)     # a state directory of an earlier disk here
        os.makedirs(self.root, mode=0o700, exist_ok=True)
        os.chmod(self.root, 0o700)                       # whatever the umask: private, as a disk root is
        os.makedirs(os.path.join(self.root, "meta"), exist_ok=True)

_OPEN: dict[str, S3Backend] = {}
_OPEN_LOCK = lockorder.lock("s3 open")


def open_s3(location: str, options: Optional[BackendOptions] = None, fetch: bool = True,
            wait: Optional[float] = None) -> S3Backend:
    """The backend of a disk URL, one per URL in a process (its client, cache
    and endpoint's health are shared: a second open of a disk whose endpoint
    just failed fails at once), made with ``options`` (None: the defaults) the
    first time; ``fetch`` brings its identity and meta/ the first time, each
    request answered within ``wait`` seconds (``fetch``)."""
    url = DiskURL.parse(location)
    key = str(url)
    with _OPEN_LOCK:
        backend = _OPEN.get(key)
        if backend is None:
            backend = _OPEN[key] = S3Backend(url, options or BackendOptions())
        if fetch and not backend.fetched:
            backend.fetch(wait)
            backend.fetched = True
    return backend


def forget_open() -> None:
    """Drop the backends opened so far (a forked daemon, or a test, starts anew)."""
    with _OPEN_LOCK:
        _OPEN.clear()
