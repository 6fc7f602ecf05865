"""The settings of S3 disks and their leases, as one value (``BackendOptions``).

The command line builds it once at its start (``from_env`` on the
environment it was given, then ``with_settings`` for a mount's ``-o``
options and ``--take-lease``) and passes it down: to ``open_archive`` and
``Archive.open`` (kept as ``archive.backend_options``), to every backend
they open, and to the lease; the WARC readers (``webfs.warc.DiskTree``)
and a mount's daemon are given it too. There is no process-wide copy: what
is opened without options (a program using webfs as a library) gets the
defaults. Nothing below the command line reads or writes the environment
for these.

One thing still reads the environment on its own: botocore's credential
chain (``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``,
``AWS_PROFILE``, ``AWS_SHARED_CREDENTIALS_FILE``, ``AWS_CONFIG_FILE``), used
when no s3_credentials file is named: that is the user's chain, as every
AWS tool reads it; and obstore's ``S3Store``, which reads ``AWS_*``
variables for what webfs does not give it (what it gives, the endpoint,
region, keys, timeouts and retries, wins). The region and whether the EC2
instance metadata may be asked are read here and given to both clients.
"""
from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Mapping, Optional

DEFAULT_REQUESTS = 16                   # requests at once to one disk
DEFAULT_CACHE = 64 << 20                # bytes of recently read objects kept
DEFAULT_STAGING = 256 << 20             # bytes staged for upload before writers wait
DEFAULT_REGION = "us-east-1"
DEFAULT_LEASE_RENEW = 60.0              # seconds between renewals of an S3 disk's lease
MIN_LEASE_RENEW = 0.1

# The mount option (-o KEY=VALUE) and the environment variable of each setting.
ENV = {"s3_credentials": "WEBFS_S3_CREDENTIALS", "state_dir": "WEBFS_STATE_DIR",
       "block_cache": "WEBFS_BLOCK_CACHE", "s3_requests": "WEBFS_S3_REQUESTS",
       "s3_staging": "WEBFS_S3_STAGING", "catalog_password_file": "WEBFS_CATALOG_PASSWORD_FILE"}
LEASE_RENEW_ENV = "WEBFS_LEASE_RENEW"
TAKE_LEASE_ENV = "WEBFS_TAKE_LEASE"
_COUNTS = ("block_cache", "s3_requests", "s3_staging")
_PATHS = ("s3_credentials", "state_dir", "catalog_password_file")


@dataclass(frozen=True)
class BackendOptions:
    """What an S3 disk is opened with: ``s3_credentials`` (an AWS credentials
    file, else botocore's chain), ``state_dir`` (where meta/ lives; None:
    ``cache_home``/webfs), the cache, request and staging sizes, the region,
    whether a missing credential may be asked of the EC2 instance metadata,
    and the lease's renewal period and whether a stale one may be taken."""
    s3_credentials: Optional[str] = None
    state_dir: Optional[str] = None
    cache_home: str = os.path.expanduser("~/.cache")
    block_cache: int = DEFAULT_CACHE
    s3_requests: int = DEFAULT_REQUESTS
    s3_staging: int = DEFAULT_STAGING
    region: str = DEFAULT_REGION
    ec2_metadata: bool = False
    lease_renew: float = DEFAULT_LEASE_RENEW
    take_lease: bool = False
    catalog_password_file: Optional[str] = None     # a PostgreSQL catalog's password (else libpq's places)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> "BackendOptions":
        """The options the variables of ``env`` (the command line's environment)
        set; ValueError naming the variable for a value that is not one."""
        settings = {key: env[name] for key, name in ENV.items() if env.get(name)}
        try:
            options = cls(cache_home=env.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"),
                          region=env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or DEFAULT_REGION,
                          ec2_metadata=env.get("AWS_EC2_METADATA_DISABLED", "true").lower() != "true",
                          lease_renew=_renew(env.get(LEASE_RENEW_ENV, "")),
                          take_lease=env.get(TAKE_LEASE_ENV, "") not in ("", "0"))
        except ValueError:
            raise ValueError(f"{LEASE_RENEW_ENV}={env.get(LEASE_RENEW_ENV)!r}: not a number of seconds") from None
        for key, value in settings.items():
            try:
                options = options.with_settings({key: value})
            except ValueError as exc:
                raise ValueError(str(exc).replace(key, name_of(key), 1)) from None
        return options

    def with_settings(self, settings: Mapping[str, str]) -> "BackendOptions":
        """These options with mount options (``s3_credentials=FILE``...) applied;
        ValueError for a value that is not one."""
        changes: dict[str, object] = {}
        for key, value in settings.items():
            if key in _COUNTS:
                if not (value.isdigit() and (int(value) > 0 or key != "s3_requests")):
                    raise ValueError(f"{key} takes a whole number"
                                     f"{' above 0' if key == 's3_requests' else ''}, not {value!r}")
                changes[key] = int(value)
            elif key in _PATHS:
                changes[key] = os.path.abspath(value)
            else:
                raise ValueError(f"{key}: not a setting of S3 disks")
        return dataclasses.replace(self, **changes)

    def taking_lease(self) -> "BackendOptions":
        """These options with ``--take-lease`` given."""
        return dataclasses.replace(self, take_lease=True)

    def state_base(self) -> str:
        """The directory under which each S3 disk's state directory is made."""
        return self.state_dir or os.path.join(self.cache_home, "webfs")


def name_of(key: str) -> str:
    """The environment variable of a setting (``s3_requests``: WEBFS_S3_REQUESTS)."""
    return ENV[key]


def _renew(text: str) -> float:
    return max(float(text), MIN_LEASE_RENEW) if text else DEFAULT_LEASE_RENEW
