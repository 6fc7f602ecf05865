"""Operations driven directly, without a kernel (S3QL's t3 tier): requests in,
replies out, on an archive of temporary disks. What a real mount adds (the
kernel's caches, tools) is in the real-mount tests."""
from __future__ import annotations

import errno
import os
import stat

import pyfuse3
import pytest
import trio
import trio.testing

from webfs.assembly import open_archive
from webfs.controltree import CONTROL_DIR
from webfs.fs import REQUESTS, Operations
from webfs.namespace import ROOT_INODE, Namespace


class Ctx:
    uid = os.getuid()
    gid = os.getgid()
    pid = os.getpid()
    umask = 0o022


CTX = Ctx()


class Fields:
    """pyfuse3.SetattrFields, whose attributes only the kernel's request sets."""

    def __init__(self, **set_):
        for name in ("mode", "uid", "gid", "size", "atime", "mtime", "ctime"):
            setattr(self, f"update_{name}", set_.get(f"update_{name}", False))


@pytest.fixture
def ops(store):
    ns = Namespace(store)
    ns.ensure_root()
    return Operations(store, ns, buffer_bound=1 << 16)


async def write_file(ops, name: bytes, data: bytes, parent: int = ROOT_INODE) -> int:
    info, attrs = await ops.create(parent, name, 0o644, os.O_WRONLY, CTX)
    for off in range(0, len(data), 1 << 17):
        assert await ops.write(info.fh, off, data[off:off + (1 << 17)]) == len(data[off:off + (1 << 17)])
    await ops.flush(info.fh)
    await ops.release(info.fh)
    return attrs.st_ino


async def read_file(ops, ino: int) -> bytes:
    info = await ops.open(ino, os.O_RDONLY, CTX)
    out, off = [], 0
    while True:
        chunk = await ops.read(info.fh, off, 1 << 17)
        if not chunk:
            break
        out.append(chunk)
        off += len(chunk)
    await ops.release(info.fh)
    return b"".join(out)


def test_a_closed_file_is_committed_and_reads_back(disks):
    store = open_archive(str(disks[0]), holder="test")
    ns = Namespace(store)
    ns.ensure_root()
    ops = Operations(store, ns, buffer_bound=1 << 16)
    data = os.urandom(300_000)          # past buffer_bound: the buffer spills to a file

    async def main():
        ino = await write_file(ops, b"page.html", data)
        assert not store.catalog.uncommitted        # close returned: the commit is done
        assert (await ops.getattr(ino)).st_size == len(data)
        assert await read_file(ops, ino) == data
        sig = await ops.getxattr(ino, b"user.webfs.signature", CTX)
        return ino, sig
    ino, sig = trio.run(main)
    # What close committed is on the disks: another opening of the archive sees it.
    store.close()
    again = open_archive(str(disks[0]), holder="test")
    try:
        ns = Namespace(again)
        node = ns.lookup(ROOT_INODE, b"page.html")
        assert node.id == ino and node.size == len(data)
        assert b"".join(again.read(r) for r in ns.contents(ino)) == data
        assert ",".join(r.block_name for r in ns.contents(ino)).encode() == sig
    finally:
        again.close()


def test_rewrite_truncate_and_unlink(ops, store):
    async def main():
        ino = await write_file(ops, b"f", b"first version")
        info = await ops.open(ino, os.O_WRONLY | os.O_TRUNC, CTX)
        await ops.write(info.fh, 0, b"second")
        await ops.release(info.fh)
        assert await read_file(ops, ino) == b"second"
        attr = pyfuse3.EntryAttributes()
        attr.st_size = 3
        fields = Fields(update_size=True)
        assert (await ops.setattr(ino, attr, fields, None, CTX)).st_size == 3
        assert await read_file(ops, ino) == b"sec"
        await ops.unlink(ROOT_INODE, b"f", CTX)
        assert (await ops.lookup(ROOT_INODE, b"f", CTX)).st_ino == 0     # a negative entry
    trio.run(main)


