#!/usr/bin/env python3
"""catalog_gen: a large webfs catalog made directly, for the catalog scale
figures (tools/bench_catscale.py), without storing a single block.

``Layout`` is the archive the catalog describes, a pure function of the
number of files and a seed: crawls of hosts of directories of pages, as
tools/make-corpus makes them, with every tenth file a duplicate of the one
before it (one block, two references) and one flat directory of 10,000
pages (``listing``) for the readdir figure:

    /crawl-001/www.listing.example/article-0000042.html         (the listing)
    /crawl-003/www.host000123.example/section-2/part-7/article-0123456.html

Block rows carry what webfs writes: 16-byte signatures (xxh3-128 of the
seed and the file number), the placement group and its rendezvous home
among 4 disks, sizes, gzip, refs, a Name: hint, a 32-byte digest, and
membership of full parity stripes of G = 4 (3 blocks of one size class on
distinct disks, parity on the fourth); the groups map and the stripes
table agree with them. Inodes, directory entries and contents follow.

``load_sqlite`` fills an opened, empty ``webfs.catalog.Catalog`` with it
in one transaction of bulk SQL against the real schema (the secondary
indexes made after the rows, as ``CREATE INDEX`` sorts once); another
engine gets a loader of its own (PostgreSQL: COPY) over the same Layout.

    tools/catalog_gen.py --files 1000000 /tmp/big/meta/catalog.db
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import xxhash

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from webfs.catalog import CACHE_KIB, SCHEMA, Catalog, seconds_of  # noqa: E402
from webfs.parity.layout import size_class  # noqa: E402
from webfs.placement import home_disk  # noqa: E402

DEPTH = 3                   # signature tree depth: groups are the first 2 bytes
DISKS = 4
WIDTH = DISKS - 1           # blocks of a full stripe (G = 4)
CRAWLS = 4
FILES_PER_DIR = 20          # pages of one leaf directory
LEAVES_PER_SECTION = 10
SECTIONS_PER_HOST = 5       # so 1,000 pages a host
LISTING = 10_000            # entries of the flat directory
DUPLICATE_EVERY = 10        # file k with k % 10 == 9 is a copy of file k - 1
CREATED = seconds_of("2026-11-27T00:00:00Z")     # as the catalog keeps it
T0_NS = 1_764_201_600 * 10**9
DIR_MODE, FILE_MODE = 0o40755, 0o100644
# Secondary indexes are made after the rows (a sort each instead of a random insert per row).
LATER_INDEXES = ("blocks_stripe", "dentries_inode", "dentries_parent")


class Layout:
    """Which file is where, numbered k = 0 .. files-1; inode numbers: the
    root, the crawls, hosts, sections, leaf directories, the listing, then
    the files (``file_ino``). Every formula here is the one the SQL of
    ``load_sqlite`` uses."""

    def __init__(self, files: int, seed: int = 1):
        if files < 1:
            raise ValueError("a catalog of at least one file")
        self.files, self.seed = files, seed
        self.listed = min(LISTING, files)                  # files 0 .. listed-1 are in the listing
        rest = files - self.listed
        self.leaves = -(-rest // FILES_PER_DIR)
        self.sections = -(-self.leaves // LEAVES_PER_SECTION)
        self.hosts = -(-self.sections // SECTIONS_PER_HOST)
        self.crawls = max(1, min(CRAWLS, self.hosts))
        self.crawl_base = 2
        self.host_base = self.crawl_base + self.crawls
        self.section_base = self.host_base + self.hosts
        self.leaf_base = self.section_base + self.sections
        self.listing_ino = self.leaf_base + self.leaves
        self.file_base = self.listing_ino + 1
        self.disk_uuids = [xxhash.xxh3_128_hexdigest(b"disk/%d/%d" % (seed, i)) for i in range(DISKS)]

    # -- directories ---------------------------------------------------------

    def dirs(self):
        """(inode, parent, name, subdirectories) of every directory but the root, parents first."""
        for c in range(self.crawls):
            hosts_here = len(range(c, self.hosts, self.crawls))
            yield self.crawl_base + c, 1, b"crawl-%03d" % (c + 1), hosts_here + (c == 0)
        for h in range(self.hosts):
            sections = min(SECTIONS_PER_HOST, self.sections - h * SECTIONS_PER_HOST)
            yield self.host_base + h, self.crawl_base + h % self.crawls, b"www.host%06d.example" % h, sections
        for s in range(self.sections):
            leaves = min(LEAVES_PER_SECTION, self.leaves - s * LEAVES_PER_SECTION)
            yield (self.section_base + s, self.host_base + s // SECTIONS_PER_HOST,
                   b"section-%d" % (s % SECTIONS_PER_HOST), leaves)
        for leaf in range(self.leaves):
            yield (self.leaf_base + leaf, self.section_base + leaf // LEAVES_PER_SECTION,
                   b"part-%d" % (leaf % LEAVES_PER_SECTION), 0)
        yield self.listing_ino, self.crawl_base, b"www.listing.example", 0

    def leaf_dirs(self) -> range:
        return range(self.leaf_base, self.leaf_base + self.leaves)

    # -- files ---------------------------------------------------------------

    def file_ino(self, k: int) -> int:
        return self.file_base + k

    def file_parent(self, k: int) -> int:
        return self.listing_ino if k < self.listed else self.leaf_base + (k - self.listed) // FILES_PER_DIR

    @staticmethod
    def file_name(k: int) -> bytes:
        return b"article-%07d.html" % k

    def path(self, k: int) -> bytes:
        """The file's path from the root, as the names of the dentries walked."""
        names = [self.file_name(k)]
        ino = self.file_parent(k)
        parents = {d[0]: (d[1], d[2]) for d in self._ancestors(ino)}
        while ino != 1:
            ino, name = parents[ino]
            names.append(name)
        return b"/" + b"/".join(reversed(names))

    def _ancestors(self, ino: int):
        if ino == self.listing_ino:
            return [(ino, self.crawl_base, b"www.listing.example"), (self.crawl_base, 1, b"crawl-001")]
        leaf = ino - self.leaf_base
        s = leaf // LEAVES_PER_SECTION
        h = s // SECTIONS_PER_HOST
        c = h % self.crawls
        return [(ino, self.section_base + s, b"part-%d" % (leaf % LEAVES_PER_SECTION)),
                (self.section_base + s, self.host_base + h, b"section-%d" % (s % SECTIONS_PER_HOST)),
                (self.host_base + h, self.crawl_base + c, b"www.host%06d.example" % h),
                (self.crawl_base + c, 1, b"crawl-%03d" % (c + 1))]

    @staticmethod
    def is_copy(k: int) -> bool:
        return k % DUPLICATE_EVERY == DUPLICATE_EVERY - 1

    def block_id(self, k: int) -> int:
        """The block of file k: its own (k + 1), or for a copy the one of file k - 1."""
        return k if self.is_copy(k) else k + 1

    def sig(self, k: int) -> str:
        """The signature of file k's document (a copy's is its original's)."""
        return xxhash.xxh3_128_hexdigest(b"%d/%d" % (self.seed, self.block_id(k) - 1))

    def sig_of_block(self, block_id: int) -> bytes:
        return xxhash.xxh3_128_digest(b"%d/%d" % (self.seed, block_id - 1))

    @staticmethod
    def size_of_block(block_id: int) -> int:
        return 1000 + block_id * 7919 % 60000

    def stripe_id(self, cls: int, q: int, parity: int) -> bytes:
        return xxhash.xxh3_128_digest(b"stripe/%d/%d/%d/%d" % (self.seed, cls, q, parity))

    def homes(self) -> list[tuple[str, int]]:
        """(placement group, its rendezvous home disk) of every group of the tree."""
        disks = [(i, u, 1.0) for i, u in enumerate(self.disk_uuids)]
        return [(g, home_disk(g, disks)) for g in (f"{i:04x}" for i in range(1 << 16))]


