"""Replay of an archive's collections by pywb, without copying them into WARCs.

This module owns the serving of a collection's *virtual WARC files*
(``webfs.cdxj``: one per source file kept in ``@warc/``, named apart here):
for a collection in a mount, their layout handed to its daemon, which shows
them as files of ``.webfs/warc/`` (``webfs.warcview``) that pywb reads as
local ``archive_paths``; otherwise over HTTP with byte ranges (127.0.0.1 by
default); and the pywb config naming every collection served.

It also owns ``PYWBDIR/webfs-cdxj/``, the CDXJ indexes kept between starts:
per collection ``COLL.cdxj``, the sorted index pywb reads, merged from one
cache file per source file, ``COLL/NAME.cdxj``, whose first line is the key
of what it indexes (the source's kept ``.index`` and ``.heads`` and the
sizes of its captures, which fix every offset of its virtual file). A start
takes a source's lines from there, else from the ``@warc/F.cdxj`` import-warc
made if its key is current, and indexes again only the sources left, so a
collection starts without reading a capture. A record pywb's indexer cannot
index is left out of the lines, and said at every start (the cache file
keeps what to say, after its key). ``write_file`` is the one place
replay writes files outside the archive.
"""
from __future__ import annotations

import collections
import heapq
import logging
import os
import re
import stat
from typing import TYPE_CHECKING, Optional

from . import control, warc, warcview
from .cdxj import KEY_PREFIX, VirtualFile, index_served, kept_lines, key_of, laid_out
from .files import write_file as write_new
from .errors import WebfsError
from .importsource import show_path

if TYPE_CHECKING:
    from .backends import BackendOptions

log = logging.getLogger(__name__)

def virtual_files(tree) -> dict[str, VirtualFile]:
    """name -> virtual file, one per source file the collection keeps."""
    return laid_out(tree, collection_sizes(tree))


def collection_sizes(tree) -> Optional[dict[bytes, int]]:
    """The size of every file of a collection, by path, in one pass: listed from
    the catalog, or asked of the daemon of the webfs mount it is in (a stat of
    each capture through the mount is a round trip to the daemon, and cold it
    made most of replay's first start); None for a plain directory (each
    virtual file stats its captures)."""
    if isinstance(tree, warc.DiskTree):
        return tree.sizes_below()
    found = control.mount_of(tree.name)
    if found is None:
        return None
    got = control.call(found[0], "file-sizes", {"collection": found[1]})      # warc.file_sizes
    return {os.fsencode(path): size for path, size in got.figures["sizes"].items()}


# ---------------------------------------------------------------- pywb's choice among captures

def _xattr(tree, rel: str, name: bytes) -> bytes:
    """One xattr of a capture file of a tree (a mount's directory or the catalog); b"" if none."""
    try:
        if isinstance(tree, warc.MountTree):
            return os.getxattr(os.path.join(tree.root, os.fsencode(rel)), name)
        ino = tree.top
        for part in [p for p in os.fsencode(rel).split(b"/") if p]:
            ino = tree.ns.lookup(ino, part).id
        return tree.ns.getxattr(ino, name)
    except (OSError, WebfsError):
        return b""


def pywb_order(tree, caps: list[dict]) -> list[dict]:
    """Captures (``versions.captures``, oldest first) with those of one second in the
    order of pywb's CDXJ lines, which is the order pywb takes them in on a tie:
    by the fields its indexer writes after the URL (mime, status, digest)."""
    def line_key(v: dict) -> tuple:
        path = v["path"]
        if _xattr(tree, path, b"user.warc.type") == b"revisit":
            mime = b"warc/revisit"
        else:
            mime = re.split(rb"[; ]", _xattr(tree, path, b"user.http.content-type"), 1)[0] or b"unk"
        rtype = _xattr(tree, path, b"user.warc.type")
        status = _xattr(tree, path, b"user.http.status") if rtype == b"response" else b"-"
        digest = _xattr(tree, path, b"user.warc.payload-digest")
        if not digest and rtype != b"revisit":
            digest = _recorded_digest(tree, v)      # pywb's indexer computes it (an ARC, an older crawler)
        return mime, status or b"-", (digest[5:] if digest.startswith(b"sha1:") else digest) or b"-"
    out, i = [], 0
    while i < len(caps):
        j = i
        while j < len(caps) and caps[j]["stamp"][:14] == caps[i]["stamp"][:14]:
            j += 1
        out += sorted(caps[i:j], key=line_key) if j - i > 1 else caps[i:j]
        i = j
    return out


