"""Rebuilding the catalog from what the disks hold, when the catalog is lost.

The catalog is an index. Every block's header says what it is; every parity
file lists its stripe's members (so blocks of a lost disk are known too);
the MANIFEST and JOURNAL on every disk name every file (a symlink's target
is its block: the namespace reads it on first use). ``rebuild_catalog``
reads them all and writes a new catalog on a surviving disk, so losing any
one disk, the catalog's included, loses no file that was closed before.

Owners, xattrs and which names are one inode come from the ``#`` lines
after each record (``manifest.attribute_lines``); records written before
them lack them, and fsck says so (files of the rebuilding user, hard links
as copies). A block that no record names becomes a file at its header's
Name: hint, or when that path is taken stays pinned, never thrown away.

``rebuild_step`` is ``fsck --rebuild-catalog``. Without ``repair`` nothing on
the disks is written, as for every fsck without it: the lock is taken
without writing the lock file (and no S3 lease), the catalog is built in a
temporary directory off the disks, compared with the one in place
(``fsck.compare``) and what a repair would change is said. With ``repair``
a catalog that opens, belongs to this archive and knows its blocks is not
replaced unless ``force``: it may hold what the plain-text records lack, and
replacing a sound catalog is a decision, not a repair.
"""
from __future__ import annotations

import logging
import os
import shutil
import stat
import tempfile
import urllib.parse
from collections import Counter, defaultdict
from dataclasses import astuple, dataclass, field
from datetime import datetime, timezone
from typing import Callable, Optional

from .. import signature as sigmod
from ..archive import Archive
from ..backends import BackendOptions
from ..catalog import ARCHIVE_META, BlockRow, Catalog, catalog_path
from ..errors import ArchiveError, CorruptBlock, CorruptParity
from ..namespace import ROOT_INODE, NamespaceRows
from ..volume import PARITY
from .fsck import catalog_state, compare, private_copy
from .records import Entries, Entry, Problem, parent_problem, path_problem, read_namespace, show_path
from .report import EXIT_CLEAN, EXIT_LEFT
from ..recovery import REBUILT
from ..parity import INTENT_FILE as PARITY_INTENTS, ParityHeader, Stripe, add_stripes, size_class

log = logging.getLogger(__name__)


HINTED = "a block header's Name: hint"   # where an entry came from that no record lists

Key = tuple[str, int]                       # (signature, overflow)


@dataclass
class Rebuilt:
    """A catalog built from the disks into ``path``, not yet in use: what
    installing it would also write (block headers whose Refs disagree) and
    what the build said and skipped."""
    path: str
    target: int                                         # the disk it belongs on
    said: list[str] = field(default_factory=list)
    skipped: list[Problem] = field(default_factory=list)
    header_refs: list[tuple[int, str, int, int]] = field(default_factory=list)   # disk, sig, overflow, refs


def build_catalog(archive: Archive, path: str, progress=None) -> Rebuilt:
    """Build a catalog from the disks into ``path`` (a new file), reading the
    disks only. Records of the MANIFEST and JOURNAL that cannot be used are
    skipped and listed in ``skipped``; on any error nothing is left at ``path``."""
    if not archive.volumes:
        raise ArchiveError("no disk of the archive is present")
    _remove_catalog_files(path)
    done = Rebuilt(path, min(archive.volumes))
    try:
        cat = Catalog(path)
        try:
            _fill_catalog(archive, cat, done, progress)
        finally:
            cat.close()
    except BaseException:
        _remove_catalog_files(path)
        raise
    return done


def _remove_catalog_files(path: str) -> None:
    for p in (path, path + "-wal", path + "-shm"):
        if os.path.exists(p):
            os.unlink(p)