def test_an_open_unlinked_file_stays_readable_until_its_last_close(ops, store):
    async def main():
        ino = await write_file(ops, b"f", b"still here")
        info = await ops.open(ino, os.O_RDONLY, CTX)
        await ops.unlink(ROOT_INODE, b"f", CTX)
        assert await ops.read(info.fh, 0, 100) == b"still here"
        await ops.release(info.fh)
        await ops.forget([(ino, 1)])        # create's lookup: the kernel lets go
        assert ops.ns.count_inodes() == 1
    trio.run(main)


def test_names_directories_and_the_control_tree(ops, store):
    async def main():
        d = await ops.mkdir(ROOT_INODE, b"crawl", 0o755, CTX)
        ino = await write_file(ops, b"a.html", b"<html>a</html>", parent=d.st_ino)
        assert (await ops.lookup(d.st_ino, b"a.html", CTX)).st_ino == ino
        assert (await ops.lookup(d.st_ino, b"..", CTX)).st_ino == ROOT_INODE
        await ops.rename(d.st_ino, b"a.html", ROOT_INODE, b"b.html", 0, CTX)
        assert (await ops.lookup(ROOT_INODE, b"b.html", CTX)).st_ino == ino
        with pytest.raises(pyfuse3.FUSEError) as info:
            await ops.mkdir(ROOT_INODE, CONTROL_DIR, 0o755, CTX)
        assert info.value.errno == errno.EEXIST
        # .webfs/blocks/<group path>/<rest> is the block, read-only
        sig = (await ops.getxattr(ino, b"user.webfs.signature", CTX)).decode()
        node = await ops.lookup(ROOT_INODE, CONTROL_DIR, CTX)
        node = await ops.lookup(node.st_ino, b"blocks", CTX)
        chars = 2 * (store.conf.depth - 1)
        for i in range(0, chars, 2):
            node = await ops.lookup(node.st_ino, sig[i:i + 2].encode(), CTX)
            assert stat.S_ISDIR(node.st_mode)
        block = await ops.lookup(node.st_ino, sig[chars:].encode(), CTX)
        assert block.st_size == len(b"<html>a</html>")
        for name in (b"not-hex", sig[chars:-1].encode(), b"0" * len(sig[chars:])):   # no such block
            with pytest.raises(pyfuse3.FUSEError) as info:
                await ops.lookup(node.st_ino, name, CTX)
            assert info.value.errno == errno.ENOENT
        info = await ops.open(block.st_ino, os.O_RDONLY, CTX)
        assert await ops.read(info.fh, 0, 100) == b"<html>a</html>"
        with pytest.raises(pyfuse3.FUSEError) as info:
            await ops.open(block.st_ino, os.O_WRONLY, CTX)
        assert info.value.errno == errno.EROFS
        again = await ops.lookup(node.st_ino, sig[chars:].encode(), CTX)     # the kernel looked it up anew ...
        assert again.st_ino == block.st_ino
        await ops.forget([(block.st_ino, 1)])          # ... before the FORGET of its older reference came
        assert (await ops.getattr(block.st_ino, CTX)).st_size == block.st_size
        await ops.forget([(block.st_ino, 1)])
        with pytest.raises(pyfuse3.FUSEError) as info:
            await ops.getattr(block.st_ino, CTX)
        assert info.value.errno == errno.ENOENT
    trio.run(main)


def test_a_store_that_fails_at_close_drops_the_new_content(ops, store, monkeypatch):
    from webfs.errors import NoSpace

    async def main():
        ino = await write_file(ops, b"f", b"kept")
        info = await ops.open(ino, os.O_WRONLY | os.O_TRUNC, CTX)
        await ops.write(info.fh, 0, b"never stored")

        def full(*args, **kwargs):
            raise NoSpace("planted: every disk is full")
        monkeypatch.setattr(store, "store", full)
        with pytest.raises(pyfuse3.FUSEError) as err:
            await ops.flush(info.fh)
        assert err.value.errno == errno.ENOSPC
        with pytest.raises(pyfuse3.FUSEError):
            await ops.release(info.fh)         # the kernel ignores a release's error
        monkeypatch.undo()
        assert await read_file(ops, ino) == b"kept"
        assert len(ops.files.failures) == 1 and "dropped" in ops.files.failures[0]
    trio.run(main)