def _recorded_digest(tree, v: dict) -> bytes:
    """What pywb's indexer writes as the digest of a record that names none: the
    base32 SHA-1 of its payload as recorded (after the HTTP header; an encoded
    page's entity, kept in the heads, not the document its file shows). Its
    record is found by ``user.warc.source`` (source name, offset) among the
    kept sources of the capture's collection; b"" if it is not found."""
    import base64
    import hashlib
    from . import urlpath
    path = os.fsencode(v["path"])
    inside = os.fsencode(urlpath.url_to_path(v["url"]) + v["stamp"])
    top = path[:len(path) - len(inside)].rstrip(b"/") if path.endswith(inside) else None
    name, _, offset = _xattr(tree, v["path"], b"user.warc.source").rpartition(b"\t")
    if top is None or not offset.isdigit():
        return b""
    try:
        for src in (src for src in warc.kept_sources(tree, top) if src.name == name):
            index = tree.read(src.path(warc.INDEX_SUFFIX, top))
            ln = next((x for x in warc.parse_index(index) if x.offset == int(offset) and x.capture == inside), None)
            if ln is None:
                continue
            if ln.where == "file":
                payload = tree.read(path)
            else:
                at = ln.payload_at
                payload = tree.read(src.path(warc.HEADS_SUFFIX, top))[at:at + ln.pl]
            return base64.b32encode(hashlib.sha1(payload).digest())
    except (OSError, WebfsError):
        pass
    return b""


# ---------------------------------------------------------------- the CDXJ indexes

CACHE_DIR = "webfs-cdxj"
LEFT_OUT = b"#webfs-left-out "      # a cache file's line, after its key: a record left out, as said


def write_file(path: str, data: bytes) -> None:
    """A file replay makes: created new and renamed over its name, never written
    through a symlink planted there (``webfs.files``)."""
    try:
        write_new(path, data)
    except OSError as exc:
        raise WebfsError(f"{path}: cannot write: {exc.strerror or exc}") from None


def _own_dir(path: str) -> str:
    """Make the directory ``path`` (a real directory, not a symlink planted in
    its place, which would send the indexes elsewhere); return it."""
    try:
        os.mkdir(path, 0o755)
    except FileExistsError:
        if not stat.S_ISDIR(os.lstat(path).st_mode):
            raise WebfsError(f"{path}: not a directory (a symlink or a file is in its place); "
                             "remove it and run replay again") from None
    return path


def _cached(path: str, key: bytes) -> Optional[tuple[list[bytes], list[str]]]:
    """(the lines, the records left out as said) of a source's cache file if it
    holds this key, else None."""
    try:
        with open(path, "rb") as f:
            first = f.readline()
            if first != KEY_PREFIX + key + b"\n":
                return None
            lines = f.read().splitlines(keepends=True)
    except OSError:
        return None
    said = 0
    while said < len(lines) and lines[said].startswith(LEFT_OUT):
        said += 1
    return lines[said:], [x[len(LEFT_OUT):].rstrip(b"\n").decode("utf-8", "replace") for x in lines[:said]]


def current(coll: str, files, pywb_dir: str, tree=None, sources: Optional[dict] = None) -> tuple[str, str]:
    """(the path of the collection's sorted CDXJ index, a line to say), indexing
    again only the virtual files whose key changed. ``files``: name ->
    VirtualFile, or what makes them (called only if a source must be indexed
    again); ``sources``: name -> (source, key), as a mount's daemon laid them
    out (``webfs.warcview``; default: from ``files``), with ``tree``."""
    top = _own_dir(os.path.join(os.path.abspath(pywb_dir), CACHE_DIR))
    cache = _own_dir(os.path.join(top, coll))
    if sources is None:
        tree, sources = None, {name: (vf.src, key_of(name, vf)) for name, vf in files.items()}
    per_file, fresh, from_import, left_out = [], 0, 0, 0
    for name, (src, key) in sources.items():
        path = os.path.join(cache, name + ".cdxj")
        lines, said = _cached(path, key) or (None, [])
        if lines is None:
            lines = kept_lines(tree or files[name].tree, src, key)
            from_import += lines is not None
            if lines is None:       # not kept, or stale (a capture deleted, a revisit's original elsewhere)
                if not isinstance(files, dict):
                    files = files()     # laid out here only now (the daemon's layout gave the keys)
                lines, said = _index_again(coll, name, files.get(name), key)
                fresh += 1
            notes = b"".join(LEFT_OUT + x.encode() + b"\n" for x in said)
            write_file(path, KEY_PREFIX + key + b"\n" + notes + b"".join(lines))   # the next start reads it here
        for x in said:
            log.warning("%s", x)
        left_out += len(said)
        per_file.append(lines)
    for stale in set(os.listdir(cache)) - {n + ".cdxj" for n in sources}:
        os.unlink(os.path.join(cache, stale))          # a source no longer kept
    merged = b"".join(heapq.merge(*per_file))
    index = os.path.join(top, coll + ".cdxj")
    try:
        with open(index, "rb") as f:
            same = f.read() == merged
    except OSError:
        same = False
    if not same:
        write_file(index, merged)
    count = merged.count(b"\n")
    left = f"; {left_out} record(s) pywb's indexer cannot index left out, each said above" if left_out else ""
    return index, (f"CDXJ index of {coll}: {index} ({count} lines; "
                   f"{fresh} of {len(sources)} source file(s) indexed now, {from_import} as import-warc indexed them, "
                   f"the rest kept in PYWBDIR{left})")


