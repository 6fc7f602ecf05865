"""The namespace's rows: inodes, directory entries, symlink targets, file
contents and xattrs, read and written as they are in the catalog
(``NamespaceRows``), and the memory of them that the request path answers
from (``NamespaceMemo``); with the one rule for a name (``name_problem``).

No POSIX checks, no journal, no commit: those are ``tree.Namespace``'s,
built on these rows. The bulk writers (import, catalog rebuild) use the rows
directly, check and journal names themselves and commit once per batch.
No other module writes the SQL of these tables.
"""
from __future__ import annotations

import contextlib
import errno
import itertools
import stat
import time
from dataclasses import dataclass
from types import MappingProxyType
from typing import Callable, Mapping, Optional

from ..catalog import BLOCK_COLUMNS, BlockRow, Catalog, hex_of
from ..catalogengine import SQLITE
from ..errors import FsError, WebfsError

ROOT_INODE = 1
NAME_MAX = 255
INODE_COLUMNS = "id, mode, uid, gid, size, nlink, atime_ns, mtime_ns, ctime_ns, rdev"
NAME_CONFLICT = " ON CONFLICT (parent, name) DO NOTHING"
# A new inode, its name and its parent's times in one statement (PostgreSQL's
# WITH of INSERTs and an UPDATE; ?11 the parent, ?12 the name, ?13 the
# parent's link count change). Both INSERTs are of the name made: with
# ON CONFLICT, nothing when another machine's name is there (row count 0).
# CockroachDB refuses a statement changing one table twice (inodes: the new
# row, the parent's): there it would be add_inode, add_name and touch_dir.
# Keyed by whether the name is asked (``_name_asked``).
NAMED_INODE_SQL = {asked: (
    f"WITH named AS (INSERT INTO dentries (parent, name, inode) VALUES (?11, ?12, ?1){conflict} RETURNING inode), "
    "touched AS (UPDATE inodes SET mtime_ns=?8, ctime_ns=?9, nlink=nlink+?13 "
    "WHERE id=?11 AND EXISTS (SELECT 1 FROM named)) "
    f"INSERT INTO inodes ({INODE_COLUMNS}) SELECT inode, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10 FROM named")
    for asked, conflict in ((False, ""), (True, NAME_CONFLICT))}
# A file's content rows from an array of block ids, piece by piece (PostgreSQL).
CONTENTS_OF_ARRAY = ("INSERT INTO contents (inode, piece, block) "
                     "SELECT ?, piece - 1, block FROM unnest(?::BIGINT[]) WITH ORDINALITY AS p (block, piece)")
BLOCK_COLUMNS_OF_B = ", ".join("b." + c.strip() for c in BLOCK_COLUMNS.split(","))   # blocks joined as b
INODE_COLUMNS_OF_I = ", ".join("i." + c.strip() for c in INODE_COLUMNS.split(","))   # inodes joined as i


@dataclass(slots=True)
class Inode:
    id: int
    mode: int
    uid: int
    gid: int
    size: int
    nlink: int
    atime_ns: int
    mtime_ns: int
    ctime_ns: int
    rdev: int

    @property
    def is_dir(self) -> bool:
        return stat.S_ISDIR(self.mode)


def now_ns() -> int:
    return time.time_ns()


def name_problem(name: bytes) -> Optional[str]:
    """Why ``name`` cannot be one entry of a directory, or None if it can.
    The one rule for every name, whether it comes through FUSE or from a
    plain-text record on the disks (MANIFEST, JOURNAL: ``webfs.commands.rebuild_catalog``)."""
    if len(name) > NAME_MAX:
        return f"name longer than {NAME_MAX} bytes"
    if not name:
        return "empty name"
    if name in (b".", b".."):
        return f"name {name.decode()!r} is reserved"
    if b"/" in name:
        return "name holds '/'"
    if b"\0" in name:
        return "name holds a NUL byte"
    return None