def _fill_catalog(archive: Archive, cat: Catalog, done: Rebuilt, progress) -> None:
    said = done.said
    blocks, header_refs = _blocks_from_headers(archive, progress, said)
    stripes = _stripes_from_parity(archive, blocks, said, done.skipped)
    ids = _write_blocks(cat, blocks, stripes)
    entries, notes = read_namespace(archive, done.skipped)
    said += notes
    _name_by_hint(entries, blocks, said)
    names, missing_blocks = _write_namespace(cat, archive, entries, ids, said, done.skipped)
    unnamed = _write_refs(cat, blocks, header_refs, ids, done.header_refs)
    _write_groups(cat, blocks)
    # Not "1": the first open recounts and protects what it must, saying so as
    # the first use of a rebuilt catalog, not an unclean stop (recovery.REBUILT).
    cat.set_meta("clean", REBUILT)
    cat.set_meta(ARCHIVE_META, archive.conf.uuid)
    cat.commit()
    said.insert(0, f"disk {done.target}: {len(blocks)} blocks, {len(stripes)} stripes, {names} names")
    if any(not e.attrs.get("owner") and e[4] != HINTED for e in entries.values()):
        said.append("records written before webfs kept owners, xattrs and hard links in them: "
                    "their files belong to the rebuilding user, without xattrs, hard links as copies")
    if unnamed:
        said.append(f"{unnamed} block(s) named by no file kept as pinned ('webfs delete' drops them)")
    if missing_blocks:
        said.append(f"{missing_blocks} block(s) lost")


def install_catalog(archive: Archive, done: Rebuilt) -> None:
    """Put a built catalog in place on its disk (it must be on that disk's
    filesystem), make block headers agree with it, void the old intents."""
    path = catalog_path(archive.volumes[done.target].root)
    for suffix in ("-wal", "-shm"):
        if os.path.exists(path + suffix):
            os.unlink(path + suffix)
    os.replace(done.path, path)
    for disk, sig, overflow, refs in done.header_refs:
        archive.volumes[disk].set_refs(sig, overflow, refs)
    # The stripes are what the parity files say: intents of the old catalog are void.
    for vol in archive.volumes.values():
        intents = os.path.join(vol.root, PARITY_INTENTS)
        if os.path.exists(intents):
            os.unlink(intents)
    archive.conf.catalog = done.target
    archive.save_config()


def rebuild_catalog(archive: Archive, progress=None,
                    problems: Optional[list[Problem]] = None) -> list[str]:
    """Write a new catalog on the lowest present disk; return what it did and lost.
    Records of the MANIFEST and JOURNAL that cannot be used are skipped and
    added to ``problems`` (where, what); without the list they are said."""
    if not archive.volumes:
        raise ArchiveError("no disk of the archive is present")
    target = archive.volumes[min(archive.volumes)]
    done = build_catalog(archive, catalog_path(target.root) + ".rebuild", progress)
    try:
        install_catalog(archive, done)
    finally:
        _remove_catalog_files(done.path)
    said = list(done.said)
    said[0] = "rebuilt the catalog on " + said[0]
    if problems is not None:
        problems.extend(done.skipped)
    else:
        said += [f"{where}: {what}" for where, what in done.skipped]
    return said


def _blocks_from_headers(archive: Archive, progress,
                         said: list[str]) -> tuple[dict[Key, BlockRow], dict[Key, int]]:
    """Step 1: every block file's header, on every present disk: the blocks
    (rows not yet in the catalog: no id, no references) and the Refs their
    headers say."""
    blocks: dict[Key, BlockRow] = {}
    header_refs: dict[Key, int] = {}
    for disk, vol in sorted(archive.volumes.items()):
        for sig, overflow, rel in vol.iter_blocks():
            if progress:
                progress(1)
            if (sig, overflow) in blocks:
                continue
            try:
                h = vol.read_header(sig, overflow)
            except (CorruptBlock, OSError) as exc:
                said.append(f"disk {disk}: {rel}: header unreadable ({exc}); left for scrub")
                continue
            blocks[(sig, overflow)] = BlockRow(0, sig, overflow, disk, h.size, h.stored, h.codec, 0, 0,
                                               h.created, h.name, sigmod.group_of(sig, archive.conf.depth), None,
                                               h.sha256)
            header_refs[(sig, overflow)] = h.refs
    return blocks, header_refs


