"""``webfs export-warc``: a collection written back out as WARC, record by
record from what webfs.warc says it keeps (the kept header blocks, the
capture files' bytes), each record as a gzip member (the source's very
member when its recipe makes it again), into files that take their names
only once the last record is written. The whole collection in its sources'
order or disk by disk (``export_tree``); or a subset of its captures, or
all of it, as a restartable stream (``export_stream``, after webfs.stream).
"""
from __future__ import annotations

import contextlib
import errno
import functools
import itertools
import os
import re
import stat
import struct
import time
import zlib
from typing import Iterator, Optional

from . import admin, stream
from .admin import human
from .errors import FsError, WebfsError
from .files import create_new, publish
from .importsource import show_path
from .assembly import OpenArchive
from .warc import (HEADS_SUFFIX, INDEX_SUFFIX, KEEP_DIR, NOWHERE, DiskTree, IndexLine, Source, Where, parse_index,
                   sources_in_import_order)
from .warcread import arc_fields
from .stream import Position


GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03"   # what zlib writes for a level-6 member
PART_SUFFIX = ".part"       # an export's file until its last record is written
BATCH = 4                   # records read, made and compressed by one task of an export
PROGRESS_EVERY = 0.25       # seconds between the export's progress reports (each a socket write in a mount)


def _set_header(head: bytes, name: bytes, value: Optional[bytes]) -> bytes:
    """A WARC header block with one header set (or dropped, value None)."""
    lines = head.split(b"\r\n") if b"\r\n" in head else head.split(b"\n")
    out, done = [], False
    for line in lines:
        k, sep, _ = line.partition(b":")
        if sep and k.strip().lower() == name.lower():
            if value is not None and not done:
                out.append(name + b": " + value)
                done = True
            continue
        out.append(line)
    if value is not None and not done:
        out.insert(1, name + b": " + value)
    return b"\r\n".join(out)


def _arc_to_warc(rec_head: bytes, rtype: str, http: bytes, payload: bytes, ident: bytes) -> bytes:
    """An ARC record as a WARC/1.1 record with the same URI, date, HTTP headers and payload."""
    import uuid
    f = arc_fields(rec_head)
    wtype = {"response": "response" if http else "resource"}.get(rtype, "warcinfo" if rtype == "arc_header"
                                                                  else "resource")
    rid = b"<urn:uuid:" + str(uuid.uuid5(uuid.NAMESPACE_URL, ident.decode("utf-8", "replace"))).encode() + b">"
    lines = [b"WARC/1.1", b"WARC-Type: " + wtype.encode(), b"WARC-Record-ID: " + rid,
             b"WARC-Date: " + f[b"warc-date"]]
    if wtype != "warcinfo":
        lines.append(b"WARC-Target-URI: " + f[b"warc-target-uri"])
    ct = b"application/http; msgtype=response" if http else (f[b"content-type"] or b"application/octet-stream")
    if wtype == "warcinfo":
        ct = b"text/plain"
    lines += [b"Content-Type: " + ct, b"Content-Length: " + str(len(http) + len(payload)).encode()]
    return b"\r\n".join(lines) + b"\r\n\r\n" + http + payload + b"\r\n\r\n"


def _kept(tree, src: Source) -> tuple[bytes, list[IndexLine]]:
    """A source file's heads and index lines, as the collection keeps them."""
    return tree.read(src.path(HEADS_SUFFIX)), list(parse_index(tree.read(src.path(INDEX_SUFFIX))))


def _disks_in_turn(keys: list[tuple[int, str]]) -> list[int]:
    """Indexes of ``keys`` in writing order: each disk's in its own order (by key),
    the disks interleaved so that each is spread evenly over the whole run; the
    captures of one key (a page stored once for several URLs: the same first
    block) one after the other, for ``_batches`` to give to one task."""
    by_disk: dict[int, list[list[int]]] = {}
    for i in sorted(range(len(keys)), key=keys.__getitem__):
        q = by_disk.setdefault(keys[i][0], [])
        if q and keys[q[-1][0]] == keys[i] and keys[i] != NOWHERE:
            q[-1].append(i)
        else:
            q.append([i])
    return [i for _, _, same in sorted(((j + 0.5) / len(q), d, same) for d, q in by_disk.items()
                                        for j, same in enumerate(q)) for i in same]


