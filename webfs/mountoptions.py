"""Mount options: what ``-o`` says, as mount(8) gives it (comma-separated,
key or key=value), parsed once into ``MountOptions`` by the command line
and handed to the mount (``webfs.mountstart``) and its daemon.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from .backends.options import ENV as S3_OPTIONS
from .errors import ArchiveError
from .heat import DEFAULT_K
from .manifest import JOURNAL_LIMIT


@dataclass
class MountOptions:
    read_only: bool = False
    allow_other: bool = False
    store_mode: Optional[str] = None
    sync: bool = False
    max_block: Optional[int] = None
    manifest_interval: float = 300.0
    journal_limit: int = JOURNAL_LIMIT           # JOURNAL bytes that start a checkpoint (at least)
    cool_interval: float = 0.0
    piece_cache: int = 128 << 20                 # bytes of decoded pieces kept for readers
    read_ahead_kb: int = 0                       # the kernel's read-ahead on the mount (0: its default, 128)
    heat_k: int = DEFAULT_K                      # reads per group in the heat estimate
    disk_delay: dict[int, float] = field(default_factory=dict)   # simulated service time per I/O
    fuse_debug: bool = False
    take_lease: bool = False                     # S3 disks: take over a stale lease (webfs.locks)
    machine_renew: float = 2.0                   # PostgreSQL catalog: seconds between renewals of the mount's row
    extra: list[str] = field(default_factory=list)
    backend: dict[str, str] = field(default_factory=dict)   # S3 disks: s3_credentials, state_dir, ...

    @classmethod
    def parse(cls, text: str) -> "MountOptions":
        """Options as mount(8) gives them: comma-separated, key or key=value."""
        from .archive import STORE_MODES
        opts = cls()
        last = ""
        for item in filter(None, (text or "").split(",")):
            key, sep, value = item.partition("=")
            if last == "disk_delay" and not sep and ":" in key:
                key, value = "disk_delay", item          # disk_delay=0:0.01,1:0.01 goes on
            last = key
            if key == "ro":
                opts.read_only = True
            elif key == "rw":
                opts.read_only = False
            elif key == "allow_other":
                opts.allow_other = True
            elif key == "sync":
                opts.sync = True
            elif key == "store_mode":
                if value not in STORE_MODES:
                    raise ArchiveError(f"store_mode must be one of {', '.join(STORE_MODES)}, not {value!r}")
                opts.store_mode = value
            elif key in ("manifest_interval", "cool_interval", "machine_renew"):
                try:
                    setattr(opts, key, float(value))
                except ValueError:
                    raise ArchiveError(f"{key} takes a number of seconds, not {value!r}") from None
                if opts.machine_renew < 0.1:
                    raise ArchiveError("machine_renew must be 0.1 seconds or more")
            elif key in ("piece_cache", "heat_k", "read_ahead_kb", "journal_limit"):
                try:
                    setattr(opts, key, int(value))
                except ValueError:
                    raise ArchiveError(f"{key} takes a whole number, not {value!r}") from None
                least = 2 if key == "heat_k" else 0
                if key != "journal_limit" and getattr(opts, key) < least:
                    raise ArchiveError(f"{key} must be {least} or more, not {value!r}")
            elif key == "disk_delay":
                try:
                    index, seconds = value.split(":")
                    opts.disk_delay[int(index)] = float(seconds)
                except ValueError:
                    raise ArchiveError(f"disk_delay takes INDEX:SECONDS[,INDEX:SECONDS...], not {value!r}") from None
                if int(index) < 0 or not opts.disk_delay[int(index)] >= 0:
                    raise ArchiveError(f"disk_delay takes a disk index and seconds of 0 or more, not {value!r}")
            elif key == "debug":
                opts.fuse_debug = True
            elif key == "take_lease":
                opts.take_lease = True
            elif key in S3_OPTIONS:
                opts.backend[key] = value
            elif key in ("defaults", "auto", "noauto", "user", "nouser", "nofail", "_netdev",
                         "exec", "noexec", "suid", "nosuid", "dev", "nodev", "atime", "noatime",
                         "relatime", "async"):
                pass                     # mount(8) and fstab words that are not ours
            elif key.startswith("x-"):
                pass
            else:
                raise ArchiveError(f"unknown mount option {item!r}")
        return opts
