"""The read-only ``.webfs`` tree of a mount: the signature tree, browsable.

It owns the virtual inodes (numbers from ``VIRTUAL_BASE`` up) that stand for
``.webfs``, ``.webfs/blocks``, the directories of the signature tree down to
the placement groups, and one file per block, named as on the disks
(``<rest>[~n]``); and ``.webfs/search``, whose names are queries
(webfs.searchtree); and ``.webfs/warc``, the virtual WARC files of the views
replay made (webfs.warcview). What exists is asked of the catalog (or the query
index, or the views) at each lookup; nothing here is stored. Who may look in (the user who mounted, and root) is checked
by ``webfs.fs``, which also reads the blocks' bytes through its piece reader.
"""
from __future__ import annotations

import errno
import stat

import pyfuse3

from .catalog import BlockRow, Catalog
from .errors import FsError
from .namespace import ROOT_INODE
from .searchtree import SearchResults, query_of
from .signature import block_name
from .warcview import VIEW_DIR, WarcViews

CONTROL_DIR = b".webfs"
VIRTUAL_BASE = 1 << 60          # inode numbers of the .webfs tree start here
VIRTUAL_TIMEOUT = 1.0           # blocks come and go: the kernel keeps these entries briefly
# .webfs, .webfs/warc and a view's files never change while they exist: the
# kernel keeps them long, which spares replay a lookup per path component each
# second. A view itself may be dropped (replaced): its entry lasts a second, and
# its files go with it (one opened through a directory held open: ENOENT).
FIXED_TIMEOUT = 300.0
FIXED_KINDS = frozenset({"root", "warc", "vfile"})
ROOT_DIRS = {b"blocks": "dir", b"search": "search", VIEW_DIR: "warc"}      # .webfs's names, and their kinds


def is_virtual(ino: int) -> bool:
    return ino >= VIRTUAL_BASE


class VirtualNode:
    """An entry of the read-only .webfs tree: a directory prefix, one block, the
    search directory, a query or one of its answers (a symlink), the warc
    directory, a view or one of its virtual WARC files."""

    def __init__(self, ino: int, kind: str, key: str, overflow: int = 0):
        self.ino, self.kind, self.key, self.overflow = ino, kind, key, overflow
        self.refs = 0           # the kernel's lookup count of it, as answered