def _in_order(tree, order: str, pool) -> Iterator[tuple[Source, bytes, IndexLine, Optional[Where]]]:
    """(source, its heads, index line, where its capture file is or None) of every
    record, in the order the records are written.

    ``order="source"``: the source files' records in their order. ``order="disk"``:
    the records without a capture file first (in source order), then the
    captures disk by disk in turn, each disk's in the order of its signature
    tree (the disk and signature of their first block), so that every disk
    streams its pages at once, each in its own order."""
    if order != "disk":
        for src in sources_in_import_order(tree):
            heads, lines = _kept(tree, src)
            wheres = iter(tree.locate([ln.capture for ln in lines if ln.where == "file"], pool, False))
            for ln in lines:
                yield src, heads, ln, next(wheres) if ln.where == "file" else None
        return
    sources = [(src, *_kept(tree, src)) for src in sources_in_import_order(tree)]
    for src, heads, lines in sources:
        for ln in lines:
            if ln.where != "file":
                yield src, heads, ln, None
    caps = [(src, heads, ln) for src, heads, lines in sources for ln in lines if ln.where == "file"]
    wheres = tree.locate([ln.capture for _, _, ln in caps], pool, True)
    for i in _disks_in_turn([w.key for w in wheres]):
        yield caps[i] + (wheres[i],)


def _there(tree, capture: bytes, ino: Optional[int] = None) -> bool:
    """Is a record's capture file still in the collection? Not: it was deleted
    (rm through the mount) and its record is left out of the export. Asked of
    the name, not told by a read's error: a block that cannot be read is an
    error of the export, never a record left out (an error of the lookup
    itself is raised too). Of the file a walk found (``ino``), asked of that
    file: its name may now be another file's (renamed over it)."""
    if ino is not None:
        return tree.ns.linked(ino)
    try:
        tree.size(capture)
    except FileNotFoundError:
        return False
    except FsError as exc:
        if exc.errno == errno.ENOENT:
            return False
        raise WebfsError(f"{show_path(capture)}: cannot be read: {exc}") from None
    except OSError as exc:
        raise WebfsError(f"{show_path(capture)}: cannot be read: {exc}") from None
    return True


def _record(tree, src: Source, heads: bytes, ln: IndexLine, where: Optional[Where],
            duplicates: str, read: dict) -> Optional[tuple[bytes, bool, bytes]]:
    """One record's bytes, whether they are byte-identical to the source's, and
    the gz column to make its gzip member with (b"" when not identical); None
    when its capture file was deleted since the import (``_there``), or since
    the walk found it (``where.ino``: webfs.walkread). ``read``: the bytes of
    the file this task read last, by its blocks (``_fetch``)."""
    head, http = ln.warc_head(heads), ln.http_head(heads)
    p = ln.payload_at
    identical = True
    if ln.where != "file":
        if ln.capture != b"-" and not _there(tree, ln.capture, where and where.ino):
            return None         # kept whole in the heads (a revisit, an encoded page), its file deleted
        payload = heads[p:p + ln.pl]
        p += ln.pl
    else:
        try:
            payload = _fetch(tree, where, read)
        except (OSError, FsError, WebfsError) as exc:
            if where.ino is None and not _there(tree, ln.capture):
                return None
            raise WebfsError(f"{show_path(ln.capture)}: cannot be read: {exc}") from None
        if payload is None:
            return None         # the file the walk found went before its blocks were read
    tail = heads[p:p + ln.tl]
    if ln.rtype == "revisit" and duplicates == "full" and ln.capture != b"-" and head.startswith(b"WARC/"):
        try:        # the file the walk found (not what its name is now), else by its name
            payload = (tree.fetch(where) if where is not None and where.ino is not None
                       else tree.read(ln.capture)) or b""
        except (OSError, FsError, WebfsError):
            payload = b""
        if payload:
            head = _set_header(head, b"WARC-Type", b"response")
            for h in (b"WARC-Refers-To", b"WARC-Refers-To-Target-URI", b"WARC-Refers-To-Date",
                      b"WARC-Profile", b"WARC-Block-Digest"):
                head = _set_header(head, h, None)
            identical = False
    if not head.startswith(b"WARC/"):
        return _arc_to_warc(head, ln.rtype, http, payload, src.label + b"\t" + str(ln.offset).encode()), False, b""
    if len(http) + len(payload) != ln.hl + ln.pl or not identical:
        head = _set_header(head, b"Content-Length", str(len(http) + len(payload)).encode())
        if not head.endswith(b"\r\n\r\n"):
            head = head.rstrip(b"\r\n") + b"\r\n\r\n"
        identical = False
        tail = b"\r\n\r\n"
    return head + http + payload + tail, identical, ln.gzip if identical else b""


