"""``webfs import-warc``: web archive files into a collection.

The import is the bulk import of webfs.ingest fed by records instead of a
walk of directories: a source (``WarcSource``) whose items carry their bytes. So it
has the same batches (one catalog commit per batch), the same promise
(a capture counted as imported survives ``kill -9``), the same resume.
A per-record gzip file is read, and its captures signed, checked against
their digests and compressed, by a process of its own
(warcapart.read_records_apart). What the collection keeps of each source
file is webfs.warc's layout.
"""
from __future__ import annotations

import errno
import functools
import hashlib
import io
import logging
import os
import re
import stat
import time
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Iterator, Optional

from . import admin, cdxj, recovery, testkill, urlpath
from .admin import human
from .errors import FsError, WebfsError
from .importsource import Item, Source, show_path
from .assembly import OpenArchive
from .ingest import Counts, Importer
from .signature import signature
from .store import Piece
from .capture import CAPTURE_TYPES, file_record
from .warc import HEADS_SUFFIX, INDEX_HEADER, INDEX_SUFFIX, KEEP_DIR
from .warcapart import Preparing, read_records_apart
from .walkread import take_all, take_found
from .warcread import READ_CHUNK, DigestCheck, Problem, Record, payload_pieces

log = logging.getLogger(__name__)


# Threads preparing the chunks of captures (webfs.ingest: the catalog's twins,
# compression, and signing and digest checks where the reading process did
# not); the walking thread stores them. Records are in memory, so unlike a
# tree's files no thread waits on a disk, and a parse thread or storing
# threads of their own only passed the interpreter lock around (a store
# thread spent nearly twice the CPU of one alone): parsing went to another
# process instead.
PREPARE_WORKERS = 2

UNRESOLVED = (b"user.warc.revisit", b"unresolved")     # a revisit kept without its original's blocks
# Besides its source's name and offset, what tells a capture already imported
# from another record at that place (xattr, the record's field), where both have it.
SAME_RECORD = ((b"user.warc.record-id", b"warc-record-id"), (b"user.warc.payload-digest", b"warc-payload-digest"))

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
    kept_new_blocks: int = 0     # the new blocks of the files kept in @warc/ (index, heads, CDXJ),
                                 # counted apart from the captures' (ingest.Counts, by Item.apart)
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