def _index_again(coll: str, name: str, vf: Optional[VirtualFile], key: bytes) -> tuple[list[bytes], list[str]]:
    """A source's lines made by pywb's indexer, from this process's own layout,
    which must be the one its key (the daemon's) names; and a line to say of
    each record left out, as pywb's indexer cannot index it."""
    if vf is None or key_of(name, vf) != key:
        raise WebfsError(f"{name}: the collection changed while replay started; run it again")
    lines, left = index_served(name, vf)
    return lines, [show_path(f"{coll}: {os.fsdecode(vf.src.label)}: offset {ln.offset}: a {ln.rtype} record "
                             f"pywb's indexer cannot index ({why}); left out of the CDXJ index, not replayed"
                             .encode("utf-8", "surrogateescape")) for ln, why in left]


# ---------------------------------------------------------------- serving

def serve(served: dict[str, dict[str, VirtualFile]], port: int, host: str = "127.0.0.1"):
    """An HTTP server of the virtual files at /COLL/NAME, with byte ranges (not started)."""
    import http.server      # here: a collection in a mount is served by the mount, and replay ends at once

    class Handler(http.server.BaseHTTPRequestHandler):
        def _target(self) -> Optional[VirtualFile]:
            coll, _, name = self.path.lstrip("/").partition("/")
            return served.get(coll, {}).get(name)

        def do_HEAD(self):
            self.do_GET(body=False)

        def do_GET(self, body: bool = True):
            vf = self._target()
            if vf is None:
                self.send_error(404)
                return
            start, end = 0, vf.size
            m = re.fullmatch(r"bytes=(\d+)-(\d*)", self.headers.get("Range", "") or "")
            if m:
                start = int(m.group(1))
                end = min(int(m.group(2)) + 1, vf.size) if m.group(2) else vf.size
                if start >= vf.size:
                    self.send_error(416)
                    return
                self.send_response(206)
                self.send_header("Content-Range", f"bytes {start}-{end - 1}/{vf.size}")
            else:
                self.send_response(200)
            self.send_header("Content-Length", str(end - start))
            self.send_header("Accept-Ranges", "bytes")
            self.end_headers()
            if body:
                pos = start
                while pos < end:
                    chunk = vf.read(pos, min(end, pos + (1 << 20)))
                    if not chunk:
                        break
                    self.wfile.write(chunk)
                    pos += len(chunk)

        def log_message(self, fmt, *args):
            log.debug("replay: " + fmt, *args)

    return http.server.ThreadingHTTPServer((host, port), Handler)


def pywb_config(indexes: dict[str, str], archives: dict[str, str]) -> str:
    """pywb's config.yaml: every served collection, its index and where its virtual files are."""
    out = ["# written by webfs replay: pywb serves these collections from the webfs archive\n",
           "collections:\n"]
    for coll, index_path in sorted(indexes.items()):
        out.append(f"  {coll}:\n"
                   f"    index_paths: {index_path}\n"
                   f"    archive_paths: {archives[coll]}\n")
    return "".join(out)