def _fetch(tree, where: Where, read: dict) -> Optional[bytes]:
    """A capture file's bytes (``tree.fetch``), read once for the captures of a
    task whose files have the very same blocks (a page stored once for several
    URLs: a quarter of the bench's crawl), each block checked against its
    signature the first time. ``_disks_in_turn`` puts such captures one after
    the other, so only the last file's bytes are kept: a task holds one
    payload more than its members, not every one it read. A file read as gone
    is read again for the next."""
    rows = where.what
    key = tuple(row.id for row in rows) if isinstance(rows, list) and rows else None
    data = read.get(key) if key is not None else None
    if data is None:
        data = tree.fetch(where)
        read.clear()
        if key is not None and data:
            read[key] = data
    return data


def _members(tree, batch: list[tuple], duplicates: str, gz: bool = True) -> list[tuple[bytes, bool, bool, int]]:
    """A batch of records as gzip members (plain records unless ``gz``): (member,
    record byte-identical, the source's very member, record bytes) each, the
    member None for a record whose capture was deleted. Run in
    the export's threads: the reads of a batch overlap those of the others, and
    zlib lets go of the GIL."""
    out, read = [], {}
    for rec in batch:
        made = _record(tree, *rec, duplicates, read)
        if made is None:
            out.append((None, False, False, 0))     # its capture deleted: counted, not written
            continue
        data, identical, recipe = made
        member, same_member = _gzip_member(data, recipe) if gz else (data, False)
        out.append((member, identical, same_member, len(data)))
    return out


def _batches(items: Iterator[tuple], size: int) -> Iterator[list[tuple]]:
    """``size`` records a batch, and the records of one capture file's key (its
    first block: ``_disks_in_turn`` puts them together) not in two (up to 8
    times ``size``), so that a page stored once is read once for all its
    captures (``_fetch``)."""
    batch: list[tuple] = []
    for item in items:
        if len(batch) >= size and (len(batch) >= 8 * size or not _same_place(batch[-1][3], item[3])):
            yield batch
            batch = []
        batch.append(item)
    if batch:
        yield batch


def _same_place(a: Optional[Where], b: Optional[Where]) -> bool:
    return a is not None and b is not None and a.key == b.key and a.key != NOWHERE