def check_name(name: bytes) -> None:
    why = name_problem(name)
    if why is not None:
        raise FsError(errno.ENAMETOOLONG if len(name) > NAME_MAX else errno.EINVAL,
                      why if len(name) > NAME_MAX else f"invalid name {name[:80]!r}: {why}")


# Inodes, names and xattrs kept in memory (NamespaceMemo): what a copy of
# a crawl asks about again and again (getattr, lookup, the kernel's
# security.capability before each write) answered without SQLite; a copy in
# progress needs the names of the directories it is writing, a reader the
# files read ahead. The oldest go first. About 450 bytes an inode with its
# name and xattrs (measured), so under 2 MiB: the bound is the daemon's
# memory that grows with the files made (webfs-internals(7), DAEMON RSS).
MEMO_INODES = 4096
# A full table drops its oldest eighth at once and is built anew: dropping
# one at a time left a table of twice the slots (a dict does not shrink)
# and a walk over the dropped ones at each eviction.
EVICT_SHARE = 8


def make_room(table: dict, bound: int) -> tuple[dict, list]:
    """Room for one more in a table kept to ``bound`` entries, oldest out:
    the table to keep using (a new one when some went: callers swap it in,
    so a reader without the lock sees the old or the new, never a half) and
    the keys that went."""
    if len(table) < bound:
        return table, []
    drop = max(1, bound // EVICT_SHARE)
    return dict(itertools.islice(table.items(), drop, None)), list(itertools.islice(table, drop))


# The xattrs of an inode that has none: one shared, unchangeable mapping, not
# an empty dict for each file (64 bytes each).
NO_XATTRS: Mapping[bytes, bytes] = MappingProxyType({})


class NamespaceMemo:
    """The namespace's rows as read or made, in memory, shared by every
    ``NamespaceRows`` over one catalog (``Catalog.memo``). Every change of the
    rows goes through ``NamespaceRows``, under the catalog lock, and forgets
    what it changed; a fill happens under the same lock, so it never keeps a
    row older than a change. A rollback forgets everything (``clear``).

    ``complete`` directories are those whose every name is in ``names`` (a
    directory made here, empty): a lookup that misses there is a miss
    without SQLite; losing any of its names to the bound makes it incomplete."""

    def __init__(self, bound: int = MEMO_INODES):
        self.bound = bound
        self.nodes: dict[int, Inode] = {}
        self.names: dict[tuple[int, bytes], int] = {}
        self.xattrs: dict[int, Mapping[bytes, bytes]] = {}
        self.complete: set[int] = set()
        # For readers: a file's blocks (their refs, disk and stripe as they
        # were read: a reader needs only what a block is) and where one of its
        # names sits (parent, offset), as a directory's next files are read
        # ahead (entries_ahead).
        self.pieces: dict[int, list[BlockRow]] = {}
        self.positions: dict[int, tuple[int, int]] = {}
        # Regular files made here that hold no blocks yet, and the catalog's
        # commit number when they were made: their first content has no old
        # one to look up (a round trip with a PostgreSQL catalog).
        self.empty: dict[int, int] = {}
        # Directories made here and the catalog's commit number when they were
        # made: while it has not moved, no other machine sees them, so none
        # can name anything in them (a name made there is not asked: add_name).
        self.new_dirs: dict[int, int] = {}
        # A file's blocks as this process's last close of it stored them, for
        # the JOURNAL records of the attribute changes that follow (rsync's
        # utimens and chmod after its close): what a record needs is which
        # blocks they are, which their later refs, disk or stripe do not change.
        self.stored: dict[int, list[BlockRow]] = {}
        # The highest inode number made or seen (0: ask the catalog), kept
        # through a clear: numbers only grow, as the kernel may still hold a
        # freed inode (its attributes and page cache) under its number.
        self.last_ino = 0
        # What this mount changed, told to other machines' mounts at commit
        # (webfs.changes.ChangeLog; None: no one else mounts the archive).
        self.changes = None

    def clear(self) -> None:
        for table in (self.nodes, self.names, self.xattrs, self.complete, self.pieces, self.positions, self.empty,
                      self.new_dirs, self.stored):
            table.clear()

    def keep_pieces(self, ino: int, parent: int, offset: int, rows: list[BlockRow]) -> None:
        self.pieces, _ = make_room(self.pieces, self.bound)
        self.positions, _ = make_room(self.positions, self.bound)
        self.pieces[ino] = rows
        self.positions[ino] = (parent, offset)

    def keep_stored(self, ino: int, rows: list[BlockRow]) -> None:
        self.stored, _ = make_room(self.stored, self.bound)
        self.stored[ino] = rows

    def made_empty(self, ino: int, commits: int) -> None:
        """A file made here with no blocks, before the catalog's commit number ``commits``."""
        self.empty, _ = make_room(self.empty, self.bound)
        self.empty[ino] = commits

    def keep_node(self, node: Inode) -> None:
        self.nodes, gone = make_room(self.nodes, self.bound)
        for old in gone:
            self.xattrs.pop(old, None)
        self.nodes[node.id] = node

    def keep_xattrs(self, ino: int, xattrs: Mapping[bytes, bytes]) -> None:
        self.xattrs, _ = make_room(self.xattrs, self.bound)
        self.xattrs[ino] = xattrs

    def keep_name(self, parent: int, name: bytes, ino: int) -> None:
        names, gone = make_room(self.names, self.bound)
        for old_parent, _ in gone:      # first: no reader sees a complete directory short of a name
            self.complete.discard(old_parent)
        self.names = names
        self.names[(parent, name)] = ino

    def made_complete(self, ino: int, commits: int) -> None:
        """A directory made here, before the catalog's commit number
        ``commits``: every name of it will be known."""
        if len(self.complete) >= self.bound:
            self.complete.pop()
        self.complete.add(ino)
        self.new_dirs, _ = make_room(self.new_dirs, self.bound)
        self.new_dirs[ino] = commits

    def unseen_dir(self, ino: int, commits: int) -> bool:
        """Is this a directory made here in the transaction still open (the
        catalog's commit number ``commits``), which no other machine sees?"""
        return self.new_dirs.get(ino) == commits

    def drop_node(self, ino: int) -> None:
        self.nodes.pop(ino, None)
        if self.changes is not None:
            self.changes.inode(ino)

    def drop_reading(self, ino: int) -> None:
        """A file's blocks or names changed: what readers kept of it goes."""
        self.pieces.pop(ino, None)
        self.stored.pop(ino, None)
        self.positions.pop(ino, None)
        if self.changes is not None:
            self.changes.inode(ino)

    def drop_place(self, ino: int) -> None:
        """A file's names changed, not its blocks: where it sits goes, what its
        close stored stays (rsync's chmod and utimens after its rename)."""
        self.pieces.pop(ino, None)
        self.positions.pop(ino, None)

    def drop_name(self, parent: int, name: bytes) -> None:
        self.names.pop((parent, name), None)
        if self.changes is not None:
            self.changes.name(parent, name)

    def made_name(self, parent: int, name: bytes, ino: int) -> None:
        """A name made here: kept if its directory is complete, else forgotten."""
        if parent in self.complete:
            self.keep_name(parent, name, ino)
            if self.changes is not None:
                self.changes.name(parent, name)
        else:
            self.drop_name(parent, name)

    def forget_others(self, inodes: set[int], names: set[tuple[int, bytes]]) -> None:
        """Another machine changed these inodes and names: what is kept of
        them goes (and is not told back)."""
        for ino in inodes:
            self.nodes.pop(ino, None)
            self.empty.pop(ino, None)
            self.xattrs.pop(ino, None)
            self.pieces.pop(ino, None)
            self.stored.pop(ino, None)
            self.positions.pop(ino, None)
        for parent, name in names:
            self.names.pop((parent, name), None)
            self.complete.discard(parent)


class NamespaceRows:
    """The namespace's rows in the catalog, read and written as they are: no
    POSIX checks, no journal, no commit. For writers that make names in bulk
    and check and journal them themselves (``webfs.ingest``,
    ``webfs.commands.rebuild_catalog``): the caller holds the catalog lock and
    commits once per batch, so a batch costs its inserts and one commit."""

    def __init__(self, catalog: Catalog):
        self.cat = catalog
        if catalog.memo is None:
            catalog.memo = NamespaceMemo()
        self.memo: NamespaceMemo = catalog.memo

    def add_inode(self, mode: int, uid: int, gid: int, size: int, nlink: int, atime_ns: int,
                  mtime_ns: int, ctime_ns: int, rdev: int = 0, ino: Optional[int] = None) -> Inode:
        """A new inode, numbered ``ino`` or past every number used so far (not
        SQLite's pick, which would give a freed number to the next file)."""
        row = (self._new_number() if ino is None else ino, mode, uid, gid, size, nlink,
               atime_ns, mtime_ns, ctime_ns, rdev)
        self.cat.execute(f"INSERT INTO inodes ({INODE_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?)", row)
        return self._added(row)

    def _new_number(self) -> int:
        numbers = self.cat.inode_numbers        # several machines' mounts: the engine's sequence
        return numbers.take(self.cat) if numbers is not None else self.last_ino() + 1

    def _added(self, row: tuple) -> Inode:
        """The inode of the row just sent, counted as used."""
        node = Inode(*row)
        if self.memo.last_ino:      # else not asked yet: the catalog's answer will count this one
            self.memo.last_ino = max(self.memo.last_ino, node.id)
        self.memo.drop_node(node.id)
        return node

    def add_named_inode(self, parent: int, name: bytes, mode: int, uid: int, gid: int, size: int,
                        nlink: int, t: int, rdev: int, parent_links: int) -> Optional[Inode]:
        """``add_inode``, ``add_name`` and ``touch_dir`` (``t`` the times of
        both, ``parent_links`` the parent's link count change) at once; None,
        and nothing made, if another machine made the name first. On
        PostgreSQL one statement, not three (a statement's CPU, not its wait,
        was a create's cost: webfs-internals(7), POSTGRESQL CP, STATEMENTS A
        FILE); SQLite takes no INSERT or UPDATE in a WITH."""
        if self.cat.engine is SQLITE:
            node = self.add_inode(mode, uid, gid, size, nlink, t, t, t, rdev)
            if not self.add_name(parent, name, node.id):
                self.drop_unnamed(node.id)
                return None
            self.touch_dir(parent, t, parent_links)
            return node
        row = (self._new_number(), mode, uid, gid, size, nlink, t, t, t, rdev)
        asked = self._name_asked(parent)
        made = self.cat.execute(NAMED_INODE_SQL[asked], (*row, parent, name, parent_links))
        node = self._added(row)
        if asked and not made.rowcount:
            self.memo.forget_others(set(), {(parent, name)})
            return None
        self.memo.made_name(parent, name, node.id)
        return node

    def touch_dir(self, parent: int, t: int, links: int = 0) -> None:
        """A directory's times set to ``t`` and its link count moved by ``links``."""
        self.cat.execute("UPDATE inodes SET mtime_ns=?, ctime_ns=?, nlink=nlink+? WHERE id=?",
                         (t, t, links, parent))

    def last_ino(self) -> int:
        """The highest inode number used so far, freed ones too (asked of the
        catalog once: Catalog.top_inode)."""
        if not self.memo.last_ino:
            self.memo.last_ino = self.cat.top_inode()
        return self.memo.last_ino

    def listing(self, read: Optional[Callable[[BlockRow], bytes]] = None) -> dict[bytes, tuple]:
        """path -> (inode, mode, size, mtime_ns, uid, gid, content, xattrs) of
        every name reachable from the root, where content is the (signature,
        overflow) of each piece, or a symlink's target: with ``read`` (a
        store's), also of a symlink the catalog knows by its block only (a
        rebuilt one, until the first readlink: ``target_in_block``), else its
        block stands for it. For comparing two catalogs (``fsck.compare``)."""
        children: dict[int, list] = {}
        for parent, name, ino in self.cat.query("SELECT parent, name, inode FROM dentries"):
            children.setdefault(parent, []).append((bytes(name), ino))
        inodes = {row[0]: row[1:] for row in self.cat.query("SELECT id, mode, size, mtime_ns, uid, gid FROM inodes")}
        content: dict[int, list] = {}
        for ino, sig, overflow in self.cat.query(
                "SELECT c.inode, b.sig, b.overflow FROM contents c JOIN blocks b ON b.id = c.block "
                "ORDER BY c.inode, c.piece"):
            content.setdefault(ino, []).append((hex_of(sig), overflow))
        targets = {ino: [bytes(target)] for ino, target in self.cat.query("SELECT inode, target FROM symlinks")}
        for ino, row in inodes.items() if read is not None else ():
            if stat.S_ISLNK(row[0]) and ino not in targets:
                with contextlib.suppress(WebfsError, OSError):      # unreadable: its block stands for it
                    targets[ino] = [self.target_in_block(ino, read)]
        content.update(targets)
        xattrs: dict[int, list] = {}
        for ino, name, value in self.cat.query("SELECT inode, name, value FROM xattrs ORDER BY inode, name"):
            xattrs.setdefault(ino, []).append((bytes(name), bytes(value)))
        out: dict[bytes, tuple] = {}
        todo, seen = [(b"", ROOT_INODE)], {ROOT_INODE}
        while todo:
            path, ino = todo.pop()
            for name, child in children.get(ino, ()):
                p = path + b"/" + name
                mode, size, mtime, uid, gid = inodes.get(child, (0, 0, 0, 0, 0))
                out[p] = (child, mode, size, mtime, uid, gid, tuple(content.get(child, ())),
                          tuple(xattrs.get(child, ())))
                if stat.S_ISDIR(mode) and child not in seen:     # a damaged catalog may loop
                    seen.add(child)
                    todo.append((p, child))
        return out

    def add_name(self, parent: int, name: bytes, ino: int) -> bool:
        """A directory entry: ``name`` in ``parent`` is inode ``ino`` (link counts
        untouched). False, and nothing made, if another machine made the name
        first (a catalog other machines' mounts share: asked of the engine, which
        waits for the other's commit; what this memo kept of the name is forgotten).
        Not asked in a directory made in the open transaction: no other machine
        sees it before its commit, so none can have made the name."""
        if not self._name_asked(parent):
            self.cat.execute("INSERT INTO dentries (parent, name, inode) VALUES (?,?,?)", (parent, name, ino))
        elif not self.cat.execute("INSERT INTO dentries (parent, name, inode) VALUES (?,?,?)" + NAME_CONFLICT,
                                  (parent, name, ino)).rowcount:
            self.memo.forget_others(set(), {(parent, name)})
            return False
        self.memo.made_name(parent, name, ino)
        return True

    def _name_asked(self, parent: int) -> bool:
        """Can another machine have made a name in ``parent`` (see ``add_name``)?"""
        numbers = self.cat.inode_numbers
        return not (numbers is None or not numbers.checked or self.memo.unseen_dir(parent, self.cat.commits))

    def drop_unnamed(self, ino: int) -> None:
        """Take back an inode just added whose name another machine made first."""
        self.cat.execute("DELETE FROM inodes WHERE id=?", (ino,))
        self.memo.drop_node(ino)

    def move_name(self, old_parent: int, old_name: bytes, new_parent: int, new_name: bytes) -> bool:
        """Move a directory entry to a free name (keeping its readdir offset).
        False, and nothing moved, if the entry is gone or the new name taken by
        another machine's (asked of the engine as ``add_name`` asks, which waits
        for the other's commit; what this memo kept of both names is forgotten)."""
        numbers = self.cat.inode_numbers
        if numbers is None or not numbers.checked:
            self.cat.execute("UPDATE dentries SET parent=?, name=? WHERE parent=? AND name=?",
                             (new_parent, new_name, old_parent, old_name))
            return True
        # An UPDATE has no ON CONFLICT: a copy under the new name, then the old one
        # goes; FOR UPDATE holds the old entry against another machine's change of it.
        if not self.cat.execute("INSERT INTO dentries (rowid, parent, name, inode) SELECT rowid, ?, ?, inode "
                                "FROM dentries WHERE parent=? AND name=? FOR UPDATE ON CONFLICT (parent, name) "
                                "DO NOTHING", (new_parent, new_name, old_parent, old_name)).rowcount:
            self.memo.forget_others(set(), {(old_parent, old_name), (new_parent, new_name)})
            return False
        self.cat.execute("DELETE FROM dentries WHERE parent=? AND name=?", (old_parent, old_name))
        return True

    def add_symlink_target(self, ino: int, target: bytes) -> None:
        self.cat.execute("INSERT INTO symlinks (inode, target) VALUES (?,?)", (ino, target))

    def target_in_block(self, ino: int, read: Callable[[BlockRow], bytes]) -> bytes:
        """A symlink's target as its block holds it (``read``: a store's), all a
        rebuilt catalog knows of it until the first readlink keeps it in
        ``symlinks``: how readlink and ``listing`` (fsck's compare) read it."""
        rows = self.contents(ino)
        return read(rows[0]) if rows else b""

    def add_contents(self, ino: int, block_ids: list[int], attrs: Optional[dict] = None) -> None:
        """A file's blocks, in piece order, for a file that has none yet; with
        ``attrs``, its inode's columns set (``set_inode``) too: on PostgreSQL
        in the same statement (webfs-internals(7), POSTGRESQL CP, STATEMENTS A FILE)."""
        if attrs and self.cat.engine is not SQLITE:
            sets = ", ".join(f"{k}=?" for k in attrs)
            self.cat.execute(f"WITH pieces AS ({CONTENTS_OF_ARRAY}) UPDATE inodes SET {sets} WHERE id=?",
                             (ino, block_ids, *attrs.values(), ino))
        else:
            self.cat.executemany("INSERT INTO contents (inode, piece, block) VALUES (?,?,?)",
                                 [(ino, piece, block_id) for piece, block_id in enumerate(block_ids)])
            if attrs:
                self.set_inode(ino, attrs)
        self.memo.drop_reading(ino)

    def set_inode(self, ino: int, attrs: dict) -> None:
        """An inode's columns (name: value) set, as they are."""
        self.cat.execute(f"UPDATE inodes SET {', '.join(k + '=?' for k in attrs)} WHERE id=?", (*attrs.values(), ino))

    def known_empty(self, ino: int) -> bool:
        """Is this a file made here that holds no blocks yet (taken: its content
        is being set)? With other machines mounted, only while the transaction
        that made it is open: once committed, one of them may have given it
        blocks a moment ago, its notice not yet heard."""
        made_at = self.memo.empty.pop(ino, None)
        numbers = self.cat.inode_numbers
        return made_at is not None and (numbers is None or not numbers.checked or made_at == self.cat.commits)

    def new_ino(self) -> int:
        """The number of an inode ``add_many`` will add, past every number used
        so far; taken under the catalog lock ``add_many`` is then called under
        (a rollback between would forget it)."""
        self.memo.last_ino = self.last_ino() + 1
        return self.memo.last_ino

    def add_many(self, nodes: list[Inode], names: list[tuple[int, bytes, int]],
                 contents: list[tuple[int, int, int]]) -> None:
        """New inodes numbered by ``new_ino``, their names (parent, name, inode)
        and blocks (inode, piece, block), one statement each: a bulk writer's
        batch, in a catalog no other machine makes names in (``inode_numbers``
        None, where ``add_name`` checks nothing either)."""
        self.cat.executemany(f"INSERT INTO inodes ({INODE_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?)",
                             [(n.id, n.mode, n.uid, n.gid, n.size, n.nlink, n.atime_ns, n.mtime_ns,
                               n.ctime_ns, n.rdev) for n in nodes])
        self.cat.executemany("INSERT INTO dentries (parent, name, inode) VALUES (?,?,?)", names)
        self.cat.executemany("INSERT INTO contents (inode, piece, block) VALUES (?,?,?)", contents)
        for node in nodes:
            self.memo.drop_node(node.id)
            self.memo.drop_reading(node.id)
        for parent, name, ino in names:
            self.memo.made_name(parent, name, ino)

    def add_xattrs(self, xattrs: list[tuple[int, bytes, bytes]]) -> None:
        """(inode, name, value) xattrs set, replacing any of the same name."""
        self.cat.executemany("INSERT OR REPLACE INTO xattrs (inode, name, value) VALUES (?,?,?)", xattrs)
        for ino, _, _ in xattrs:
            self.memo.xattrs.pop(ino, None)

    def add_xattr(self, ino: int, name: bytes, value: bytes) -> None:
        self.cat.execute("INSERT OR REPLACE INTO xattrs (inode, name, value) VALUES (?,?,?)", (ino, name, value))
        self.memo.xattrs.pop(ino, None)

    def bump_nlink(self, ino: int, delta: int) -> None:
        self.cat.execute("UPDATE inodes SET nlink=nlink+? WHERE id=?", (delta, ino))
        self.memo.drop_node(ino)

    def contents(self, ino: int, named: bool = False) -> list[BlockRow]:
        """A file's blocks in order; ``named``: none once it has no name left
        (nlink 0, though open or known to the kernel still): how a reader that
        found it by a walk asks, so that a file removed before its blocks are
        asked is told gone, whether its blocks have left the disks yet or not
        (webfs.walkread)."""
        return [BlockRow.of(r) for r in self.cat.query(
            f"SELECT {BLOCK_COLUMNS_OF_B} FROM contents c JOIN blocks b ON b.id = c.block "
            + ("JOIN inodes i ON i.id = c.inode AND i.nlink > 0 " if named else "")
            + "WHERE c.inode=? ORDER BY c.piece", (ino,))]

    def linked(self, ino: int, fresh: bool = False) -> bool:
        """Is the file numbered ``ino`` still named in the archive? Asked of the
        catalog, never of the memo, which a command reading a mount's catalog
        does not keep up with the daemon's removals (webfs.walkread).
        ``fresh``: of a connection opened now, as a reading command's own
        SQLite connection was seen to go on reading an older snapshot after the
        daemon had committed a removal and taken its blocks off the disks."""
        cat = Catalog.reader(self.cat.path, self.cat.engine) if fresh else self.cat
        try:
            return bool(cat.query("SELECT 1 FROM inodes WHERE id=? AND nlink>0", (ino,)))
        finally:
            if fresh:
                cat.close()

    def set_changed(self, ino: int, t_ns: int) -> None:
        """mtime and ctime set to ``t_ns`` (a directory that got names)."""
        self.cat.execute("UPDATE inodes SET mtime_ns=?, ctime_ns=? WHERE id=?", (t_ns, t_ns, ino))
        self.memo.drop_node(ino)

    def children(self, parent: int) -> dict[bytes, Inode]:
        """Every name in a directory, with its inode."""
        rows = self.cat.query(f"SELECT d.name, {INODE_COLUMNS_OF_I} FROM dentries d JOIN inodes i ON i.id = d.inode "
                              "WHERE d.parent=?", (parent,))
        return {r[0]: Inode(*r[1:]) for r in rows}

    def inodes_with_xattr(self, name: bytes, value: bytes) -> set[int]:
        """The inodes whose xattr ``name`` has this value."""
        return {r[0] for r in self.cat.query("SELECT inode FROM xattrs WHERE name=? AND value=?",
                                             (name, value))}

    def xattr_values(self, name: bytes) -> list[tuple[bytes, int]]:
        """(value, inode) of every inode that has the xattr ``name``."""
        return [tuple(r) for r in self.cat.query("SELECT value, inode FROM xattrs WHERE name=?", (name,))]