def shown_by_mount(tree) -> Optional[tuple[str, dict]]:
    """For a collection in a webfs mount: its virtual files laid out by the
    mount's daemon and shown as a view of its .webfs/warc (webfs.warcview),
    which pywb reads as local files: (the view's directory, name -> (source,
    key)). None elsewhere (served over HTTP)."""
    found = isinstance(tree, warc.MountTree) and control.mount_of(tree.name)
    if not found:
        return None
    mnt, inside = found
    got = control.call(mnt, "warc-view", {"collection": inside}).figures      # warcview.warc_view
    # each source by its index file's name (an older daemon sent the source's name)
    sources = {name: (warc.source_of(os.fsencode(src)) or warc.Source(os.fsencode(src)),
                      key.encode("utf-8", "surrogateescape")) for name, (src, key) in got["files"].items()}
    return os.path.join(mnt, ".webfs", os.fsdecode(warcview.VIEW_DIR), got["view"]) + "/", sources


def collections_of(target: str, options: BackendOptions) -> tuple[list[tuple[str, str]], list[str]]:
    """((name, where) of each collection TARGET holds, lines to say). TARGET is
    one collection (it keeps web archive files, in @warc/), or a mount point,
    DISK:/ or a directory whose top directories are; with each, the collections
    nested in it (import-warc into a directory of a collection, or of a top
    directory: ``warc.collection_tops``), named by their path with "-" for "/"
    (pywb's collection names hold no "/"). A nested collection whose name a
    collection less deep, or found first, has already is not served, and said."""
    place = warc.archive_place(target)
    tree = warc.open_tree(target, options)
    try:
        tops, one = warc.collection_tops(tree)
        found = [top for top in tops if top == b"" or tree.is_dir(top + b"/" + warc.KEEP_DIR)]
    finally:
        tree.close()
    if not found:
        raise WebfsError(f"{target}: no collection of web archive files here (no @warc/ in it or below)")
    base = os.path.basename((place[1] if place is not None else os.path.abspath(target)).rstrip("/")) if one else ""
    out, lines, named = [], [], set()
    for rel in sorted(found, key=lambda r: r.count(b"/")):     # a top directory's name before a nested one's
        path = os.fsdecode(rel)
        name = "-".join(p for p in [base] + path.split("/") if p)
        where = (target if not path else f"{place[0]}:/{os.path.join(place[1], path).strip('/')}"
                 if place is not None else os.path.join(target, path))
        if name in named:
            lines.append(f"{where}: not served: a collection is already named {name}; "
                         f"replay it alone (webfs replay {where} DIR)")
            continue
        named.add(name)
        out.append((name, where))
    return out, lines


def prepare(target: str, pywb_dir: str, port: int, options: BackendOptions, host: str = "127.0.0.1"):
    """Index the collections of TARGET (its disks opened with ``options``), write
    the pywb config; return (the HTTP server of the virtual files no mount
    shows, or None, lines to say, trees to close)."""
    os.makedirs(pywb_dir, exist_ok=True)
    served: dict[str, dict[str, VirtualFile]] = {}     # over HTTP
    indexes, archives, shown = {}, {}, {}
    found, lines = collections_of(target, options)
    trees = []
    try:
        for coll, where in found:
            tree = warc.open_tree(where, options)
            trees.append(tree)
            view = shown_by_mount(tree)
            if view is None:
                files = served[coll] = virtual_files(tree)
                indexes[coll], said = current(coll, files, pywb_dir)
                archives[coll], shown[coll] = f"http://{host}:{port}/{coll}/", None
            else:
                archives[coll] = shown[coll] = view[0]
                indexes[coll], said = current(coll, lambda t=tree: virtual_files(t), pywb_dir, tree, view[1])
            lines.append(said)
        write_file(os.path.join(pywb_dir, "config.yaml"), pywb_config(indexes, archives).encode())
        server = serve(served, port, host) if served else None
    except BaseException:
        for tree in trees:
            tree.close()
        raise
    lines += _what_serves(served, shown, port, host)
    lines.append(f"now run:  cd {pywb_dir} && wayback -b 127.0.0.1 -p 8080   "
                 f"(then http://127.0.0.1:8080/{next(iter(sorted(indexes)), 'COLLECTION')}/URL)")
    return server, lines, trees


def _what_serves(served: dict, shown: dict, port: int, host: str) -> list[str]:
    """What serves the virtual files: the mounts that show them, the HTTP server."""
    mounts = collections.Counter(os.path.dirname(where.rstrip("/")) for where in shown.values() if where)
    lines = [f"pywb reads the virtual WARC files of {n} collection(s) as files of {views}/ "
             f"(while the mount lasts: after a remount, run webfs replay again)" for views, n in sorted(mounts.items())]
    if served:
        count = sum(len(f) for f in served.values())
        lines.append(f"serving {count} virtual WARC file(s) of {len(served)} collection(s) "
                     f"on http://{host}:{port}/")
    return lines