def test_a_name_made_after_a_miss_leaves_no_record_of_the_miss(ops):
    """cp -r looks up every name before it creates it: the miss's record goes
    when the name is made (the kernel replaced its negative entry), so the
    records do not pile up for NEGATIVE_TIMEOUT during an ingest."""
    async def run():
        d = (await ops.mkdir(ROOT_INODE, b"d", 0o755, CTX)).st_ino
        for name in (b"f", b"n", b"s", b"l", b"r", b"sub"):
            assert (await ops.lookup(d, name, CTX)).st_ino == 0       # a negative entry
        assert ops.miss_count == 6
        f = await write_file(ops, b"f", b"x", parent=d)
        await ops.mknod(d, b"n", stat.S_IFIFO | 0o644, 0, CTX)
        await ops.symlink(d, b"s", b"f", CTX)
        await ops.link(f, d, b"l", CTX)
        await write_file(ops, b"tmp", b"y", parent=d)
        await ops.rename(d, b"tmp", d, b"r", 0, CTX)
        await ops.mkdir(d, b"sub", 0o755, CTX)
        assert ops.miss_count == 0 and not ops.misses
        # a miss for a name never made is still remembered (the kernel keeps it)
        assert (await ops.lookup(d, b"never", CTX)).st_ino == 0
        assert ops.miss_count == 1
    trio.run(run)


def test_a_walker_in_order_gets_the_files_after_its_directory_fetched_ahead(ops):
    """find | cat, grep -r and tar open files depth-first: a directory's
    entries in listing order, a subdirectory's where it is listed, then the
    parent's next entries. A reader that opens the file the walk gives next
    gets the following files fetched ahead, into subdirectories and past the
    end of its own; one that opens files out of that order gets nothing."""
    async def main():
        a = (await ops.mkdir(ROOT_INODE, b"a", 0o755, CTX)).st_ino
        f1 = await write_file(ops, b"f1", b"first of a", a)
        sub = (await ops.mkdir(a, b"sub", 0o755, CTX)).st_ino
        g1 = await write_file(ops, b"g1", b"first of sub", sub)
        await write_file(ops, b"empty", b"", sub)
        g2 = await write_file(ops, b"g2", b"last of sub", sub)
        f2 = await write_file(ops, b"f2", b"last of a", a)
        b = (await ops.mkdir(ROOT_INODE, b"b", 0o755, CTX)).st_ino
        h1 = await write_file(ops, b"h1", b"only file of b", b)
        piece = {ino: ops.ns.pieces(ino)[0] for ino in (f1, g1, g2, f2, h1)}
        # A file written here is in the kernel's pages (no fetch ahead for it)
        # until the kernel forgets it: a reader after a remount, here.
        await ops.forget([(ino, 1) for ino in piece])

        async def fetched_after_open(ino):
            ops.reader.cache.items.clear()
            ops.reader.cache.used = 0
            info = await ops.open(ino, os.O_RDONLY, CTX)
            await ops.release(info.fh)
            await trio.testing.wait_all_tasks_blocked()    # every fetch ahead started
            for fetch in list(ops.reader.cache.inflight.values()):
                await fetch.wait()
            # the opened file's own piece may be read at its open (webfs/kernelpages.py)
            return {i for i, row in piece.items() if i != ino and ops.reader.cache.get(row) is not None}

        async with trio.open_nursery() as nursery:
            ops.running(nursery)
            assert await fetched_after_open(h1) == set()      # out of order: no guess
            assert await fetched_after_open(g1) == set()      # out of order: held, nothing listed
            before = dict(REQUESTS)
            assert await fetched_after_open(g2) == {f2, h1}   # next of its directory: 2 ahead
            assert REQUESTS.get("read-ahead-lookup", 0) > before.get("read-ahead-lookup", 0)
            assert await fetched_after_open(f2) == {h1}       # then 4 (all there is)
            assert await fetched_after_open(g1) == set()      # back again: out of order
            before = dict(REQUESTS)
            assert await fetched_after_open(f1) == set()      # out of order, before the one held
            assert await fetched_after_open(h1) == set()      # another directory: out of order
            # a random reader's opens (out of order, or before the file held) list nothing
            assert REQUESTS.get("read-ahead-lookup", 0) == before.get("read-ahead-lookup", 0)
            nursery.cancel_scope.cancel()
    trio.run(main)


