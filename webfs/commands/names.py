"""fsck's pass over the names: the catalog's directory tree checked against
itself, as e2fsck's passes 2 to 4 check entries, connectivity and link counts.

The block checks count a block's references from the names (``namespace_refs``),
so a name pointing nowhere, a tree cut off from the root or a wrong link count
would be taken at its word there: a block still named by a lost inode freed, a
count of 5 believed. This pass runs first, and with --repair mends, in order
(each step sees what the one before mended):

- ``dangling-name``: a name whose inode has no row. The inode is made again
  from what the catalog still holds of it (its pieces, or a symlink's target):
  a file whose mode, owner and times are guesses, which the finding says.
  With nothing of it left, the name goes.
- ``bad-parent``: a name under an inode that has no row or is not a directory;
  ``cycle``: directories the root does not reach because they hold each other;
  ``unattached``: an inode with a link count and no name. Each is
  reconnected as ``/lost+found/#INO`` (e2fsck's place and spelling), under
  the directory made, owner root, mode 0700, if there is none.
- ``dir-names``: a directory with more than one name keeps its first.
- ``nameless``: an inode with no name and no link count (a file open when its
  daemon died; a mount's recovery frees these too): freed.
- ``links``: a link count that is not what the names make it (a file: its
  names; a directory: 2 and one a subdirectory): set.

Names changed here end with a checkpoint (a new MANIFEST), so the plain-text
records say what the catalog says.
"""
from __future__ import annotations

import stat
from typing import Optional

from ..manifest import Journal
from ..namespace import ROOT_INODE, Namespace, now_ns
from ..namespace.damage import TreeDamage
from ..store import Store
from .report import Report

LOST_AND_FOUND = b"lost+found"


def check_names(store: Store, report: Report, repair: bool) -> None:
    journal = Journal(store.archive) if repair else None
    ns = Namespace(store, journal.record if journal else None)
    names = _Names(store, ns, report, repair)
    with store.catalog.lock:
        names.dangling()
        names.bad_parents()
        names.cycles()
        names.unattached()
        names.extra_dir_names()
    for ino in names.to_free:       # outside the lock: freeing takes signature locks after it
        ns.free(ino)
    with store.catalog.lock:
        names.link_counts()
    if repair and names.changed:
        store.commit()
        with store.catalog.lock:
            journal.checkpoint(ns)


