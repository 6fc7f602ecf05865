"""What a collection made by ``webfs import-warc`` keeps, and the reading of it
back: its layout, its index files, and the collection (or the whole archive) as a tree to read, through a mount
or from the disks of an unmounted archive.

The import is webfs.warcimport's, the export webfs.warcexport's; both, and
webfs.replay and webfs.versions, read a collection through this module.
The source files are read by webfs.warcread.

What a collection ``NAME`` keeps of a source file ``x.warc.gz``
(webfs-format(5), WEB ARCHIVE FILES):

- every response, resource and revisit capture as the file
  ``NAME/`` + urlpath.capture_path(URI, date, n), holding the payload as
  stored (after the HTTP header block, transfer and content encodings kept);
  a revisit whose original is there gets the original's blocks;
- ``NAME/@warc/x.warc.gz.index``: one text line per record (see INDEX_HEADER);
- ``NAME/@warc/x.warc.gz.heads``: per record, its raw WARC header block and
  HTTP header block, the whole block of records that are not captures
  (request, metadata, warcinfo, ...), and the bytes after the block;
- another source file of the same name, imported into the collection later,
  as ``x.warc.gz.index~2`` and ``x.warc.gz.heads~2`` (``Source``).

Both are ordinary files (blocks, MANIFEST lines), so the recovery tools get
them back, and the source file's records can be rebuilt with ``head -c``.
"""
from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import stat
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator, NamedTuple, Optional

from . import walkread
from .admin import Progress, Result
from .archive import archive_place
from .backends import BackendOptions, is_url
from .errors import FsError, WebfsError
if TYPE_CHECKING:
    from .assembly import OpenArchive


KEEP_DIR = b"@warc"                  # at the top of a collection: webfs's own names
INDEX_SUFFIX = b".index"
HEADS_SUFFIX = b".heads"
INDEX_HEADER = ("# webfs warc index 1\toffset\tlength\tgzip\ttype\theads-offset\twarc-header"
                "\thttp-header\tpayload\ttail\tpayload-in\tcapture\n")
# ---------------------------------------------------------------- reading a collection back

NOWHERE = (1 << 30, "")     # the order key of a capture whose place is not known: after every disk
READERS = 12                # capture files read at once by export-warc (through a mount, reads overlap)
LISTING_PAGE = 1000         # a directory's entries asked of the catalog at once
PATH_ROOM = 3072            # bytes of a path given to the kernel at once (PATH_MAX is 4096)
AT_CWD = -100              # the "no directory fd" of MountTree._at (AT_FDCWD's value)