def _stripes_from_parity(archive: Archive, blocks: dict[Key, BlockRow], said: list[str],
                         skipped: list[Problem]) -> list[Stripe]:
    """Step 2: stripes from the parity headers; their members on lost disks
    become blocks too (found from the parity header alone)."""
    disk_indexes = set(archive.disk_indexes)
    stripes = []
    for disk, vol in sorted(archive.volumes.items()):
        for rel in vol.backend.list(PARITY):
            try:
                raw = vol.backend.read(rel, 0, 1 << 20)
                header, _ = ParityHeader.parse(raw, f"disk {disk}: {rel}")
            except (CorruptParity, OSError) as exc:
                said.append(f"{exc}; that stripe is not protected until scrub")
                continue
            strange = sorted({m.disk for m in header.members} - disk_indexes)
            if strange:
                skipped.append((f"disk {disk}: {rel}", f"a member on disk {strange[0]}, which is not "
                                "a disk of the archive: skipped; that stripe is not protected until scrub"))
                continue
            disks_mask = 1 << disk
            for m in header.members:
                found = blocks.setdefault(m.key, BlockRow(0, m.sig, m.overflow, m.disk, m.size, m.stored, m.codec,
                                                          0, 0, m.created, m.name,
                                                          sigmod.group_of(m.sig, archive.conf.depth), None))
                found.stripe = header.stripe
                disks_mask |= 1 << found.disk
            stripes.append(Stripe(header.stripe, disk, size_class(header.length), header.length, "ok",
                                     len(header.members), disks_mask))
    return stripes


def _name_by_hint(entries: Entries, blocks: dict[Key, BlockRow], said: list[str]) -> None:
    """Step 3b: a block that no record names (the records of a lost machine's
    staged uploads, a MANIFEST lost with its disk) becomes a file at its
    header's Name: hint, as webfs-recover does: mode 644, mtime its Created
    time. Not when the hint is missing, not a usable path, taken by a recorded
    entry, or shared by several such blocks (the pieces of a split file): those
    stay pinned."""
    used = {sigmod.ContentKey.parse(t)[:2] for v in entries.values() for t in v[0]}
    claims: defaultdict[bytes, list[Key]] = defaultdict(list)
    for key, b in blocks.items():
        if key not in used and b.name and b.disk >= 0:
            claims[urllib.parse.unquote_to_bytes(b.name)].append(key)
    named = taken = 0
    for path, keys in sorted(claims.items()):
        if (len(keys) > 1 or path_problem(path) or path in entries or entries.has_below(path)
                or parent_problem(entries, path)):
            taken += 1
            continue
        b = blocks[keys[0]]
        entries[path] = Entry([b.block_name], b.size, stat.S_IFREG | 0o644, _created_ns(b.created),
                              HINTED)
        named += 1
    if named:
        said.append(f"{named} block(s) no record names made files at their header's Name: hint "
                    "(mode 644, mtime their Created time)")
    if taken:
        said.append(f"{taken} Name: hint(s) of blocks no record names not used (taken by a recorded "
                    "name, not a usable path, or shared by several blocks): those blocks stay pinned")


