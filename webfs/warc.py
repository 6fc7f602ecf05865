"""Web archive files in and out: ``webfs import-warc`` and ``webfs export-warc``.

This module owns the layout of what a collection keeps of WARC and ARC
files (read by webfs.warcread), their import, and the writing of a
collection back out as WARC.

The import is the bulk import of webfs.ingest fed by records instead of a
walk of directories: an ``Importer`` whose items carry their bytes. So it
has the same batches (one catalog commit per batch), the same promise
(a capture counted as imported survives ``kill -9``), the same resume.
A per-record gzip file is read, and its captures signed, checked against
their digests and compressed, by a process of its own
(warcread.read_records_apart).

What a collection ``NAME`` keeps of a source file ``x.warc.gz``
(webfs-format(5), WEB ARCHIVE FILES):

- every response, resource and revisit capture as the file
  ``NAME/`` + urlpath.capture_path(URI, date, n), holding the payload as
  stored (after the HTTP header block, transfer and content encodings kept);
  a revisit whose original is there gets the original's blocks;
- ``NAME/@warc/x.warc.gz.index``: one text line per record (see INDEX_HEADER);
- ``NAME/@warc/x.warc.gz.heads``: per record, its raw WARC header block and
  HTTP header block, the whole block of records that are not captures
  (request, metadata, warcinfo, ...), and the bytes after the block.

Both are ordinary files (blocks, MANIFEST lines), so the recovery tools get
them back, and the source file's records can be rebuilt with ``head -c``.
"""
from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import io
import logging
import os
import re
import stat
import struct
import time
import zlib
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Iterator, Optional

from . import admin, recovery, urlpath
from .admin import human
from .errors import FsError, WebfsError
from .files import create_new, publish
from .ingest import Importer, Item, Piece, show_path
from .namespace import ROOT_INODE
from .archive import archive_place
from .assembly import OpenArchive, open_archive
from .backends import is_url
from .signature import signature
from .store import Store
from .warcread import (READ_CHUNK, DigestCheck, Preparing, Problem, Record, arc_fields, payload_pieces,
                       read_records_apart)

log = logging.getLogger(__name__)

KEEP_DIR = b"@warc"                  # at the top of a collection: webfs's own names
INDEX_SUFFIX = b".index"
HEADS_SUFFIX = b".heads"
INDEX_HEADER = ("# webfs warc index 1\toffset\tlength\tgzip\ttype\theads-offset\twarc-header"
                "\thttp-header\tpayload\ttail\tpayload-in\tcapture\n")
CAPTURE_TYPES = ("response", "resource", "revisit")
# HTTP response headers a capture file shows as xattrs (the first of each):
# the encodings say that the file holds the entity as recorded, so encoded.
HTTP_XATTRS = {
    b"content-type": b"user.http.content-type",
    b"content-encoding": b"user.http.content-encoding",
    b"transfer-encoding": b"user.http.transfer-encoding",
}
XATTR_FIELDS = (
    (b"user.warc.target-uri", b"warc-target-uri"),
    (b"user.warc.date", b"warc-date"),
    (b"user.warc.record-id", b"warc-record-id"),
    (b"user.warc.payload-digest", b"warc-payload-digest"),
    (b"user.warc.type", b"warc-type"),
)


# ---------------------------------------------------------------- importing

# Threads preparing the chunks of captures (webfs.ingest: the catalog's twins,
# compression, and signing and digest checks where the reading process did
# not); the walking thread stores them. Records are in memory, so unlike a
# tree's files no thread waits on a disk, and a parse thread or storing
# threads of their own only passed the interpreter lock around (20,000
# small-page records: a store thread spent 4.3 s of CPU on what takes 2.5 s
# alone): parsing went to another process instead.
PREPARE_WORKERS = 2

# The figures of a WARC import. Shaped like ingest.Counts (a list of int
# fields), which is why `duplicates` pairs them; the figures are others.
@dataclass
class WarcCounts:
    records: int = 0
    captures: int = 0
    other: int = 0
    bytes: int = 0
    revisits_resolved: int = 0
    revisits_unresolved: int = 0
    duplicates: int = 0
    dup_bytes: int = 0
    already: int = 0
    problems: list = field(default_factory=list)


@dataclass
class Revisit:
    """A revisit record's capture, waiting for its original (same payload digest)."""
    path: bytes
    payload: object
    mtime: int
    xattrs: list
    identity: bytes
    src: bytes
    digest: Optional[bytes]
    where: str
    uri: bytes