def collection_members(tree, duplicates: str = "revisit", order: str = "source",
                       gz: bool = True) -> Iterator[tuple[bytes, bool, bool, int]]:
    """Every kept record as a gzip member, in writing order (``_in_order``):
    (member, record byte-identical to the source's, member the source's very
    member, record bytes). Batches of records are read, made and compressed by
    the tree's ``readers`` threads, a few batches ahead of the writer."""
    from collections import deque
    from concurrent.futures import ThreadPoolExecutor
    pool = ThreadPoolExecutor(tree.readers, thread_name_prefix="export")
    window: deque = deque()
    try:
        for batch in _batches(_in_order(tree, order, pool), BATCH):
            window.append(pool.submit(_members, tree, batch, duplicates, gz))
            if len(window) >= 2 * tree.readers:
                yield from window.popleft().result()
        while window:
            yield from window.popleft().result()
    finally:
        pool.shutdown(cancel_futures=True)


class OutFiles:
    """The files an export writes (gzip per record, or plain WARC for an OUT named
    .warc): OUT, or with a split size OUT-00001.warc.gz,
    OUT-00002.warc.gz, ... Each is written as NAME.part and all are renamed to
    their names only once the last record is written, so an export that fails
    or is stopped leaves no short file (its .part files are removed, and an
    OUT already there is left as it was), and one that is killed leaves only
    files named as incomplete. Every file is created new (``webfs.files``): a
    name already taken, OUT or its .part, is refused unless ``force``, and
    then only the name is replaced, never what a symlink there points at."""

    def __init__(self, out: str, split: Optional[int], force: bool = False):
        self.out = out
        self.split = split
        self.force = force
        self.gz = not out.endswith(".warc")      # OUT.warc is plain WARC; any other name gzip per record
        self.names: list[str] = []
        self.fh = None

    def name(self, n: int) -> str:
        return (self.out if self.split is None else
                re.sub(r"(\.warc)?(\.gz)?$", "", self.out) + f"-{n:05d}.warc" + (".gz" if self.gz else ""))

    def write(self, member: bytes) -> None:
        if self.fh is None or (self.split is not None and self.fh.tell() > 0 and self.fh.tell() >= self.split):
            self._next()
        try:
            self.fh.write(member)
        except OSError as exc:
            raise self._failed(exc) from None

    def check(self, name: str, part_too: bool = True) -> None:
        """Refuse a name the export may not take, or its .part (before anything is written)."""
        if part_too:
            self._refuse_part(name)
        try:
            st = os.lstat(name)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise WebfsError(f"{name}: {exc.strerror}") from None
        if stat.S_ISDIR(st.st_mode):
            raise WebfsError(f"{name}: is a directory")
        if not self.force:
            raise WebfsError(f"{name}: exists; refusing to overwrite it (give --force)")

    def _refuse_part(self, name: str) -> None:
        if not self.force and os.path.lexists(name + PART_SUFFIX):
            raise WebfsError(f"{name}{PART_SUFFIX}: exists (an export killed before its end leaves one); "
                             "remove it, or give --force")

    def _next(self) -> None:
        self._close()
        name = self.name(len(self.names) + 1)
        self.check(name)
        try:
            fd = create_new(name + PART_SUFFIX, replace_leftover=self.force)
        except FileExistsError:
            raise WebfsError(f"{name}{PART_SUFFIX}: was made by another process while the export "
                             "started; refusing to write there") from None
        except IsADirectoryError:
            raise WebfsError(f"{name}{PART_SUFFIX}: is a directory") from None
        except OSError as exc:
            raise self._failed(exc, name) from None
        self.names.append(name)
        self.fh = open(fd, "wb", buffering=1 << 20)

    def _close(self) -> None:
        fh, self.fh = self.fh, None
        if fh is not None:
            try:
                fh.flush()
                os.fsync(fh.fileno())       # the data on disk before the name says it is complete
            except OSError as exc:
                with contextlib.suppress(OSError):
                    fh.close()
                raise self._failed(exc) from None
            fh.close()

    def reopen(self, count: int, size: int) -> None:
        """Go on with an export stopped after ``size`` bytes of its ``count``-th
        file: its .part files are there, the last one cut back to ``size`` (what
        was written after the last token is written again)."""
        self.names = [self.name(n) for n in range(1, count + 1)]
        for name in self.names:
            self.check(name, part_too=False)
            if not os.path.isfile(name + PART_SUFFIX) or os.path.islink(name + PART_SUFFIX):
                raise WebfsError(f"{name}{PART_SUFFIX}: not there (or not a file); the export cannot go on "
                                 "without it: start it again")
        for n in itertools.count(count + 1):     # begun by the stopped run after its last token
            later = self.name(n) + PART_SUFFIX
            if self.split is None or not os.path.isfile(later) or os.path.islink(later):
                break
            os.unlink(later)
        if not count:
            return
        last = self.names[-1] + PART_SUFFIX
        try:
            fd = os.open(last, os.O_WRONLY | os.O_NOFOLLOW)
        except OSError as exc:
            raise self._failed(exc, self.names[-1]) from None
        have = os.fstat(fd).st_size
        if have < size:
            os.close(fd)
            raise WebfsError(f"{last}: {have} bytes, fewer than the {size} the token says were written: "
                             "not the file that export wrote")
        os.ftruncate(fd, size)
        os.lseek(fd, size, os.SEEK_SET)
        self.fh = open(fd, "wb", buffering=1 << 20)

    def written(self) -> tuple[int, int]:
        """(files begun, bytes of the last) with every byte handed to the system."""
        if self.fh is None:
            return len(self.names), 0
        try:
            self.fh.flush()
        except OSError as exc:
            raise self._failed(exc) from None
        return len(self.names), self.fh.tell()

    def keep(self) -> list[str]:
        """Stop, leaving the .part files for a resumed export; their names."""
        fh, self.fh = self.fh, None
        if fh is not None:
            with contextlib.suppress(OSError):
                fh.close()
        return [name + PART_SUFFIX for name in self.names if os.path.lexists(name + PART_SUFFIX)]

    def _failed(self, exc: OSError, name: Optional[str] = None) -> WebfsError:
        name = name or self.name(max(1, len(self.names)))
        return WebfsError(f"{name}: cannot write: {exc.strerror or exc}")

    def finish(self) -> list[str]:
        """Every file complete: give the .part files their names."""
        if self.fh is None and not self.names:
            self._next()                # a collection without records is an empty file
        self._close()
        for name in self.names:
            try:
                publish(name + PART_SUFFIX, name, replace=self.force)
            except FileExistsError:
                raise WebfsError(f"{name}: appeared while the export ran; refusing to overwrite it "
                                 "(give --force)") from None
            except OSError as exc:
                raise self._failed(exc, name) from None
        return self.names

    def discard(self) -> None:
        """Remove what was written (the export failed or was stopped)."""
        try:
            self._close()
        except WebfsError:
            pass
        for name in self.names:
            try:
                os.unlink(name + PART_SUFFIX)
            except FileNotFoundError:
                pass

    def leftovers(self) -> dict[str, tuple[int, int]]:
        """The .part files there now, by name: (device, inode) of each (a symlink's own)."""
        found, n = {}, 1
        while True:
            try:
                st = os.lstat(self.name(n) + PART_SUFFIX)
            except OSError:
                break
            found[self.name(n) + PART_SUFFIX] = (st.st_dev, st.st_ino)
            if self.split is None:
                break
            n += 1
        return found