def test_a_listing_kept_from_readdir_fetches_no_block_a_file_no_longer_has(ops):
    """The read-ahead takes a listed directory's next files from its readdir's
    listing (webfs/listings.py), which may be older than the catalog: a file
    rewritten or removed since is not fetched ahead with the block it had;
    one unchanged is, and the walk asks the catalog nothing."""
    async def main():
        d = (await ops.mkdir(ROOT_INODE, b"d", 0o755, CTX)).st_ino
        f = [await write_file(ops, b"f%d" % i, b"page %d" % i, d) for i in range(4)]
        for listed in (ROOT_INODE, d):                                   # what readdir does
            ops.reader.listed(listed, 0, ops.ns.listing(listed, 0, 200), end=True)
        old = {ino: ops.ns.kept_block(ino) for ino in f}
        info = await ops.open(f[2], os.O_WRONLY | os.O_TRUNC, CTX)       # rewritten since
        await ops.write(info.fh, 0, b"new page 2")
        await ops.flush(info.fh)
        await ops.release(info.fh)
        await ops.unlink(d, b"f3", CTX)                                  # removed since
        await ops.forget([(ino, 1) for ino in f[:3]])    # written here: in the kernel's pages until forgotten
        ops.reader.cache.items.clear()
        ops.reader.cache.used = 0
        before = dict(REQUESTS)
        async with trio.open_nursery() as nursery:
            ops.running(nursery)
            for ino in f[:2]:                       # in order: 2 ahead, then 4
                info = await ops.open(ino, os.O_RDONLY, CTX)
                await ops.release(info.fh)
                await trio.testing.wait_all_tasks_blocked()
            for fetch in list(ops.reader.cache.inflight.values()):
                await fetch.wait()
            nursery.cancel_scope.cancel()
        assert ops.reader.cache.get(old[f[1]]) is not None
        assert ops.reader.cache.get(old[f[2]]) is None and ops.reader.cache.get(old[f[3]]) is None
        assert REQUESTS.get("read-ahead-lookup", 0) == before.get("read-ahead-lookup", 0)
        assert await read_file(ops, f[2]) == b"new page 2"
    trio.run(main)


def test_a_walker_whose_next_files_are_coming_asks_nothing_of_their_blocks(ops):
    """Whether a listed file still has the block it was listed with is asked
    only of the files a trip ahead would fetch: an open in a walk whose next
    files are at hand or coming (three in four) asks none. It asked it of the
    whole window at every open (16 a file once the window was full)."""
    async def main():
        d = (await ops.mkdir(ROOT_INODE, b"d", 0o755, CTX)).st_ino
        f = [await write_file(ops, b"f%02d" % i, b"page %d" % i, d) for i in range(40)]
        for listed in (ROOT_INODE, d):                                   # what readdir does
            ops.reader.listed(listed, 0, ops.ns.listing(listed, 0, 200), end=True)
        await ops.forget([(ino, 1) for ino in f])    # written here: in the kernel's pages until forgotten
        ops.reader.cache.items.clear()
        ops.reader.cache.used = 0
        asked = []
        kept_block = ops.ns.kept_block
        ops.ns.kept_block = lambda ino: asked.append(ino) or kept_block(ino)
        async with trio.open_nursery() as nursery:
            ops.running(nursery)
            for ino in f:
                info = await ops.open(ino, os.O_RDONLY, CTX)
                await ops.release(info.fh)
                await trio.testing.wait_all_tasks_blocked()
            nursery.cancel_scope.cancel()
        assert 0 < len(asked) <= len(f)
        assert [await read_file(ops, ino) for ino in f] == [b"page %d" % i for i in range(40)]
    trio.run(main)