@dataclass
class Where:
    """Where a capture file is, for reading it: its order key (the disk and the
    signature of its first block, the order of that disk's signature tree),
    what the tree's ``fetch`` needs (a path, or the file's block rows), and
    the inode number of the file a walk of the catalog found there (None
    through a mount, where the name is read when the file is): what is read
    is that file, or nothing if it went meanwhile (webfs.walkread)."""
    key: tuple[int, str]
    what: object
    ino: Optional[int] = None


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
        fd, step, size = AT_CWD, [], 0      # size: len(b"/".join(step)), kept as it grows (a
        try:                                # 2,000-segment path joined at each step took seconds)
            for part in dirs + [None]:
                grown = size + len(part) + (1 if step else 0) if part is not None else PATH_ROOM
                if grown < PATH_ROOM:
                    step.append(part)
                    size = grown
                    continue
                where = b"/".join(step) or b"/"
                new = os.open(where, os.O_RDONLY | os.O_DIRECTORY, dir_fd=None if fd == AT_CWD else fd)
                if fd != AT_CWD:
                    os.close(fd)
                fd, step = new, [part] if part is not None else []
                size = len(part) if part is not None else 0
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

    def read_at(self, rel: bytes, offset: int, size: int) -> bytes:
        """``size`` bytes of a file from ``offset`` (fewer at its end)."""
        fd = self._open(rel)
        try:
            out = b""
            while len(out) < size:
                got = os.pread(fd, size - len(out), offset + len(out))
                if not got:
                    break
                out += got
            return out
        finally:
            os.close(fd)

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

    def __init__(self, disk: str, path: str, options: Optional[BackendOptions],
                 opened: Optional[OpenArchive] = None):
        """The collection at ``path`` of the archive of ``disk``, opened here
        with ``options`` (the command line's, for S3 disks and leases; None:
        the defaults) and closed by ``close``; or of ``opened`` (left open),
        with its namespace."""
        # here: replay of a collection in a mount opens no archive, and loads no store
        from .assembly import open_archive
        from .namespace import ROOT_INODE, Namespace
        self.name = path
        self.owns_store = opened is None
        self._last: Optional[tuple[int, bytes]] = None     # read_at's last block: (its id, its bytes)
        # Reading only (versions, url, replay), as status and get: no lock, no S3 lease.
        self.store = open_archive(disk, lock=False, options=options) if opened is None else opened.store
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

    def inode(self, rel: bytes) -> int:
        """The inode number of a path of the collection (FsError if none)."""
        return self._ino(rel)

    def _ino(self, rel: bytes) -> int:
        ino = self.top
        for part in [p for p in rel.split(b"/") if p]:
            ino = self.ns.lookup(ino, part).id
        return ino

    def read(self, rel: bytes) -> bytes:
        """A file's bytes; FsError ENOENT if it is not there, or went between the
        lookup of its name and the read of its blocks (webfs.walkread)."""
        ino = self._ino(rel)
        data = walkread.read_found(self.ns, self.store, ino, self.ns.contents(ino, named=True))
        if data is None:
            raise FsError(errno.ENOENT, f"{os.fsdecode(rel)}: removed as it was read")
        return data

    def read_at(self, rel: bytes, offset: int, size: int) -> bytes:
        """Up to ``size`` bytes of a file from ``offset``: only the blocks they are
        in are read, the last one kept for the next call (a search's steps)."""
        out, at = [], 0
        for row in self.ns.contents(self._ino(rel)):
            if at < offset + size and at + row.size > offset:
                if self._last is None or self._last[0] != row.id:
                    self._last = (row.id, self.store.read(row))
                out.append(self._last[1][max(0, offset - at):offset + size - at])
            at += row.size
        return b"".join(out)

    def listdir(self, rel: bytes) -> list[bytes]:
        try:
            ino = self._ino(rel)
        except FsError:
            return []
        return sorted(self._entries(ino))

    def _entries(self, ino: int) -> dict:
        """A directory's entries, name -> Inode: a query a page, a short page the
        last (not one more to find nothing: an export lists every directory of
        the collection, 2,600 in the bench's)."""
        out, after = {}, 0
        while True:
            ents = self.ns.entries(ino, after, LISTING_PAGE)
            out.update((name, node) for _, name, node in ents)
            if len(ents) < LISTING_PAGE:
                return out
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

    def sizes_below(self) -> dict[bytes, int]:
        """The size of every file of the collection, by its path."""
        return {path: node.size for path, node in self.files_below().items()}

    def files_below(self) -> dict:
        """Every file of the collection (an Inode), by its path: each directory
        listed once, the directories of a level 500 to a query (replay lays out
        11,000 captures in 2,600 directories; a query per directory took 0.1 s of
        CPU, a lookup per file half a second)."""
        out: dict = {}
        level = {self.top: b""}         # directories by inode -> their paths
        while level:
            below = {}
            for parent, name, node in self.ns.entries_of(list(level)):
                path = level[parent] + b"/" + name if level[parent] else name
                if node.is_dir:
                    below[node.id] = path
                else:
                    out[path] = node
            level = below
        return out

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
            out.append(Where((rows[0].disk, rows[0].sig) if rows else NOWHERE, rows, n.id))
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

    def fetch(self, where: Where) -> Optional[bytes]:
        """A capture file's bytes as the walk found its blocks; None when that
        file went since (webfs.walkread)."""
        if isinstance(where.what, Exception):
            raise where.what
        return walkread.read_found(self.ns, self.store, where.ino, where.what)


def open_tree(collection: str, options: BackendOptions):
    """A collection to read: DISK:/NAME (its disks opened with ``options``), or a
    directory of a mount."""
    place = archive_place(collection)
    if place is not None:
        return DiskTree(*place, options)
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

    @property
    def payload_at(self) -> int:
        """Where in the source's kept heads its payload is, or would be: past its WARC and HTTP headers."""
        return self.ho + self.wl + self.hl

    def warc_head(self, heads: bytes) -> bytes:
        return heads[self.ho:self.ho + self.wl]

    def http_head(self, heads: bytes) -> bytes:
        return heads[self.ho + self.wl:self.payload_at]


def parse_index(data: bytes) -> Iterator[IndexLine]:
    for line in data.split(b"\n"):
        if not line or line.startswith(b"#"):
            continue
        f = line.split(b"\t")
        yield IndexLine(int(f[0]), int(f[1]), f[2].startswith(b"gz"), f[2], f[3].decode(), int(f[4]), int(f[5]),
                        int(f[6]), int(f[7]), int(f[8]), f[9].decode(), f[10])


