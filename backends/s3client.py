"""The object client of one S3 disk: GET, PUT, DELETE, HEAD and LIST of
objects, HEAD and CREATE of the bucket, each bounded per disk and turned
into one-line OSErrors that name the disk.

obstore (Rust's object_store) does the object requests: a PUT or GET costs a
sixth of boto3's CPU here; boto3 only what obstore lacks (HEAD and CREATE of
a bucket, the probe of a down endpoint, and the credential chain). Both have
short connect and request timeouts and their own retries (``ATTEMPTS``).
Every request asks the endpoint's health first (``webfs.backends.s3endpoint``)
and tells it what happened; one with a deadline is a hedged read.
"""
from __future__ import annotations

import datetime
import errno
import re
from typing import Callable, Iterator, Optional

from ..locks import SYSTEM_CLOCK, Clock
from .s3endpoint import Endpoint, EndpointDown, Late
from .. import lockorder

CONNECT_TIMEOUT = 2.0
READ_TIMEOUT = 10.0
ATTEMPTS = 2


class NoCredentials(Exception):
    """botocore's chain found no credentials for this disk."""


class ObjectClient:
    """Requests to one disk's bucket (or prefix): ``url`` a DiskURL, ``keys``
    from the s3_credentials file (else botocore's chain), at most ``requests``
    at once, each first asking its ``endpoint``'s health (timed by ``clock``)."""

    def __init__(self, url, keys: dict[str, str], requests: int, region: str, ec2_metadata: bool = False,
                 clock: Clock = SYSTEM_CLOCK):
        self.url = url
        self._ec2_metadata = ec2_metadata
        self.location = str(url)
        self._keys = keys
        self._region = region
        self._requests = requests
        self._slots = lockorder.semaphore("s3 requests", requests)
        self._clients_lock = lockorder.lock("s3 clients")
        self._objects = None                        # the obstore S3Store (object requests)
        self._buckets = None                        # boto3 clients (bucket requests), made when needed
        self.endpoint = Endpoint(self.location, self.probe, requests, clock)

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
                    from obstore.auth.boto3 import Boto3CredentialProvider
                    try:
                        keys = {"credential_provider": Boto3CredentialProvider(self._session())}
                    except ValueError:
                        raise NoCredentials() from None
                self._objects = S3Store(
                    self.url.bucket, prefix=self.url.prefix or None, endpoint=self.url.endpoint,
                    region=self._region,
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
                from botocore.config import Config as BotoConfig
                session = self._session()

                def client(read_timeout: float, attempts: int):
                    return session.client(
                        "s3", endpoint_url=self.url.endpoint, region_name=self._region,
                        config=BotoConfig(connect_timeout=CONNECT_TIMEOUT, read_timeout=read_timeout,
                                          retries={"total_max_attempts": attempts, "mode": "standard"},
                                          s3={"addressing_style": "path"}),
                        **self._keys)
                self._buckets = (client(READ_TIMEOUT, ATTEMPTS), client(CONNECT_TIMEOUT, 1))
            return self._buckets

    def _session(self):
        """A boto3 session whose credential chain asks the EC2 instance metadata
        address only when ``ec2_metadata``: else no credentials would mean a
        second's wait and a request off this machine."""
        import boto3
        import botocore.session
        core = botocore.session.Session()
        if not self._ec2_metadata:
            core.get_component("credential_provider").remove("iam-role")
        return boto3.session.Session(botocore_session=core)

    # -- one request ---------------------------------------------------------

    def call(self, path: str, request: Callable, deadline: Optional[float] = None):
        """One request (``request()`` does it), bounded per disk; the client's
        errors become one-line OSErrors naming the disk. One with a
        ``deadline`` (a read) not answered by then fails (the endpoint is down
        from then) while it goes on in the background."""
        self.check_up(path)
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

    def check_up(self, path: str) -> None:
        """No request to an endpoint known down: reads go through parity, writes to other disks."""
        if not self.endpoint.up():
            raise EndpointDown(errno.EHOSTDOWN, "endpoint down (asked again every few seconds)",
                               f"{self.location}/{path}")

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

    # -- the requests ----------------------------------------------------------

    def probe(self) -> None:
        """Does the endpoint answer (after an outage)? A HEAD of the bucket with a
        short timeout and no retry; raises if not (``Endpoint`` asks, in a thread)."""
        self._bucket_clients()[1].head_bucket(Bucket=self.url.bucket)

    def bucket_call(self, op: str, path: str = ""):
        """HEAD or CREATE of the bucket (``op``: head_bucket, create_bucket), through boto3."""
        client = self._bucket_clients()[0]
        return self.call(path, lambda: getattr(client, op)(Bucket=self.url.bucket))

    def get(self, path: str, offset: int = 0, size: int = -1, deadline: Optional[float] = None) -> bytes:
        """An object's bytes (a range of them); past the end: b"". ``deadline``:
        how long its answer may take to start (a large object's body takes its time)."""
        import obstore
        options = {}
        if offset or size >= 0:
            if size == 0:
                return b""
            options["range"] = (offset, offset + size) if size >= 0 else {"offset": offset}
        try:
            answer = self.call(path, lambda: obstore.get(self._object_store(), path, options=options), deadline)
            return bytes(self.call(path, answer.bytes))
        except OSError as exc:
            if exc.errno == errno.EINVAL:
                return b""
            raise

    def put(self, path: str, data: bytes, create: bool = False) -> None:
        """Replace an object whole; ``create``: only if there is none (a
        conditional PUT, ``If-None-Match: *``), else FileExistsError."""
        import obstore
        mode = {"mode": "create"} if create else {}
        self.call(path, lambda: obstore.put(self._object_store(), path, data, use_multipart=False, **mode))

    def delete(self, path: str) -> None:
        """Delete an object (a missing one is not an error in S3)."""
        import obstore
        self.call(path, lambda: obstore.delete(self._object_store(), path))

    def head(self, path: str, deadline: Optional[float] = None) -> int:
        """An object's size; FileNotFoundError if there is none."""
        import obstore
        return int(self.call(path, lambda: obstore.head(self._object_store(), path), deadline)["size"])

    def list(self, prefix: str, limit: int = 0, deadline: Optional[float] = None) -> Iterator[str]:
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
            page = self.call(prefix, next_page, deadline)
            if not page:
                return
            for item in page:
                yield item["path"]
            if limit:
                return
