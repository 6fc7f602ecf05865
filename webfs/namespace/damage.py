"""The tree's rows asked the questions fsck asks of them (webfs.commands.names):
names that lead nowhere, entries under what is not a directory, inodes with
no name, link counts that are not what the names make them. Plain SQL that
both catalog engines run; each a scan, for a check, never the request path.
"""
from __future__ import annotations

import stat
from typing import Optional

from ..catalog import Catalog
from .rows import ROOT_INODE


def _is_dir(row: str) -> str:
    return f"({row}.mode & {0o170000}) = {stat.S_IFDIR}"       # S_IFMT


class TreeDamage:
    """Queries of a catalog's tree, and the plain row changes that mend it."""

    def __init__(self, cat: Catalog):
        self.cat = cat

    def names_of_missing_inodes(self) -> list[tuple[int, bytes, int]]:
        return [(p, bytes(n), i) for p, n, i in self.cat.query(
            "SELECT d.parent, d.name, d.inode FROM dentries d LEFT JOIN inodes i ON i.id = d.inode "
            "WHERE i.id IS NULL ORDER BY d.inode")]

    def remains(self, ino: int) -> tuple[list[int], Optional[bytes]]:
        """What the catalog still lists of an inode: its pieces' sizes, its symlink target."""
        sizes = [r[0] for r in self.cat.query(
            "SELECT b.size FROM contents c JOIN blocks b ON b.id = c.block WHERE c.inode = ? ORDER BY c.piece",
            (ino,))]
        target = self.cat.scalar("SELECT target FROM symlinks WHERE inode = ?", (ino,))
        return sizes, None if target is None else bytes(target)

    def names_under_non_directories(self) -> list[tuple[int, bytes, int, bool]]:
        """(parent, name, inode, whether the parent exists) of entries whose parent is not a directory."""
        return [(p, bytes(n), i, bool(there)) for p, n, i, there in self.cat.query(
            "SELECT d.parent, d.name, d.inode, p.id IS NOT NULL FROM dentries d "
            f"LEFT JOIN inodes p ON p.id = d.parent WHERE p.id IS NULL OR NOT ({_is_dir('p')}) "
            "ORDER BY d.inode")]

    def directory_names(self) -> list[tuple[int, int, bytes]]:
        """(inode, parent, name) of every directory's names, a directory's first name first."""
        return [(i, p, bytes(n)) for i, p, n in self.cat.query(
            "SELECT d.inode, d.parent, d.name FROM dentries d JOIN inodes i ON i.id = d.inode "
            f"WHERE {_is_dir('i')} ORDER BY d.inode, d.parent, d.name")]

    def inodes_without_names(self) -> list[tuple[int, int]]:
        return self.cat.query("SELECT i.id, i.nlink FROM inodes i LEFT JOIN dentries d ON d.inode = i.id "
                              "WHERE d.inode IS NULL AND i.id <> ? ORDER BY i.id", (ROOT_INODE,))

    def wrong_file_link_counts(self) -> list[tuple[int, int, int]]:
        """(inode, link count, names) of the named non-directories whose count is not their names'."""
        return self.cat.query(
            "SELECT i.id, i.nlink, COUNT(*) FROM inodes i JOIN dentries d ON d.inode = i.id "
            f"WHERE NOT ({_is_dir('i')}) GROUP BY i.id, i.nlink HAVING i.nlink <> COUNT(*) ORDER BY i.id")

    def directory_link_counts(self) -> list[tuple[int, int, int]]:
        """(inode, link count, subdirectories) of every directory in use."""
        return self.cat.query(
            "SELECT i.id, i.nlink, (SELECT COUNT(*) FROM dentries d JOIN inodes c ON c.id = d.inode "
            f"WHERE d.parent = i.id AND {_is_dir('c')}) FROM inodes i WHERE {_is_dir('i')} AND i.nlink > 0 "
            "ORDER BY i.id")

    def first_name(self, ino: int) -> Optional[tuple[int, bytes]]:
        row = self.cat.query("SELECT parent, name FROM dentries WHERE inode = ? ORDER BY parent, name LIMIT 1",
                             (ino,))
        return (row[0][0], bytes(row[0][1])) if row else None

    def count_names(self, ino: int) -> int:
        return self.cat.scalar("SELECT COUNT(*) FROM dentries WHERE inode = ?", (ino,))

    def has_inode(self, ino: int) -> bool:
        return self.cat.scalar("SELECT 1 FROM inodes WHERE id = ?", (ino,)) is not None

    def remove_name(self, parent: int, name: bytes) -> None:
        self.cat.execute("DELETE FROM dentries WHERE parent = ? AND name = ?", (parent, name))

    def set_links(self, ino: int, nlink: int) -> None:
        self.cat.execute("UPDATE inodes SET nlink = ? WHERE id = ?", (nlink, ino))
