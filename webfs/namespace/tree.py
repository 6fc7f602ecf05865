"""The directory tree of one archive: POSIX's rules in one place (ENOENT,
EEXIST, ENOTEMPTY, ENAMETOOLONG, rename over a target, link counts), with
no FUSE in it: ``fs`` translates kernel requests into these calls, and a
test can drive it directly. A file's content is a list of blocks (one per
piece); ``set_contents`` replaces it and releases the blocks it no longer
uses. Every change is told to the journal (plain text on the disks) so
names survive the catalog.
"""
from __future__ import annotations

import dataclasses
import errno
import stat
import threading
from contextlib import contextmanager
from typing import Callable, Iterator, Mapping, Optional

from ..catalog import TOP_FREED, BlockRow, Catalog
from ..errors import FsError
from ..signature import block_name
from ..store import Store
from .rows import (BLOCK_COLUMNS_OF_B, INODE_COLUMNS, INODE_COLUMNS_OF_I, NAME_MAX, NO_XATTRS, ROOT_INODE,
                   Inode, NamespaceRows, check_name, now_ns)
from .paths import NAMES_UP_SQL, KeptPaths

# A directory's entries joined with their inodes: (rowid, parent, name, the inode's columns).
ENTRIES_SQL = (f"SELECT d.rowid, d.parent, d.name, {INODE_COLUMNS_OF_I} "
               "FROM dentries d JOIN inodes i ON i.id = d.inode WHERE ")

# Times a rename is done again after another machine changed one of its names meanwhile.
RENAME_TRIES = 4