def test_a_chmod_to_the_mode_a_file_has_changes_its_ctime_alone(store):
    """rsync fchmods each new file to the mode it was made with: that setattr
    moves the ctime (as chmod(2) must) and writes no JOURNAL record; a real
    change writes one. So do the kernel's times written back with the mtime
    the file has."""
    records = []
    ns = Namespace(store, journal=lambda *args, **kwargs: records.append(args[0]))
    ns.ensure_root()
    ops = Operations(store, ns, buffer_bound=1 << 16)

    async def main():
        ino = await write_file(ops, b"f", b"page")
        before, n = await ops.getattr(ino), len(records)
        same = await ops.setattr(ino, before, Fields(update_mode=True), None, CTX)
        assert len(records) == n and same.st_mode == before.st_mode
        assert same.st_ctime_ns > before.st_ctime_ns
        before.st_mode = stat.S_IFREG | 0o600
        changed = await ops.setattr(ino, before, Fields(update_mode=True), None, CTX)
        assert len(records) == n + 1 and stat.S_IMODE(changed.st_mode) == 0o600
        # The kernel writing back its times after a chmod or a rename: the
        # mtime the file has, a new ctime (not in the JOURNAL): no record.
        changed.st_ctime_ns += 1000
        times = await ops.setattr(ino, changed, Fields(update_mtime=True, update_ctime=True), None, CTX)
        assert len(records) == n + 1 and times.st_mtime_ns == changed.st_mtime_ns
        assert (await ops.getattr(ino)).st_ctime_ns == changed.st_ctime_ns
        changed.st_mtime_ns -= 10 ** 9
        moved = await ops.setattr(ino, changed, Fields(update_mtime=True, update_ctime=True), None, CTX)
        assert len(records) == n + 2 and moved.st_mtime_ns == changed.st_mtime_ns
    trio.run(main)


def test_a_ctime_the_kernel_writes_back_older_than_the_files_writes_nothing(ops, store):
    """After rsync's chmod or rename of a closed file the writeback cache
    sends the ctime it took then, which the daemon stamped later: that
    setattr writes no row and leaves the newer ctime; a newer one is written."""
    async def main():
        ino = await write_file(ops, b"f", b"page")
        attrs = await ops.getattr(ino)
        attrs.st_mode = stat.S_IFREG | 0o600
        chmod = await ops.setattr(ino, attrs, Fields(update_mode=True), None, CTX)
        stale = await ops.getattr(ino)
        stale.st_ctime_ns = chmod.st_ctime_ns - 1000
        writes = store.catalog.write_count()
        kept = await ops.setattr(ino, stale, Fields(update_mtime=True, update_ctime=True), None, CTX)
        assert store.catalog.write_count() == writes
        assert kept.st_ctime_ns == chmod.st_ctime_ns == (await ops.getattr(ino)).st_ctime_ns
        stale.st_ctime_ns = chmod.st_ctime_ns + 1000
        newer = await ops.setattr(ino, stale, Fields(update_mtime=True, update_ctime=True), None, CTX)
        assert store.catalog.write_count() == writes + 1 and newer.st_ctime_ns == stale.st_ctime_ns
    trio.run(main)


def test_a_random_open_past_the_held_one_asks_one_short_query(ops):
    """A random reader opening a file further on in the directory of its last
    open: one query that stops at the first file between (a read-ahead-lookup),
    not a listing of the next files with their blocks; the file right after
    the held one, or after an empty file, is a walker's next (in order)."""
    async def main():
        d = (await ops.mkdir(ROOT_INODE, b"d", 0o755, CTX)).st_ino
        f = [await write_file(ops, b"f%d" % i, b"page %d" % i, d) for i in range(6)]
        empty = await write_file(ops, b"empty", b"", d)
        last = await write_file(ops, b"last", b"after the empty one", d)
        ops.ns.memo.pieces.clear()
        # Files written here are in the kernel's pages (no walk for them) until
        # the kernel forgets them: a reader after a remount, here.
        await ops.forget([(ino, 1) for ino in f + [empty, last]])

        async def opened(ino):
            before = REQUESTS.get("read-ahead-lookup", 0)
            info = await ops.open(ino, os.O_RDONLY, CTX)
            await ops.release(info.fh)
            return REQUESTS.get("read-ahead-lookup", 0) - before

        async with trio.open_nursery() as nursery:
            ops.running(nursery)
            assert await opened(f[1]) == 0                  # held
            assert await opened(f[4]) == 1                  # f2, f3 between: out of order
            assert not ops.ns.memo.pieces                   # nothing listed with its blocks
            assert ops.reader._held[d].walking == [(d, ops.ns.position(f[4])[1])]
            await opened(f[0])
            await opened(f[1])                              # right after the held one: in order
            assert f[2] in ops.reader._expected             # its walk listed on, f2 next
            await opened(f[5])                              # out of order again: held
            await opened(last)                              # only an empty file between: in order
            assert d not in ops.reader._held and empty not in ops.reader._expected
            nursery.cancel_scope.cancel()
    trio.run(main)


