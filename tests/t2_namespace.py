"""Namespace driven directly, without a kernel: POSIX rules on names, links,
renames and attributes, and the journal it tells every change to."""
from __future__ import annotations

import errno
import stat

import pytest

from webfs.commands.moves import move_group
from webfs.errors import FsError
from webfs.namespace import ROOT_INODE, Namespace


@pytest.fixture
def ns(store):
    journal = []
    ns = Namespace(store, journal=lambda *args, **kwargs: journal.append(args[:3]))
    ns.ensure_root()
    ns.journal_lines = journal
    return ns


def mkdir(ns, parent, name):
    return ns.create(parent, name, stat.S_IFDIR | 0o755, 0, 0)


def mkfile(ns, parent, name):
    return ns.create(parent, name, stat.S_IFREG | 0o644, 0, 0)


def errno_of(call) -> int:
    with pytest.raises(FsError) as info:
        call()
    return info.value.errno


def test_create_lookup_and_list(ns):
    d = mkdir(ns, ROOT_INODE, b"crawl")
    f = mkfile(ns, d.id, b"index.html")
    assert ns.lookup(d.id, b"index.html").id == f.id
    assert [name for _, name, _ in ns.entries(d.id)] == [b"index.html"]
    assert ns.path_of(f.id) == b"/crawl/index.html"
    assert ns.get(d.id).nlink == 2 and ns.get(ROOT_INODE).nlink == 3
    assert errno_of(lambda: mkfile(ns, d.id, b"index.html")) == errno.EEXIST
    assert errno_of(lambda: ns.lookup(d.id, b"nothing")) == errno.ENOENT
    assert errno_of(lambda: mkfile(ns, f.id, b"x")) == errno.ENOTDIR
    assert errno_of(lambda: mkfile(ns, d.id, b"x" * 256)) == errno.ENAMETOOLONG
    assert any(line[0] == "+" for line in ns.journal_lines)


def test_hard_links_count_and_unlink_keeps_the_inode_for_its_other_name(ns):
    f = mkfile(ns, ROOT_INODE, b"a")
    ns.link(f.id, ROOT_INODE, b"b")
    assert ns.get(f.id).nlink == 2
    assert sorted(name for _, name in ns.names_of(f.id)) == [b"a", b"b"]
    assert ns.unlink(ROOT_INODE, b"a").nlink == 1
    assert ns.lookup(ROOT_INODE, b"b").id == f.id
    d = mkdir(ns, ROOT_INODE, b"d")
    assert errno_of(lambda: ns.link(d.id, ROOT_INODE, b"d2")) == errno.EPERM


def test_rmdir_of_a_full_directory_and_rename_over_a_target(ns):
    d = mkdir(ns, ROOT_INODE, b"d")
    mkfile(ns, d.id, b"f")
    assert errno_of(lambda: ns.rmdir(ROOT_INODE, b"d")) == errno.ENOTEMPTY
    g = mkfile(ns, ROOT_INODE, b"g")
    replaced = ns.rename(ROOT_INODE, b"g", d.id, b"f")
    assert replaced is not None and replaced.nlink == 0
    assert ns.lookup(d.id, b"f").id == g.id
    assert errno_of(lambda: ns.rename(ROOT_INODE, b"d", d.id, b"inside")) == errno.EINVAL
    e = mkdir(ns, ROOT_INODE, b"e")
    assert errno_of(lambda: ns.rename(ROOT_INODE, b"e", d.id, b"f")) == errno.ENOTDIR
    ns.rename(ROOT_INODE, b"e", d.id, b"f", exchange=True)
    assert ns.lookup(d.id, b"f").id == e.id and ns.lookup(ROOT_INODE, b"e").id == g.id


def test_a_rename_within_a_directory_touches_it_once(ns, store):
    """rsync renames each file from its temporary name in the same directory:
    the directory's row is written and journaled once, its link count kept;
    across directories each one changes, a directory's link moving with it."""
    d = mkdir(ns, ROOT_INODE, b"d")
    sub = mkdir(ns, d.id, b".sub.tmp")
    mkfile(ns, d.id, b".f.tmp")
    before = ns.get(d.id)
    ns.journal_lines.clear()
    updates = []
    touches = "UPDATE inodes SET mtime_ns"        # _touch_dir's
    store.catalog.db.set_trace_callback(lambda sql: updates.append(sql) if sql.startswith(touches) else None)
    try:
        ns.rename(d.id, b".f.tmp", d.id, b"f")
        ns.rename(d.id, b".sub.tmp", d.id, b"sub")
    finally:
        store.catalog.db.set_trace_callback(None)
    assert len(updates) == 2
    assert [line[2] for line in ns.journal_lines if line[0] == "+"] == [b"/d", b"/d"]
    assert ns.get(d.id).nlink == before.nlink == 3 and ns.get(d.id).mtime_ns >= before.mtime_ns
    e = mkdir(ns, ROOT_INODE, b"e")
    ns.rename(d.id, b"sub", e.id, b"sub")
    assert (ns.get(d.id).nlink, ns.get(e.id).nlink) == (2, 3)
    assert ns.lookup(e.id, b"sub").id == sub.id


