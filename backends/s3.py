"""The S3 backend: a disk is a bucket, or a prefix in one, on an S3-compatible
object store (SeaweedFS, Ceph RGW, Garage, AWS S3), named by a disk URL::

    s3://HOST:PORT/BUCKET[/PREFIX]        (HTTPS)
    s3+http://HOST:PORT/BUCKET[/PREFIX]   (plain HTTP)

Objects have the names files have on a local disk (``WEBFS-DISK``,
``webfs.conf``, ``blocks/ab/cd/<rest>``, ``parity/...``, ``meta/...``), so
a bucket copied to a directory with any S3 tool is a disk that
``tools/webfs-recover`` reads.

**Two sides.** Blocks, parity files and the identity files live in the
bucket. ``meta/`` (catalog, JOURNAL, intents, lock, log) needs appends, file
descriptors, flock and SQLite: it lives in a local *state directory*
(``root``), and a consistent copy of it goes to the bucket at every
``sync()`` (each checkpoint and the unmount): MANIFEST, JOURNAL, RECORDS and
a snapshot of the catalog taken with SQLite's backup API. Opening the disk
fetches ``WEBFS-DISK`` and ``webfs.conf`` (which also proves the endpoint,
the credentials and the bucket), and the ``meta/`` copy when the state
directory has no catalog or an older copy (``meta/COPY``): so an archive whose disks are all
in object stores mounts on a new machine from its URLs alone. One ``meta/``
object lives in the bucket only: ``meta/MOUNTED``, the lease of the writer
(``webfs.locks``), read past the cache and created with ``write_if_absent``.

**Credentials** come from botocore's usual chain (``AWS_ACCESS_KEY_ID``...,
``~/.aws/credentials``, ``AWS_PROFILE``) or from the file named by the mount
option ``s3_credentials=FILE`` (``WEBFS_S3_CREDENTIALS``): an AWS credentials
file whose section ``[HOST:PORT]`` (else ``[default]``) is used. A URL with a
user or password is refused: URLs end up in webfs.conf, logs and status.

**An endpoint that is down** fails fast: short connect and read timeouts and
botocore's standard retries (two attempts), and after a failure every request
to that endpoint fails at once for ``DOWN_SECONDS`` (logged once), so reads
are served from parity and writes go to the other disks without waiting.
Requests to one disk are bounded (``s3_requests=N``), and recently read
blocks and parity files are kept in memory (``block_cache=BYTES``).
"""
from __future__ import annotations

import collections
import configparser
import errno
import logging
import os
import re
import sqlite3
import tempfile
import threading
import time
import urllib.parse
from dataclasses import dataclass
from typing import Iterator, Optional

from .base import Backend
from .local import LocalBackend

log = logging.getLogger(__name__)

SCHEMES = {"s3": "https", "s3+http": "http"}
LOCAL_PREFIX = "meta/"                  # lives in the state directory
IDENTITY = ("WEBFS-DISK", "webfs.conf")  # in the bucket, mirrored in the state directory
PUBLISHED = ("meta/MANIFEST", "meta/JOURNAL", "meta/RECORDS")
CATALOG = "meta/catalog.db"
COPY = "meta/COPY"                      # the number of the last copy of meta/ to the bucket
LEASE = "meta/MOUNTED"                  # the mount lease (webfs.locks): in the bucket only, never cached
DOWN_SECONDS = 10.0                     # an endpoint that failed is not asked again for this long
CONNECT_TIMEOUT = 2.0
READ_TIMEOUT = 10.0
ATTEMPTS = 2
DEFAULT_REQUESTS = 16                   # requests at once to one disk
DEFAULT_CACHE = 64 << 20                # bytes of recently read objects kept
ROOM = 1 << 60                          # an object store has no fixed size: "free space" it reports