def load_sqlite(cat: Catalog, layout: Layout, log=lambda *a: None) -> dict[str, float]:
    """Fill an empty SQLite catalog with ``layout``: seconds per step."""
    db, path = cat.db, cat.path
    if cat.scalar("SELECT count(*) FROM inodes"):
        raise ValueError(f"{path}: not an empty catalog")
    scratch = path + ".gen"
    for p in (scratch, scratch + "-journal"):
        if os.path.exists(p):
            os.remove(p)
    steps: dict[str, float] = {}
    t = time.perf_counter()

    def step(name: str) -> None:
        nonlocal t
        now = time.perf_counter()
        steps[name] = now - t
        log("%s: %.1f s", name, steps[name])
        t = now

    _register(db, layout)
    db.commit()
    # One writer, a file made from nothing: no journal, no fsync, a large cache;
    # the catalog's own settings come back at the end.
    db.execute("PRAGMA journal_mode=DELETE")
    for pragma in ("journal_mode=OFF", "synchronous=OFF", "cache_size=-1000000", "temp_store=FILE"):
        db.execute("PRAGMA " + pragma)
    db.execute("ATTACH ? AS gen", (scratch,))
    db.execute("PRAGMA gen.journal_mode=OFF")
    try:
        for name in LATER_INDEXES:
            db.execute(f"DROP INDEX {name}")
        db.execute("BEGIN")
        _load_dirs(db, layout)
        step("directories")
        _load_docs(db, layout)
        step("documents (scratch)")
        _load_blocks(db, layout)
        step("blocks, stripes, groups")
        _load_files(db, layout)
        step("inodes, dentries, contents")
        db.executescript(SCHEMA)           # commits, then makes the secondary indexes once
        step("indexes")
    finally:
        if db.in_transaction:
            db.rollback()
        db.execute("DETACH gen")
        os.remove(scratch)
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute("PRAGMA journal_mode=WAL")
        db.execute(f"PRAGMA cache_size=-{CACHE_KIB}")
    return steps