def test_symlink_attributes_and_xattrs(ns):
    link = ns.create(ROOT_INODE, b"l", stat.S_IFLNK | 0o777, 0, 0, 0, b"target/path")
    assert ns.readlink(link.id) == b"target/path"
    f = mkfile(ns, ROOT_INODE, b"f")
    assert errno_of(lambda: ns.readlink(f.id)) == errno.EINVAL
    assert ns.set_attrs(f.id, mode=stat.S_IFREG | 0o600, uid=7).uid == 7
    ns.setxattr(f.id, b"user.a", b"1")
    assert ns.getxattr(f.id, b"user.a") == b"1" and ns.listxattr(f.id) == [b"user.a"]
    ns.removexattr(f.id, b"user.a")
    assert errno_of(lambda: ns.getxattr(f.id, b"user.a")) == errno.ENODATA


def test_contents_replace_and_free_give_the_blocks_back(ns, store):
    f = mkfile(ns, ROOT_INODE, b"f")
    row = store.store(b"some page", name=b"/f")
    ns.set_contents(f.id, [row], 9, 1)
    store.commit()
    assert [r.sig for r in ns.contents(f.id)] == [row.sig]
    assert ns.block_names([f.id]) == {f.id: row.sig}
    ns.unlink(ROOT_INODE, b"f")
    ns.free(f.id)
    store.commit()
    assert store.catalog.block(row.sig) is None


def test_kept_paths_outlive_another_machines_new_names_but_not_a_rename_on_them(ns, store):
    """Another machine's notice of names (webfs.changes) clears the kept paths
    only when one of those names is on a kept path: its new files elsewhere
    change no path here (each cleared them all: a path walk, a round trip a
    directory on PostgreSQL, at every file's commit while two machines copied)."""
    statements = []
    store.catalog.db.set_trace_callback(statements.append)
    walked = lambda: sum("FROM dentries WHERE inode=" in s for s in statements)     # noqa: E731
    crawl = mkdir(ns, ROOT_INODE, b"crawl")
    site = mkdir(ns, crawl.id, b"site")
    ns.forget_others(set(), set(), False)
    assert ns.path_of(site.id) == b"/crawl/site" and walked() == 0
    ns.forget_others({999}, {(site.id, b"made-elsewhere.html"), (ROOT_INODE, b"other")}, False)
    assert ns.path_of(site.id) == b"/crawl/site" and walked() == 0
    store.catalog.execute("UPDATE dentries SET name=? WHERE parent=? AND name=?", (b"moved", ROOT_INODE, b"crawl"))
    ns.forget_others({crawl.id}, {(ROOT_INODE, b"crawl"), (ROOT_INODE, b"moved")}, False)
    assert ns.path_of(site.id) == b"/moved/site" and walked() == 1     # both levels in one walk up


def test_a_kept_file_path_goes_with_another_machines_change_of_its_name(ns, store):
    """A file made here keeps its path for its close; another machine renaming
    that file (a name no directory path goes through) drops that path alone."""
    statements = []
    store.catalog.db.set_trace_callback(statements.append)
    walked = lambda: sum("FROM dentries WHERE inode=" in s for s in statements)     # noqa: E731
    crawl = mkdir(ns, ROOT_INODE, b"crawl")
    f, g = mkfile(ns, crawl.id, b"f.html"), mkfile(ns, crawl.id, b"g.html")
    store.catalog.execute("UPDATE dentries SET name=? WHERE parent=? AND name=?", (b"h.html", crawl.id, b"f.html"))
    ns.forget_others({f.id}, {(crawl.id, b"f.html"), (crawl.id, b"h.html")}, False)
    assert ns.path_of(g.id) == b"/crawl/g.html" and walked() == 0
    assert ns.path_of(f.id) == b"/crawl/h.html" and walked() == 1


