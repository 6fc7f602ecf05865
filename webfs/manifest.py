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

**Checkpoints.** A MANIFEST and the JOURNAL beside it are two files, replaced
one after the other, so a crash between the two leaves a new MANIFEST with
the old JOURNAL, whose lines the MANIFEST already holds; replaying an
exchange (``<>``) twice undoes it. So each checkpoint has a number N: first
the line ``#<TAB>checkpoint<TAB>N`` is appended to every JOURNAL (and
fsynced), then every MANIFEST is written starting with the same line, then
every JOURNAL is cut to that line and what follows it. A reader replays only
the JOURNAL lines after the last marker that matches its MANIFEST's
(``journal_after_checkpoint``); without a matching marker, or on disks
written before checkpoints were numbered, it replays the whole JOURNAL as
before. Readers that do not know ``#`` lines skip them.
"""
from __future__ import annotations

import logging
import os
import stat
import threading
from typing import TYPE_CHECKING, Optional

from . import testkill
from .catalog import BlockRow
from .namespace import ROOT_INODE

if TYPE_CHECKING:
    from .archive import Archive
    from .namespace import Inode, Namespace

log = logging.getLogger(__name__)

MANIFEST = "meta/MANIFEST"
JOURNAL = "meta/JOURNAL"
CHECKPOINT_META = "checkpoint"          # catalog meta key: the last checkpoint number used


def checkpoint_line(n: int) -> bytes:
    """The marker of checkpoint n: the MANIFEST's first line, and a JOURNAL line."""
    return b"#\tcheckpoint\t%d\n" % n


def checkpoint_of(manifest: bytes) -> Optional[int]:
    """The checkpoint number a MANIFEST starts with, or None (written before numbering)."""
    first = manifest[:64].split(b"\n", 1)[0]
    fields = first.split(b"\t")
    if len(fields) == 3 and fields[0] == b"#" and fields[1] == b"checkpoint" and fields[2].isdigit():
        return int(fields[2])
    return None


def journal_after_checkpoint(manifest: bytes, journal: bytes) -> bytes:
    """The lines of a JOURNAL that the MANIFEST beside it does not hold: those
    after the last marker of the MANIFEST's checkpoint, or all of them when
    there is no such marker (disks written before checkpoints were numbered)."""
    n = checkpoint_of(manifest)
    if n is None:
        return journal
    marker = checkpoint_line(n)
    at = journal.rfind(b"\n" + marker)
    if at >= 0:
        return journal[at + 1 + len(marker):]
    if journal.startswith(marker):
        return journal[len(marker):]
    return journal


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

    def take(self) -> bytes:
        """The lines recorded so far, taken out (the store does this at each
        commit, under the catalog lock, and appends them right after)."""
        with self.lock:
            data, self.lines = b"".join(self.lines), []
        return data

    def append(self, data: bytes) -> None:
        self._append(data, False)

    def flush(self, fsync: bool = False) -> None:
        data = self.take()
        if data:
            self._append(data, fsync)

    def _append(self, data: bytes, fsync: bool) -> None:
        for vol in self.archive.volumes.values():
            try:
                fd = self._fds.get(vol.index)
                if fd is None:
                    fd = vol.backend.open_append(JOURNAL)
                    # A crash may have cut the last line short: end it, so the
                    # next line is not glued to it.
                    try:
                        end = os.fstat(fd).st_size
                        if end and vol.backend.read(JOURNAL, end - 1, 1) != b"\n":
                            os.write(fd, b"\n")
                    except OSError:
                        os.close(fd)
                        raise
                    self._fds[vol.index] = fd
                os.write(fd, data)
                if fsync:
                    os.fsync(fd)
            except OSError as exc:
                log.warning("disk %d: cannot append to %s: %s", vol.index, JOURNAL, exc)

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds = {}

    def next_checkpoint(self, catalog) -> int:
        """A number no checkpoint of this archive has used: one more than the
        catalog's record and every MANIFEST present. The caller commits."""
        n = int(catalog.get_meta(CHECKPOINT_META) or 0)
        for vol in self.archive.volumes.values():
            try:
                with open(os.path.join(vol.root, MANIFEST), "rb") as f:
                    n = max(n, checkpoint_of(f.read(64)) or 0)
            except OSError:
                pass
        catalog.set_meta(CHECKPOINT_META, str(n + 1))
        return n + 1

    def mark(self, n: int) -> dict[int, int]:
        """Append checkpoint n's marker to every JOURNAL (fsynced) and return
        the bytes each JOURNAL now has: what the new MANIFEST will hold. The
        caller holds the catalog lock and has committed (flushing the lines)."""
        self.flush()
        self._append(checkpoint_line(n), fsync=True)
        testkill.point("checkpoint-after-marker")
        return self.sizes()

    def checkpoint(self, namespace: "Namespace") -> int:
        """Write a new MANIFEST on every disk and start an empty JOURNAL.
        The caller holds the catalog lock, so no change slips between the two."""
        n = self.next_checkpoint(namespace.cat)
        namespace.cat.commit()
        covered = self.mark(n)
        data = manifest_of(namespace)
        self.replace(data, covered, n)
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

    def replace(self, manifest: bytes, covered: dict[int, int], n: Optional[int] = None) -> None:
        """Write the MANIFEST on every disk, and keep of each JOURNAL only what
        came after the first ``covered`` bytes (changes the MANIFEST does not hold).
        With a checkpoint number, both start with its marker (see the module's doc)."""
        marker = b"" if n is None else checkpoint_line(n)
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
                vol.backend.write_atomic(MANIFEST, marker + manifest, fsync=True)
                testkill.point("checkpoint-after-manifest")
                vol.backend.write_atomic(JOURNAL, marker + tail, fsync=True)
                testkill.point("checkpoint-after-journal")
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
