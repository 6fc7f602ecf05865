"""Plain-text records of the namespace on every disk: MANIFEST and JOURNAL.

``meta/MANIFEST.gz`` (gzip; ``meta/MANIFEST``, plain, on disks written
before) lists every name of the archive, one per line::

    <sig>[~n][,<sig>…]<TAB><size><TAB><mode octal><TAB><mtime><TAB><path>

(``-`` for directories and empty files; paths escape tab, newline and
backslash as ``\\t``, ``\\n``, ``\\\\``; mtime is seconds with nine decimals).
``meta/JOURNAL`` holds the namespace changes since that MANIFEST was written:
``+`` an entry (the five fields), ``-`` a path removed, ``>`` a rename,
``<>`` two paths exchanged. A person (or tools/webfs-recover) can rebuild
the tree from them without webfs.

**Two copies.** The MANIFEST and JOURNAL are kept on two disks, not on every
disk (``record_disks``): the disk that holds the catalog, and the next present
disk after it in index order (cyclically). Losing any one disk leaves one
plain-text copy of every record (and, unless it was the catalog disk, the
catalog too), which is what the archive promises; a copy on every disk of
four cost ~600 B per file at rest for no promise kept. Every present disk has
``meta/RECORDS`` naming the two (``Disks: 0 1``), for a person; the recovery
tools need not read it, since they take the newest MANIFEST of any disk, and
a checkpoint removes the MANIFEST and JOURNAL of every other present disk
(after the two new copies are on their disks), so no stale copy stays
behind. Disks written before this (a copy on every disk) read as before; the
first checkpoint moves them to two copies. When a disk of the two is missing
at a checkpoint the next present disk takes its place.

**Size bound.** The JOURNAL is checkpointed (``on_full``) when it grows past
``limit`` bytes: the larger of ``JOURNAL_LIMIT`` and half the MANIFEST, so the
JOURNAL stays small beside the MANIFEST and the MANIFEST is rewritten at most
once per half its size of new records (the cost stays linear in the changes).
While an import runs (``importing``) the bound is ``IMPORT_SLACK`` times
that, and passing the plain bound is acted on when the import ends: an
import's records go to one checkpoint after it, not to one in its middle
that rewrites the whole MANIFEST and then another (the checkpoint's CPU was
a twentieth of an import-warc's, beside it on two cores).

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

**Compressed.** A checkpoint writes the MANIFEST gzip'd, as
``meta/MANIFEST.gz`` (``zcat`` gives the plain lines), and removes the plain
``meta/MANIFEST`` of the disk after it: two plain copies were 340 B a file
at rest, two gzip'd ones about 80 B. Readers take, per disk, the form with
the higher checkpoint number (``manifest_on``), so disks written before read
as before and the first checkpoint turns them into the new form. A damaged
gzip stream yields the lines before the damage (``gunzip_tolerant``). The
JOURNAL stays plain: it is appended to. Its size bound counts the MANIFEST's
plain bytes, so checkpoints come as often as before.
"""
from __future__ import annotations

import contextlib
import itertools
import logging
import os
import re
import stat
import struct
import zlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterable, Iterator, NamedTuple, Optional, Union

from . import testkill
from .backends.local import TMP_SUFFIX
from .catalog import BlockRow
from .namespace import ROOT_INODE
from . import lockorder

if TYPE_CHECKING:
    from .archive import Archive
    from .namespace import Inode, Namespace

log = logging.getLogger(__name__)

MANIFEST = "meta/MANIFEST"              # plain: read on disks written before, no longer written
MANIFEST_GZ = "meta/MANIFEST.gz"        # what a checkpoint writes
MANIFEST_FORMS = (MANIFEST_GZ, MANIFEST)
GZIP_LEVEL = 9                          # 2.7 % smaller than gzip's default 6, 0.2 s more CPU per 100,000 names
JOURNAL = "meta/JOURNAL"
RECORDS = "meta/RECORDS"                # names the disks that hold MANIFEST and JOURNAL
RECORD_COPIES = 2                       # disks that hold MANIFEST and JOURNAL
JOURNAL_LIMIT = 4 << 20                 # bytes of JOURNAL that ask for a checkpoint (at least)
IMPORT_SLACK = 4                        # ... while an import runs, this many times that (one checkpoint at its end)
CHECKPOINT_META = "checkpoint"          # catalog meta key: the last checkpoint number used
OWNER, XATTR, INODE = b"owner", b"xattr", b"inode"     # kinds of the # lines after an entry
_XATTR_LINE = b"#\t" + XATTR + b"\t"
_ESCAPED = re.compile(rb"[\\\t\n\0]")           # what escape_path or xattr_field changes


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