class WarcImporter(Importer):
    """The bulk importer, fed records of web archive files instead of a tree."""

    def __init__(self, *args, collection: bytes, **kw):
        super().__init__(*args, **kw)
        self.collection = collection
        self.wc = WarcCounts()
        self.dirs: dict[bytes, Item] = {}          # path below the collection -> its directory item
        self.by_digest: dict[bytes, object] = {}   # payload digest -> Item (this import) or inode
        self.taken: set[bytes] = set()             # capture paths given out in this import
        self.names_before: dict[int, dict] = {}  # directory inode -> its names before this import
        self.stored_digests: Optional[dict] = None # payload digest -> inode, of earlier imports
        self.revisits_left: list[Revisit] = []     # revisits whose original was not met yet

    # The walk: each source file's records, then its kept files.
    def count(self, sources: list[bytes]) -> Optional[int]:
        return None

    def walk(self, sources: list[bytes], dest: Item) -> Iterator[Item]:
        self.top = dest
        self.dirs[b""] = dest
        for src in sources:
            yield from self._source(src)
        # Revisits met before their original: resolved now that every record was read.
        for rv in self.revisits_left:
            yield self._revisit(rv, self._original(rv.digest))
        self.revisits_left = []

    def _dir(self, path: bytes) -> Item:
        """The item of a directory below the collection (made in this import or found);
        its missing parents are made first, top down (a URL may have thousands of
        segments: no recursion)."""
        item = self.dirs.get(path)
        if item is not None:
            return item
        missing = [path]
        while True:
            parent_path = missing[-1].rpartition(b"/")[0]
            if parent_path in self.dirs:
                break
            missing.append(parent_path)
        for here in reversed(missing):
            item = self._new_dir(here)
        return item

    def _new_dir(self, path: bytes) -> Item:
        parent_path, _, name = path.rpartition(b"/")
        parent = self.dirs[parent_path]
        node = self._name_in(parent, name)
        st = SimpleNamespace(st_mode=stat.S_IFDIR | 0o755, st_uid=self.uid, st_gid=self.gid,
                             st_atime_ns=time.time_ns(), st_mtime_ns=time.time_ns(), st_rdev=0)
        item = Item("dir", b"", parent, name, self.top.path + b"/" + path, st)
        if node is not None:
            if not node.is_dir:
                item.failed = f"{show_path(item.path)}: already there and not a directory"
            else:
                item.skip, item.ino, item.existing = True, node.id, node
        self.dirs[path] = item
        self._pending_dirs.append(item)
        return item

    def _file(self, path: bytes, data, mtime_ns: int, xattrs: list, identity: bytes,
              src: bytes, share: Optional[object] = None, digest: Optional[bytes] = None,
              where: str = "", prepared: Optional[tuple] = None) -> Optional[Item]:
        """A file item for a path below the collection; None when it is there already."""
        parent_path, _, name = path.rpartition(b"/")
        parent = self._dir(parent_path)
        st = SimpleNamespace(st_mode=stat.S_IFREG | 0o644, st_uid=self.uid, st_gid=self.gid,
                             st_atime_ns=mtime_ns, st_mtime_ns=mtime_ns, st_rdev=0)
        item = Item("file", self.top.path + b"/" + path, parent, name, self.top.path + b"/" + path, st)
        item.xattrs = xattrs
        item.size = len(data) if share is None else 0
        item.warc_identity = identity
        item.warc_where = where or show_path(item.path)     # its record, in messages
        item.warc_data, item.warc_digest, item.warc_share = data, digest, share
        item.warc_revisit = share is not None
        item.warc_prepared = prepared
        self.enqueue(item, len(data) if share is None else 0)
        item.warc_future = item.future
        return item

    def _free_path(self, stem: bytes, stamp_of, identity: bytes) -> tuple[bytes, bool]:
        """(the first capture path stem+stamp(n) not taken by another capture, True), or
        (its path, False) when this very capture (same identity) is already there."""
        n = 1
        while True:
            path = stem + stamp_of(n).encode()
            if path not in self.taken:
                parent_path, _, name = path.rpartition(b"/")
                parent = self.dirs.get(parent_path) if parent_path in self.dirs else None
                if parent is None:
                    parent = self._dir(parent_path)
                node = self._name_in(parent, name)
                if node is None:
                    self.taken.add(path)
                    return path, True
                try:
                    if self.ns.getxattr(node.id, b"user.warc.source") == identity:
                        return path, False
                except FsError:
                    pass
            n += 1

    def _source(self, src: bytes) -> Iterator[Item]:
        name = os.path.basename(src)
        self._pending_dirs: list[Item] = []
        index = [INDEX_HEADER.encode()]
        heads = io.BytesIO()
        keep = KEEP_DIR
        conf = self.store.conf
        volumes = self.store.archive.volumes
        preparing = Preparing(self.max_block, self.store.signature_fn is signature, conf.codec, conf.level,
                              self.store.catalog.path, conf.depth,
                              [[d.index, d.uuid, d.weight, d.index in volumes,
                                volumes[d.index].local_blocks if d.index in volumes else None]
                               for d in conf.disks])
        for rec in read_records_apart(os.fsdecode(src), preparing):
            if isinstance(rec, Problem):
                self._report(f"{show_path(src)}: offset {rec.offset}: {rec.text}")
                continue
            self.wc.records += 1
            capture = b"-"
            where = b"heads"
            ho = heads.tell()
            heads.write(rec.head)
            heads.write(rec.http)
            problem = rec.fields.get(b"x-problem")
            if problem:
                self._report(f"{show_path(src)}: offset {rec.offset}: {problem.decode()}; imported as read")
            item = None
            if rec.rtype in CAPTURE_TYPES:
                try:
                    item, capture = self._capture(src, name, rec)
                except (ValueError, RecursionError, OSError, FsError) as exc:   # one record's, not the import's
                    self._report(f"{show_path(src)}: offset {rec.offset}: its capture cannot be filed "
                                 f"({type(exc).__name__}: {exc}); kept in the heads only")
                    item, capture = None, b"-"
                if capture != b"-" and (item is None or item.kind == "file"):
                    # a decoded capture's file is the document: the entity as recorded stays in the heads
                    where = b"file" if rec.rtype != "revisit" and rec.document is None else b"heads"
            else:
                self.wc.other += 1
            if where == b"heads":
                for piece in payload_pieces(rec.payload, READ_CHUNK):
                    heads.write(piece)
            heads.write(rec.tail)
            index.append(b"\t".join([
                str(rec.offset).encode(), str(rec.length).encode(), rec.gzip or (b"gz" if rec.gz else b"-"),
                rec.rtype.encode() or b"-", str(ho).encode(), str(len(rec.head)).encode(),
                str(len(rec.http)).encode(), str(len(rec.payload)).encode(), str(len(rec.tail)).encode(),
                where, capture]) + b"\n")
            yield from self._drain_dirs()
            if item is not None:
                yield item
        # the kept files of this source
        idx = b"".join(index)
        hd = heads.getvalue()
        ident = name + b"\t" + hashlib.sha1(idx).hexdigest().encode()
        for suffix, data in ((INDEX_SUFFIX, idx), (HEADS_SUFFIX, hd)):
            path = self._kept_name(keep + b"/" + name + suffix, ident)
            if path is None:
                continue
            item = self._file(path, data, time.time_ns(), [(b"user.warc.source", ident)], ident, src)
            yield from self._drain_dirs()
            yield item

    def _name_in(self, parent: Item, name: bytes):
        """What is already under a name in a directory that was there before this
        import (one query per directory); a directory this import made has only
        the names it gave out."""
        if parent.ino is None or parent.existing is None:
            return None
        names = self.names_before.get(parent.ino)
        if names is None:
            if len(self.names_before) > 10_000:
                self.names_before.clear()
            names = self.names_before[parent.ino] = self.names_in(parent)
        return names.get(name)

    def _kept_name(self, path: bytes, ident: bytes) -> Optional[bytes]:
        n = 1
        base = path
        while True:
            parent_path, _, nm = path.rpartition(b"/")
            parent = self._dir(parent_path)
            node = self._name_in(parent, nm)
            if node is None and path not in self.taken:
                self.taken.add(path)
                return path
            if node is not None:
                try:
                    if self.ns.getxattr(node.id, b"user.warc.source") == ident:
                        return None
                except FsError:
                    pass
            n += 1
            path = base + b"~" + str(n).encode()

    def _drain_dirs(self) -> Iterator[Item]:
        while self._pending_dirs:
            d = self._pending_dirs.pop(0)
            if not d.skip or d.failed:
                yield d
            else:
                yield d          # skipped dirs still pass through (the batch counts them)

    def _capture(self, src: bytes, name: bytes, rec: Record) -> tuple[Optional[Item], bytes]:
        f = rec.fields
        rec.document, rec.undecoded = None, None
        if rec.rtype != "revisit" and rec.http:
            rec.document, rec.undecoded = decode_entity(rec.http, rec.payload)
        uri = f.get(b"warc-target-uri", b"")
        where = f"{show_path(src)}: offset {rec.offset}"
        if not uri:
            self._report(f"{where}: a {rec.rtype} record without a WARC-Target-URI; kept in the heads only")
            return None, b"-"
        clean = uri.strip(b" \t")
        if clean.startswith(b"<") and clean.endswith(b">"):
            clean = clean[1:-1].strip(b" \t")
        if clean != uri:
            self._report(f"{where}: WARC-Target-URI written as {show_path(uri)}; filed under {show_path(clean)}")
        date = f.get(b"arc-date") or f.get(b"warc-date", b"")
        try:
            urlpath.stamp(date.decode("ascii"))
        except (ValueError, UnicodeDecodeError):
            self._report(f"{where}: no usable date ({show_path(date)}); kept in the heads only")
            return None, b"-"
        stem = urlpath.url_to_path(clean).encode("utf-8", "surrogateescape")
        identity = name + b"\t" + str(rec.offset).encode()
        path, new = self._free_path(stem, lambda n: urlpath.stamp(date.decode("ascii"), n), identity)
        if not new:
            self.wc.already += 1
            if rec.rtype != "revisit" and digest_of(f) and digest_of(f) not in self.by_digest:
                self.by_digest[digest_of(f)] = self._stored_with_digest(digest_of(f))
            return None, path          # already imported: its index line names it all the same
        xattrs = [(b"user.warc.source", identity)]
        for xname, key in XATTR_FIELDS:
            if key in f:
                xattrs.append((xname, f[key]))
        if rec.arc:
            xattrs.append((b"user.warc.type", rec.rtype.encode()))
        if rec.http:
            first = rec.http.split(b"\n", 1)[0].split()
            if len(first) >= 2:
                xattrs.append((b"user.http.status", first[1]))
            for line in rec.http.split(b"\n")[1:]:
                k, sep, v = line.partition(b":")
                header = k.strip().lower()
                if sep and header in HTTP_XATTRS and HTTP_XATTRS[header] not in dict(xattrs):
                    xattrs.append((HTTP_XATTRS[header], v.strip(b" \t\r")))
        elif f.get(b"content-type") and rec.rtype == "resource":
            xattrs.append((b"user.http.content-type", f[b"content-type"]))
        xattrs = list(dict(xattrs).items())
        mtime = _date_ns(date)
        digest = f.get(b"warc-payload-digest")
        if rec.rtype == "revisit":
            self.wc.captures += 1
            rv = Revisit(path, rec.payload, mtime, xattrs, identity, src, digest, where, clean)
            orig = self._original(digest)
            if orig is None and digest:
                self.revisits_left.append(rv)   # its original may come later in this import
                return None, path
            return self._revisit(rv, orig), path
        data, prepared, check = self._as_shown(rec, where, xattrs, digest)
        item = self._file(path, data, mtime, xattrs, identity, src, digest=check, where=where, prepared=prepared)
        if digest and digest not in self.by_digest:
            self.by_digest[digest] = item
        self.wc.captures += 1
        self.wc.bytes += len(data)
        return item, path

    def _as_shown(self, rec: Record, where: str, xattrs: list, digest: Optional[bytes]):
        """(what the capture file holds, its preparation, the digest to check it
        against): the decoded document, its record's digest checked here over
        the entity as recorded; or that entity, as read, when it is not encoded
        or does not decode (said in an xattr and a problem line)."""
        if rec.undecoded:
            xattrs.append((b"user.http.decoded", b"no: " + rec.undecoded.encode()))
            self._report(f"{where}: {rec.undecoded}; the capture file holds the entity as recorded")
        if rec.document is None:
            return rec.payload, rec.prepared, digest
        xattrs.append((b"user.http.decoded", b"yes"))
        if rec.prepared is not None:
            matches = rec.prepared[1]
        else:
            check = DigestCheck(digest)
            check.update(rec.payload)
            matches = check.matches()
        if matches is False:
            self._report(f"{where}: WARC-Payload-Digest {show_path(digest)} does not match the payload; "
                         f"imported as read")
        return rec.document, None, None

    def _original(self, digest: Optional[bytes]):
        """The capture (Item of this import, or inode) whose payload has this digest, or None."""
        if not digest:
            return None
        orig = self.by_digest.get(digest)
        return orig if orig is not None else self._stored_with_digest(digest)

    def _revisit(self, rv: "Revisit", orig) -> Item:
        """A revisit's file: its original's blocks, or (none) what the record holds, said."""
        if orig is None:
            self.wc.revisits_unresolved += 1
            self._report(f"{rv.where}: revisit of {show_path(rv.uri)} whose original (digest "
                         f"{show_path(rv.digest or b'none')}) is not here; kept as an empty file")
            return self._file(rv.path, rv.payload, rv.mtime, rv.xattrs + [(b"user.warc.revisit", b"unresolved")],
                              rv.identity, rv.src)
        self.wc.revisits_resolved += 1
        return self._file(rv.path, b"", rv.mtime, rv.xattrs, rv.identity, rv.src, share=orig)

    def _stored_with_digest(self, digest: bytes) -> Optional[int]:
        """A file stored before this import whose payload has this digest (its inode):
        the catalog's captures are read once, in one query, on the first need."""
        if self.stored_digests is None:
            self.stored_digests = {}
            revisits = self.ns.inodes_with_xattr(b"user.warc.type", b"revisit")
            for value, ino in self.ns.xattr_values(b"user.warc.payload-digest"):
                if ino not in revisits:
                    self.stored_digests.setdefault(value, ino)
        ino = self.stored_digests.get(digest)
        if ino is not None:
            try:
                self.ns.get(ino)
            except FsError:
                return None          # deleted since
        return ino

    def _report(self, line: str) -> None:
        self.wc.problems.append(line)
        self.progress.note(line)

    # -- preparing (the pool's threads) and storing (the walking thread) ---------

    def _pieces(self, data, check: DigestCheck, sign: bool) -> Iterator[Piece]:
        """A payload (bytes or Payload) in pieces, fed to its digest check on the
        way (here, not in the walk: hashing releases the GIL); signed if asked."""
        sign_fn = self.store.signature_fn
        for piece in payload_pieces(data, self.max_block):
            check.update(piece)
            yield Piece(piece, sign_fn(piece) if sign else None)
        if not len(data):
            yield Piece(b"", sign_fn(b"") if sign else None)     # an empty capture is one empty block

    def prepare(self, item: Item) -> Optional[tuple[list[Piece], Optional[bool]]]:
        """A one-piece capture's pieces, signed, and the verdict of its digest
        check; None for a revisit and a capture longer than a block."""
        data = item.warc_data
        if item.warc_share is not None or len(data) > self.max_block:
            return None
        if item.warc_prepared is not None:
            sig, matches, encoded = item.warc_prepared
            return [Piece(data, sig or self.store.signature_fn(data), encoded)], matches
        check = DigestCheck(item.warc_digest)
        pieces = list(self._pieces(data, check, sign=True))
        return pieces, check.matches()

    def store_prepared(self, item: Item, prepared: Optional[tuple[list[Piece], Optional[bool]]]) -> None:
        """Store a capture: a revisit's original blocks, or its payload (bytes or
        Payload) as prepared or piece by piece; say whether it matched its WARC
        digest."""
        data, digest, share = item.warc_data, item.warc_digest, item.warc_share
        item.warc_data = item.warc_share = None          # held until stored, not until named
        if share is not None:
            self._share(item, share)
            return
        if prepared is not None:
            pieces, matches = prepared
            self.store_pieces(item, pieces)
        else:
            check = DigestCheck(digest)
            self.store_pieces(item, self._pieces(data, check, sign=False))
            matches = check.matches()
        if matches is False:
            item.warning = (f"{item.warc_where}: WARC-Payload-Digest "
                            f"{show_path(digest)} does not match the payload; imported as read")
        item.kept_rows = list(item.rows)

    def _count_file(self, item: Item) -> None:
        """A resolved revisit is counted as one (WarcCounts), not as a duplicate the
        size of its original: a first import of 0.8 MB said 12.3 MiB of duplicates."""
        if item.warc_revisit:
            self.counts.files += 1
            return
        super()._count_file(item)

    def _share(self, item: Item, orig) -> None:
        """A revisit: the original's blocks, one more reference each."""
        if isinstance(orig, Item):
            # walked earlier, so stored earlier by this same thread: settled
            try:
                orig.warc_future.result()
            except Exception:
                raise FsError(errno.ENOENT, "its original could not be imported") from None
            rows = orig.kept_rows
        else:
            rows = self.ns.contents(orig)
        taken = []
        try:
            for row in rows:
                taken.append(self.store.add_ref(row))
        except BaseException:
            for row in taken:
                self.store.release(row)
            raise
        item.rows = taken
        item.size = sum(r.size for r in rows)