class Source(NamedTuple):
    """A source file a collection keeps: its name, and which source of that name
    it is. import-warc keeps the first file named F as ``@warc/F.index``,
    ``F.heads`` and ``F.cdxj``; another file named F, imported into the same
    collection later, as ``F.index~2``, ``F.heads~2``, ``F.cdxj~2`` (``~3``
    for a third...). Each is a source of its own, called ``F~N`` in messages."""
    name: bytes
    n: int = 1

    def file_name(self, suffix: bytes) -> bytes:
        """The name in @warc/ of one of its kept files (INDEX_SUFFIX, HEADS_SUFFIX, ...)."""
        return self.name + suffix + (b"~%d" % self.n if self.n > 1 else b"")

    def path(self, suffix: bytes, top: bytes = b"") -> bytes:
        """The path of that file in the collection, or in the tree whose
        collection is at ``top``."""
        return _keep_dir(top) + b"/" + self.file_name(suffix)

    @property
    def label(self) -> bytes:
        """What messages call it: F, or F~N."""
        return self.file_name(b"")

    @property
    def index_name(self) -> bytes:
        """Its index file's name in @warc/, which names it without ambiguity (``source_of``)."""
        return self.file_name(INDEX_SUFFIX)


def _keep_dir(top: bytes) -> bytes:
    return (top + b"/" if top else b"") + KEEP_DIR


_INDEX_NAME = re.compile(rb"(.+)" + re.escape(INDEX_SUFFIX) + rb"(?:~([2-9]|[1-9][0-9]+))?\Z", re.S)


def source_of(index_name: bytes) -> Optional[Source]:
    """The source whose index file has this name in @warc/ (F.index, F.index~N);
    None for any other name."""
    m = _INDEX_NAME.match(index_name)
    return m and Source(m.group(1), int(m.group(2) or 1))


def kept_sources(tree, top: bytes = b"") -> list[Source]:
    """The source files a collection keeps (by the names of their index files),
    each of a name imported again too (F.index~2): every reader of a
    collection's sources (export-warc, replay, url) takes them from here.
    ``top``: the collection's directory in ``tree``, if not its root."""
    return [src for src in map(source_of, tree.listdir(_keep_dir(top))) if src is not None]


def collection_tops(tree) -> tuple[list[bytes], bool]:
    """(the directories to look for captures in, whether the tree is one
    collection): the tree itself and the collections in it, if it keeps web
    archive files (@warc/); else every top directory, whether or not it does
    (captures copied in as files are found too), and the collections in each."""
    if tree.is_dir(KEEP_DIR):
        return [b""] + _collections_in(tree, b""), True
    out = []
    for c in tree.listdir(b""):
        if not c.startswith(b".") and tree.is_dir(c):
            out += [c] + _collections_in(tree, c)
    return out, False


def _collections_in(tree, top: bytes) -> list[bytes]:
    """The collections inside the directory ``top`` of a tree (import-warc into
    a directory of the archive, or of a collection): its directories that keep
    web archive files (@warc/), and the collections in each of those."""
    out = []
    for name in tree.listdir(top):
        rel = top + b"/" + name if top else name
        if name != KEEP_DIR and b"@" not in name and tree.is_dir(rel + b"/" + KEEP_DIR):
            out += [rel] + _collections_in(tree, rel)
    return out


def sources_in_import_order(tree) -> list[Source]:
    """The kept source files in the order they were imported (their index file's
    mtime, set when the import wrote it), then by name."""
    return sorted(kept_sources(tree), key=lambda src: (tree.mtime_ns(src.path(INDEX_SUFFIX)), src))


# ---------------------------------------------------------------- the whole archive as a tree (versions, url)

def open_target(target: str, options: BackendOptions):
    """The whole archive as a tree: a mount point, or any disk of an unmounted
    archive (opened with ``options``)."""
    if is_url(target) or os.path.isfile(os.path.join(target, "WEBFS-DISK")):
        return DiskTree(target, "/", options)
    if not os.path.isdir(target):
        raise WebfsError(f"{target}: not a mount point or a disk of an archive")
    return MountTree(target)


def file_sizes(archive, progress: Progress, collection: str) -> Result:
    """The admin command replay asks a mount's daemon: the size of every file of a
    collection, by its path in the collection."""
    tree = DiskTree("", collection, None, opened=archive)
    try:
        return Result(figures={"sizes": {os.fsdecode(p): n for p, n in tree.sizes_below().items()}})
    finally:
        tree.close()