def gunzip_tolerant(data: bytes) -> tuple[bytes, Optional[str]]:
    """The plain bytes of a gzip stream (of one member or several, as ``zcat``
    reads them), and what was wrong with it, if anything: a damaged or cut
    stream yields what came before the damage, as ``zcat`` prints it."""
    out, rest = [], data
    while rest:
        unzip = zlib.decompressobj(31)
        try:
            out.append(unzip.decompress(rest))
            out.append(unzip.flush())
        except zlib.error as exc:
            return b"".join(out), f"not a whole gzip stream ({exc})"
        if not unzip.eof:
            return b"".join(out), "the gzip stream is cut short"
        rest = unzip.unused_data
    return b"".join(out), None


def read_head(path: str, n: int = 64) -> bytes:
    """The first ``n`` plain bytes of a MANIFEST file (gzip'd or not); OSError if unreadable."""
    with open(path, "rb") as f:
        data = f.read(n if not path.endswith(".gz") else 4096)
    if not path.endswith(".gz"):
        return data
    try:
        return zlib.decompressobj(31).decompress(data, n)
    except zlib.error:
        return b""


def manifest_on(root: str) -> Optional[tuple[str, int]]:
    """(the MANIFEST of the disk at ``root``, its checkpoint number, 0 when
    unnumbered): of the gzip'd and the plain form, the one with the higher
    number (both are there only after a crash inside a checkpoint; on a tie
    the plain one), or None."""
    found = []
    for form in MANIFEST_FORMS:
        try:
            found.append((checkpoint_of(read_head(os.path.join(root, form))) or 0, form))
        except OSError:
            pass
    if not found:
        return None
    # A tie is a gzip'd one whose head does not decompress beside a plain one
    # written before numbering: the plain one can be read.
    n, form = max(found, key=lambda f: (f[0], f[1] == MANIFEST))
    return form, n


def read_manifest(backend, form: str) -> tuple[bytes, Optional[str]]:
    """The plain lines of MANIFEST ``form`` on a disk, and what was wrong with
    its gzip stream (the lines before the damage are kept)."""
    data = backend.read(form)
    return gunzip_tolerant(data) if form == MANIFEST_GZ else (data, None)


def plain_size(root: str, form: str) -> int:
    """The plain bytes of a MANIFEST: a gzip'd one's trailer holds them (modulo
    4 GiB, which only makes the first JOURNAL bound of a mount smaller)."""
    path = os.path.join(root, form)
    if form != MANIFEST_GZ:
        return os.path.getsize(path)
    with open(path, "rb") as f:
        f.seek(-4, os.SEEK_END)
        return struct.unpack("<I", f.read(4))[0]


def record_disks(archive: "Archive", copies: int = RECORD_COPIES) -> list[int]:
    """The disks that hold MANIFEST and JOURNAL: the catalog disk (or, when it
    is missing, the present disk with the lowest index) and the present disks
    after it in index order, cyclically, ``copies`` in all."""
    present = sorted(archive.volumes)
    if not present:
        return []
    first = present.index(archive.first_volume.index)
    return (present[first:] + present[:first])[:copies]


def records_text(disks: list[int]) -> bytes:
    return (b"# webfs: meta/MANIFEST.gz (zcat) and meta/JOURNAL are on these disks (webfs-format(5))\n"
            b"Disks: " + b" ".join(b"%d" % d for d in disks) + b"\n")


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


def xattr_field(value: bytes) -> bytes:
    """An xattr value as a record holds it: ``t`` and the value escaped as a
    path is, or (a value with a NUL byte) ``x`` and its hex."""
    return b"x" + value.hex().encode() if b"\0" in value else b"t" + escape_path(value)