def export_warc(archive: OpenArchive, progress: admin.Progress, collection: str, out: str, split: Optional[int] = None,
                duplicates: str = "revisit", order: str = "source", force: bool = False) -> admin.Result:
    """The export-warc operation: the collection at ``collection`` (its path in
    the archive) written as WARC into ``out``, read from the store's catalog
    and blocks; inside a mount's daemon, or on an unmounted archive."""
    tree = DiskTree("", collection, None, opened=archive)
    try:
        return export_tree(tree, out, split, duplicates, progress, order, force)
    finally:
        tree.close()


def export_tree(tree, out: str, split: Optional[int] = None, duplicates: str = "revisit",
                progress: Optional[admin.Progress] = None, order: str = "source",
                force: bool = False) -> admin.Result:
    """Write a collection (a MountTree or DiskTree) as per-record gzipped WARC (OutFiles)."""
    from . import testkill
    if not tree.is_dir(KEEP_DIR):
        raise WebfsError(f"{tree.name}: not a collection made by import-warc (it has no {KEEP_DIR.decode()}/)")
    progress = progress or admin.Progress()
    progress.set_total(None, "exporting")
    figures = {"records": 0, "identical": 0, "gzip_identical": 0, "bytes": 0, "deleted": 0, "files": []}
    files = OutFiles(out, split, force)
    files.check(files.name(1))          # refused before a record is read
    told, last = 0, time.monotonic()
    try:
        for member, identical, same_member, size in collection_members(tree, duplicates, order, files.gz):
            if member is not None:
                files.write(member)
                testkill.point("export-after-member")
            _count(figures, member, identical, same_member, size)
            if progress.stopping:
                raise WebfsError(f"stopped before the end; {out} not written")
            if time.monotonic() - last >= PROGRESS_EVERY:      # not a socket write per record
                progress.advance(figures["records"] - told)
                told, last = figures["records"], time.monotonic()
        figures["files"] = files.finish()
    except BaseException:
        files.discard()
        raise
    progress.advance(figures["records"] - told)
    return _summary(figures)