def digest_of(fields: dict) -> Optional[bytes]:
    return fields.get(b"warc-payload-digest")


@functools.lru_cache(maxsize=4096)
def _date_ns(date: bytes) -> int:
    try:
        s = date.decode("ascii")
        if len(s) == 14 and s.isdigit():
            t = time.strptime(s, "%Y%m%d%H%M%S")
        else:
            t = time.strptime(s[:19], "%Y-%m-%dT%H:%M:%S")
        import calendar
        return calendar.timegm(t) * 1_000_000_000
    except (ValueError, UnicodeDecodeError):
        return time.time_ns()


def warc_summary(wc: WarcCounts, c, seconds: float, stopped: bool) -> list[str]:
    lines = [f"imported {wc.records} records from the web archive files in {seconds:.1f} s "
             f"({wc.records / max(seconds, 1e-6):.0f} records/s): {wc.captures} captures "
             f"({human(wc.bytes)} of payload), {wc.other} other records kept",
             f"  {c.dup_files} files ({human(c.dup_bytes)}) were duplicates, stored as references; "
             f"{wc.revisits_resolved} revisits resolved to their original, "
             f"{wc.revisits_unresolved} not; {c.new_blocks} new blocks; "
             f"{wc.already} captures already there"]
    problems = wc.problems + c.problems
    if problems:     # each was said on stderr as it was met (Progress.note): not twice
        lines.append(f"  {len(problems)} problem(s), each said on stderr above")
    if stopped:
        lines.append("  stopped before the end; run the same import again to go on")
    return lines


