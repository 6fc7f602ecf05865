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

**The client** is obstore (Rust's object_store) for objects: a PUT or GET
costs a sixth of boto3's CPU here; boto3 only for what obstore lacks (HEAD
and CREATE of a bucket, and the credential chain).

**Credentials** come from botocore's usual chain (``AWS_ACCESS_KEY_ID``...,
``~/.aws/credentials``, ``AWS_PROFILE``) or from the file named by the mount
option ``s3_credentials=FILE`` (``WEBFS_S3_CREDENTIALS``): an AWS credentials
file whose section ``[HOST:PORT]`` (else ``[default]``) is used. A URL with a
user or password is refused: URLs end up in webfs.conf, logs and status.

**Blocks and parity files are written behind** (``staging``): a write lands
in the state directory's ``staging/`` and is PUT by uploader threads;
``sync()`` waits for the uploads before it copies meta/, and opening the disk
uploads what a killed daemon left staged before anything else.

**An endpoint that is down** fails fast: short connect and request timeouts
and the client's own retries (two attempts), and after a failure every request
to that endpoint fails at once (logged once), so reads are served from parity
and writes go to the other disks without waiting. A read of a block or
parity file not answered within ``HEDGE_SECONDS`` (``present()``'s listing:
``PRESENT_SECONDS``) counts as such a failure: its caller reads through
parity while the slow request finishes in the background (``Endpoint``). Every ``DOWN_SECONDS`` a thread of its own asks the endpoint
again (a HEAD of the bucket, short timeout); when it answers the disk is
usable again (``present()``), and the mount takes it back (``Store.check_disks``).
Requests to one disk are bounded (``s3_requests=N``), and recently read
blocks and parity files are kept in memory (``block_cache=BYTES``).
"""
from __future__ import annotations

import collections
import concurrent.futures
import configparser
import datetime
import errno
import fcntl
import heapq
import logging
import os
import queue
import re
import sqlite3
import tempfile
import threading
import time
import urllib.parse
from dataclasses import dataclass
from typing import Callable, Iterator, Optional

from .base import LEASE, Backend
from .local import LocalBackend
from .staging import Staging
from .. import lockorder

log = logging.getLogger(__name__)

SCHEMES = {"s3": "https", "s3+http": "http"}
LOCAL_PREFIX = "meta/"                  # lives in the state directory
IDENTITY = ("WEBFS-DISK", "webfs.conf")  # in the bucket, mirrored in the state directory
PUBLISHED = ("meta/MANIFEST", "meta/JOURNAL", "meta/RECORDS")
CATALOG = "meta/catalog.db"
COPY = "meta/COPY"                      # the number of the last copy of meta/ to the bucket
DOWN_SECONDS = 3.0                      # a down endpoint is asked again (by a probe) this often
HEDGE_SECONDS = 1.5                     # a block or parity read not answered by then is served through parity
PRESENT_SECONDS = 5.0                   # present()'s listing not answered by then: the endpoint is down
CONNECT_TIMEOUT = 2.0
READ_TIMEOUT = 10.0
ATTEMPTS = 2
DEFAULT_REQUESTS = 16                   # requests at once to one disk
DEFAULT_CACHE = 64 << 20                # bytes of recently read objects kept
DEFAULT_STAGING = 256 << 20             # bytes staged for upload before writers wait
STAGING = "staging"                     # in the state directory: objects written, not yet PUT
STAGED = ("blocks/", "parity/")         # the objects written behind
ARCHIVE_LOCK = "meta/lock"              # the archive's flock file (webfs.archive.LOCK_FILE)
ROOM = 1 << 60                          # an object store has no fixed size: "free space" it reports

# Settings: from mount options (``configure``) or the environment, for every command.
ENV = {"s3_credentials": "WEBFS_S3_CREDENTIALS", "state_dir": "WEBFS_STATE_DIR",
       "block_cache": "WEBFS_BLOCK_CACHE", "s3_requests": "WEBFS_S3_REQUESTS",
       "s3_staging": "WEBFS_S3_STAGING"}


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


def configure(settings: dict[str, str]) -> None:
    """Apply backend mount options (for this process and the daemon it forks)."""
    for key, value in settings.items():
        if key in ("block_cache", "s3_requests", "s3_staging") and not (
                value.isdigit() and (int(value) > 0 or key != "s3_requests")):
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


class NoCredentials(Exception):
    """botocore's chain found no credentials for this disk."""


