"""The MANIFEST of a disk's meta/ as tests read and alter it: gzip'd
(meta/MANIFEST.gz, what webfs writes) or plain (meta/MANIFEST, disks written
before), whichever the disk holds (webfs-format(5))."""
from __future__ import annotations

import gzip
from pathlib import Path
from typing import Optional

FORMS = ("MANIFEST.gz", "MANIFEST")


def manifest_file(meta: Path) -> Optional[Path]:
    """The MANIFEST in the directory ``meta``, either form, or None."""
    return next((meta / f for f in FORMS if (meta / f).exists()), None)


def read_manifest(meta: Path) -> bytes:
    """Its plain lines (FileNotFoundError when meta/ has none)."""
    path = manifest_file(meta)
    if path is None:
        raise FileNotFoundError(meta / "MANIFEST.gz")
    data = path.read_bytes()
    return gzip.decompress(data) if path.suffix == ".gz" else data


def write_manifest(meta: Path, plain: bytes) -> None:
    """Replace its lines, in the form it has."""
    path = manifest_file(meta) or meta / FORMS[0]
    path.write_bytes(gzip.compress(plain) if path.suffix == ".gz" else plain)


def append_manifest(meta: Path, plain: bytes) -> None:
    """Append lines, as a writer cut short or hostile might: a gzip'd one gets
    another gzip member (zcat and webfs read the members one after another)."""
    path = manifest_file(meta)
    with open(path, "ab") as f:
        f.write(gzip.compress(plain) if path.suffix == ".gz" else plain)