def attribute_lines(node: "Inode", xattrs: Iterable[tuple[bytes, bytes]]) -> bytes:
    """The ``#`` lines that follow an entry (in the MANIFEST, or after a JOURNAL
    ``+``) with what the five fields lack: its owner, its xattrs, and, for a
    file of several names, its inode number, which its other names share.
    Readers that do not know them skip them, as every ``#`` line."""
    out = [b"#\t%s\t%d\t%d\n" % (OWNER, node.uid, node.gid)]
    # Most names and values need no escape: written as they are, after one
    # search each (the replaces and formatting of every line were half of a
    # commit's journal text in an import-warc, 8 xattrs a capture).
    out += [_XATTR_LINE + name + b"\tt" + value + b"\n"
            if _ESCAPED.search(name) is None and _ESCAPED.search(value) is None
            else b"#\t%s\t%s\t%s\n" % (XATTR, escape_path(name), xattr_field(value)) for name, value in xattrs]
    if node.nlink > 1 and not stat.S_ISDIR(node.mode):
        out.append(b"#\t%s\t%d\n" % (INODE, node.id))
    return b"".join(out)


class Added(NamedTuple):
    """A ``+`` record not yet written: its line is made when the commit takes it."""
    path: bytes
    node: "Inode"
    rows: list[BlockRow]
    xattrs: Optional[list[tuple[bytes, bytes]]]     # None: the inode's, asked at take