class EndpointDown(OSError):
    """The endpoint did not answer (refused, timed out): the disk is unreachable."""


class Late(Exception):
    """A request was not answered within its deadline (it goes on in the background)."""


class Endpoint:
    """Up or down, for one disk's endpoint; ``probe()`` raises unless it answers.

    Down after a failed request: requests fail at once; a probe (a thread of
    its own, never a caller) asks again every DOWN_SECONDS. A read with a
    deadline (``within``) runs in a worker (daemon threads: a hung request
    never holds up the end of the process); its caller stops waiting at the
    deadline (``Late``) and its answer is dropped."""

    def __init__(self, where: str, probe: Callable[[], None], workers: int):
        self.where = where
        self._probe = probe
        self._down_until = 0.0          # 0: up; else down, not probed before then (monotonic)
        self._answered = False          # it answered once: an outage is worth a log line
        self._probing = False
        self._lock = lockorder.lock("s3 endpoint")
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._workers = workers
        self._started = 0

    @property
    def down(self) -> bool:
        """Known down (the last request failed, no probe found it back since)."""
        return self._down_until != 0.0

    def up(self) -> bool:
        """May a request go to it now? When down, starts a probe if one is due; never waits."""
        if not self._down_until:
            return True
        with self._lock:
            if self._probing or time.monotonic() < self._down_until:
                return False
            self._probing = True
        threading.Thread(target=self._ask, name="webfs-endpoint-probe", daemon=True).start()
        return False

    def _ask(self) -> None:
        try:
            self._probe()
        except Exception:
            with self._lock:
                self._down_until = time.monotonic() + DOWN_SECONDS
                self._probing = False
            return
        with self._lock:
            self._down_until = 0.0
            self._probing = False
        log.warning("%s: endpoint answers again", self.where)

    def failed(self, why: str) -> None:
        """A request found it unreachable: down from now (said once per outage,
        and only of an endpoint that answered before: one that never did is
        reported by whoever asked, mkfs or mount)."""
        with self._lock:
            first = not self._down_until and self._answered
            self._down_until = time.monotonic() + DOWN_SECONDS
        if first:
            log.error("%s: endpoint down (%s); reads come from parity, writes go to other disks",
                      self.where, why)

    def answered(self) -> None:
        self._answered = True

    def within(self, seconds: float, request: Callable):
        """``request()``'s answer, or ``Late`` after ``seconds`` (the request
        goes on in a worker and its answer is dropped)."""
        future = concurrent.futures.Future()
        with self._lock:
            if self._started < self._workers:
                self._started += 1
                threading.Thread(target=self._work, name="webfs-endpoint-read", daemon=True).start()
        self._jobs.put((future, request))
        try:
            return future.result(seconds)
        except concurrent.futures.TimeoutError:
            raise Late(f"no answer within {seconds:g} s") from None

    def _work(self) -> None:
        while True:
            future, request = self._jobs.get()
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(request())
            except BaseException as exc:
                future.set_exception(exc)