class Namespace(NamespaceRows):
    """The directory tree of one archive, over its catalog and store."""

    def __init__(self, store: Store, journal: Optional[Callable[..., None]] = None,
                 catalog: Optional[Catalog] = None):
        super().__init__(catalog or store.catalog)      # or a read-only snapshot of it
        self.store = store
        self.journal = journal or (lambda *args, **kwargs: None)
        self.paths = KeptPaths()        # renames here clear them; another machine's, those through its names
        self._deferred = threading.local()

    @contextmanager
    def _locked(self) -> Iterator[None]:
        """The catalog lock, with the reference changes made under it (``_later``)
        done once it is let go: they take a signature lock, and the lock order is
        signature lock, then catalog lock (a store in a worker thread holds its
        signature lock while it waits for the catalog lock)."""
        outer = getattr(self._deferred, "ops", None)
        if outer is not None:
            with self.cat.lock:
                yield
            return
        ops = self._deferred.ops = []
        try:
            with self.cat.lock:
                yield
        finally:
            self._deferred.ops = None
            for fn, row in ops:
                fn(row)

    def _later(self, fn, row: BlockRow) -> None:
        self._deferred.ops.append((fn, row))

    # -- reading ---------------------------------------------------------------

    def ensure_root(self, uid: int = 0, gid: int = 0) -> None:
        if self.cat.scalar("SELECT 1 FROM inodes WHERE id=?", (ROOT_INODE,)) is None:
            t = now_ns()
            self.add_inode(stat.S_IFDIR | 0o755, uid, gid, 0, 2, t, t, t, ino=ROOT_INODE)
            self.cat.commit()

    def get(self, ino: int) -> Inode:
        node = self.memo.nodes.get(ino)
        if node is not None:
            return node
        with self.cat.lock:
            rows = self.cat.query(f"SELECT {INODE_COLUMNS} FROM inodes WHERE id=?", (ino,))
            if not rows:
                raise FsError(errno.ENOENT, f"no inode {ino}")
            node = Inode(*rows[0])
            self.memo.keep_node(node)
        return node

    def find(self, parent: int, name: bytes) -> Optional[Inode]:
        """The inode of ``name`` in ``parent``, or None: ``lookup`` without the
        exception, for the kernel's lookups (cp -r and rsync miss every name
        before they make it)."""
        ino = self.memo.names.get((parent, name))
        if ino is None and parent not in self.memo.complete:
            return self._find_row(parent, name)
        return None if ino is None else self.get(ino)

    def _find_row(self, parent: int, name: bytes) -> Optional[Inode]:
        """``find`` from the catalog: the name, its inode and, for a file of
        one piece, its block and where the name sits, in one query, so that
        the open and read that follow a cold lookup ask nothing more."""
        with self.cat.lock:
            rows = self.cat.query(
                f"SELECT d.rowid, {INODE_COLUMNS_OF_I}, "
                f"{BLOCK_COLUMNS_OF_B} FROM dentries d JOIN inodes i ON i.id = d.inode "
                "LEFT JOIN contents c ON c.inode = d.inode AND c.piece = 0 "
                "LEFT JOIN blocks b ON b.id = c.block WHERE d.parent=? AND d.name=?", (parent, name))
            if not rows:
                return None
            r = rows[0]
            node = self.memo.nodes.get(r[1])         # the memo's, if kept: as new as the catalog's
            if node is None:
                node = Inode(*r[1:11])
                self.memo.keep_node(node)
            self.memo.keep_name(parent, name, node.id)
            if r[11] is not None:
                row = BlockRow.of(r[11:])
                if row.size == node.size:           # the first piece is the whole file
                    self.memo.keep_pieces(node.id, parent, r[0], [row])
        return node

    def lookup(self, parent: int, name: bytes) -> Inode:
        node = self.find(parent, name)
        if node is None:
            raise FsError(errno.ENAMETOOLONG if len(name) > NAME_MAX else errno.ENOENT)
        return node

    def _taken(self, parent: int, name: bytes) -> bool:
        """Is ``name`` in use in ``parent``? (Under the catalog lock.) From
        memory in a complete directory: the check before every create."""
        if parent in self.memo.complete:
            return (parent, name) in self.memo.names
        return bool(self.cat.scalar("SELECT 1 FROM dentries WHERE parent=? AND name=?", (parent, name)))

    def entries(self, parent: int, after: int = 0, limit: int = 1000) -> list[tuple[int, bytes, Inode]]:
        """(offset, name, inode) of a directory's entries after an offset, in
        offset order, kept nowhere: a walk of everything leaves the memo to
        what is in use (the kernel's readdir asks ``listing``)."""
        rows = self.cat.query(ENTRIES_SQL + "d.parent=? AND d.rowid>? ORDER BY d.rowid LIMIT ?", (parent, after, limit))
        return [(r[0], r[2], Inode(*r[3:])) for r in rows]

    def entries_of(self, parents: list[int]) -> list[tuple[int, bytes, Inode]]:
        """(parent, name, inode) of every entry of many directories, a query per
        500 (a collection's walk, level by level: not a query per directory)."""
        return [(r[1], r[2], Inode(*r[3:])) for r in self.cat.query_in(ENTRIES_SQL + "d.parent IN ({})", parents)]

    def listing(self, parent: int, after: int, limit: int, keep: bool = True
                ) -> list[tuple[int, bytes, Inode, Optional[BlockRow]]]:
        """``entries`` with each file's first block, in one query (None for a
        directory, an empty file or one of several pieces); a file of one piece
        keeps its block and position for its reader. ``keep``: the inodes go to
        the memo too (the kernel's readdir: the opens and getattrs of a listed
        directory's files come next), and a walker of it (grep -r, find, tar)
        costs no query more at its opens or for what is read ahead."""
        with self.cat.lock:             # a fill under the lock, as every fill of the memo
            rows = self.cat.query(
                f"SELECT d.rowid, d.name, {INODE_COLUMNS_OF_I}, "
                f"{BLOCK_COLUMNS_OF_B} FROM dentries d JOIN inodes i ON i.id = d.inode "
                "LEFT JOIN contents c ON c.inode = d.inode AND c.piece = 0 "
                "LEFT JOIN blocks b ON b.id = c.block WHERE d.parent=? AND d.rowid>? "
                "ORDER BY d.rowid LIMIT ?", (parent, after, limit))
            out = []
            for r in rows:
                node = Inode(*r[2:12])
                if keep and node.id not in self.memo.nodes:
                    self.memo.keep_node(node)
                row = BlockRow.of(r[12:]) if r[12] is not None else None
                if row is not None and row.size != node.size:     # the first of several pieces
                    row = None
                if row is not None:
                    self.memo.keep_pieces(node.id, parent, r[0], [row])
                out.append((r[0], r[1], node, row))
        return out

    def kept_block(self, ino: int) -> Optional[BlockRow]:
        """The block a file of one piece keeps for its next open, if any: gone
        as soon as the file's blocks or names change (``drop_reading``)."""
        found = self.memo.pieces.get(ino)
        return found[0] if found is not None and len(found) == 1 else None

    def position(self, ino: int) -> Optional[tuple[int, int]]:
        """(parent, offset) of one of an inode's names, or None if it has none."""
        found = self.memo.positions.get(ino)
        if found is not None:
            return found
        rows = self.cat.query("SELECT parent, rowid FROM dentries WHERE inode=? LIMIT 1", (ino,))
        return tuple(rows[0]) if rows else None

    def names_of(self, ino: int) -> list[tuple[int, bytes]]:
        """(parent, name) of every name of an inode."""
        return [tuple(r) for r in self.cat.query(
            "SELECT parent, name FROM dentries WHERE inode=?", (ino,))]

    def has_file_before(self, parent: int, offset: int) -> bool:
        """Whether a file with content comes before an offset in its directory."""
        return bool(self.cat.query(
            "SELECT 1 FROM dentries d JOIN contents c ON c.inode = d.inode AND c.piece = 0 "
            "WHERE d.parent=? AND d.rowid<? LIMIT 1", (parent, offset)))

    def has_reading_between(self, parent: int, after: int, before: int) -> bool:
        """Whether a directory has, between two offsets, a subdirectory or a
        file with content: what a walker of the tree would read there."""
        return bool(self.cat.query(
            "SELECT 1 FROM dentries d JOIN inodes i ON i.id = d.inode WHERE d.parent=? AND d.rowid>? "
            f"AND d.rowid<? AND ((i.mode & {0o170000}) = {stat.S_IFDIR} OR EXISTS (SELECT 1 FROM contents c "
            "WHERE c.inode = d.inode AND c.piece = 0)) LIMIT 1", (parent, after, before)))

    def entries_ahead(self, parent: int, offset: int, limit: int
                      ) -> list[tuple[int, int, bool, Optional[BlockRow]]]:
        """(offset, inode, is a directory, first block or None) of a directory's
        next entries after an offset, in order: what a walker of the tree opens
        next (``listing`` without keeping the inodes)."""
        return [(off, node.id, node.is_dir, row) for off, _, node, row in self.listing(parent, offset, limit, False)]

    def path_of(self, ino: int) -> bytes:
        """The path of an inode from the root (one of its names, for hints and journals).
        The names up to the first directory whose path is kept come from one
        recursive query, which SQLite and PostgreSQL run as a loop, not a
        recursion: a captured URL can be thousands of directories deep."""
        names: list[tuple[int, int, bytes, Optional[int]]] = []     # (inode, parent, name, mode), deepest first
        here, path = ino, b""
        made = self.paths.file(ino)
        if made is not None:
            return made
        up = iter(self.cat.query(NAMES_UP_SQL, (ino,)) if ino != ROOT_INODE and ino not in self.paths.dirs else ())
        while here != ROOT_INODE:
            cached = self.paths.dirs.get(here)
            if cached is not None:
                path = cached
                break
            row = next(up, None)
            if row is None:
                return b""
            names.append(row)
            here = row[1]
        for node, parent, name, mode in reversed(names):
            path = path + b"/" + name
            if mode is not None and stat.S_ISDIR(mode):
                self.paths.keep_dir(node, path, parent, name)
        return path

    def pieces(self, ino: int) -> list[BlockRow]:
        """A file's blocks for a reader: ``contents``, or what the read-ahead of
        its directory kept (no SQL then). Their refs, disk and stripe may be
        older than the catalog's; what each block is (and so its bytes) is not.
        Kept blocks serve the one open they were fetched for: kept longer, a
        block that ``webfs cool`` or rebalance moved since was looked for on
        its old disk first at every open (webfs-internals(7), READS THROUGH
        THE MOUNT)."""
        found = self.memo.pieces.get(ino)
        if found is None:
            return self.contents(ino)
        with self.cat.lock:             # the memo changes only under the lock
            self.memo.pieces.pop(ino, None)
        return found

    def forget_pieces(self, ino: int) -> None:
        """A reader found the kept blocks wrong (a read failed): ask the catalog next."""
        with self.cat.lock:             # the memo changes only under the lock
            self.memo.drop_reading(ino)

    def forget_others(self, inodes: set[int], names: set[tuple[int, bytes]], everything: bool) -> None:
        """Another machine's mount changed these inodes and names (webfs.changes):
        nothing kept of them answers again; ``everything``: nothing kept at all."""
        with self.cat.lock:
            if everything:
                self.memo.clear()
            else:
                self.memo.forget_others(inodes, names)
            if everything:
                self.paths.clear()
            else:
                self.paths.forget_names(names)

    def _pieces_of(self, inodes: list[int], cols: str) -> Iterator[tuple]:
        """(inode, *cols of its blocks joined as b) of many files, in piece order, a query per 500."""
        for i in range(0, len(inodes), 500):
            part = inodes[i:i + 500]
            yield from self.cat.query(
                f"SELECT c.inode, {cols} FROM contents c JOIN blocks b ON b.id = c.block "
                f"WHERE c.inode IN ({','.join('?' * len(part))}) ORDER BY c.inode, c.piece", part)

    def contents_of(self, inodes: list[int]) -> dict[int, list[BlockRow]]:
        """inode -> its blocks in order (``contents`` of many files at once);
        an inode without blocks is absent."""
        found: dict[int, list[BlockRow]] = {}
        for r in self._pieces_of(inodes, BLOCK_COLUMNS_OF_B):
            found.setdefault(r[0], []).append(BlockRow.of(r[1:]))
        return found

    def block_names(self, inodes: list[int]) -> dict[int, str]:
        """inode -> its blocks as a MANIFEST lists them ('sig[~n],...'), for many files at once."""
        names: dict[int, list[str]] = {}
        for ino, sig, overflow in self._pieces_of(inodes, "b.sig, b.overflow"):
            names.setdefault(ino, []).append(block_name(sig.hex(), overflow))
        return {ino: ",".join(v) for ino, v in names.items()}

    def readlink(self, ino: int) -> bytes:
        target = self.cat.scalar("SELECT target FROM symlinks WHERE inode=?", (ino,))
        if target is None:
            if not stat.S_ISLNK(self.get(ino).mode):
                raise FsError(errno.EINVAL, "not a symlink")
            # A rebuilt catalog knows a symlink only by its block: read the target once.
            target = self.target_in_block(ino, self.store.read)
            self.add_symlink_target(ino, target)
        return target

    def count_inodes(self) -> int:
        return self.cat.scalar("SELECT COUNT(*) FROM inodes")

    # -- making names ----------------------------------------------------------

    def _parent_dir(self, parent: int) -> Inode:
        node = self.get(parent)
        if not node.is_dir:
            raise FsError(errno.ENOTDIR)
        return node

    def _touch_dir(self, parent: int, nlink_delta: int = 0) -> None:
        """A directory got or lost a name: its times (and link count) change.
        (Under the catalog lock.) Its row in the memo is changed as the
        catalog's is, not dropped: the next name made there (cp -r makes
        one after another) then reads no row back."""
        t = now_ns()
        self.touch_dir(parent, t, nlink_delta)
        self._dir_touched(parent, t, nlink_delta)

    def _dir_touched(self, parent: int, t: int, nlink_delta: int) -> None:
        kept = self.memo.nodes.get(parent)
        if kept is not None:
            self.memo.nodes[parent] = dataclasses.replace(kept, mtime_ns=t, ctime_ns=t,
                                                          nlink=kept.nlink + nlink_delta)
        self.journal("+", self.get(parent), self.path_of(parent) or b"/")

    def create(self, parent: int, name: bytes, mode: int, uid: int, gid: int,
               rdev: int = 0, target: Optional[bytes] = None) -> Inode:
        """A new file, directory, symlink (target given) or special node."""
        check_name(name)
        if target is None:
            return self._create(parent, name, mode, uid, gid, rdev, None, None)
        # A symlink's target is a block, stored before the catalog lock is taken:
        # the store waits for a signature lock, never waited for under the catalog's.
        row = self.store.store(target, name=self._join(parent, name))
        try:
            return self._create(parent, name, mode, uid, gid, rdev, target, row)
        except BaseException:
            self.store.release(row)
            raise

    def _create(self, parent: int, name: bytes, mode: int, uid: int, gid: int, rdev: int,
                target: Optional[bytes], row: Optional[BlockRow]) -> Inode:
        with self.cat.lock:
            self._parent_dir(parent)
            if self._taken(parent, name):
                raise FsError(errno.EEXIST)
            self.cat.room.check()
            t = now_ns()
            is_dir = stat.S_ISDIR(mode)
            size = len(target) if target is not None else 0
            node = self.add_named_inode(parent, name, mode, uid, gid, size, 1 + is_dir, t, rdev, int(is_dir))
            if node is None:                                # made by another machine meanwhile
                raise FsError(errno.EEXIST)
            ino = node.id
            self._dir_touched(parent, t, int(is_dir))
            path = self._join(parent, name)
            (self.paths.keep_dir if is_dir else self.paths.keep_file)(ino, path, parent, name)
            rows = []
            if target is not None:
                self.add_symlink_target(ino, target)
                rows = [row]
                self.add_contents(ino, [row.id])
            self.journal("+", node, path, rows=rows)
            self.memo.keep_node(node)
            self.memo.keep_xattrs(ino, NO_XATTRS)
            if stat.S_ISREG(mode):
                self.memo.made_empty(ino, self.cat.commits)
            if is_dir:
                self.memo.made_complete(ino, self.cat.commits)
            return node

    def link(self, ino: int, parent: int, name: bytes) -> Inode:
        check_name(name)
        with self._locked():
            node = self.get(ino)
            if node.is_dir:
                raise FsError(errno.EPERM, "hard links to directories are not allowed")
            self._parent_dir(parent)
            self.cat.room.check()
            if self._taken(parent, name) or not self.add_name(parent, name, ino):
                raise FsError(errno.EEXIST)
            self.cat.execute("UPDATE inodes SET nlink=nlink+1, ctime_ns=? WHERE id=?", (now_ns(), ino))
            self.memo.drop_node(ino)
            self._touch_dir(parent)
            for row in self.contents(ino):
                self._later(self.store.add_ref, row)
            node = self.get(ino)
            self._journal_every_name(node)      # each name's record says which inode it shares
            return node

    def _journal_every_name(self, node: Inode, rows: Optional[list[BlockRow]] = None) -> None:
        """A ``+`` record for every name of ``node`` (its attributes changed);
        a file of one name whose path is kept (from its create), or a directory
        whose path is (rsync sets every directory's mode and times), asks nothing."""
        if node.is_dir:
            path = b"/" if node.id == ROOT_INODE else self.path_of(node.id) or None
        else:
            path = self.paths.file(node.id) if node.nlink == 1 else None
        if path is not None:
            self.journal("+", node, path, rows=rows)
            return
        for (parent, name) in self.cat.query("SELECT parent, name FROM dentries WHERE inode=?", (node.id,)):
            self.journal("+", node, self._join(parent, name), rows=rows)

    def _join(self, parent: int, name: bytes) -> bytes:
        return self.path_of(parent) + b"/" + name

    # -- removing names --------------------------------------------------------

    def unlink(self, parent: int, name: bytes) -> Inode:
        """Remove a non-directory name; returns the inode (nlink 0: free it when unused)."""
        return self._remove(parent, name, directory=False)

    def rmdir(self, parent: int, name: bytes) -> Inode:
        return self._remove(parent, name, directory=True)

    def _remove(self, parent: int, name: bytes, directory: bool) -> Inode:
        with self._locked():
            node = self.lookup(parent, name)
            if node.is_dir != directory:
                raise FsError(errno.ENOTDIR if directory else errno.EISDIR)
            if directory and self.cat.scalar("SELECT 1 FROM dentries WHERE parent=? LIMIT 1", (node.id,)):
                raise FsError(errno.ENOTEMPTY)
            path = self._join(parent, name)
            self._drop_name(parent, name, node)
            self.journal("-", None, path)
            return self.get(node.id)

    def _drop_name(self, parent: int, name: bytes, node: Inode) -> None:
        self.cat.execute("DELETE FROM dentries WHERE parent=? AND name=?", (parent, name))
        self.memo.drop_name(parent, name)
        self.memo.drop_node(node.id)
        self.memo.drop_reading(node.id)
        self.paths.drop(node.id)
        if node.is_dir:
            self.cat.execute("UPDATE inodes SET nlink=0, ctime_ns=? WHERE id=?", (now_ns(), node.id))
            self._touch_dir(parent, -1)
        else:
            self.cat.execute("UPDATE inodes SET nlink=nlink-1, ctime_ns=? WHERE id=?", (now_ns(), node.id))
            self._touch_dir(parent)
            # The blocks of this name's reference go now; the inode's own
            # content stays readable through open handles until it is freed.
            if node.nlink > 1:
                for row in self.contents(node.id):
                    self._later(self.store.release, row)

    def free(self, ino: int) -> None:
        """Forget an inode that has no name left: its blocks lose their references."""
        with self._locked():
            node = self.get(ino)
            if node.nlink > 0:
                return
            for row in self.contents(ino):
                self._later(self.store.release, row)
            highest = ino >= self.last_ino()        # asked before its row goes
            for table, col in (("contents", "inode"), ("symlinks", "inode"),
                               ("xattrs", "inode"), ("inodes", "id")):
                self.cat.execute(f"DELETE FROM {table} WHERE {col}=?", (ino,))
            if highest:                             # its number stays used (Catalog.top_inode)
                self.cat.set_meta(TOP_FREED, str(ino))
            self.memo.drop_node(ino)
            self.memo.drop_reading(ino)
            self.memo.xattrs.pop(ino, None)
            self.memo.complete.discard(ino)

    def orphans(self) -> list[int]:
        """Inodes with no name left (a crash while they were open)."""
        return [r[0] for r in self.cat.query("SELECT id FROM inodes WHERE nlink<=0 AND id<>?",
                                             (ROOT_INODE,))]

    # -- renaming --------------------------------------------------------------

    def rename(self, old_parent: int, old_name: bytes, new_parent: int, new_name: bytes,
               noreplace: bool = False, exchange: bool = False) -> Optional[Inode]:
        """Rename; returns the inode that lost its name to the target, if any.
        A target name another machine made at the same moment, or a source it
        removed, is met as if its change came first: the rename is done again
        over what the catalog now holds (a target replaced, EEXIST with
        ``noreplace``, ENOENT for a source gone)."""
        check_name(new_name)
        for _ in range(RENAME_TRIES):
            with self._locked():
                done, replaced = self._rename(old_parent, old_name, new_parent, new_name, noreplace, exchange)
            if done:
                return replaced
        raise FsError(errno.EIO, "rename: the names kept changing on other machines")

    def _rename(self, old_parent: int, old_name: bytes, new_parent: int, new_name: bytes,
                noreplace: bool, exchange: bool) -> tuple[bool, Optional[Inode]]:
        """(done, the inode that lost its name); not done: another machine changed one of the names."""
        node = self.lookup(old_parent, old_name)
        self._parent_dir(new_parent)
        target = self.find(new_parent, new_name)        # a miss raises nothing (rsync's every rename)
        if target is not None and target.id == node.id:
            return True, None
        if node.is_dir and self._is_ancestor(node.id, new_parent):
            raise FsError(errno.EINVAL, "cannot move a directory into itself")
        old_path, new_path = self._join(old_parent, old_name), self._join(new_parent, new_name)
        if exchange:
            if target is None:
                raise FsError(errno.ENOENT)
            if target.is_dir and self._is_ancestor(target.id, old_parent):
                raise FsError(errno.EINVAL)
            self.cat.execute("UPDATE dentries SET inode=? WHERE parent=? AND name=?",
                             (target.id, old_parent, old_name))
            self.cat.execute("UPDATE dentries SET inode=? WHERE parent=? AND name=?",
                             (node.id, new_parent, new_name))
            self.memo.drop_name(old_parent, old_name)
            self.memo.drop_name(new_parent, new_name)
            self.memo.complete.difference_update((old_parent, new_parent))
            self.memo.drop_reading(node.id)
            self.memo.drop_reading(target.id)
            self.paths.clear()
            if node.is_dir != target.is_dir and old_parent != new_parent:
                delta = 1 if node.is_dir else -1
                self._touch_dir(new_parent, delta)
                self._touch_dir(old_parent, -delta)
            self.journal("<>", None, old_path, new_path)
            return True, None
        replaced = None
        if target is not None:
            if noreplace:
                raise FsError(errno.EEXIST)
            if target.is_dir:
                if not node.is_dir:
                    raise FsError(errno.EISDIR)
                if self.cat.scalar("SELECT 1 FROM dentries WHERE parent=? LIMIT 1", (target.id,)):
                    raise FsError(errno.ENOTEMPTY)
            elif node.is_dir:
                raise FsError(errno.ENOTDIR)
            self._drop_name(new_parent, new_name, target)
            replaced = self.get(target.id)
            self.cat.execute("UPDATE dentries SET parent=?, name=? WHERE parent=? AND name=?",
                             (new_parent, new_name, old_parent, old_name))
        elif not self.move_name(old_parent, old_name, new_parent, new_name):
            return False, None          # nothing written yet: done again from the catalog
        self.memo.drop_name(old_parent, old_name)
        self.memo.made_name(new_parent, new_name, node.id)
        self.paths.renamed(node, target, new_path, new_parent, new_name)
        self.journal(">", None, old_path, new_path)     # before the directory's +: the next create's replaces it
        delta = 1 if node.is_dir else 0
        if new_parent == old_parent:
            self._touch_dir(old_parent, 0)      # within one directory (rsync's every file): touched once
        else:
            self._touch_dir(old_parent, -delta)
            self._touch_dir(new_parent, delta)
        ctime_ns = now_ns()
        self.cat.execute("UPDATE inodes SET ctime_ns=? WHERE id=?", (ctime_ns, node.id))
        self.memo.drop_node(node.id)
        self.memo.keep_node(dataclasses.replace(node, ctime_ns=ctime_ns))     # not read back (a round trip)
        self.memo.drop_place(node.id)
        return True, replaced

    def _is_ancestor(self, ancestor: int, ino: int) -> bool:
        while ino != ROOT_INODE:
            if ino == ancestor:
                return True
            parent = self.cat.scalar("SELECT parent FROM dentries WHERE inode=? LIMIT 1", (ino,))
            if parent is None:
                return False
            ino = parent
        return ancestor == ROOT_INODE

    # -- attributes and content -----------------------------------------------

    def set_attrs(self, ino: int, rows: Optional[list[BlockRow]] = None, sent: bool = False, **attrs) -> Inode:
        """Set mode, uid, gid, size, atime_ns, mtime_ns (ctime follows); rows, if
        given, are the file's blocks (so the journal need not look them up);
        ``sent``: the row's UPDATE was sent already (``add_contents``)."""
        allowed = {"mode", "uid", "gid", "size", "atime_ns", "mtime_ns", "ctime_ns"}
        attrs = {k: v for k, v in attrs.items() if k in allowed and v is not None}
        attrs.setdefault("ctime_ns", now_ns())
        with self.cat.lock:
            if not sent:
                self.set_inode(ino, attrs)
            kept = self.memo.nodes.get(ino)
            self.memo.drop_node(ino)
            if kept is None:
                node = self.get(ino)
            else:               # the row as the UPDATE left it, without reading it back (a round trip)
                node = dataclasses.replace(kept, **attrs)
                self.memo.keep_node(node)
            if set(attrs) - {"atime_ns", "ctime_ns"}:
                self._journal_every_name(node, rows if rows is not None else self.memo.stored.get(ino))
            return node

    def set_contents(self, ino: int, rows: list[BlockRow], size: int, mtime_ns: int) -> Inode:
        """Make a file's content these blocks (references already taken);
        the old blocks lose the references this file held (once per name)."""
        with self._locked():
            if rows:
                self.cat.room.check()
            node = self.get(ino)
            empty = self.known_empty(ino)
            old = [] if empty else self.contents(ino)
            if not empty:           # a file made here holds no rows yet: nothing to delete
                self.cat.execute("DELETE FROM contents WHERE inode=?", (ino,))
            self.memo.drop_reading(ino)
            attrs = {"size": size, "mtime_ns": mtime_ns, "ctime_ns": now_ns()}
            self.add_contents(ino, [row.id for row in rows], attrs)
            # A file with n names holds n references to each of its blocks.
            for _ in range(max(node.nlink, 1) - 1):
                for row in rows:
                    self._later(self.store.add_ref, row)
            for _ in range(max(node.nlink, 1)):
                for row in old:
                    self._later(self.store.release, row)
            node = self.set_attrs(ino, rows=rows, sent=True, **attrs)
            self.memo.keep_stored(ino, rows)
            return node

    # -- xattrs ----------------------------------------------------------------

    def _xattrs(self, ino: int) -> Mapping[bytes, bytes]:
        found = self.memo.xattrs.get(ino)
        if found is None:
            with self.cat.lock:
                found = dict(self.cat.query("SELECT name, value FROM xattrs WHERE inode=?", (ino,))) or NO_XATTRS
                if ino in self.memo.nodes:          # kept as long as its inode is
                    self.memo.keep_xattrs(ino, found)
        return found

    def getxattr(self, ino: int, name: bytes) -> bytes:
        value = self.xattr(ino, name)
        if value is None:
            raise FsError(errno.ENODATA)
        return value

    def xattr(self, ino: int, name: bytes) -> Optional[bytes]:
        """An xattr's value, or None if the file has none of that name."""
        return self._xattrs(ino).get(name)

    def listxattr(self, ino: int) -> list[bytes]:
        return sorted(self._xattrs(ino))

    def setxattr(self, ino: int, name: bytes, value: bytes, create: bool = False,
                 replace: bool = False) -> None:
        with self.cat.lock:
            exists = self.cat.scalar("SELECT 1 FROM xattrs WHERE inode=? AND name=?", (ino, name))
            if create and exists:
                raise FsError(errno.EEXIST)
            if replace and not exists:
                raise FsError(errno.ENODATA)
            self.cat.room.check()
            self.cat.execute("INSERT OR REPLACE INTO xattrs (inode, name, value) VALUES (?,?,?)",
                             (ino, name, value))
            self.cat.execute("UPDATE inodes SET ctime_ns=? WHERE id=?", (now_ns(), ino))
            self.memo.xattrs.pop(ino, None)
            self.memo.drop_node(ino)
            self._journal_every_name(self.get(ino))     # the records carry xattrs

    def removexattr(self, ino: int, name: bytes) -> None:
        with self.cat.lock:
            self.memo.xattrs.pop(ino, None)
            if self.cat.execute("DELETE FROM xattrs WHERE inode=? AND name=?", (ino, name)).rowcount == 0:
                raise FsError(errno.ENODATA)
            self._journal_every_name(self.get(ino))

    def xattrs_of(self, inodes: list[int], kept: bool = False) -> dict[int, list[tuple[bytes, bytes]]]:
        """inode -> its (name, value) xattrs in name order, for many inodes at once;
        ``kept``: those the memo keeps from it (the live catalog, under its lock:
        a commit's journal records, for a new file of none no round trip)."""
        found: dict[int, list[tuple[bytes, bytes]]] = {}
        if kept:
            known = {ino: self.memo.xattrs.get(ino) for ino in inodes}
            found = {ino: sorted(x.items()) for ino, x in known.items() if x}
            inodes = [ino for ino, x in known.items() if x is None]
            if not inodes:
                return found
        for ino, name, value in self.cat.query_in(
                "SELECT inode, name, value FROM xattrs WHERE inode IN ({}) ORDER BY inode, name", inodes):
            found.setdefault(ino, []).append((bytes(name), bytes(value)))
        return found

    def walk(self) -> Iterator[tuple[bytes, Inode]]:
        """(path, inode) of every name, parents before children."""
        stack = [(ROOT_INODE, b"")]
        while stack:
            parent, base = stack.pop()
            after = 0
            while True:
                batch = self.entries(parent, after)
                if not batch:
                    break
                for off, name, node in batch:
                    path = base + b"/" + name
                    yield path, node
                    if node.is_dir:
                        stack.append((node.id, path))
                after = batch[-1][0]