def test_a_new_files_first_content_asks_nothing_of_its_old_blocks(ns, store):
    """A file made here holds no blocks: its first content does not look up
    old ones (a round trip on PostgreSQL); the next does, and releases them.
    While other machines are mounted, the first does not either as long as
    the transaction that made the file is open (no other machine sees it),
    and does once it was committed (one may have written it a moment ago)."""
    statements = []
    store.catalog.db.set_trace_callback(statements.append)
    asked = lambda: sum("FROM contents c JOIN" in s for s in statements)     # noqa: E731
    f = mkfile(ns, ROOT_INODE, b"f")
    first = store.store(b"first page", name=b"/f")
    ns.set_contents(f.id, [first], 10, 1)
    assert asked() == 0
    ns.set_contents(f.id, [store.store(b"second page", name=b"/f")], 11, 2)
    store.commit()
    assert asked() == 1 and store.catalog.block(first.sig) is None

    class OthersMounted:
        checked = True
    g = mkfile(ns, ROOT_INODE, b"g")
    h = mkfile(ns, ROOT_INODE, b"h")
    store.catalog.inode_numbers = OthersMounted()
    ns.set_contents(g.id, [store.store(b"third page", name=b"/g")], 10, 3)
    assert asked() == 1
    store.commit()
    ns.set_contents(h.id, [store.store(b"fourth page", name=b"/h")], 11, 3)
    store.catalog.inode_numbers = None
    store.commit()
    assert asked() == 2
    store.catalog.db.set_trace_callback(None)


def test_attribute_changes_after_a_close_journal_its_blocks_without_asking(store):
    """rsync's utimens and chmod after a close are JOURNAL records that list
    the file's blocks: those the close stored are given (no SQL); a rename
    (rsync's of each temporary file) moves the name, not the blocks, so they
    are still given, under the new path, and nothing is asked of the catalog;
    once its content may have changed (a new content, a rollback) they are
    not, and the record asks the catalog. A file made here has no contents
    rows to delete at its first content."""
    records = []
    ns = Namespace(store, journal=lambda op, node, path, *_, **kw: records.append((path, kw.get("rows"))))
    ns.ensure_root()
    statements = []
    store.catalog.db.set_trace_callback(statements.append)
    f = mkfile(ns, ROOT_INODE, b"f")
    first = store.store(b"first page", name=b"/f")
    ns.set_contents(f.id, [first], 10, 1)
    assert not any(s.startswith("DELETE FROM contents") for s in statements)
    records.clear()
    ns.set_attrs(f.id, mtime_ns=5)
    assert [(p, [r.sig for r in rows]) for p, rows in records] == [(b"/f", [first.sig])]
    second = store.store(b"second page", name=b"/f")
    ns.set_contents(f.id, [second], 11, 2)
    assert sum(s.startswith("DELETE FROM contents") for s in statements) == 1
    records.clear()
    ns.set_attrs(f.id, mode=stat.S_IFREG | 0o600)
    assert [[r.sig for r in rows] for _, rows in records] == [[second.sig]]
    store.commit()
    ns.rename(ROOT_INODE, b"f", ROOT_INODE, b"g")
    records.clear()
    statements.clear()
    ns.set_attrs(f.id, mtime_ns=6)
    assert [(p, [r.sig for r in rows]) for p, rows in records] == [(b"/g", [second.sig])]
    assert not [s for s in statements if s.startswith("SELECT")], statements
    h = mkfile(ns, ROOT_INODE, b"h")
    store.commit()
    ns.set_contents(h.id, [store.store(b"third page", name=b"/h")], 10, 3)
    store.catalog.rollback()            # the content it was given is no more
    records.clear()
    ns.set_attrs(h.id, mtime_ns=7)
    assert [rows for _, rows in records] == [None]
    store.catalog.db.set_trace_callback(None)


def test_inode_numbers_are_not_reused_by_names_made_in_bulk(ns):
    """webfs import into a mount makes its inodes through the mount's rows: a
    number freed while mounted (the kernel may still hold it) is not given
    to the next file, whichever way that file is made."""
    a = mkfile(ns, ROOT_INODE, b"a")
    ns.unlink(ROOT_INODE, b"a")
    ns.free(a.id)
    t = 1
    bulk = ns.add_inode(0o100644, 0, 0, 0, 1, t, t, t)
    assert bulk.id > a.id
    b = mkfile(ns, ROOT_INODE, b"b")
    assert b.id > bulk.id
    ns.unlink(ROOT_INODE, b"b")
    ns.free(b.id)
    from webfs.namespace import NamespaceRows       # an import's own rows over the same catalog
    assert NamespaceRows(ns.cat).add_inode(0o100644, 0, 0, 0, 1, t, t, t).id > b.id