def import_warc(archive: OpenArchive, progress: admin.Progress, sources: list[str], dest: str,
                collection: Optional[str] = None, mount_dev: Optional[int] = None) -> admin.Result:
    """Import web archive files into the collection DEST/NAME."""
    if collection is None:
        base = os.path.basename(sources[0]) if sources else "warc"
        collection = re.sub(r"(\.w?arc)?(\.gz)?$", "", base) or "warc"
    if "/" in collection or collection in (".", "..", "") or "@" in collection:
        raise WebfsError(f"{collection!r}: a collection is one name, without '/' or '@'")
    started = time.monotonic()
    target = os.path.join(dest, collection)
    with recovery.names(archive) as ns:
        importer = WarcImporter.into(archive, ns, progress, mount_dev, collection=os.fsencode(collection),
                                     workers=PREPARE_WORKERS)
        counts = importer.run([os.fsencode(s) for s in sources], os.fsencode(target))
    seconds = time.monotonic() - started
    stopped = progress.stopping
    wc = importer.wc
    problems = wc.problems + counts.problems
    result = admin.Result(warc_summary(wc, counts, seconds, stopped), 4 if problems or stopped else 0)
    result.figures = {k: v for k, v in vars(wc).items()}
    result.figures.update(dup_files=counts.dup_files, dup_bytes=counts.dup_bytes,
                          new_blocks=counts.new_blocks, files=counts.files, seconds=round(seconds, 3),
                          stopped=stopped, collection=target, problems=problems)   # the records' and the store's
    return result