def _summary(figures: dict) -> admin.Result:
    share = figures["identical"] / figures["records"] if figures["records"] else 1.0
    return admin.Result([f"exported {figures['records']} records ({human(figures['bytes'])}) into "
                         f"{len(figures['files'])} file(s); {figures['identical']} ({share:.0%}) byte-identical "
                         f"to the records imported, {figures['gzip_identical']} of them in the very gzip "
                         "member of the source" + (f"; {figures['deleted']} left out: their captures were "
                                                   "deleted" if figures["deleted"] else "")], 0, figures)


def _count(figures: dict, member: Optional[bytes], identical: bool, same_member: bool, size: int) -> None:
    if member is None:
        figures["deleted"] += 1
        return
    figures["records"] += 1
    figures["identical"] += identical
    figures["gzip_identical"] += same_member
    figures["bytes"] += size


def _gzip_member(data: bytes, recipe: bytes) -> tuple[bytes, bool]:
    """A record as a gzip member, compressed once: (the source's very member, True)
    when its recipe makes one with the kept CRC-32 (zlib at the level and with
    the header the source's member had); else (a member all the same: the
    recipe's when there is one, zlib level 6's otherwise, False)."""
    level, head, crc = 6, GZIP_HEADER, None
    if recipe.startswith(b"gz:"):
        _, level_text, head_hex, crc_hex = recipe.split(b":")
        level, head, crc = int(level_text), bytes.fromhex(head_hex.decode()), int(crc_hex, 16)
    c = zlib.compressobj(level, zlib.DEFLATED, -zlib.MAX_WBITS)
    member = head + c.compress(data) + c.flush() + struct.pack("<II", zlib.crc32(data), len(data) & 0xFFFFFFFF)
    return member, crc is not None and zlib.crc32(member) == crc


# ---------------------------------------------------------------- a restartable stream of records (webfs.stream)

def stream_start(tree: DiskTree, subset: str, out: str, split: Optional[int], duplicates: str) -> Position:
    """A new export stream's position: the stream's snapshot of the archive
    (webfs.stream.start), and its own place: the collection, the export's
    options, the records without a capture file written (none yet), the files
    begun and the size of the last (none)."""
    pos = stream.start(tree.store, subset)
    pos.place = {"collection": _named(tree), "out": os.path.basename(out), "split": split,
                 "duplicates": duplicates, "heads": 0, "files": 0, "size": 0}
    return pos