def _memo_agrees_with_the_catalog(ns) -> None:
    """Every row the memo keeps is the catalog's row, and a complete directory's
    names in memory are all its names."""
    memo = ns.memo
    for ino, node in list(memo.nodes.items()):
        row = ns.cat.query("SELECT id, mode, uid, gid, size, nlink, atime_ns, mtime_ns, ctime_ns, rdev "
                           "FROM inodes WHERE id=?", (ino,))
        assert row and tuple(row[0]) == (node.id, node.mode, node.uid, node.gid, node.size, node.nlink,
                                         node.atime_ns, node.mtime_ns, node.ctime_ns, node.rdev), ino
    for (parent, name), ino in list(memo.names.items()):
        assert ns.cat.scalar("SELECT inode FROM dentries WHERE parent=? AND name=?", (parent, name)) == ino
    for parent in memo.complete:
        known = {n for (p, n) in memo.names if p == parent}
        assert known == {r[0] for r in ns.cat.query("SELECT name FROM dentries WHERE parent=?", (parent,))}
    for ino, xattrs in list(memo.xattrs.items()):
        assert xattrs == dict(ns.cat.query("SELECT name, value FROM xattrs WHERE inode=?", (ino,)))
    for ino, rows in list(memo.pieces.items()):
        assert [(r.id, r.sig, r.size) for r in rows] == [(r.id, r.sig, r.size) for r in ns.contents(ino)], ino
    for ino, rows in list(memo.stored.items()):
        assert [r.block_name for r in rows] == [r.block_name for r in ns.contents(ino)], ino
    for ino, (parent, offset) in list(memo.positions.items()):
        assert ns.cat.scalar("SELECT inode FROM dentries WHERE parent=? AND rowid=?", (parent, offset)) == ino


@pytest.mark.parametrize("seed,bound", [(1, 50_000), (2, 50_000), (3, 7)])
def test_the_memo_answers_what_the_catalog_says_through_every_change(store, seed, bound):
    """Names, inodes and xattrs answered from memory (no SQLite) stay the
    catalog's through creates, links, unlinks, renames (over a target, across
    directories, exchanges), attribute and xattr changes, bulk rows, a small
    bound that evicts, a rollback of uncommitted changes, and directories
    listed for the kernel (readdir keeps their inodes)."""
    import random
    from webfs.namespace import NamespaceMemo
    store.catalog.memo = NamespaceMemo(bound)
    ns = Namespace(store)
    ns.ensure_root()
    rnd = random.Random(seed)
    dirs, files = [ROOT_INODE], []
    kept = read_ahead = 0
    for step in range(400):
        op = rnd.choice(["mkdir", "file", "file", "link", "unlink", "rename", "exchange", "attr",
                         "xattr", "rmxattr", "bulk", "lookup", "rollback", "store", "store", "readahead",
                         "readdir"])
        parent = rnd.choice(dirs)
        name = b"n%d" % rnd.randrange(12)
        try:
            if op == "mkdir":
                dirs.append(mkdir(ns, parent, name).id)
            elif op == "file":
                files.append(mkfile(ns, parent, name).id)
            elif op == "link" and files:
                ns.link(rnd.choice(files), parent, name)
            elif op == "unlink":
                ns.unlink(parent, name)
            elif op in ("rename", "exchange"):
                ns.rename(parent, name, rnd.choice(dirs), b"n%d" % rnd.randrange(12),
                          exchange=op == "exchange")
            elif op == "attr" and files:
                ns.set_attrs(rnd.choice(files), mode=stat.S_IFREG | rnd.choice([0o600, 0o644]))
            elif op == "xattr" and files:
                ns.setxattr(rnd.choice(files), b"user.k%d" % rnd.randrange(3), b"v%d" % step)
            elif op == "rmxattr" and files:
                ns.removexattr(rnd.choice(files), b"user.k%d" % rnd.randrange(3))
            elif op == "bulk":
                with ns.cat.lock:
                    node = ns.add_inode(stat.S_IFREG | 0o644, 0, 0, 0, 1, 1, 1, 1)
                    ns.add_name(parent, b"bulk%d" % step, node.id)
                    ns.set_changed(parent, step)
                    ns.add_xattrs([(node.id, b"user.bulk", b"1")])
                files.append(node.id)
            elif op == "lookup":
                ns.lookup(parent, name)
            elif op == "store" and files:
                data = b"page %d" % rnd.randrange(5)
                row = store.store(data, name=b"x")
                ns.set_contents(rnd.choice(files), [row], len(data), step)
            elif op == "readahead":
                ns.entries_ahead(parent, 0, 8)
            elif op == "readdir":
                listed = [e[:3] for e in ns.listing(parent, 0, 200)]
                assert all(ns.memo.nodes.get(node.id, node) == node for _, _, node in listed)
            elif op == "rollback":
                if rnd.random() < 0.5:
                    ns.cat.commit()
                else:
                    ns.cat.rollback()
                    dirs = [r[0] for r in ns.cat.query("SELECT id FROM inodes") if ns.get(r[0]).is_dir]
                    files = [r[0] for r in ns.cat.query("SELECT id FROM inodes") if not ns.get(r[0]).is_dir]
        except FsError:
            pass
        # What a FUSE request would ask, answered through the memo.
        for ino in dirs[-3:] + files[-3:]:
            try:
                ns.get(ino)
                ns.listxattr(ino)
                ns.pieces(ino)
                ns.position(ino)
            except FsError:
                pass
        _memo_agrees_with_the_catalog(ns)
        kept = max(kept, len(ns.memo.names))
        read_ahead = max(read_ahead, len(ns.memo.pieces))
    assert kept >= 3 and read_ahead >= 1