def _register(db, layout: Layout) -> None:
    db.create_function("gen_sig", 1, layout.sig_of_block, deterministic=True)
    db.create_function("gen_class", 1, size_class, deterministic=True)
    db.create_function("gen_stripe", 3, layout.stripe_id, deterministic=True)


def _load_dirs(db, layout: Layout) -> None:
    rows = list(layout.dirs())
    t = T0_NS
    db.execute("INSERT INTO inodes (id, mode, uid, gid, size, nlink, atime_ns, mtime_ns, ctime_ns) "
               "VALUES (1, ?, 0, 0, 0, ?, ?, ?, ?)", (DIR_MODE, 2 + layout.crawls, t, t, t))
    db.executemany("INSERT INTO inodes (id, mode, uid, gid, size, nlink, atime_ns, mtime_ns, ctime_ns) "
                   "VALUES (?, ?, 0, 0, 0, ?, ?, ?, ?)", ((ino, DIR_MODE, 2 + sub, t, t, t)
                                                          for ino, _, _, sub in rows))
    db.executemany("INSERT INTO dentries (parent, name, inode) VALUES (?, ?, ?)",
                   ((parent, name, ino) for ino, parent, name, _ in rows))
    db.execute("CREATE TABLE gen.homes (grp TEXT PRIMARY KEY, disk INTEGER) WITHOUT ROWID")
    db.executemany("INSERT INTO gen.homes VALUES (?, ?)", layout.homes())


def _file_numbers(layout: Layout) -> str:
    """A CTE of k = 0 .. files-1 with each file's parent directory."""
    return (f"WITH RECURSIVE n(k) AS (SELECT 0 UNION ALL SELECT k + 1 FROM n WHERE k + 1 < {layout.files}), "
            f"f(k, parent) AS (SELECT k, CASE WHEN k < {layout.listed} THEN {layout.listing_ino} "
            f"ELSE {layout.leaf_base} + (k - {layout.listed}) / {FILES_PER_DIR} END FROM n) ")