def export_stream(tree: DiskTree, out: str, pos: Position, force: bool = False,
                  on_token=None) -> admin.Result:
    """Write, into ``out``, the records the export stream at ``pos`` has still to
    send: for the whole collection (no subset) first its records without a
    capture file (warcinfo, request, metadata...), in source order; then the
    records of the captures the stream sends (a subset's, or all), in its
    order, read by one thread per disk. After each record ``on_token(token,
    bytes of the last file)``. Stopped or failed, the .part files stay, to be
    gone on with by ``--resume``; a new name is taken as in ``export_tree``."""
    if not tree.is_dir(KEEP_DIR):
        raise WebfsError(f"{tree.name}: not a collection made by import-warc (it has no {KEEP_DIR.decode()}/)")
    place = pos.place
    if place["collection"] != _named(tree) or place["out"] != os.path.basename(out):
        raise WebfsError(f"the token is of an export of {place['collection']} into {place['out']}, not of "
                         f"{_named(tree)} into {os.path.basename(out)}")
    files = OutFiles(out, place["split"], force)
    if place["files"]:
        files.reopen(place["files"], place["size"])
    else:
        files.check(files.name(1))
    figures = {"records": 0, "identical": 0, "gzip_identical": 0, "bytes": 0, "deleted": 0, "files": []}
    try:
        for (member, identical, same_member, size), after in _stream_records(tree, pos, files.gz):
            if member is not None:
                files.write(member)
            _count(figures, member, identical, same_member, size)
            after.place["files"], after.place["size"] = files.written()
            if on_token is not None:
                on_token(after.token(), after.place["size"])
        figures["files"] = files.finish()
    except BaseException as exc:
        kept = files.keep()
        if isinstance(exc, WebfsError) and kept:
            raise WebfsError(f"{exc}; kept {', '.join(kept)}: give --resume the last token printed "
                             "to go on") from None
        raise
    return _summary(figures)


def _named(tree: DiskTree) -> str:
    """The collection's path from the archive's root, as a token keeps it."""
    return os.path.normpath("/" + tree.name.strip("/"))


def _stream_records(tree: DiskTree, pos: Position, gz: bool) -> Iterator[tuple[tuple, Position]]:
    """(gzip member as ``_members`` gives it, the position after it) of each record
    the export stream at ``pos`` has still to send."""
    place = pos.place
    sources = [(src, *_kept(tree, src)) for src in sources_in_import_order(tree)
               if tree.inode(src.path(INDEX_SUFFIX)) <= pos.top_ino]
    if not pos.subset and not pos.grp and not pos.ino:
        alone = [(src, heads, ln, None) for src, heads, lines in sources for ln in lines if ln.capture == b"-"]
        for n, rec in enumerate(alone[place["heads"]:], place["heads"] + 1):
            yield _members(tree, [rec], place["duplicates"], gz)[0], pos.at("", 0, dict(place, heads=n))
        place = dict(place, heads=len(alone))
    top = tree.name.strip("/")
    captures = {(top + "/" if top else "") + os.fsdecode(ln.capture): (src, heads, ln)
                for src, heads, lines in sources for ln in lines if ln.capture != b"-"}

    def jobs():
        for path, ino, after in stream.pages(tree.store, pos):
            rec = captures.get(path)
            if rec is None:
                continue            # not a capture of this collection
            read = rec[2].where == "file" or (rec[2].rtype == "revisit" and place["duplicates"] == "full")
            rows = tree.ns.contents(ino, named=True) if read else []       # none: the record is kept in the heads
            where = Where((stream.disk_of(rows), rows[0].sig if rows else ""), rows, ino)
            work = functools.partial(_members, tree, [(*rec, where)], place["duplicates"], gz)
            yield stream.disk_of(rows), work, after.at(after.grp, after.ino, dict(place))

    for members, after in stream.read_in_order(jobs(), len(tree.store.archive.volumes)):
        yield members[0], after