def test_every_table_of_the_memo_and_the_paths_kept_hold_their_bounds(store, monkeypatch):
    """A copy of many files (created, stored, half of them renamed after their
    close as rsync does, read ahead, listed) leaves no table of the memo past
    its bound (the xattrs of renamed files once stayed for ever), the paths
    of files made past theirs, and a lookup still finds every file."""
    from webfs.namespace import NamespaceMemo, paths
    monkeypatch.setattr(paths, "FILE_PATHS_KEPT", 8)
    store.catalog.memo = NamespaceMemo(32)
    ns = Namespace(store)
    ns.ensure_root()
    memo = ns.memo
    made = []
    for d in range(3):
        top = mkdir(ns, ROOT_INODE, b"d%d" % d)
        for i in range(60):
            f = mkfile(ns, top.id, b".f%d.tmp" % i)
            row = store.store(b"page %d %d" % (d, i), name=b"x")
            ns.set_contents(f.id, [row], len(b"page %d %d" % (d, i)), i)
            name = b"f%d" % i
            if i % 2:
                ns.rename(top.id, b".f%d.tmp" % i, top.id, name)
            else:
                name = b".f%d.tmp" % i
            made.append((top.id, name, f.id))
        ns.entries_ahead(top.id, 0, 100)
        ns.listing(top.id, 0, 200)
        for table in (memo.nodes, memo.names, memo.xattrs, memo.pieces, memo.positions, memo.empty,
                      memo.complete, memo.stored):
            assert len(table) <= 32
        assert len(ns.paths.files) <= 8
    for parent, name, ino in made:
        assert ns.lookup(parent, name).id == ino


def test_blocks_kept_by_a_lookup_serve_one_open_then_the_catalog_answers(ns, store):
    """A cold lookup keeps the file's block for the open after it; an open
    after a move of the block's group (webfs cool, rebalance) must get the
    catalog's disk, not look for the block on its old one first."""
    f = mkfile(ns, ROOT_INODE, b"f")
    row = store.store(b"a page that moves", name=b"/f")
    ns.set_contents(f.id, [row], 17, 1)
    store.commit()
    cold = Namespace(store, journal=lambda *args, **kwargs: None)
    assert cold.find(ROOT_INODE, b"f").id == f.id
    moved_to = next(vol.index for vol in store.archive.volumes.values() if vol.index != row.disk)
    move_group(store, row.grp, moved_to)
    assert [r.disk for r in cold.pieces(f.id)] == [row.disk]       # kept by the lookup, for its open
    assert [r.disk for r in cold.pieces(f.id)] == [moved_to]       # the next open asks the catalog


def test_entries_of_many_directories_at_once(ns):
    """entries_of (a collection's walk, level by level): every entry of the
    directories asked, more of them than one query's 500, as entries lists them."""
    dirs = [mkdir(ns, ROOT_INODE, b"d%d" % i) for i in range(600)]
    for d in dirs[::7]:
        mkfile(ns, d.id, b"f")
        mkdir(ns, d.id, b"sub")
    got = sorted((parent, name, node) for parent, name, node in ns.entries_of([d.id for d in dirs]))
    want = sorted((d.id, name, node) for d in dirs for _, name, node in ns.entries(d.id))
    assert got == want and len(got) == 2 * len(dirs[::7])
    assert ns.entries_of([dirs[1].id]) == []