def _load_docs(db, layout: Layout) -> None:
    """gen.docs: one row per block (the files that are not copies), with its
    disk, size class and rank among the blocks of its disk and class."""
    db.execute("CREATE TABLE gen.docs (id INTEGER PRIMARY KEY, sig BLOB, grp TEXT, disk INTEGER, "
               "size INTEGER, stored INTEGER, cls INTEGER, refs INTEGER)")
    db.execute(
        _file_numbers(layout) +
        "INSERT INTO gen.docs SELECT id, sig, grp, h.disk, size, size * 3 / 10 + 20, "
        "gen_class(size * 3 / 10 + 20), "
        f"CASE WHEN k % {DUPLICATE_EVERY} = {DUPLICATE_EVERY - 2} AND k + 1 < {layout.files} THEN 2 ELSE 1 END "
        "FROM (SELECT *, lower(hex(substr(sig, 1, 2))) AS grp FROM (SELECT k, parent, k + 1 AS id, "
        f"gen_sig(k + 1) AS sig, 1000 + (k + 1) * 7919 % 60000 AS size FROM f "
        f"WHERE k % {DUPLICATE_EVERY} != {DUPLICATE_EVERY - 1})) JOIN gen.homes h USING (grp)")
    db.execute("CREATE TABLE gen.ranked (id INTEGER PRIMARY KEY, q INTEGER, parity INTEGER)")
    db.execute(
        f"INSERT INTO gen.ranked SELECT id, r / {WIDTH}, (disk + 1 + r % {WIDTH}) % {DISKS} FROM "
        "(SELECT id, disk, row_number() OVER (PARTITION BY disk, cls ORDER BY id) - 1 AS r FROM gen.docs)")


def _load_blocks(db, layout: Layout) -> None:
    db.execute(
        "INSERT INTO blocks (id, sig, overflow, disk, size, stored, codec, refs, pins, created, grp, "
        "stripe, sha256) SELECT d.id, d.sig, 0, d.disk, d.size, d.stored, 'gzip', d.refs, 0, ?, d.grp, "
        "gen_stripe(d.cls, r.q, r.parity), randomblob(32) FROM gen.docs d JOIN gen.ranked r USING (id) "
        "ORDER BY d.id", (CREATED,))
    db.execute(
        "INSERT INTO stripes (id, parity_disk, size_class, length, state, members, disks) "
        "SELECT gen_stripe(d.cls, r.q, r.parity), r.parity, d.cls, max(d.stored), 'ok', count(*), "
        "(1 << r.parity) | sum(1 << d.disk) FROM gen.docs d JOIN gen.ranked r USING (id) "
        "GROUP BY d.cls, r.q, r.parity")
    db.execute("INSERT INTO groups (grp, disk) SELECT grp, disk FROM gen.homes "
               "WHERE grp IN (SELECT grp FROM gen.docs)")


def _load_files(db, layout: Layout) -> None:
    copy = f"k % {DUPLICATE_EVERY} = {DUPLICATE_EVERY - 1}"
    block = f"CASE WHEN {copy} THEN k ELSE k + 1 END"
    db.execute(
        _file_numbers(layout) +
        "INSERT INTO inodes (id, mode, uid, gid, size, nlink, atime_ns, mtime_ns, ctime_ns) "
        f"SELECT {layout.file_base} + k, {FILE_MODE}, 0, 0, 1000 + ({block}) * 7919 % 60000, 1, "
        f"{T0_NS} + k, {T0_NS} + k, {T0_NS} + k FROM f")
    db.execute(_file_numbers(layout) +
               "INSERT INTO dentries (parent, name, inode) "
               f"SELECT parent, CAST(printf('article-%07d.html', k) AS BLOB), {layout.file_base} + k FROM f")
    db.execute(_file_numbers(layout) +
               f"INSERT INTO contents (inode, piece, block) SELECT {layout.file_base} + k, 0, {block} FROM f")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="catalog_gen.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, required=True, help="files of the catalog")
    ap.add_argument("--seed", type=int, default=1, help="signatures' seed (default 1)")
    ap.add_argument("catalog", help="the catalog file to make (must not exist)")
    o = ap.parse_args(argv)
    if os.path.exists(o.catalog):
        ap.error(f"{o.catalog} exists")
    t = time.perf_counter()
    cat = Catalog(o.catalog)
    try:
        load_sqlite(cat, Layout(o.files, o.seed), log=lambda fmt, *a: print(fmt % a, file=sys.stderr))
    finally:
        cat.close()
    print("%s: %d files in %.1f s, %.2f GB" % (o.catalog, o.files, time.perf_counter() - t,
                                              os.path.getsize(o.catalog) / 1e9))
    return 0


if __name__ == "__main__":
    sys.exit(main())