class WarcSource(Source):
    """The source of an import fed records of web archive files instead of a tree."""

    def __init__(self, importer, collection: bytes):
        super().__init__(importer)
        self.collection = collection
        self.wc = WarcCounts()
        self.dirs: dict[bytes, Item] = {}          # path below the collection -> its directory item
        self.by_digest: dict[bytes, object] = {}   # payload digest -> Item (this import) or inode
        self.taken: set[bytes] = set()             # capture paths given out in this import
        self.names_before: dict[int, dict] = {}  # directory inode -> its names before this import
        self.stored_digests: Optional[dict] = None # payload digest -> inode, of earlier imports
        self.revisits_left: list[Revisit] = []     # revisits whose original was not met yet
        self.kept = Counts()          # what the kept files of @warc/ add: not captures (Item.apart)

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
        item.shares = share is not None
        item.warc_prepared = prepared
        self.enqueue(item, len(data) if share is None else 0)
        item.warc_future = item.future
        return item

    def _free_path(self, stem: bytes, first: bytes, stamp_of, identity: bytes,
                   fields: Optional[dict] = None) -> tuple[bytes, bool]:
        """(the first capture path stem+stamp(n) not taken by another capture, True), or
        (its path, False) when this very capture is already there: the same
        identity (source name and offset) and, where both have them, the same
        WARC-Record-ID and payload digest (``fields``: the record's; another file
        of the same name can hold another record at that offset); ``first``:
        stamp(1), ``stamp_of(n)`` the others'."""
        n = 1
        while True:
            path = stem + (first if n == 1 else stamp_of(n))
            if path not in self.taken:
                parent_path, _, name = path.rpartition(b"/")
                parent = self.dirs.get(parent_path) if parent_path in self.dirs else None
                if parent is None:
                    parent = self._dir(parent_path)
                node = self._name_in(parent, name)
                if node is None:
                    self.taken.add(path)
                    return path, True
                if self._holds(node.id, b"user.warc.source", identity) and all(
                        self._holds(node.id, xattr, fields[key], True)
                        for xattr, key in SAME_RECORD if key in (fields or {})):
                    return path, False
            n += 1

    def _holds(self, ino: int, name: bytes, value: bytes, missing: bool = False) -> bool:
        """Does the inode's xattr ``name`` hold ``value``? (``missing``: the answer
        when it has no such xattr.)"""
        try:
            return self.ns.getxattr(ino, name) == value
        except FsError:
            return missing

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
        sizes: dict[bytes, int] = {}        # the capture files of the records shown from them,
        payloads: dict[bytes, bytes] = {}   # and those the CDXJ indexer reads (no payload digest)
        cdx_keys: dict[int, tuple] = {}     # the CDXJ keys the reading process made
        for rec in read_records_apart(os.fsdecode(src), preparing, cdx_keys):
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
            else:
                sizes[capture] = len(rec.payload)
                if not rec.fields.get(b"warc-payload-digest", b"").strip() and isinstance(rec.payload, bytes):
                    payloads[capture] = rec.payload
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
        lines = cdxj.at_import(name, idx, hd, sizes, payloads, cdx_keys)
        for suffix, data in ((INDEX_SUFFIX, idx), (HEADS_SUFFIX, hd), (cdxj.CDXJ_SUFFIX, lines)):
            if data is None:
                continue
            path = self._kept_name(keep + b"/" + name + suffix, ident)
            if path is None:
                continue
            item = self._file(path, data, time.time_ns(), [(b"user.warc.source", ident)], ident, src)
            item.apart = self.kept         # not a capture: its duplicates and new blocks counted apart
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
                if self._holds(node.id, b"user.warc.source", ident):
                    return None
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
        filed = rec.filed or file_record(rec)      # the reading process's, or this one's
        where = f"{show_path(src)}: offset {rec.offset}"
        if filed.unfiled == "WARC-Target-URI":
            self._report(f"{where}: a {rec.rtype} record without a WARC-Target-URI; kept in the heads only")
            return None, b"-"
        uri = f[b"warc-target-uri"]
        if filed.uri != uri:
            self._report(f"{where}: WARC-Target-URI written as {show_path(uri)}; filed under {show_path(filed.uri)}")
        if filed.unfiled:
            date = f.get(b"arc-date") or f.get(b"warc-date", b"")
            self._report(f"{where}: no usable date ({show_path(date)}); kept in the heads only")
            return None, b"-"
        identity = name + b"\t" + str(rec.offset).encode()
        path, new = self._free_path(filed.stem, filed.stamp,
                                    lambda n: urlpath.stamp(filed.date, n).encode(), identity, f)
        if not new:
            self.wc.already += 1
            if rec.rtype != "revisit" and digest_of(f) and digest_of(f) not in self.by_digest:
                self.by_digest[digest_of(f)] = self._stored_with_digest(digest_of(f))
            return None, path          # already imported: its index line names it all the same
        xattrs = [(b"user.warc.source", identity), *filed.xattrs]
        mtime = filed.mtime_ns
        digest = f.get(b"warc-payload-digest")
        if rec.rtype == "revisit":
            self.wc.captures += 1
            rv = Revisit(path, rec.payload, mtime, xattrs, identity, src, digest, where, filed.uri)
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
        or does not decode (said in an xattr and a problem line). The reading
        process prepares what the file holds: a document, signed and encoded,
        with the verdict on the entity's digest, said here."""
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
        return rec.document, rec.prepared and (rec.prepared[0], None, rec.prepared[2]), None

    def _original(self, digest: Optional[bytes]):
        """The capture (Item of this import, or inode) whose payload has this digest, or None."""
        if not digest:
            return None
        orig = self.by_digest.get(digest)
        return orig if orig is not None else self._stored_with_digest(digest)

    def _revisit(self, rv: "Revisit", orig) -> Item:
        """A revisit's file: its original's blocks, or (none) what the record holds, said."""
        if orig is None:
            self._unresolved(rv, "")
            return self._file(rv.path, rv.payload, rv.mtime, rv.xattrs + [UNRESOLVED], rv.identity, rv.src)
        self.wc.revisits_resolved += 1
        item = self._file(rv.path, b"", rv.mtime, rv.xattrs, rv.identity, rv.src, share=orig)
        item.warc_revisit = rv
        return item

    def _unresolved(self, rv: "Revisit", why: str) -> None:
        self.wc.revisits_unresolved += 1
        self._report(f"{rv.where}: revisit of {show_path(rv.uri)} whose original (digest "
                     f"{show_path(rv.digest or b'none')}) is not here{why}; kept as an empty file")

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
            if self._share(item, share):
                return
            data = self._original_gone(item)
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

    def _original_gone(self, item: Item):
        """A revisit whose original went before its blocks were taken: kept as one
        whose original is not here (as if it had never been stored), said and
        counted so; what it holds is its record's payload."""
        rv, item.warc_revisit = item.warc_revisit, None
        self.wc.revisits_resolved -= 1
        self._unresolved(rv, " (removed during this import)")
        item.xattrs, item.shares = rv.xattrs + [UNRESOLVED], False
        return rv.payload

    def _share(self, item: Item, orig) -> bool:
        """A revisit: the original's blocks, one more reference each; False (none
        taken) when the original, stored before this import and found by its
        inode, has no name left (removed, or renamed over, since)."""
        if isinstance(orig, Item):
            # walked earlier, so stored earlier by this same thread: settled
            try:
                orig.warc_future.result()
            except Exception:
                raise FsError(errno.ENOENT, "its original could not be imported") from None
            taken = take_all(self.store, orig.kept_rows)
        else:
            testkill.point("import-before-refs")
            taken = take_found(self.ns, self.store, orig)
            if taken is None:
                return False
        item.rows = taken
        item.size = sum(r.size for r in taken)
        item.warc_revisit = None
        return True