class S3Backend(Backend):
    """A disk in a bucket (or a prefix of one); ``meta/`` in a local state directory."""

    location: str = ""          # plain attributes here, not the base class's properties
    domain: str = ""
    bounded = False

    def __init__(self, url: DiskURL):
        # No credentials must not mean a probe of the EC2 instance metadata
        # address (a second's wait, and traffic off this machine) unless asked for.
        os.environ.setdefault("AWS_EC2_METADATA_DISABLED", "true")
        self.url = url
        self.location = str(url)
        self.domain = url.domain
        self.root = state_dir(url)
        self.local = LocalBackend(self.root)
        self._requests = _setting("s3_requests", DEFAULT_REQUESTS)
        self._slots = lockorder.semaphore("s3 requests", self._requests)
        self._keys = _credentials(url)
        self._clients_lock = lockorder.lock("s3 clients")
        self._objects = None                        # the obstore S3Store (object requests)
        self._buckets = None                        # boto3 clients (bucket requests), made when needed
        self._cache: collections.OrderedDict[str, bytes] = collections.OrderedDict()
        self._cache_bytes = 0
        self._cache_limit = _setting("block_cache", DEFAULT_CACHE)
        self._cache_lock = lockorder.lock("s3 cache")
        self.endpoint = Endpoint(self.location, self._probe, self._requests)
        self._published: dict[str, tuple] = {}      # meta/ file -> its stamp when last copied
        self.fetched = False                        # identity and meta/ brought from the bucket
        self.made = False                           # a new disk (create()): ours is the only side
        # The bucket's mount lease (webfs.locks.BucketLease) while this process
        # holds it: meta/ is copied to the bucket only under it, or on a disk just made.
        self.lease = None
        # Half the requests at most for uploads: reads keep the other half.
        self.staging = Staging(os.path.join(self.root, STAGING), self._put, max(1, self._requests // 2),
                               _setting("s3_staging", DEFAULT_STAGING), self.location)

    def _object_store(self):
        """obstore's S3Store for this disk (made at the first request): its own
        timeouts and retries (two attempts), keys from the s3_credentials file
        or botocore's chain."""
        with self._clients_lock:
            if self._objects is None:
                from obstore.store import S3Store
                if self._keys:
                    keys = {"access_key_id": self._keys["aws_access_key_id"],
                            "secret_access_key": self._keys["aws_secret_access_key"],
                            **({"token": self._keys["aws_session_token"]} if "aws_session_token" in self._keys else {})}
                else:
                    import boto3
                    from obstore.auth.boto3 import Boto3CredentialProvider
                    try:
                        keys = {"credential_provider": Boto3CredentialProvider(boto3.session.Session())}
                    except ValueError:
                        raise NoCredentials() from None
                self._objects = S3Store(
                    self.url.bucket, prefix=self.url.prefix or None, endpoint=self.url.endpoint,
                    region=os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1",
                    virtual_hosted_style_request=False,
                    client_options={"allow_http": self.url.endpoint.startswith("http:"),
                                    "connect_timeout": datetime.timedelta(seconds=CONNECT_TIMEOUT),
                                    "timeout": datetime.timedelta(seconds=READ_TIMEOUT),
                                    "pool_max_idle_per_host": str(self._requests)},
                    retry_config={"max_retries": ATTEMPTS - 1,
                                  "retry_timeout": datetime.timedelta(seconds=READ_TIMEOUT * ATTEMPTS),
                                  "backoff": {"init_backoff": datetime.timedelta(milliseconds=100),
                                              "max_backoff": datetime.timedelta(seconds=1)}},
                    **keys)
            return self._objects

    def _bucket_clients(self):
        """boto3 clients for what obstore does not do: HEAD and CREATE of the
        bucket (the normal one, and a probe with a short timeout and no retry)."""
        with self._clients_lock:
            if self._buckets is None:
                import boto3
                from botocore.config import Config as BotoConfig
                session = boto3.session.Session()

                def client(read_timeout: float, attempts: int):
                    return session.client(
                        "s3", endpoint_url=self.url.endpoint, region_name=session.region_name or "us-east-1",
                        config=BotoConfig(connect_timeout=CONNECT_TIMEOUT, read_timeout=read_timeout,
                                          retries={"total_max_attempts": attempts, "mode": "standard"},
                                          s3={"addressing_style": "path"}),
                        **self._keys)
                self._buckets = (client(READ_TIMEOUT, ATTEMPTS), client(CONNECT_TIMEOUT, 1))
            return self._buckets

    def __repr__(self) -> str:
        return f"S3Backend({self.location!r})"

    # -- requests ------------------------------------------------------------

    def _call(self, path: str, request, deadline: Optional[float] = None):
        """One request (``request()`` does it), bounded per disk; the client's
        errors become one-line OSErrors naming the disk. One with a
        ``deadline`` (a read) not answered by then fails (the endpoint is down
        from then) while it goes on in the background."""
        self._check_up(path)
        try:
            if deadline is not None:
                answer = self.endpoint.within(deadline, lambda: self._slotted(request))
            else:
                answer = self._slotted(request)
        except Late as exc:
            self.endpoint.failed(str(exc))
            raise EndpointDown(errno.EHOSTDOWN, f"endpoint unreachable ({exc})", f"{self.location}/{path}") from None
        except Exception as exc:
            error = self._error(exc, path)
            if error is None:
                raise
            if isinstance(error, EndpointDown):
                self.endpoint.failed(error.strerror)    # the client has retried already
            raise error from None
        self.endpoint.answered()
        return answer

    def _slotted(self, request):
        with self._slots:
            return request()

    def _bucket_call(self, op: str, path: str = ""):
        """HEAD or CREATE of the bucket, through boto3."""
        client = self._bucket_clients()[0]
        return self._call(path, lambda: getattr(client, op)(Bucket=self.url.bucket))

    def _error(self, exc: Exception, path: str) -> Optional[OSError]:
        """The OSError a client's exception means (None: not a client's)."""
        where = f"{self.location}/{path}" if path else self.location
        from obstore.exceptions import (AlreadyExistsError, BaseError, NotFoundError, PermissionDeniedError,
                                        PreconditionError, UnauthenticatedError)
        if isinstance(exc, NotFoundError):
            return FileNotFoundError(errno.ENOENT, "no such object", where)
        if isinstance(exc, (AlreadyExistsError, PreconditionError)):    # a PUT with If-None-Match: *
            return FileExistsError(errno.EEXIST, "the object is there already", where)
        if isinstance(exc, (PermissionDeniedError, UnauthenticatedError)):
            return PermissionError(errno.EACCES, "access denied (check the S3 credentials)", self.location)
        if isinstance(exc, BaseError):
            # obstore says only in words whether the server answered.
            status = re.search(r"status code: (\d{3})", str(exc))
            if status is None:
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                cause = "timed out" if "timed out" in first.lower() else "no answer"
                return EndpointDown(errno.EHOSTDOWN, f"endpoint unreachable ({cause})", where)
            if status.group(1) == "416":
                return OSError(errno.EINVAL, "offset past the end", where)
            return OSError(errno.EIO, f"S3 error {status.group(1)}", where)
        from botocore.exceptions import (BotoCoreError, ClientError, NoCredentialsError,
                                         PartialCredentialsError)
        if isinstance(exc, ClientError):
            return self._client_error(exc, path)
        if isinstance(exc, (NoCredentials, NoCredentialsError, PartialCredentialsError)):
            return PermissionError(errno.EACCES, "no S3 credentials (set AWS_ACCESS_KEY_ID and "
                                   "AWS_SECRET_ACCESS_KEY, write ~/.aws/credentials, or give "
                                   "-o s3_credentials=FILE)", self.location)
        if isinstance(exc, BotoCoreError):
            return EndpointDown(errno.EHOSTDOWN, f"endpoint unreachable ({type(exc).__name__})", where)
        return None

    def _probe(self) -> None:
        """Does the endpoint answer (after an outage)? A HEAD of the bucket with a
        short timeout and no retry; raises if not (``Endpoint`` asks, in a thread)."""
        self._bucket_clients()[1].head_bucket(Bucket=self.url.bucket)

    def _client_error(self, exc, path: str) -> OSError:
        code = str(exc.response.get("Error", {}).get("Code", ""))
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        where = f"{self.location}/{path}" if path else self.location
        if code in ("NoSuchKey", "404", "NotFound") or (status == 404 and code != "NoSuchBucket"):
            return FileNotFoundError(errno.ENOENT, "no such object", where)
        if code == "NoSuchBucket":
            return FileNotFoundError(errno.ENOENT, f"no bucket {self.url.bucket}", self.location)
        if status == 403 or code in ("AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "403"):
            return PermissionError(errno.EACCES, "access denied (check the S3 credentials)", self.location)
        if code in ("InvalidRange",):
            return OSError(errno.EINVAL, "offset past the end", where)
        return OSError(errno.EIO, f"S3 error {code or status}", where)

    def _get(self, path: str, offset: int = 0, size: int = -1) -> bytes:
        import obstore
        options = {}
        if offset or size >= 0:
            if size == 0:
                return b""
            options["range"] = (offset, offset + size) if size >= 0 else {"offset": offset}
        try:
            # The deadline is the answer's start: a large object's body takes its time.
            answer = self._call(path, lambda: obstore.get(self._object_store(), path, options=options),
                                self._deadline(path))
            return bytes(self._call(path, answer.bytes))
        except OSError as exc:
            if exc.errno == errno.EINVAL:
                return b""
            raise

    def _put(self, path: str, data: bytes) -> None:
        import obstore
        self._forget(path)
        self._call(path, lambda: obstore.put(self._object_store(), path, data, use_multipart=False))
        if not self._is_local(path):
            # Write-through: a parity file is read back at the next member's XOR,
            # a block at its next reference (Refs): no GET for either.
            self._remember(path, bytes(data))

    def _delete(self, path: str) -> None:
        import obstore
        self._call(path, lambda: obstore.delete(self._object_store(), path))
        self._forget(path)

    def _head(self, path: str) -> int:
        import obstore
        return int(self._call(path, lambda: obstore.head(self._object_store(), path),
                              self._deadline(path))["size"])

    def _deadline(self, path: str) -> Optional[float]:
        """How long a read of this object may take to start answering: blocks and
        parity files have redundancy to fall back on (HEDGE_SECONDS); the rest
        (identity, meta/, the lease) waits for the client's own timeouts."""
        return HEDGE_SECONDS if self._is_staged(path) else None

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

    @staticmethod
    def _is_staged(path: str) -> bool:
        return path.startswith(STAGED)

    def _check_up(self, path: str) -> None:
        """No request to an endpoint known down: reads go through parity, writes to other disks."""
        if not self.endpoint.up():
            raise EndpointDown(errno.EHOSTDOWN, "endpoint down (asked again every few seconds)",
                               f"{self.location}/{path}")

    def read(self, path: str, offset: int = 0, size: int = -1) -> bytes:
        if self._is_local(path) or path in IDENTITY:
            return self.local.read(path, offset, size)
        if path == LEASE:
            return self._get(path, offset, size)    # another machine may have changed it
        data = self.staging.read(path) if self._is_staged(path) else None
        if data is None:
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
        if self._is_staged(path):
            self._check_up(path)
            self._forget(path)
            return self.staging.put(path, data, fsync)      # PUT behind (see staging)
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
        import obstore
        self._call(path, lambda: obstore.put(self._object_store(), path, bytes(data), mode="create",
                                             use_multipart=False))

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
        data = self._cached(path)
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
        for name in heapq.merge(self._list_remote(prefix), staged):
            if name != last:
                yield name
            last = name

    def _list_remote(self, prefix: str, limit: int = 0, deadline: Optional[float] = None) -> Iterator[str]:
        """Names below a prefix (a directory: "" or ending in "/"), page by page;
        the first ``limit`` only, if given; each page within ``deadline``."""
        import obstore
        pages = None

        def next_page():
            nonlocal pages
            if pages is None:       # no request yet: the first comes with the first page
                pages = iter(obstore.list(self._object_store(), prefix.rstrip("/") or None,
                                          chunk_size=limit or 1000))
            return next(pages, None)
        while True:
            page = self._call(prefix, next_page, deadline)
            if not page:
                return
            for item in page:
                yield item["path"]
            if limit:
                return

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
            next(self._list_remote(IDENTITY[0] + "/", limit=1, deadline=PRESENT_SECONDS), None)
        except OSError:
            return False
        return True

    def comes_back(self) -> bool:
        return True

    def known_present(self) -> bool:
        """Reachable as far as the last request knows (asks nothing: status)."""
        return not self.endpoint.down

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
        another machine took over, must not replace that machine's copy. First
        every staged object goes to the bucket: the copy must name no object
        the bucket lacks."""
        if self.lease is None and not self.made:
            return
        if self.lease is not None and not self.lease.held():
            log.error("%s: the lease was taken over by another mount; meta/ is not copied to the bucket",
                      self.location)
            return
        self.staging.drain()
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
        self.staging.close()

    # -- opening, and making a new disk -------------------------------------------

    def fetch(self) -> None:
        """Upload what a killed daemon left staged; then bring the identity
        files, and meta/ when ours is missing or older, from the bucket."""
        replayed = 0 if self._locked_elsewhere() else self.staging.replay()
        if replayed:
            self.staging.drain()
            log.warning("%s: %d objects left staged by an earlier mount are uploaded", self.location, replayed)
        os.makedirs(self.root, mode=0o700, exist_ok=True)     # private, as a disk root is (webfs.archive)
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
            self._bucket_call("head_bucket")
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
            self._head(path)
            return True
        except FileNotFoundError:
            return False

    def create(self) -> None:
        """Make the bucket if it is not there, and an empty state directory."""
        try:
            self._bucket_call("head_bucket")
        except FileNotFoundError:
            self._bucket_call("create_bucket")
        self.fetched = self.made = True             # a new disk: ours is the only side
        import shutil
        shutil.rmtree(self.root, ignore_errors=True)     # a state directory of an earlier disk here
        os.makedirs(self.root, mode=0o700, exist_ok=True)
        os.chmod(self.root, 0o700)                       # whatever the umask: private, as a disk root is
        os.makedirs(os.path.join(self.root, "meta"), exist_ok=True)


_OPEN: dict[str, S3Backend] = {}
_OPEN_LOCK = lockorder.lock("s3 open")


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
