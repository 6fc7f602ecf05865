"""Paths kept for ``Namespace.path_of``: of directories (a walk up stops at
the first one known) and of files made here (their close's hint and journal
record, moments after the create, ask the catalog nothing: a round trip with
PostgreSQL), with the names (parent, name) the paths go through, so that
another machine's change clears them only when it renames or removes one of
those names. Changed only under the catalog lock, as the namespace memo."""
from __future__ import annotations

from typing import Iterable, Optional

from .rows import make_room

# The names from an inode up to the root, the inode's own first: (inode, parent,
# name, mode), one statement for the walk (a round trip with PostgreSQL) where
# a statement a level asked 2 a new file at 1 M files into random directories,
# whose parents' paths the bounded memory below holds less of than at 100,000.
# Directories have one name each, so only the first step needs its LIMIT. A
# SELECT outside (the WITH inside): the PostgreSQL engine sends other statements as writes.
NAMES_UP_SQL = (
    "SELECT ino, parent, name, (SELECT mode FROM inodes WHERE id = ino) FROM ("
    "WITH RECURSIVE up (depth, ino, parent, name) AS ("
    "SELECT 0, inode, parent, name FROM (SELECT inode, parent, name FROM dentries WHERE inode=? LIMIT 1) own "
    "UNION ALL SELECT up.depth + 1, d.inode, d.parent, d.name FROM up JOIN dentries d ON d.inode = up.parent "
    "WHERE up.parent != 1) SELECT * FROM up) walk ORDER BY depth")

# Directory paths kept (~150 B each with the dict's slot): a copy is made in
# walk order, so the directories in use are few and recent, and 100,000 of
# them (15 MB) grew the daemon with the archive for nothing.
DIR_PATHS_KEPT = 10_000
# Paths of files made here, kept for their store and commit: the newest, oldest out.
FILE_PATHS_KEPT = 1024


class KeptPaths:
    """Directories' paths, files' paths, and the names the kept paths go through."""

    def __init__(self) -> None:
        self.dirs: dict[int, bytes] = {}
        self.files: dict[int, tuple[bytes, tuple[int, bytes]]] = {}    # inode: (path, its own name)
        # Its own name: inode, of the files kept: another machine's names (a
        # notice's dozens) are looked up here, not matched against every file.
        self.file_names: dict[tuple[int, bytes], int] = {}
        self.dir_names: set[tuple[int, bytes]] = set()

    def file(self, ino: int) -> Optional[bytes]:
        kept = self.files.get(ino)
        return None if kept is None else kept[0]

    def keep_dir(self, ino: int, path: bytes, parent: int, name: bytes) -> None:
        if len(self.dirs) >= DIR_PATHS_KEPT or len(self.dir_names) >= 2 * DIR_PATHS_KEPT:
            self.clear()        # files too: the names their paths go through are no longer known
        self.dirs[ino] = path
        self.dir_names.add((parent, name))

    def keep_file(self, ino: int, path: bytes, parent: int, name: bytes) -> None:
        old = self.files
        self.files, gone = make_room(old, FILE_PATHS_KEPT)
        for went in gone:
            self._unname(went, old[went][1])
        self.drop(self.file_names.get((parent, name), ino))     # an earlier file of the name: not there now
        self.files[ino] = (path, (parent, name))
        self.file_names[(parent, name)] = ino

    def _unname(self, ino: int, own: tuple[int, bytes]) -> None:
        if self.file_names.get(own) == ino:
            del self.file_names[own]

    def drop(self, ino: int) -> None:
        self.dirs.pop(ino, None)
        kept = self.files.pop(ino, None)
        if kept is not None:
            self._unname(ino, kept[1])

    def renamed(self, moved, other, path: bytes, parent: int, name: bytes) -> None:
        """A rename of the inode ``moved`` to ``path`` (replacing or exchanged
        with ``other``): a directory's changes every path through it; a
        file's, only its own (rsync renames every file it copies: the
        directories' paths stay, and its new one is kept)."""
        if moved.is_dir or (other is not None and other.is_dir):
            self.clear()
            return
        if other is not None:
            self.drop(other.id)
        self.keep_file(moved.id, path, parent, name)

    def clear(self) -> None:
        self.dirs.clear()
        self.files.clear()
        self.file_names.clear()
        self.dir_names.clear()

    def forget_names(self, names: Iterable[tuple[int, bytes]]) -> None:
        """Another machine changed these names: every path through them goes."""
        names = set(names)
        if not self.dir_names.isdisjoint(names):
            self.clear()
        else:
            for name in names:
                ino = self.file_names.pop(name, None)
                if ino is not None:
                    self.files.pop(ino, None)
