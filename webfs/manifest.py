"""Plain-text records of the namespace on every disk: MANIFEST and JOURNAL.

``meta/MANIFEST`` lists every name of the archive, one per line::

    <sig>[~n][,<sig>…]<TAB><size><TAB><mode octal><TAB><mtime><TAB><path>

(``-`` for directories and empty files; paths escape tab, newline and
backslash as ``\\t``, ``\\n``, ``\\\\``; mtime is seconds with nine decimals).
``meta/JOURNAL`` holds the namespace changes since that MANIFEST was written:
``+`` an entry (the five fields), ``-`` a path removed, ``>`` a rename,
``<>`` two paths exchanged. The same files are on every disk, so any disk
that survives tells every name, and a person (or tools/webfs-recover) can
rebuild the tree without webfs.
"""
from __future__ import annotations

import logging
import os
import stat
import threading
from typing import TYPE_CHECKING, Optional

from .catalog import BlockRow
from .namespace import ROOT_INODE

if TYPE_CHECKING:
    from .archive import Archive
    from .namespace import Inode, Namespace

log = logging.getLogger(__name__)

MANIFEST = "meta/MANIFEST"
JOURNAL = "meta/JOURNAL"


def escape_path(path: bytes) -> bytes:
    return path.replace(b"\\", b"\\\\").replace(b"\t", b"\\t").replace(b"\n", b"\\n")


def unescape_path(text: bytes) -> bytes:
    out, i = bytearray(), 0
    while i < len(text):
        c = text[i:i + 1]
        if c == b"\\" and i + 1 < len(text):
            out += {b"t": b"\t", b"n": b"\n", b"\\": b"\\"}.get(text[i + 1:i + 2], text[i + 1:i + 2])
            i += 2
        else:
            out += c
            i += 1
    return bytes(out)


def format_mtime(ns: int) -> str:
    return f"{ns // 10**9}.{ns % 10**9:09d}"


def entry(rows: list[BlockRow], node: "Inode", path: bytes) -> bytes:
    """One MANIFEST line (without the newline)."""
    return entry_of(",".join(r.block_name for r in rows), node, path)


def entry_of(sigs: str, node: "Inode", path: bytes) -> bytes:
    return b"\t".join([(sigs or "-").encode(), str(node.size).encode(), f"{node.mode:o}".encode(),
                       format_mtime(node.mtime_ns).encode(), escape_path(path)])


class Journal:
    """Namespace changes, buffered and appended to meta/JOURNAL on every present
    disk at each catalog commit (so a killed daemon loses nothing it committed)."""

    def __init__(self, archive: "Archive"):
        self.archive = archive
        self.lines: list[bytes] = []
        self.lock = threading.Lock()
        self.namespace: Optional["Namespace"] = None
        self._fds: dict[int, int] = {}          # disk -> open JOURNAL (appends stay cheap)

    def record(self, op: str, node: Optional["Inode"], path: bytes, new_path: bytes = b"",
               rows: Optional[list[BlockRow]] = None) -> None:
        if op == "+":
            if rows is None:
                rows = [] if stat.S_ISDIR(node.mode) else self.namespace.contents(node.id)
            line = b"+\t" + entry(rows, node, path)
        elif op in (">", "<>"):
            line = op.encode() + b"\t" + escape_path(path) + b"\t" + escape_path(new_path)
        else:
            line = b"-\t" + escape_path(path)
        with self.lock:
            self.lines.append(line + b"\n")

    def flush(self, fsync: bool = False) -> None:
        with self.lock:
            data, self.lines = b"".join(self.lines), []
        if not data:
            return
        for vol in self.archive.volumes.values():
            try:
                fd = self._fds.get(vol.index)
                if fd is None:
                    fd = self._fds[vol.index] = vol.backend.open_append(JOURNAL)
                os.write(fd, data)
                if fsync:
                    os.fsync(fd)
            except OSError as exc:
                log.warning("disk %d: cannot append to %s: %s", vol.index, JOURNAL, exc)

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds = {}

    def checkpoint(self, namespace: "Namespace") -> int:
        """Write a new MANIFEST on every disk and start an empty JOURNAL.
        The caller holds the catalog lock, so no change slips between the two."""
        data = manifest_of(namespace)
        self.replace(data, {})
        return data.count(b"\n")

    def sizes(self) -> dict[int, int]:
        """Bytes in JOURNAL on each disk now (the caller has flushed, under the catalog lock)."""
        sizes = {}
        for vol in self.archive.volumes.values():
            try:
                sizes[vol.index] = vol.backend.size(JOURNAL)
            except OSError:
                sizes[vol.index] = 0
        return sizes

    def replace(self, manifest: bytes, covered: dict[int, int]) -> None:
        """Write the MANIFEST on every disk, and keep of each JOURNAL only what
        came after the first ``covered`` bytes (changes the MANIFEST does not hold)."""
        self.flush()
        self.close()            # the JOURNAL files are replaced: appends reopen them
        for vol in self.archive.volumes.values():
            try:
                tail = b""
                if covered.get(vol.index) is not None:
                    try:
                        tail = vol.backend.read(JOURNAL, covered[vol.index])
                    except FileNotFoundError:
                        pass
                vol.backend.write_atomic(MANIFEST, manifest, fsync=True)
                vol.backend.write_atomic(JOURNAL, tail, fsync=True)
            except OSError as exc:
                log.warning("disk %d: cannot write %s: %s", vol.index, MANIFEST, exc)


def manifest_of(namespace: "Namespace") -> bytes:
    """Every name of the namespace as MANIFEST lines, the root first, parents before children."""
    lines = [entry([], namespace.get(ROOT_INODE), b"/") + b"\n"]
    chunk: list = []

    def emit():
        sigs = namespace.block_names([node.id for _, node in chunk if not stat.S_ISDIR(node.mode)])
        lines.extend(entry_of(sigs.get(node.id, ""), node, path) + b"\n" for path, node in chunk)
        chunk.clear()
    for item in namespace.walk():
        chunk.append(item)
        if len(chunk) >= 1000:
            emit()
    emit()
    return b"".join(lines)