# Settings: from mount options (``configure``) or the environment, for every command.
ENV = {"s3_credentials": "WEBFS_S3_CREDENTIALS", "state_dir": "WEBFS_STATE_DIR",
       "block_cache": "WEBFS_BLOCK_CACHE", "s3_requests": "WEBFS_S3_REQUESTS"}


class DiskURLError(ValueError):
    """A disk URL that cannot name an S3 disk (the message says why)."""


def is_url(location: str) -> bool:
    return isinstance(location, str) and re.match(r"^s3(\+http)?://", location) is not None


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


def configure(settings: dict[str, str]) -> None:
    """Apply backend mount options (for this process and the daemon it forks)."""
    for key, value in settings.items():
        if key in ("block_cache", "s3_requests") and not (value.isdigit() and (int(value) > 0 or key == "block_cache")):
            raise ValueError(f"{key} takes a whole number{' above 0' if key == 's3_requests' else ''}, not {value!r}")
        if key in ("s3_credentials", "state_dir"):
            value = os.path.abspath(value)
        os.environ[ENV[key]] = value


def _setting(key: str, default):
    value = os.environ.get(ENV[key])
    if value is None or value == "":
        return default
    return int(value) if isinstance(default, int) else value


def state_dir(url: DiskURL) -> str:
    """The local directory that holds this disk's ``meta/`` side."""
    base = _setting("state_dir", None) or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "webfs")
    return os.path.join(base, "s3", f"{url.host}_{url.port}", url.bucket,
                        urllib.parse.quote(url.prefix, safe="") or "_")


def _credentials(url: DiskURL) -> dict[str, str]:
    """Keys from the s3_credentials file, if one is named: section [HOST:PORT], else [default]."""
    path = _setting("s3_credentials", None)
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


class EndpointDown(OSError):
    """The endpoint did not answer (refused, timed out): the disk is unreachable."""