class _Names:
    def __init__(self, store: Store, ns: Namespace, report: Report, repair: bool):
        self.tree = TreeDamage(store.catalog)
        self.ns = ns
        self.report = report
        self.repair = repair
        self.changed = False
        self.to_free: list[int] = []
        self.recounted: set[int] = set()    # directories this repair gave or took a subdirectory
        self._lost_and_found: Optional[int] = None

    def _found(self, kind: str, where: str, what: str) -> None:
        self.report.add(kind, where, what, self.repair)
        self.changed = self.changed or self.repair

    def _where(self, parent: int, name: bytes) -> str:
        """The path of a name, or where it is when the root does not reach it
        (Namespace.path_of trusts the tree: a loop would never end)."""
        names, at, seen = [name], parent, set()
        while at != ROOT_INODE:
            up = None if at in seen else self.tree.first_name(at)
            if up is None:
                return f"name {name.decode(errors='backslashreplace')!r} in inode {parent}"
            seen.add(at)
            at = up[0]
            names.append(up[1])
        return (b"/" + b"/".join(reversed(names))).decode(errors="backslashreplace")

    def dangling(self) -> None:
        for parent, name, ino in self.tree.names_of_missing_inodes():
            where = self._where(parent, name)
            sizes, target = self.tree.remains(ino)
            if target is None and not sizes:
                self._found("dangling-name", where, f"names inode {ino}, which does not exist; "
                                                    "nothing of it is left: the name is removed")
                if self.repair:
                    self.tree.remove_name(parent, name)
                continue
            self._found("dangling-name", where,
                        f"names inode {ino}, which does not exist; made again from its "
                        + ("symlink target" if target is not None else f"{len(sizes)} piece(s)")
                        + " (mode, owner and times are guesses)")
            if self.repair and not self.tree.has_inode(ino):     # a second name of it: made already
                mode = stat.S_IFLNK | 0o777 if target is not None else stat.S_IFREG | 0o644
                size = len(target) if target is not None else sum(sizes)
                t = now_ns()
                self.ns.add_inode(mode, 0, 0, size, self.tree.count_names(ino), t, t, t, ino=ino)

    def bad_parents(self) -> None:
        for parent, name, ino, there in self.tree.names_under_non_directories():
            whose = "is not a directory" if there else "does not exist"
            self._reconnect("bad-parent", ino, (parent, name), f"its directory, inode {parent}, {whose}")

    def cycles(self) -> None:
        """Directories whose parents lead back to themselves, never to the root.
        A chain that ends at a parent that is not a directory is bad_parents'."""
        up: dict[int, tuple[int, bytes]] = {}
        for ino, parent, name in self.tree.directory_names():
            up.setdefault(ino, (parent, name))
        reached = {ROOT_INODE}
        for start in sorted(up):
            chain, at = [], start
            while at not in reached and at in up and at not in chain:
                chain.append(at)
                at = up[at][0]
            if at in chain:                 # a loop: one of it goes to lost+found, the rest follow
                loop = chain[chain.index(at):]
                first = min(loop)
                self._reconnect("cycle", first, up[first], f"directories {sorted(loop)} hold each other "
                                                           "and the root reaches none of them")
            reached.update(chain)

    def unattached(self) -> None:
        for ino, nlink in self.tree.inodes_without_names():
            if nlink > 0:
                self._reconnect("unattached", ino, None, f"{nlink} link(s) and no name")
            else:
                self._found("nameless", f"inode {ino}", "no name and no link left (open when its daemon "
                                                        "died): freed, as a mount's recovery would")
                if self.repair:
                    self.to_free.append(ino)

    def extra_dir_names(self) -> None:
        seen: set[int] = set()
        for ino, parent, name in self.tree.directory_names():
            if ino not in seen:
                seen.add(ino)
                continue
            self._found("dir-names", self._where(parent, name),
                        f"a second name of directory {ino}: removed (its first name stays)")
            if self.repair:
                self.tree.remove_name(parent, name)
                self.recounted.add(parent)

    def link_counts(self) -> None:
        for ino, nlink, names in self.tree.wrong_file_link_counts():
            self._set_links(ino, nlink, names, f"{names} name(s)")
        for ino, nlink, subdirs in self.tree.directory_link_counts():
            if nlink == 2 + subdirs:
                continue
            if ino in self.recounted:       # this repair's own doing: no finding of its own
                self.tree.set_links(ino, 2 + subdirs)
            else:
                self._set_links(ino, nlink, 2 + subdirs,
                                f"{subdirs} subdirector{'y' if subdirs == 1 else 'ies'}")

    def _set_links(self, ino: int, nlink: int, right: int, why: str) -> None:
        name = self.tree.first_name(ino)
        where = "/" if ino == ROOT_INODE else self._where(*name) if name else f"inode {ino}"
        self._found("links", where, f"link count {nlink}, {right} by its {why}")
        if self.repair:
            self.tree.set_links(ino, right)

    def _reconnect(self, kind: str, ino: int, entry: Optional[tuple[int, bytes]], why: str) -> None:
        where = self._where(*entry) if entry else f"inode {ino}"
        home = self._lost_and_found_dir() if self.repair else None
        if self.repair and home is None:
            self.report.add(kind, where, f"{why}; /lost+found is not a directory: move it away, "
                                         "then repair again", fixable=False)
            return
        self._found(kind, where, f"{why}: reconnected as /lost+found/#{ino}")
        if not self.repair:
            return
        if entry:
            self.tree.remove_name(*entry)
            self.recounted.add(entry[0])
        name, n = b"#%d" % ino, 1
        while self.ns.find(home, name) is not None:      # a #INO left by an earlier repair
            n += 1
            name = b"#%d.%d" % (ino, n)
        self.ns.add_name(home, name, ino)
        self.ns.memo.drop_name(home, name)
        self.recounted.add(home)

    def _lost_and_found_dir(self) -> Optional[int]:
        if self._lost_and_found is None:
            node = self.ns.find(ROOT_INODE, LOST_AND_FOUND)
            if node is None:
                node = self.ns.create(ROOT_INODE, LOST_AND_FOUND, stat.S_IFDIR | 0o700, 0, 0)
            elif not node.is_dir:
                return None
            self._lost_and_found = node.id
        return self._lost_and_found
