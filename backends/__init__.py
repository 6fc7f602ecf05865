"""Where a disk lives: one small interface, and the backends that implement it.

Installed as ``webfs.backends``. Every path is relative to the disk's root
and uses '/'. A backend knows nothing of blocks or parity: it reads and
writes files. ``open_backend`` turns a disk's location into a backend.
"""
from __future__ import annotations

import os
import re

from typing import Optional

from .base import Backend
from .options import BackendOptions


def is_url(location: str) -> bool:
    """Is this disk location a URL (s3://, s3+http://) rather than a directory?
    (Without loading the S3 backend: every command asks.)"""
    return isinstance(location, str) and re.match(r"^s3(\+http)?://", location) is not None


def normalize(location: str) -> str:
    """A disk location as webfs.conf records it: a canonical URL, or an absolute path.
    ValueError (naming the location) for a URL that cannot be a disk."""
    if is_url(location):
        from .s3 import DiskURL
        return str(DiskURL.parse(location))
    return os.path.abspath(location)


def open_backend(location: str, delay: float = 0.0, options: Optional[BackendOptions] = None) -> Backend:
    """The backend for a disk location: a local directory, or a disk URL
    (``s3://HOST:PORT/BUCKET[/PREFIX]``, ``s3+http://...``) opened with
    ``options`` (None: the defaults)."""
    if is_url(location):
        from .s3 import open_s3
        return open_s3(location, options)
    from .local import LocalBackend
    return LocalBackend(os.path.abspath(location), delay=delay)

__all__ = ["Backend", "BackendOptions", "is_url", "normalize", "open_backend"]