# ---------------------------------------------------------------- entities decoded

DECODED_MAX = 64 << 20      # a document decoded larger than this is kept as recorded (a bomb)


def _gunzip(data: bytes) -> bytes:
    out, z = [], zlib.decompressobj(16 + zlib.MAX_WBITS)
    size = 0
    while True:
        out.append(z.decompress(data, DECODED_MAX + 1 - size))
        size += len(out[-1])
        if size > DECODED_MAX:
            raise ValueError(f"larger than {DECODED_MAX >> 20} MiB decoded")
        if z.unconsumed_tail:
            data = z.unconsumed_tail
            continue
        if not z.eof:
            raise ValueError("cut short")
        data = z.unused_data
        if not data:
            return b"".join(out)
        z = zlib.decompressobj(16 + zlib.MAX_WBITS)     # a second member


def _inflate(data: bytes) -> bytes:
    try:                     # RFC 9110's deflate is zlib-wrapped; some servers send it raw
        return zlib.decompress(data)
    except zlib.error:
        return zlib.decompress(data, -zlib.MAX_WBITS)


def _unbrotli(data: bytes) -> bytes:
    import brotli            # pywb's dependency (brotlipy); not always installed
    return brotli.decompress(data)


CONTENT_DECODERS = {b"gzip": _gunzip, b"x-gzip": _gunzip, b"deflate": _inflate, b"br": _unbrotli}


CHUNK_SIZE_LINE = re.compile(rb"[0-9A-Fa-f]+[ \t]*(;[^\r\n]*)?\r?\n")


def dechunk(data: bytes) -> bytes:
    """The body of a ``Transfer-Encoding: chunked`` message (trailers dropped)."""
    out, p = [], 0
    while True:
        eol = data.find(b"\n", p)
        if eol < 0:
            raise ValueError("a chunk size line is cut short")
        size = int(data[p:eol].split(b";")[0].strip() or b"x", 16)
        p = eol + 1
        if size == 0:
            return b"".join(out)
        if p + size > len(data):
            raise ValueError("a chunk is cut short")
        out.append(data[p:p + size])
        p += size
        p += 2 if data[p:p + 2] == b"\r\n" else 1 if data[p:p + 1] == b"\n" else 0


def http_codings(http: bytes) -> tuple[list[bytes], list[bytes]]:
    """(transfer codings, content codings) an HTTP header block names, lowercase, in order."""
    found: dict[bytes, list[bytes]] = {b"transfer-encoding": [], b"content-encoding": []}
    for line in http.split(b"\n")[1:]:
        k, sep, v = line.partition(b":")
        if sep and k.strip().lower() in found:
            found[k.strip().lower()] += [c.strip().lower() for c in v.split(b",") if c.strip()]
    return ([c for c in found[b"transfer-encoding"] if c != b"identity"],
            [c for c in found[b"content-encoding"] if c != b"identity"])