def digest_of(fields: dict) -> Optional[bytes]:
    return fields.get(b"warc-payload-digest")


def warc_summary(wc: WarcCounts, c, seconds: float, stopped: bool) -> list[str]:
    lines = [f"imported {wc.records} records from the web archive files in {seconds:.1f} s "
             f"({wc.records / max(seconds, 1e-6):.0f} records/s): {wc.captures} captures "
             f"({human(wc.bytes)} of payload), {wc.other} other records kept",
             f"  {c.dup_files} captures ({human(c.dup_bytes)}) were duplicates, stored as references; "
             f"{wc.revisits_resolved} revisits resolved to their original, "
             f"{wc.revisits_unresolved} not; {c.new_blocks} new blocks of captures "
             f"({wc.kept_new_blocks} more for the files kept in @warc/); "
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
        importer = Importer.into(archive, ns, progress, mount_dev, workers=PREPARE_WORKERS,
                                 source=functools.partial(WarcSource, collection=os.fsencode(collection)))
        counts = importer.run([os.fsencode(s) for s in sources], os.fsencode(target))
    seconds = time.monotonic() - started
    stopped = progress.stopping
    wc = importer.source.wc
    wc.kept_new_blocks = importer.source.kept.new_blocks
    problems = wc.problems + counts.problems
    result = admin.Result(warc_summary(wc, counts, seconds, stopped), 4 if problems or stopped else 0)
    result.figures = {k: v for k, v in vars(wc).items()}
    result.figures.update(dup_files=counts.dup_files, dup_bytes=counts.dup_bytes,
                          new_blocks=counts.new_blocks, files=counts.files, seconds=round(seconds, 3),
                          stopped=stopped, collection=target, problems=problems)   # the records' and the store's
    return result