def _mount_store(disks):
    """A store as a mount opens it: removals, parity flushes and Refs headers
    follow commits in the background worker."""
    store = open_archive(str(disks[0]), holder="test", background=True)
    ns = Namespace(store)
    ns.ensure_root()
    return store, Operations(store, ns, buffer_bound=1 << 16)


def test_a_duplicates_refs_header_is_written_by_its_close_on_the_loop(disks, monkeypatch):
    """A close stored on the loop whose file repeats another writes the
    block's Refs header itself, after its commit, when the background worker
    is idle: no wake-up of the worker, and the next close is not sent to a
    worker trip because the worker is busy (webfs-internals(7), STORE AT CLOSE)."""
    import threading
    from webfs.groupcommit import HANDOFFS
    store, ops = _mount_store(disks)
    writers = []
    write = store.headers.write

    def seen(ids):
        writers.append(threading.current_thread())
        write(ids)
    monkeypatch.setattr(store.headers, "write", seen)
    data = os.urandom(3000)

    async def main():
        await write_file(ops, b"a", data)
        store.background.drain()            # the first commit's parity flush, if any
        trips = sum(HANDOFFS.values())
        ino = await write_file(ops, b"b", data)
        assert sum(HANDOFFS.values()) == trips      # stored and committed on the loop
        assert writers == [threading.current_thread()]
        assert not store.refs_in_flight
        (row,) = ops.ns.contents(ino)
        assert store.archive.volumes[row.disk].read_header(row.sig, row.overflow).refs == 2
    try:
        trio.run(main)
    finally:
        store.close()


def test_a_refs_header_that_fails_on_the_loop_leaves_the_close_done(disks, monkeypatch, caplog):
    """A Refs header write that fails after a close's commit on the loop is
    logged, as the worker logs it; the close, committed, succeeds (fsck mends
    the header)."""
    store, ops = _mount_store(disks)

    def broken(ids):
        raise RuntimeError("planted: the header writer fails")
    monkeypatch.setattr(store.headers, "write", broken)
    data = os.urandom(3000)

    async def main():
        await write_file(ops, b"a", data)
        store.background.drain()
        ino = await write_file(ops, b"b", data)
        assert await read_file(ops, ino) == data
    try:
        trio.run(main)
        store.background.drain()            # (with the worker busy at that close, it logs there)
        assert "background work after a commit failed" in caplog.text
    finally:
        monkeypatch.undo()
        store.close()


def test_a_stripe_a_close_on_the_loop_fills_gets_its_parity_file_from_that_close(disks, monkeypatch):
    """A small file's close stored on the loop that fills a parity stripe
    writes the stripe's parity file itself, after its stripe lock is let go,
    instead of waking the parity writer thread (an import's storing thread
    still hands it over); the file is on its disk when the close returns."""
    import threading
    store, ops = _mount_store(disks)
    parity = store.protection
    writers = []
    write_full = parity.writer._write

    def seen(stripe_id):
        writers.append(threading.current_thread())
        write_full(stripe_id)
        assert stripe_id not in parity.write_behind        # written, its intents let go
    monkeypatch.setattr(parity.writer, "_write", seen)

    async def main():
        # A close goes to a worker while a commit or a trip is still away (the
        # create's name commit, a busy machine): such a close hands its stripe
        # over as before. Files are written until a close on the loop fills one.
        for i in range(40 * parity.width):
            store.background.drain()        # (a flush at work would send the close to a worker)
            await write_file(ops, b"f%d" % i, os.urandom(3000))
            if threading.current_thread() in writers:
                return
    try:
        trio.run(main)
        assert threading.current_thread() in writers
    finally:
        store.close()