def decode_entity(http: bytes, entity) -> tuple[Optional[bytes], Optional[str]]:
    """(the document a browser shows: dechunked, decompressed; or None, why not).
    (None, None) when the entity is not encoded."""
    transfer, content = http_codings(http)
    if not transfer and not content:
        return None, None
    if not isinstance(entity, bytes):
        return None, "longer than a record held in memory"
    data = entity
    try:
        for coding in reversed(transfer):
            if coding != b"chunked":
                return None, f"transfer coding {coding.decode('ascii', 'replace')} unknown"
            if CHUNK_SIZE_LINE.match(data):
                data = dechunk(data)
            # else the crawler recorded the body dechunked, as many do (warcio reads it so)
        for coding in reversed(content):
            decoder = CONTENT_DECODERS.get(coding)
            if decoder is None:
                return None, f"content coding {coding.decode('ascii', 'replace')} unknown"
            data = decoder(data)
    except ImportError:
        return None, "br: the brotli package is not installed"
    except Exception as exc:        # zlib.error, brotli.error, ValueError: damaged data
        return None, f"{b', '.join(transfer + content).decode('ascii', 'replace')} does not decode ({exc})"
    return (data, None) if data is not entity else (None, None)


# ---------------------------------------------------------------- reading a collection back

NOWHERE = (1 << 30, "")     # the order key of a capture whose place is not known: after every disk
GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03"   # what zlib writes for a level-6 member
PART_SUFFIX = ".part"       # an export's file until its last record is written
READERS = 12                # capture files read at once by export-warc (through a mount, reads overlap)
BATCH = 4                   # records read, made and compressed by one task of an export
PATH_ROOM = 3072            # bytes of a path given to the kernel at once (PATH_MAX is 4096)
AT_CWD = -100              # the "no directory fd" of MountTree._at (AT_FDCWD's value)
PROGRESS_EVERY = 0.25       # seconds between the export's progress reports (each a socket write in a mount)


@dataclass
class Where:
    """Where a capture file is, for reading it: its order key (the disk and the
    signature of its first block, the order of that disk's signature tree) and
    what the tree's ``fetch`` needs (a path, or the file's block rows)."""
    key: tuple[int, str]
    what: object


class MountTree:
    """A collection read through a mount (or any directory): plain file reads."""

    readers = READERS           # files read at once: through a mount, reads of small files overlap

    def __init__(self, root: str):
        self.name = root
        self.root = os.fsencode(root)

    @contextlib.contextmanager
    def _at(self, rel: bytes):
        """(a directory's fd or AT_FDCWD, a name in it) for a path below the root, however
        long: past PATH_MAX (a 6,000-byte URL's path) the directories on the way are
        opened a few at a time."""
        path = os.path.join(self.root, rel)
        if len(path) < PATH_ROOM:
            yield AT_CWD, path
            return
        *dirs, name = path.split(b"/")
        fd, step = AT_CWD, []
        try:
            for part in dirs + [None]:
                if part is not None and len(b"/".join(step + [part])) < PATH_ROOM:
                    step.append(part)
                    continue
                where = b"/".join(step) or b"/"
                new = os.open(where, os.O_RDONLY | os.O_DIRECTORY, dir_fd=None if fd == AT_CWD else fd)
                if fd != AT_CWD:
                    os.close(fd)
                fd, step = new, [part] if part is not None else []
            yield fd, name
        finally:
            if fd != AT_CWD:
                os.close(fd)

    def _open(self, rel: bytes, flags: int = os.O_RDONLY) -> int:
        with self._at(rel) as (fd, name):
            return os.open(name, flags, dir_fd=None if fd == AT_CWD else fd)

    def read(self, rel: bytes) -> bytes:
        with open(self._open(rel), "rb") as f:
            return f.read()

    def listdir(self, rel: bytes) -> list[bytes]:
        try:
            fd = self._open(rel, os.O_RDONLY | os.O_DIRECTORY)
        except (FileNotFoundError, NotADirectoryError):
            return []
        try:
            return sorted(os.fsencode(n) for n in os.listdir(fd))
        finally:
            os.close(fd)

    def close(self) -> None:
        pass

    def _stat(self, rel: bytes) -> os.stat_result:
        with self._at(rel) as (fd, name):
            return os.stat(name, dir_fd=None if fd == AT_CWD else fd)

    def size(self, rel: bytes) -> int:
        return self._stat(rel).st_size

    def mtime_ns(self, rel: bytes) -> int:
        return self._stat(rel).st_mtime_ns

    def signature(self, rel: bytes) -> str:
        with open(self._open(rel), "rb") as f:
            try:
                return os.getxattr(f.fileno(), "user.webfs.signature").decode()
            except OSError:
                return "sha1:" + hashlib.sha1(f.read()).hexdigest()

    def is_dir(self, rel: bytes) -> bool:
        try:
            return stat.S_ISDIR(self._stat(rel).st_mode)
        except OSError:
            return False

    def locate(self, paths: list[bytes], pool, ordered: bool) -> list[Where]:
        """Where each capture file is; with ``ordered``, its first block's disk and
        signature from the mount's virtual xattrs (two getxattr round trips a file,
        so in parallel); NOWHERE in a directory that is not a mount."""
        if not ordered:
            return [Where(NOWHERE, p) for p in paths]
        return list(pool.map(lambda p: Where(self._first_block(p), p), paths, chunksize=64))

    def _first_block(self, rel: bytes) -> tuple[int, str]:
        try:
            fd = self._open(rel)
        except OSError:
            return NOWHERE
        try:
            return (int(os.getxattr(fd, "user.webfs.disk").split(b",")[0]),
                    os.getxattr(fd, "user.webfs.signature").decode().split(",")[0])
        except (OSError, ValueError):
            return NOWHERE
        finally:
            os.close(fd)

    def fetch(self, where: Where) -> bytes:
        return self.read(where.what)