class Journal:
    """Namespace changes, buffered and appended to meta/JOURNAL on the record
    disks at each catalog commit (so a killed daemon loses nothing it committed)."""

    def __init__(self, archive: "Archive", limit: int = JOURNAL_LIMIT):
        self.archive = archive
        self.lines: list = []                  # a line (bytes), or a + record (Added): see take
        self._added: dict[bytes, int] = {}     # path -> where in lines its + record is (see record)
        self.lock = lockorder.lock("journal lines")
        self.namespace: Optional["Namespace"] = None
        self._fds: dict[int, int] = {}          # disk -> open JOURNAL (appends stay cheap)
        self._opened: dict[int, object] = {}    # disk -> the Volume its JOURNAL was opened on
        self.min_limit = limit
        # Called (once per checkpoint, from the thread that appended, maybe
        # under the catalog lock: it must only start a checkpoint elsewhere)
        # when the JOURNAL grows past ``limit`` or a record disk goes away.
        self.on_full: Optional[Callable[[], None]] = None
        self._asked = False
        self._importing = 0                     # imports running (their bound is IMPORT_SLACK times)
        # Until the first checkpoint, appends go where the newest records are;
        # ``stale`` says that is not where the rule puts them (a checkpoint moves them).
        # anchored: a MANIFEST is under the JOURNAL (a new archive has none, and wants one)
        self.disks, self.anchored = self._holders()
        self.stale = self.disks != record_disks(archive)
        self.grown = 0
        self.limit = limit
        for index in self.disks[:1]:
            vol = archive.volumes[index]
            try:
                self.grown = vol.backend.size(JOURNAL)
                found = manifest_on(vol.root)
                if found:
                    self.limit = max(limit, plain_size(vol.root, found[0]) // 2)
            except OSError:
                pass

    def wants_checkpoint(self) -> bool:
        """The JOURNAL is past its bound, has no MANIFEST under it, a record disk
        is gone or replaced, or one holds no MANIFEST (rebuilt under a mount:
        its directory went, so no JOURNAL was opened on it to say so)."""
        volumes = self.archive.volumes
        return (self.grown > self.limit or not self.anchored
                or self.disks != record_disks(self.archive)
                or any(self._opened.get(i, v) is not v for i, v in volumes.items())
                or any(manifest_on(volumes[i].root) is None for i in self.disks if i in volumes))

    def _holders(self) -> tuple[list[int], bool]:
        """The present disks that hold the newest MANIFEST (the highest checkpoint
        number; every disk with a MANIFEST on disks written before numbering),
        and whether there is one; without one, the disks the rule names."""
        found = {}
        for vol in self.archive.volumes.values():
            have = manifest_on(vol.root)
            if have:
                found[vol.index] = have[1]
        if not found:
            return record_disks(self.archive), False
        newest = max(found.values())
        return sorted(i for i, n in found.items() if n == newest), True

    def record(self, op: str, node: Optional["Inode"], path: bytes, new_path: bytes = b"",
               rows: Optional[list[BlockRow]] = None,
               xattrs: Optional[list[tuple[bytes, bytes]]] = None) -> None:
        if op == "+":
            if rows is None:
                rows = [] if stat.S_ISDIR(node.mode) else self.namespace.contents(node.id)
            # Its line and attribute lines are made at take(): xattrs set later in
            # the same commit (an import sets a batch's at once) are in them, asked
            # once per commit, unless given here (a new inode's, all of them).
            added = Added(path, node, rows, None if xattrs is None else sorted(dict(xattrs).items()))
            with self.lock:
                # A + replaces what an earlier + of its path and inode said
                # (webfs-format(5)), so it takes that one's place: the + just
                # before it (rsync's utimens then chmod), or a file of one name's
                # with only + records of other paths between (cp's create, then
                # its close). A rename, removal or exchange between ends that.
                at = self._added.get(path)
                if at is not None and self.lines[at].node.id == node.id and (
                        at == len(self.lines) - 1 or stat.S_ISREG(node.mode) and node.nlink == 1):
                    self.lines[at] = added
                    return
                self._added[path] = len(self.lines)
                self.lines.append(added)
            return
        if op in (">", "<>"):
            line = op.encode() + b"\t" + escape_path(path) + b"\t" + escape_path(new_path)
        else:
            line = b"-\t" + escape_path(path)
        with self.lock:
            self.lines.append(line + b"\n")
            self._added.clear()             # names moved or went: no later + replaces an earlier

    def take(self) -> bytes:
        """The lines recorded so far, taken out (the store does this at each
        commit, under the catalog lock, and appends them right after)."""
        with self.lock:
            lines, self.lines = self.lines, []
            self._added.clear()
        added = [item.node.id for item in lines if isinstance(item, Added) and item.xattrs is None]
        xattrs = self.namespace.xattrs_of(added, kept=True) if added and self.namespace else {}
        return b"".join(item if isinstance(item, bytes) else
                        b"+\t" + entry(item.rows, item.node, item.path) + b"\n"
                        + attribute_lines(item.node, xattrs.get(item.node.id, ()) if item.xattrs is None
                                          else item.xattrs) for item in lines)

    def append(self, data: bytes) -> None:
        self._append(data, False)

    def flush(self, fsync: bool = False) -> None:
        data = self.take()
        if data:
            self._append(data, fsync)

    def _append(self, data: bytes, fsync: bool) -> None:
        gone = False
        for index in self.disks:
            vol = self.archive.volumes.get(index)
            if vol is None:
                gone = True             # a record disk left: the next checkpoint picks another
                continue
            if self._opened.get(index, vol) is not vol:
                # The disk was replaced (webfs rebuild): its JOURNAL has no
                # MANIFEST under it until a checkpoint writes one, soon.
                os.close(self._fds.pop(index))
                gone = True
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
                    self._opened[vol.index] = vol
                os.write(fd, data)
                if fsync:
                    os.fsync(fd)
            except OSError as exc:
                log.warning("disk %d: cannot append to %s: %s", vol.index, JOURNAL, exc)
        self.grown += len(data)
        self._ask_if(gone or self.grown > self.limit * (IMPORT_SLACK if self._importing else 1))

    def ask_checkpoint(self) -> bool:
        """Ask for a checkpoint (``on_full``) if one is wanted: the disks
        changed, say. Whether one was wanted."""
        wanted = self.wants_checkpoint()
        if wanted and self.on_full is not None:
            # Even when one was asked already: it may be staging without the disk that came.
            self._asked = True
            self.on_full()
        return wanted

    def _ask_if(self, due: bool) -> None:
        if due and self.on_full is not None and not self._asked:
            self._asked = True
            self.on_full()

    @contextlib.contextmanager
    def importing(self) -> Iterator[None]:
        """While an import runs: the size bound is IMPORT_SLACK times larger,
        and the plain bound is acted on at its end (the JOURNAL keeps every
        commit's lines as always: only the MANIFEST's rewrite waits)."""
        with self.lock:
            self._importing += 1
        try:
            yield
        finally:
            with self.lock:
                self._importing -= 1
                last = not self._importing
            self._ask_if(last and self.grown > self.limit)

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds, self._opened = {}, {}

    def next_checkpoint(self, catalog) -> int:
        """A number no checkpoint of this archive has used: one more than the
        catalog's record and every MANIFEST present. The caller commits."""
        n = int(catalog.get_meta(CHECKPOINT_META) or 0)
        for vol in self.archive.volumes.values():
            have = manifest_on(vol.root)
            n = max(n, have[1] if have else 0)
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
        """Write a new MANIFEST on the record disks and start an empty JOURNAL.
        The caller holds the catalog lock, so no change slips between the two."""
        n = self.next_checkpoint(namespace.cat)
        namespace.cat.commit()
        covered = self.mark(n)
        lines = 0

        def counted():
            nonlocal lines
            for chunk in manifest_chunks(namespace):
                lines += chunk.count(b"\n")
                yield chunk
        self.replace(counted(), covered, n)
        return lines

    def sizes(self) -> dict[int, int]:
        """Bytes in JOURNAL on each disk now (the caller has flushed, under the catalog lock)."""
        sizes = {}
        for index in self.disks:
            vol = self.archive.volumes.get(index)
            if vol is None:
                continue
            try:
                sizes[vol.index] = vol.backend.size(JOURNAL)
            except OSError:
                sizes[vol.index] = 0
        return sizes

    def stage(self, manifest: Union[bytes, Iterable[bytes]], n: Optional[int] = None) -> "Staged":
        """Write the new MANIFEST (its marker first) under a temporary name beside
        the MANIFEST of each record disk, synced: the slow part of a checkpoint,
        which needs no lock. ``manifest`` is bytes or chunks (``manifest_chunks``),
        written to every record disk as they come, so the whole MANIFEST is never
        in memory. A disk that fails is left out (and logged)."""
        marker = b"" if n is None else checkpoint_line(n)
        chunks = (manifest,) if isinstance(manifest, (bytes, bytearray)) else manifest
        tmp = f"{MANIFEST_GZ}.{os.getpid()}{TMP_SUFFIX}"
        fds: dict[int, int] = {}
        disks = record_disks(self.archive)
        for index in disks:
            vol = self.archive.volumes[index]
            try:
                vol.backend.remove_leftovers(MANIFEST)     # MANIFEST.*.tmp: either form's
                fds[index] = vol.backend.open_append(tmp)
            except OSError as exc:
                log.warning("disk %d: cannot write %s: %s", index, MANIFEST_GZ, exc)
        size = 0
        packer = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, 31)
        try:
            for chunk in itertools.chain((marker,), chunks, (None,)):
                if chunk is None:
                    packed = packer.flush()
                else:
                    size += len(chunk)
                    packed = packer.compress(chunk)
                self._write_all(fds, packed)
            for index, fd in list(fds.items()):
                try:
                    os.fsync(fd)
                except OSError as exc:
                    log.warning("disk %d: cannot write %s: %s", index, MANIFEST_GZ, exc)
                    os.close(fds.pop(index))
        except BaseException:
            for index, fd in fds.items():
                os.close(fd)
                self.archive.volumes[index].backend.remove(tmp)
            raise
        for fd in fds.values():
            os.close(fd)
        return Staged({index: tmp for index in fds}, size, disks)

    @staticmethod
    def _write_all(fds: dict[int, int], data: bytes) -> None:
        """``data`` to every file of ``fds``; a disk that fails is logged and left out."""
        for index, fd in list(fds.items()):
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
            except OSError as exc:
                log.warning("disk %d: cannot write %s: %s", index, MANIFEST_GZ, exc)
                os.close(fds.pop(index))

    def install(self, staged: "Staged", covered: dict[int, int], n: Optional[int] = None) -> None:
        """Put the staged MANIFEST in place on each record disk and keep of the
        JOURNAL only what came after the first ``covered`` bytes (changes the
        MANIFEST does not hold); then remove the copies other disks hold and
        write ``meta/RECORDS``. The caller holds the catalog lock, so no JOURNAL
        line slips in between. With a checkpoint number, MANIFEST and JOURNAL
        both start with its marker (see the module's doc)."""
        marker = b"" if n is None else checkpoint_line(n)
        self.flush()
        self.close()            # the JOURNAL files are replaced: appends reopen them
        # What came after the marker: the same on every disk that had the
        # records, which need not be the disks that get them now.
        tail = b""
        for index, size in covered.items():
            vol = self.archive.volumes.get(index)
            if vol is None:
                continue
            try:
                tail = vol.backend.read(JOURNAL, size)
                break
            except FileNotFoundError:
                break
            except OSError as exc:
                log.warning("disk %d: cannot read %s: %s", index, JOURNAL, exc)
        # The disks the rule named when it was staged: one that came since (a
        # rebuild) gets the records from the next checkpoint (wants_checkpoint
        # says one is due), and the ones staged for keep them meanwhile.
        disks = staged.disks
        written = []
        for index, tmp in staged.files.items():
            vol = self.archive.volumes.get(index)
            if vol is None:
                continue
            try:
                vol.backend.rename(tmp, MANIFEST_GZ)
                testkill.point("checkpoint-after-manifest")
                # write_atomic syncs meta/, so the rename above is lasting too
                vol.backend.write_atomic(JOURNAL, marker + tail, fsync=True)
                testkill.point("checkpoint-after-journal")
                vol.backend.remove(MANIFEST)        # the plain form of disks written before
                written.append(index)
                self.grown = len(marker) + len(tail)
            except OSError as exc:
                log.warning("disk %d: cannot write %s: %s", vol.index, MANIFEST_GZ, exc)
        if not written:
            return              # the old records stay where they are, and appends with them
        self.disks, self.stale, self._asked, self.anchored = disks, False, False, True
        self.limit = max(self.min_limit, staged.size // 2)
        note = records_text(disks)
        for vol in self.archive.volumes.values():
            try:
                if vol.index not in disks:
                    # After the new copies are on their disks: an older copy
                    # left here would only be read if both of those were lost.
                    vol.backend.remove(JOURNAL)
                    for form in MANIFEST_FORMS:
                        vol.backend.remove(form)
                try:
                    same = vol.backend.read(RECORDS) == note
                except FileNotFoundError:
                    same = False
                if not same:
                    vol.backend.write_atomic(RECORDS, note, fsync=True)
            except OSError as exc:
                log.warning("disk %d: cannot write %s: %s", vol.index, RECORDS, exc)

    def replace(self, manifest: Union[bytes, Iterable[bytes]], covered: dict[int, int],
                n: Optional[int] = None) -> None:
        """``stage`` then ``install``, for callers that hold the catalog lock throughout."""
        self.install(self.stage(manifest, n), covered, n)


@dataclass
class Staged:
    """A MANIFEST written under a temporary name on some disks, ``size`` bytes,
    for the record disks the rule named then (``disks``)."""
    files: dict[int, str]
    size: int
    disks: list[int]


def manifest_chunks(namespace: "Namespace") -> Iterator[bytes]:
    """Every name of the namespace as MANIFEST lines, the root first, parents
    before children, in chunks of up to 1,000 lines."""
    root = namespace.get(ROOT_INODE)
    yield entry([], root, b"/") + b"\n" + attribute_lines(root, namespace.xattrs_of([ROOT_INODE]).get(ROOT_INODE, []))
    chunk: list = []

    def emit() -> bytes:
        sigs = namespace.block_names([node.id for _, node in chunk if not stat.S_ISDIR(node.mode)])
        xattrs = namespace.xattrs_of([node.id for _, node in chunk])
        data = b"".join(entry_of(sigs.get(node.id, ""), node, path) + b"\n"
                        + attribute_lines(node, xattrs.get(node.id, ())) for path, node in chunk)
        chunk.clear()
        return data
    for item in namespace.walk():
        chunk.append(item)
        if len(chunk) >= 1000:
            yield emit()
    if chunk:
        yield emit()


def manifest_of(namespace: "Namespace") -> bytes:
    """The whole MANIFEST (see manifest_chunks)."""
    return b"".join(manifest_chunks(namespace))