def _created_ns(created: str) -> int:
    """A header's Created time (ISO 8601 UTC) in ns; 0 when it does not parse."""
    try:
        return int(datetime.strptime(created, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
                   .timestamp()) * 10**9
    except ValueError:
        return 0


def _write_blocks(cat: Catalog, blocks: dict[Key, BlockRow], stripes: list[Stripe]) -> dict[Key, int]:
    """Step 3: the stripe and block rows; returns each block's row id."""
    add_stripes(cat, stripes)
    return {key: cat.insert_block(*astuple(b)[1:]).id for key, b in blocks.items()}


def _write_namespace(cat: Catalog, archive: Archive, entries: dict[bytes, tuple], ids: dict[Key, int],
                     said: list[str], skipped: list[Problem]) -> tuple[int, int]:
    """Step 4: inodes, names and contents from the plain-text records, with
    the owners, xattrs and hard links their ``#`` lines give (records without
    them: the rebuilding user's, none, separate files). A piece on no disk and
    in no stripe gets a row on no disk, so reading it gives EIO, never wrong
    bytes. Returns the names written and the blocks lost."""
    root = entries.pop(b"/", None)
    t_root = root[3] if root else max((v[3] for v in entries.values()), default=0)
    rows = NamespaceRows(cat)
    _add_inode(rows, root or Entry([], 0, stat.S_IFDIR | 0o755, t_root, ""), nlink=2, ino=ROOT_INODE)
    dirs = {b"": ROOT_INODE}          # only directories can be parents
    linked: dict[int, int] = {}       # the records' inode number -> the inode made for it
    missing_blocks = 0
    for p in sorted(entries, key=lambda p: (p.count(b"/"), p)):
        entry = entries[p]
        parent_path, _, name = p.rpartition(b"/")
        parent = dirs.get(parent_path)
        if parent is None:
            parent = _make_parents(rows, entries, dirs, p, entry, said, skipped)
            if parent is None:
                continue
        mode, number = entry[2], entry.attrs.get("inode")
        if not stat.S_ISDIR(mode) and number in linked:       # another name of a file made already
            rows.add_name(parent, name, linked[number])
            rows.bump_nlink(linked[number], 1)
            continue
        ino = _add_inode(rows, entry, nlink=2 if stat.S_ISDIR(mode) else 1)
        rows.add_name(parent, name, ino)
        if stat.S_ISDIR(mode):
            dirs[p] = ino
            rows.bump_nlink(parent, 1)
            continue
        if number is not None:
            linked[number] = ino
        missing_blocks += _add_contents(cat, archive, rows, ino, p, entry, ids, said)
    return len(entries), missing_blocks


def _add_inode(rows: NamespaceRows, entry: Entry, nlink: int, ino: Optional[int] = None) -> int:
    """An inode for a record: its mode and mtime, owner and xattrs."""
    uid, gid = entry.attrs.get("owner", (os.getuid(), os.getgid()))
    mtime = entry[3]
    made = rows.add_inode(entry[2], uid, gid, entry[1] if not stat.S_ISDIR(entry[2]) else 0,
                          nlink, mtime, mtime, mtime, ino=ino).id
    for name, value in sorted(entry.attrs.get("xattrs", {}).items()):
        rows.add_xattr(made, name, value)
    return made


def _make_parents(rows: NamespaceRows, entries: dict[bytes, tuple], dirs: dict[bytes, int], p: bytes,
                  entry: Entry, said: list[str], skipped: list[Problem]) -> Optional[int]:
    """The parent of ``p`` when no record lists it (a damaged MANIFEST, a name
    from a block's hint): made with mode 755, so the file is kept. None when
    a listed ancestor is not a directory (or was skipped)."""
    parent_path = p.rpartition(b"/")[0]
    above = [parent_path[:i] for i in range(len(parent_path), 0, -1) if parent_path[i:i + 1] in (b"/", b"")]
    if any(q in entries and q not in dirs for q in above):
        skipped.append((entry[4], f"a parent of {show_path(p)} is not a directory (or was skipped): skipped"))
        return None
    parent, walked = ROOT_INODE, b""
    for part in parent_path[1:].split(b"/"):
        walked += b"/" + part
        if walked not in dirs:
            made = _add_inode(rows, Entry([], 0, stat.S_IFDIR | 0o755, entry[3], ""), nlink=2)
            rows.add_name(parent, part, made)
            rows.bump_nlink(parent, 1)
            dirs[walked] = made
            said.append(f"{show_path(walked)}: a directory no record lists; made with mode 755")
        parent = dirs[walked]
    return parent


def _add_contents(cat: Catalog, archive: Archive, rows: NamespaceRows, ino: int, p: bytes, entry: Entry,
                  ids: dict[Key, int], said: list[str]) -> int:
    """A file's blocks; a block on no disk and in no stripe gets a row on no
    disk (reading it gives EIO). Returns how many were missing."""
    sigs, size = entry[0], entry[1]
    block_ids, missing = [], 0
    for piece, text in enumerate(sigs):
        key = sigmod.ContentKey.parse(text)
        block_id = ids.get((key.sig, key.overflow))
        if block_id is None:
            missing += 1
            said.append(f"{p!r}: block {text} is on no disk and in no stripe: the file is lost")
            piece_size = min(archive.conf.max_block, size - piece * archive.conf.max_block)
            block_id = ids[(key.sig, key.overflow)] = cat.insert_block(
                key.sig, key.overflow, -1, piece_size, 0, "identity", 0, 0, "",
                p.decode("utf-8", "replace")[:400], sigmod.group_of(key.sig, archive.conf.depth)).id
        block_ids.append(block_id)
    rows.add_contents(ino, block_ids)
    return missing


def _write_refs(cat: Catalog, blocks: dict[Key, BlockRow], header_refs: dict[Key, int],
               ids: dict[Key, int], header_fixes: list) -> int:
    """Step 5: references are what the names use; a block nobody names is kept,
    pinned with the count its header had; headers that disagree are listed in
    ``header_fixes`` (installing the catalog rewrites them). Returns the blocks
    no name uses."""
    used = cat.namespace_refs()
    unnamed = 0
    for key, block_id in ids.items():
        refs, pins = used.get(block_id, 0), 0
        if not refs:
            unnamed += 1
            refs = pins = max(header_refs.get(key, 1), 1)
        cat.set_refs(block_id, refs, pins)
        if key in header_refs and header_refs[key] != refs:
            header_fixes.append((blocks[key].disk, key[0], key[1], refs))
    return unnamed


def _write_groups(cat: Catalog, blocks: dict[Key, BlockRow]) -> None:
    """Step 6: the group map: each group on the disk that holds most of its blocks."""
    where: defaultdict[str, Counter] = defaultdict(Counter)
    for b in blocks.values():
        where[b.grp][b.disk] += 1
    for grp, counts in where.items():
        cat.set_group_disk(grp, counts.most_common(1)[0][0])


class RebuildRefused(Exception):
    """--repair without --force on a catalog that is sound; the message says so."""


def rebuild_step(disk: str, repair: bool, force: bool, say: Callable[[str], None],
                 problems: list[Problem], progress=None, options: Optional[BackendOptions] = None) -> Optional[int]:
    """Run the rebuild (``repair``) or its read-only preview. Returns the exit
    status when fsck ends here (the preview), None when the new catalog is in
    place and fsck goes on to check it. Unusable records go to ``problems``;
    S3 disks are opened with ``options``."""
    archive = Archive.open(disk, options=options)
    if archive.conf.catalog_url:
        raise RebuildRefused(f"the catalog is in the PostgreSQL database {archive.conf.catalog_url}: "
                             "--rebuild-catalog rebuilds SQLite catalogs only (restore the database from "
                             f"a dump; 'webfs fsck {disk}' checks it)")
    # Read-only first: a refused --repair writes nothing either (not even the lock's holder).
    archive.lock("webfs fsck --rebuild-catalog", write=False)
    scratch = tempfile.mkdtemp(prefix="webfs-rebuild-")
    try:
        why, copy = _state_of_catalog(archive, scratch)
        if repair:
            if why is None and not force:
                raise RebuildRefused(
                    f"{catalog_path(archive.volumes[archive.conf.catalog].root)} opens and belongs to this "
                    f"archive: not replaced ('webfs fsck {disk}' checks it; "
                    f"'webfs fsck --rebuild-catalog {disk}' says what a rebuild would change; "
                    "--force replaces it)")
            archive.unlock()
            archive.lock("webfs fsck --rebuild-catalog")
            for line in rebuild_catalog(archive, progress=progress, problems=problems):
                say(line)
            return None
        done = build_catalog(archive, os.path.join(scratch, "rebuilt.db"), progress)
        problems.extend(done.skipped)
        say("built a catalog from the disks (read-only: written off the disks): " + done.said[0])
        for line in done.said[1:]:
            say(line)
        changes = [f"the catalog in place: {why}"] if why else compare(copy, done.path, archive)
        if done.header_refs:
            changes.append(f"{len(done.header_refs)} block header(s) would get the Refs the names give")
        for line in changes:
            say("would change: " + line)
        command = f"'webfs fsck --rebuild-catalog --repair {'--force ' if changes and not why else ''}{disk}'"
        say("read-only check: nothing was written; " + (f"{command} would make these changes" if changes
                                                        else "a rebuild would change nothing"))
        return EXIT_LEFT if changes or done.skipped else EXIT_CLEAN
    finally:
        archive.unlock()
        shutil.rmtree(scratch, ignore_errors=True)


def _state_of_catalog(archive: Archive, scratch: str) -> tuple[Optional[str], Optional[str]]:
    """Why the catalog in place is not usable (None: it is), and a private copy of it in ``scratch``."""
    vol = archive.volumes.get(archive.conf.catalog)
    original = catalog_path(vol.root) if vol is not None else None
    copy = private_copy(original, scratch) if original and os.path.exists(original) else None
    return catalog_state(archive, copy), copy