class DiskTree:
    """A collection read from an archive's catalog and blocks, without a mount:
    from the disks of an unmounted archive (``DISK:/NAME``), or, given the
    store of a mount's daemon, from inside the daemon (export-warc of a
    collection in a mount runs there)."""

    def __init__(self, disk: str, path: str, opened: Optional[OpenArchive] = None):
        """The collection at ``path`` of the archive of ``disk``, opened here and
        closed by ``close``; or of ``opened`` (left open), with its namespace."""
        from .namespace import Namespace
        self.name = path
        self.owns_store = opened is None
        # Reading only (versions, url, replay), as status and get: no lock, no S3 lease.
        self.store = open_archive(disk, lock=False) if opened is None else opened.store
        try:
            self.ns = (opened and opened.namespace) or Namespace(self.store)
            self.readers = 4 * len(self.store.archive.volumes)      # short reads, overlapped
            ino = ROOT_INODE
            for part in [p for p in os.fsencode(path).split(b"/") if p]:
                try:
                    ino = self.ns.lookup(ino, part).id
                except FsError as exc:
                    raise WebfsError(f"{path}: not in the archive ({exc})") from None
            self.top = ino
        except BaseException:
            self.close()
            raise

    def _ino(self, rel: bytes) -> int:
        ino = self.top
        for part in [p for p in rel.split(b"/") if p]:
            ino = self.ns.lookup(ino, part).id
        return ino

    def read(self, rel: bytes) -> bytes:
        return b"".join(self.store.read(row) for row in self.ns.contents(self._ino(rel)))

    def listdir(self, rel: bytes) -> list[bytes]:
        try:
            ino = self._ino(rel)
        except FsError:
            return []
        return sorted(self._entries(ino))

    def _entries(self, ino: int) -> dict:
        """A directory's entries, name -> Inode."""
        out, after = {}, 0
        while True:
            ents = self.ns.entries(ino, after)
            if not ents:
                return out
            out.update((name, node) for _, name, node in ents)
            after = ents[-1][0]

    def close(self) -> None:
        if self.owns_store:
            self.store.close()

    def size(self, rel: bytes) -> int:
        return self.ns.get(self._ino(rel)).size

    def mtime_ns(self, rel: bytes) -> int:
        return self.ns.get(self._ino(rel)).mtime_ns

    def signature(self, rel: bytes) -> str:
        return ",".join(r.sig for r in self.ns.contents(self._ino(rel)))

    def is_dir(self, rel: bytes) -> bool:
        try:
            return self.ns.get(self._ino(rel)).is_dir
        except FsError:
            return False

    def locate(self, paths: list[bytes], pool, ordered: bool) -> list[Where]:
        """Where each capture file is, from the catalog in a few queries: every
        directory listed once, the blocks of all the files asked for in a query
        per 500 (not a lookup per path component and file)."""
        listed: dict[bytes, dict] = {}
        nodes = []
        for p in paths:
            parent, _, name = p.rpartition(b"/")
            nodes.append(self._listing(listed, parent).get(name))
        blocks = self.ns.contents_of([n.id for n in nodes if n is not None and not n.is_dir])
        out = []
        for n in nodes:
            if n is None or n.is_dir:
                out.append(Where(NOWHERE, FsError(errno.EISDIR if n else errno.ENOENT)))
                continue
            rows = blocks.get(n.id, [])
            out.append(Where((rows[0].disk, rows[0].sig) if rows else NOWHERE, rows))
        return out

    def _listing(self, listed: dict, rel: bytes) -> dict:
        """The entries of a directory of the collection (none if it is not one), each
        directory on the way listed once."""
        names = listed.get(rel)
        if names is not None:
            return names
        names, here = listed.get(b"") or listed.setdefault(b"", self._entries(self.top)), b""
        for part in [p for p in rel.split(b"/") if p]:
            here = here + b"/" + part if here else part
            sub = listed.get(here)
            if sub is None:
                node = names.get(part)
                sub = listed[here] = self._entries(node.id) if node is not None and node.is_dir else {}
            names = sub
        return names

    def fetch(self, where: Where) -> bytes:
        if isinstance(where.what, Exception):
            raise where.what
        return b"".join(self.store.read(row) for row in where.what)


def open_tree(collection: str):
    place = archive_place(collection)
    if place is not None:
        return DiskTree(*place)
    if not os.path.isdir(collection):
        raise WebfsError(f"{collection}: not a directory, and not DISK:/NAME of an archive")
    return MountTree(collection)


@dataclass
class IndexLine:
    offset: int
    length: int
    gz: bool
    gzip: bytes                  # the gz column as written (gzip_recipe)
    rtype: str
    ho: int
    wl: int
    hl: int
    pl: int
    tl: int
    where: str
    capture: bytes


def parse_index(data: bytes) -> Iterator[IndexLine]:
    for line in data.split(b"\n"):
        if not line or line.startswith(b"#"):
            continue
        f = line.split(b"\t")
        yield IndexLine(int(f[0]), int(f[1]), f[2].startswith(b"gz"), f[2], f[3].decode(), int(f[4]), int(f[5]),
                        int(f[6]), int(f[7]), int(f[8]), f[9].decode(), f[10])


def kept_sources(tree) -> list[bytes]:
    """The source files a collection keeps (by the names of their index files)."""
    return [n[:-len(INDEX_SUFFIX)] for n in tree.listdir(KEEP_DIR) if n.endswith(INDEX_SUFFIX)]