class S3Backend(Backend):
    """A disk in a bucket (or a prefix of one); ``meta/`` in a local state directory."""

    location: str = ""          # plain attributes here, not the base class's properties
    domain: str = ""
    bounded = False

    def __init__(self, url: DiskURL):
        # No credentials must not mean a probe of the EC2 instance metadata
        # address (a second's wait, and traffic off this machine) unless asked for.
        os.environ.setdefault("AWS_EC2_METADATA_DISABLED", "true")
        import boto3
        from botocore.config import Config as BotoConfig
        self.url = url
        self.location = str(url)
        self.domain = url.domain
        self.root = state_dir(url)
        self.local = LocalBackend(self.root)
        self._key_prefix = f"{url.prefix}/" if url.prefix else ""
        requests = _setting("s3_requests", DEFAULT_REQUESTS)
        self._slots = threading.BoundedSemaphore(requests)
        session = boto3.session.Session()
        keys = _credentials(url)

        def client(read_timeout: float, attempts: int):
            return session.client(
                "s3", endpoint_url=url.endpoint, region_name=session.region_name or "us-east-1",
                config=BotoConfig(connect_timeout=CONNECT_TIMEOUT, read_timeout=read_timeout,
                                  retries={"total_max_attempts": attempts, "mode": "standard"},
                                  max_pool_connections=requests, s3={"addressing_style": "path"},
                                  request_checksum_calculation="when_required",
                                  response_checksum_validation="when_required"),
                **keys)
        self.client = client(READ_TIMEOUT, ATTEMPTS)
        self._probe_client = client(CONNECT_TIMEOUT, 1)     # is it back? (see _back_up)
        self._cache: collections.OrderedDict[str, bytes] = collections.OrderedDict()
        self._cache_bytes = 0
        self._cache_limit = _setting("block_cache", DEFAULT_CACHE)
        self._cache_lock = threading.Lock()
        self._down_until = 0.0                      # 0: up; else down until then (monotonic)
        self._last_ok = 0.0
        self._probing = threading.Lock()
        self._published: dict[str, tuple] = {}      # meta/ file -> its stamp when last copied
        self.fetched = False                        # identity and meta/ brought from the bucket
        self.made = False                           # a new disk (create()): ours is the only side
        # The bucket's mount lease (webfs.locks.BucketLease) while this process
        # holds it: meta/ is copied to the bucket only under it, or on a disk just made.
        self.lease = None

    def __repr__(self) -> str:
        return f"S3Backend({self.location!r})"

    # -- requests ------------------------------------------------------------

    def _key(self, path: str) -> str:
        return self._key_prefix + path

    def _call(self, op: str, path: str, **kwargs):
        """One request, bounded per disk; botocore errors become OSErrors naming the disk."""
        from botocore.exceptions import (BotoCoreError, ClientError, NoCredentialsError,
                                         PartialCredentialsError)
        if self._down_until and not self._back_up():
            raise EndpointDown(errno.EHOSTDOWN, "endpoint down (not asked again for a few seconds)",
                               f"{self.location}/{path}")
        try:
            with self._slots:
                answer = getattr(self.client, op)(**kwargs)
        except ClientError as exc:
            raise self._client_error(exc, path) from None
        except (NoCredentialsError, PartialCredentialsError):
            raise PermissionError(errno.EACCES, "no S3 credentials (set AWS_ACCESS_KEY_ID and "
                                  "AWS_SECRET_ACCESS_KEY, write ~/.aws/credentials, or give "
                                  "-o s3_credentials=FILE)", self.location) from None
        except BotoCoreError as exc:
            # Refused, timed out, cut: botocore has retried already.
            # Said once per outage, and only of an endpoint that answered before:
            # one that never did is reported by whoever asked (mkfs, mount).
            first = not self._down_until and self._last_ok > 0
            self._down_until = time.monotonic() + DOWN_SECONDS
            if first:
                log.error("%s: endpoint down (%s); reads come from parity, writes go to other disks",
                          self.location, exc)
            raise EndpointDown(errno.EHOSTDOWN, f"endpoint unreachable ({type(exc).__name__})",
                               f"{self.location}/{path}") from None
        self._last_ok = time.monotonic()
        return answer

    def _back_up(self) -> bool:
        """After an outage: is the endpoint answering again? One thread asks,
        with a short timeout and no retry, once DOWN_SECONDS have passed; the
        others fail at once meanwhile, so a hung server stalls no one for long."""
        if time.monotonic() < self._down_until or not self._probing.acquire(blocking=False):
            return False
        try:
            if not self._down_until:
                return True                 # another thread found it back
            from botocore.exceptions import BotoCoreError, ClientError
            try:
                self._probe_client.head_bucket(Bucket=self.url.bucket)
            except (BotoCoreError, ClientError):
                self._down_until = time.monotonic() + DOWN_SECONDS
                return False
            log.warning("%s: endpoint answers again", self.location)
            self._down_until = 0.0
            return True
        finally:
            self._probing.release()

    def _client_error(self, exc, path: str) -> OSError:
        code = str(exc.response.get("Error", {}).get("Code", ""))
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        where = f"{self.location}/{path}" if path else self.location
        if code in ("NoSuchKey", "404", "NotFound") or (status == 404 and code != "NoSuchBucket"):
            return FileNotFoundError(errno.ENOENT, "no such object", where)
        if code == "PreconditionFailed" or status == 412:
            return FileExistsError(errno.EEXIST, "the object is there already", where)
        if code == "NoSuchBucket":
            return FileNotFoundError(errno.ENOENT, f"no bucket {self.url.bucket}", self.location)
        if status == 403 or code in ("AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "403"):
            return PermissionError(errno.EACCES, "access denied (check the S3 credentials)", self.location)
        if code in ("InvalidRange",):
            return OSError(errno.EINVAL, "offset past the end", where)
        return OSError(errno.EIO, f"S3 error {code or status}", where)

    def _get(self, path: str, offset: int = 0, size: int = -1) -> bytes:
        kwargs = {"Bucket": self.url.bucket, "Key": self._key(path)}
        if offset or size >= 0:
            if size == 0:
                return b""
            kwargs["Range"] = f"bytes={offset}-" + (f"{offset + size - 1}" if size >= 0 else "")
        try:
            answer = self._call("get_object", path, **kwargs)
        except OSError as exc:
            if exc.errno == errno.EINVAL:
                return b""
            raise
        with answer["Body"] as body:
            return body.read()

    def _put(self, path: str, data: bytes) -> None:
        self._forget(path)
        self._call("put_object", path, Bucket=self.url.bucket, Key=self._key(path), Body=bytes(data))
        if not self._is_local(path):
            # Write-through: a parity file is read back at the next member's XOR,
            # a block at its next reference (Refs): no GET for either.
            self._remember(path, bytes(data))

    def _delete(self, path: str) -> None:
        self._call("delete_object", path, Bucket=self.url.bucket, Key=self._key(path))
        self._forget(path)

    # -- the cache of recently read objects --------------------------------------

    def _cached(self, path: str) -> Optional[bytes]:
        with self._cache_lock:
            data = self._cache.get(path)
            if data is not None:
                self._cache.move_to_end(path)
            return data

    def _remember(self, path: str, data: bytes) -> None:
        if len(data) > self._cache_limit // 4:
            return
        with self._cache_lock:
            old = self._cache.pop(path, None)
            self._cache_bytes += len(data) - (len(old) if old is not None else 0)
            self._cache[path] = data
            while self._cache_bytes > self._cache_limit:
                _, gone = self._cache.popitem(last=False)
                self._cache_bytes -= len(gone)

    def _forget(self, path: str) -> None:
        with self._cache_lock:
            old = self._cache.pop(path, None)
            if old is not None:
                self._cache_bytes -= len(old)

    # -- the Backend interface -----------------------------------------------------

    @staticmethod
    def _is_local(path: str) -> bool:
        return path != LEASE and (path.startswith(LOCAL_PREFIX) or path == LOCAL_PREFIX.rstrip("/"))

    def read(self, path: str, offset: int = 0, size: int = -1) -> bytes:
        if self._is_local(path) or path in IDENTITY:
            return self.local.read(path, offset, size)
        if path == LEASE:
            return self._get(path, offset, size)    # another machine may have changed it
        data = self._cached(path)
        if data is None:
            if offset or size >= 0:
                return self._get(path, offset, size)
            data = self._get(path)
            self._remember(path, data)
        return data[offset:] if size < 0 else data[offset:offset + size]

    def write_atomic(self, path: str, data: bytes, fsync: bool = False) -> None:
        if self._is_local(path):
            return self.local.write_atomic(path, data, fsync)
        self._put(path, data)               # a PUT replaces an object whole
        if path in IDENTITY:
            self.local.write_atomic(path, data, fsync)

    def write_new(self, path: str, data: bytes, fsync: bool = False) -> None:
        self.write_atomic(path, data, fsync)

    def write_if_absent(self, path: str, data: bytes) -> None:
        """Create an object only if there is none (a conditional PUT,
        ``If-None-Match: *``; atomic on stores that honour it: SeaweedFS,
        AWS S3, Ceph RGW), else FileExistsError."""
        self._forget(path)
        self._call("put_object", path, Bucket=self.url.bucket, Key=self._key(path), Body=bytes(data),
                   IfNoneMatch="*")

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
        data = self._cached(path)
        if data is not None:
            return len(data)
        answer = self._call("head_object", path, Bucket=self.url.bucket, Key=self._key(path))
        return int(answer["ContentLength"])

    def list(self, prefix: str) -> Iterator[str]:
        if self._is_local(prefix + "/"):
            yield from self.local.list(prefix)
            return
        yield from self._list_remote(prefix.rstrip("/") + "/" if prefix else "")

    def _list_remote(self, prefix: str, limit: int = 0) -> Iterator[str]:
        token = None
        skip = len(self._key_prefix)
        while True:
            kwargs = {"Bucket": self.url.bucket, "Prefix": self._key(prefix)}
            if token:
                kwargs["ContinuationToken"] = token
            if limit:
                kwargs["MaxKeys"] = limit
            answer = self._call("list_objects_v2", prefix, **kwargs)
            for item in answer.get("Contents", []):
                yield item["Key"][skip:]
            token = answer.get("NextContinuationToken")
            if not answer.get("IsTruncated") or not token or limit:
                return

    def remove_leftovers(self, path: str) -> list[str]:
        if self._is_local(path):
            return self.local.remove_leftovers(path)
        return []                           # a PUT never leaves half an object

    def free_space(self) -> tuple[int, int]:
        return ROOM, ROOM

    def present(self) -> bool:
        """Reachable: not failed in the last DOWN_SECONDS, and answering now (one
        HEAD: callers ask after an error, or before replacing the disk)."""
        if self._down_until:
            return self._back_up()
        try:
            self._call("head_bucket", "", Bucket=self.url.bucket)
        except OSError:
            return False
        return True

    def _stamp(self, path: str) -> tuple:
        """What tells that a local meta/ file changed: size and mtime (with a catalog's WAL)."""
        stamp = []
        for name in (path, path + "-wal") if path == CATALOG else (path,):
            try:
                st = os.stat(os.path.join(self.root, name))
                stamp.append((st.st_size, st.st_mtime_ns))
            except FileNotFoundError:
                stamp.append(None)
        return tuple(stamp)

    def sync(self) -> None:
        """Copy meta/ to the bucket: the records and a consistent catalog snapshot
        (what changed since the last copy, or since it was fetched), then the
        copy's number (``meta/COPY``), last, so a copy cut short is not taken
        for a newer one. Only the holder of the bucket's lease copies (or the
        maker of a new disk): a command that only reads, or a mount whose lease
        another machine took over, must not replace that machine's copy."""
        if self.lease is None and not self.made:
            return
        if self.lease is not None and not self.lease.held():
            log.error("%s: the lease was taken over by another mount; meta/ is not copied to the bucket",
                      self.location)
            return
        copied = False
        for path in PUBLISHED:
            stamp = self._stamp(path)
            if self._published.get(path) == stamp:
                continue
            try:
                data = self.local.read(path)
            except FileNotFoundError:
                self._delete(path)
            else:
                self._put(path, data)
            self._published[path] = stamp
            copied = True
        catalog = os.path.join(self.root, CATALOG)
        stamp = self._stamp(CATALOG)
        if os.path.exists(catalog) and self._published.get(CATALOG) != stamp:
            fd, tmp = tempfile.mkstemp(prefix=".catalog-copy.", dir=os.path.dirname(catalog))
            os.close(fd)
            try:
                src = sqlite3.connect(f"file:{catalog}?mode=ro", uri=True)
                dst = sqlite3.connect(tmp)
                try:
                    src.backup(dst)
                finally:
                    dst.close()
                    src.close()
                with open(tmp, "rb") as f:
                    self._put(CATALOG, f.read())
            finally:
                os.unlink(tmp)
            self._published[CATALOG] = stamp
            copied = True
        if copied:
            mark = b"%d\n" % ((self._copy_number(self.local.read) or 0) + 1)
            self._put(COPY, mark)
            self.local.write_atomic(COPY, mark)

    @staticmethod
    def _copy_number(read) -> Optional[int]:
        """The number in meta/COPY (read by ``read``: local or remote), or None."""
        try:
            text = read(COPY).strip()
        except FileNotFoundError:
            return None
        return int(text) if text.isdigit() else None

    def close(self) -> None:
        try:
            self.sync()
        except OSError as exc:
            log.error("%s: cannot copy meta/ to the bucket: %s (the next sync or mount does)",
                      self.location, exc.strerror or exc)

    # -- opening, and making a new disk -------------------------------------------

    def fetch(self) -> None:
        """Bring the identity files, and meta/ when ours is missing or older, from the bucket."""
        os.makedirs(os.path.join(self.root, "meta"), exist_ok=True)
        for path in IDENTITY:
            try:
                data = self._get(path)
            except FileNotFoundError:
                self.local.remove(path)
                continue
            self.local.write_atomic(path, data)
        if not self.local.exists(IDENTITY[0]):
            return
        try:
            self._fetch_meta()
        finally:
            self._published = {path: self._stamp(path) for path in (*PUBLISHED, CATALOG)}

    def _fetch_meta(self) -> None:
        """The bucket's copy of meta/ replaces ours when ours has no catalog or
        an older copy number (another machine mounted the archive since)."""
        remote = self._copy_number(self._get)
        here = self._copy_number(self.local.read)
        if self.local.exists(CATALOG) and (remote is None or (here is not None and here >= remote)):
            return
        # Without a copy number (never copied, or lost with the catalog) the
        # records that are there still name every file for fsck --rebuild-catalog.
        for path in (*PUBLISHED, CATALOG):
            try:
                data = self._get(path)
            except FileNotFoundError:
                self.local.remove(path)
                continue
            if path == CATALOG:
                for leftover in ("-wal", "-shm"):
                    self.local.remove(CATALOG + leftover)
            self.local.write_atomic(path, data)
        if remote is not None:
            self.local.write_atomic(COPY, b"%d\n" % remote)
        log.info("%s: meta/ fetched from the bucket (%s)", self.location,
                 f"copy {remote}" if remote is not None else "no meta/COPY: the records that are there")

    def check_new(self) -> Optional[str]:
        """Why this bucket (prefix) cannot become a new disk, or None: it must be
        reachable with our credentials and hold nothing. Writes nothing."""
        try:
            self._call("head_bucket", "", Bucket=self.url.bucket)
        except FileNotFoundError:
            return None                     # made by create()
        except OSError as exc:
            return exc.strerror
        first = next(iter(self._list_remote("", limit=1)), None)
        if first is None:
            return None
        if self.exists_remote(IDENTITY[0]):
            return "holds a webfs disk already"
        return f"not empty (holds {first})"

    def exists_remote(self, path: str) -> bool:
        try:
            self._call("head_object", path, Bucket=self.url.bucket, Key=self._key(path))
            return True
        except FileNotFoundError:
            return False

    def create(self) -> None:
        """Make the bucket if it is not there, and an empty state directory."""
        try:
            self._call("head_bucket", "", Bucket=self.url.bucket)
        except FileNotFoundError:
            self._call("create_bucket", "", Bucket=self.url.bucket)
        self.fetched = self.made = True             # a new disk: ours is the only side
        import shutil
        shutil.rmtree(self.root, ignore_errors=True)     # a state directory of an earlier disk here
        os.makedirs(os.path.join(self.root, "meta"), exist_ok=True)


_OPEN: dict[str, S3Backend] = {}
_OPEN_LOCK = threading.Lock()


def open_s3(location: str, fetch: bool = True) -> S3Backend:
    """The backend of a disk URL, one per URL in a process (its client and cache
    are shared); ``fetch`` brings its identity and meta/ the first time."""
    url = DiskURL.parse(location)
    key = str(url)
    with _OPEN_LOCK:
        backend = _OPEN.get(key) or S3Backend(url)
        if fetch and not backend.fetched:
            backend.fetch()
            backend.fetched = True
        _OPEN[key] = backend
    return backend


def forget_open() -> None:
    """Drop the backends opened so far (a forked daemon, or a test, starts anew)."""
    with _OPEN_LOCK:
        _OPEN.clear()