class ControlTree:
    """The virtual inodes of ``.webfs``, made as the kernel looks them up and
    dropped when it forgets them."""

    def __init__(self, catalog: Catalog, depth: int, owner: tuple[int, int]):
        self.catalog = catalog
        self.group_chars = 2 * (depth - 1)      # hex digits that name a placement group
        self.owner = owner
        self.nodes: dict[int, VirtualNode] = {}
        self.by_key: dict[tuple[str, str, int], int] = {}
        self.search = SearchResults()
        self.warc = WarcViews()

    def node(self, ino: int) -> VirtualNode:
        node = self.nodes.get(ino)
        if node is None:
            raise FsError(errno.ENOENT)
        return node

    def forget(self, ino: int, nlookup: int) -> None:
        """The kernel dropped ``nlookup`` of its references. A node goes with
        the last: a FORGET the kernel sent for an inode it evicted may come
        after a new lookup of the same name was answered with it."""
        node = self.nodes.get(ino)
        if node is None:
            return
        node.refs -= nlookup
        if node.refs > 0:
            return
        del self.nodes[ino]
        self.by_key.pop((node.kind, node.key, node.overflow), None)
        if node.kind == "query":
            self.search.forget(node.key)

    def _node_for(self, kind: str, key: str, overflow: int = 0) -> VirtualNode:
        ident = (kind, key, overflow)
        ino = self.by_key.get(ident)
        if ino is None:
            ino = VIRTUAL_BASE + len(self.by_key) + 1
            while ino in self.nodes:
                ino += 1
            self.nodes[ino] = VirtualNode(ino, kind, key, overflow)
            self.by_key[ident] = ino
        return self.nodes[ino]

    def lookup(self, parent: int, name: bytes) -> VirtualNode:
        """The entry ``name`` of a directory (a reference the kernel now holds)."""
        node = self._find(parent, name)
        node.refs += 1
        return node

    def _find(self, parent: int, name: bytes) -> VirtualNode:
        if parent == ROOT_INODE:
            return self._node_for("root", "")
        node = self.node(parent)
        text = name.decode("ascii", "replace")
        if node.kind == "root":
            if name in ROOT_DIRS:
                return self._node_for(ROOT_DIRS[name], "")
            raise FsError(errno.ENOENT)
        if node.kind in ("warc", "view"):
            return self._warc_node(node, name)
        if node.kind == "search":
            return self._node_for("query", query_of(name))
        if node.kind == "query":
            self.search.target(node.key, name)
            return self._node_for("link", node.key + "\0" + name.decode("utf-8", "surrogateescape"))
        if node.kind != "dir":
            raise FsError(errno.ENOTDIR)
        if len(node.key) < self.group_chars:
            key = node.key + text
            if len(text) == 2 and self.catalog.group_prefix_exists(key):
                return self._node_for("dir", key)
            raise FsError(errno.ENOENT)
        rest, _, ovf = text.partition("~")
        if ovf and not ovf.isdigit():
            raise FsError(errno.ENOENT)
        sig = node.key + rest
        if self.catalog.block(sig, int(ovf or 0)) is None:
            raise FsError(errno.ENOENT)
        return self._node_for("block", sig, int(ovf or 0))

    def _warc_node(self, node: VirtualNode, name: bytes) -> VirtualNode:
        """A view of .webfs/warc, or a virtual WARC file of a view."""
        if name not in self.warc.names(None if node.kind == "warc" else node.key):
            raise FsError(errno.ENOENT)
        if node.kind == "warc":
            return self._node_for("view", name.decode())
        return self._node_for("vfile", node.key + "\0" + name.decode("utf-8", "surrogateescape"))

    def _view_file(self, node: VirtualNode):
        view_id, _, name = node.key.partition("\0")
        return self.warc.file(view_id, name.encode("utf-8", "surrogateescape"))

    def file_info(self, ino: int) -> pyfuse3.FileInfo:
        """How a virtual file is opened: a block kept in the kernel's cache; a
        virtual WARC file read as asked, each read ending at its record's end
        (``ViewFile.read``), which only direct_io passes on as it is (the page
        cache would take a short read for the file's end)."""
        node = self.node(ino)
        if node.kind == "vfile":
            self._view_file(node)           # ENOENT if its view was dropped since
            return pyfuse3.FileInfo(fh=ino, direct_io=True)
        return pyfuse3.FileInfo(fh=ino, keep_cache=True)

    async def read(self, ino: int, off: int, size: int, reader) -> bytes:
        """Bytes of a virtual file: a block's, or a virtual WARC file's."""
        node = self.node(ino)
        if node.kind == "vfile":
            return await self._view_file(node).read(reader, off, size)
        return (await reader.piece(self.block(ino)))[off:off + size]

    def block(self, ino: int) -> BlockRow:
        """The block a virtual file stands for, as the catalog has it now."""
        node = self.node(ino)
        row = self.catalog.block(node.key, node.overflow)
        if row is None:
            raise FsError(errno.ENOENT)
        return row

    def attrs(self, node: VirtualNode, times_ns: int) -> pyfuse3.EntryAttributes:
        a = pyfuse3.EntryAttributes()
        a.st_ino = node.ino
        a.entry_timeout = a.attr_timeout = FIXED_TIMEOUT if node.kind in FIXED_KINDS else VIRTUAL_TIMEOUT
        a.st_blksize = 128 * 1024
        if node.kind == "block":
            a.st_mode = stat.S_IFREG | 0o400
            a.st_size = self.block(node.ino).size
            a.st_nlink = 1
        elif node.kind == "vfile":
            a.st_mode = stat.S_IFREG | 0o400
            a.st_size = self._view_file(node).size
            a.st_nlink = 1
        elif node.kind == "link":
            a.st_mode = stat.S_IFLNK | 0o777
            a.st_size = len(self.readlink(node.ino))
            a.st_nlink = 1
        else:
            a.st_mode = stat.S_IFDIR | 0o500
            a.st_nlink = 2
        a.st_uid, a.st_gid = self.owner
        a.st_atime_ns = a.st_mtime_ns = a.st_ctime_ns = times_ns
        a.st_blocks = (a.st_size + 511) // 512        # st_blocks counts POSIX's 512-byte units
        return a

    def readlink(self, ino: int) -> bytes:
        node = self.node(ino)
        if node.kind != "link":
            raise FsError(errno.EINVAL)
        query, _, name = node.key.partition("\0")
        return self.search.target(query, name.encode("utf-8", "surrogateescape"))

    def children(self, node: VirtualNode, fresh: bool = False) -> list[tuple[bytes, VirtualNode]]:
        if node.kind == "root":
            return [(name, self._node_for(kind, "")) for name, kind in ROOT_DIRS.items()]
        if node.kind in ("warc", "view"):
            return [(name, self._warc_node(node, name))
                    for name in self.warc.names(None if node.kind == "warc" else node.key)]
        if node.kind == "search":
            return []
        if node.kind == "query":
            found = self.search.refresh(node.key) if fresh else self.search.entries(node.key)
            return [(name, self._node_for("link", node.key + "\0" + name.decode("utf-8", "surrogateescape")))
                    for name, _ in found]
        width = self.group_chars
        if len(node.key) < width:
            return [(prefix[-2:].encode(), self._node_for("dir", prefix))
                    for prefix in self.catalog.group_prefixes(node.key, len(node.key) + 2)]
        return [(block_name(sig, ovf)[width:].encode(), self._node_for("block", sig, ovf))
                for sig, ovf in self.catalog.blocks_in_group(node.key)]

    def readdir(self, ino: int, start_id: int, token, times_ns: int) -> None:
        children = self.children(self.node(ino), fresh=start_id == 0)
        for i, (name, child) in enumerate(children[start_id:], start_id + 1):
            if not pyfuse3.readdir_reply(token, name, self.attrs(child, times_ns), i):
                return
            child.refs += 1         # readdirplus: an entry listed is looked up