def sources_in_import_order(tree) -> list[bytes]:
    """The kept source files in the order they were imported (their index file's
    mtime, set when the import wrote it), then by name."""
    return sorted(kept_sources(tree), key=lambda src: (tree.mtime_ns(KEEP_DIR + b"/" + src + INDEX_SUFFIX), src))


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


def _kept(tree, src: bytes) -> tuple[bytes, list[IndexLine]]:
    """A source file's heads and index lines, as the collection keeps them."""
    return (tree.read(KEEP_DIR + b"/" + src + HEADS_SUFFIX),
            list(parse_index(tree.read(KEEP_DIR + b"/" + src + INDEX_SUFFIX))))


def _disks_in_turn(keys: list[tuple[int, str]]) -> list[int]:
    """Indexes of ``keys`` in writing order: each disk's in its own order (by key),
    the disks interleaved so that each is spread evenly over the whole run."""
    by_disk: dict[int, list[int]] = {}
    for i in sorted(range(len(keys)), key=keys.__getitem__):
        by_disk.setdefault(keys[i][0], []).append(i)
    return [i for _, _, i in sorted(((j + 0.5) / len(q), d, i) for d, q in by_disk.items()
                                     for j, i in enumerate(q))]


def _in_order(tree, order: str, pool) -> Iterator[tuple[bytes, bytes, IndexLine, Optional[Where]]]:
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


def _record(tree, src: bytes, heads: bytes, ln: IndexLine, where: Optional[Where],
            duplicates: str) -> tuple[bytes, bool, bytes]:
    """One record's bytes, whether they are byte-identical to the source's, and
    the gz column to make its gzip member with (b"" when not identical)."""
    p = ln.ho
    head = heads[p:p + ln.wl]
    p += ln.wl
    http = heads[p:p + ln.hl]
    p += ln.hl
    identical = True
    if where is None:
        payload = heads[p:p + ln.pl]
        p += ln.pl
    else:
        try:
            payload = tree.fetch(where)
        except (OSError, FsError, WebfsError) as exc:
            raise WebfsError(f"{show_path(ln.capture)}: cannot be read: {exc}") from None
    tail = heads[p:p + ln.tl]
    if ln.rtype == "revisit" and duplicates == "full" and ln.capture != b"-" and head.startswith(b"WARC/"):
        try:
            payload = tree.read(ln.capture)
        except (OSError, FsError, WebfsError):
            payload = b""
        if payload:
            head = _set_header(head, b"WARC-Type", b"response")
            for h in (b"WARC-Refers-To", b"WARC-Refers-To-Target-URI", b"WARC-Refers-To-Date",
                      b"WARC-Profile", b"WARC-Block-Digest"):
                head = _set_header(head, h, None)
            identical = False
    if not head.startswith(b"WARC/"):
        return _arc_to_warc(head, ln.rtype, http, payload, src + b"\t" + str(ln.offset).encode()), False, b""
    if len(http) + len(payload) != ln.hl + ln.pl or not identical:
        head = _set_header(head, b"Content-Length", str(len(http) + len(payload)).encode())
        if not head.endswith(b"\r\n\r\n"):
            head = head.rstrip(b"\r\n") + b"\r\n\r\n"
        identical = False
        tail = b"\r\n\r\n"
    return head + http + payload + tail, identical, ln.gzip if identical else b""


def _members(tree, batch: list[tuple], duplicates: str, gz: bool = True) -> list[tuple[bytes, bool, bool, int]]:
    """A batch of records as gzip members (plain records unless ``gz``): (member,
    record byte-identical, the source's very member, record bytes) each. Run in
    the export's threads: the reads of a batch overlap those of the others, and
    zlib lets go of the GIL."""
    out = []
    for rec in batch:
        data, identical, recipe = _record(tree, *rec, duplicates)
        member, same_member = _gzip_member(data, recipe) if gz else (data, False)
        out.append((member, identical, same_member, len(data)))
    return out


def _batches(items: Iterator[tuple], size: int) -> Iterator[list[tuple]]:
    batch: list[tuple] = []
    for item in items:
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


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

    def check(self, name: str) -> None:
        """Refuse a name the export may not take, or its .part (before anything is written)."""
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
    tree = DiskTree("", collection, opened=archive)
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
    figures = {"records": 0, "identical": 0, "gzip_identical": 0, "bytes": 0, "files": []}
    files = OutFiles(out, split, force)
    files.check(files.name(1))          # refused before a record is read
    told, last = 0, time.monotonic()
    try:
        for member, identical, same_member, size in collection_members(tree, duplicates, order, files.gz):
            files.write(member)
            testkill.point("export-after-member")
            figures["records"] += 1
            figures["identical"] += identical
            figures["gzip_identical"] += same_member
            figures["bytes"] += size
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
    share = figures["identical"] / figures["records"] if figures["records"] else 1.0
    return admin.Result([f"exported {figures['records']} records ({human(figures['bytes'])}) into "
                         f"{len(figures['files'])} file(s); {figures['identical']} ({share:.0%}) byte-identical "
                         f"to the records imported, {figures['gzip_identical']} of them in the very gzip "
                         "member of the source"], 0, figures)


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


# ---------------------------------------------------------------- the whole archive as a tree (versions, url)

def open_target(target: str):
    """The whole archive as a tree: a mount point, or any disk of an unmounted archive."""
    if is_url(target) or os.path.isfile(os.path.join(target, "WEBFS-DISK")):
        return DiskTree(target, "/")
    if not os.path.isdir(target):
        raise WebfsError(f"{target}: not a mount point or a disk of an archive")
    return MountTree(target)
