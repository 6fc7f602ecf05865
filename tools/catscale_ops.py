"""The catalog operations the catscale figures time (tools/bench_catscale.py),
through the API the mount uses, with every answer checked against the
generator's layout (tools/catalog_gen.py):

lookup    a random existing path walked from the root, a name at a time
          (``Namespace.find``, as the kernel's lookups do), every name
          asked of the catalog (the memo of names emptied before each path)
sig       a random existing signature (``Catalog.blocks_with_sigs``, the
          store's duplicate check)
insert    a new file in a random existing directory: ``Namespace.create``,
          the duplicate check, ``Catalog.insert_block``,
          ``Namespace.set_contents`` and a commit each (a lone writer's
          group commit); its parity stripe and block file are not part of it
listing   every entry of the 10,000-entry directory, 200 at a time
          (``Namespace.entries``, as readdir asks)

``measure`` takes a function that opens the catalog, so another engine's
catalog plugs in beside SQLite's; ``plans`` traces the statements the
operations run and asks SQLite for their query plans.
"""
from __future__ import annotations

import random
import re
import time
from statistics import median
from typing import Callable

import xxhash

from catalog_gen import FILE_MODE, Layout
from webfs.catalog import Catalog
from webfs.namespace.tree import Namespace
from webfs.parity.layout import StripeLayout
from webfs.signature import group_of

class WrongAnswer(ValueError):
    """An operation's answer disagrees with the generator's layout."""


def walk(ns: Namespace, path: bytes) -> int:
    """The inode of a path, one name at a time from the root."""
    ino = 1
    for name in path.split(b"/")[1:]:
        node = ns.find(ino, name)
        if node is None:
            raise WrongAnswer(f"{path!r}: no {name!r} in inode {ino}")
        ino = node.id
    return ino


def listing(ns: Namespace, ino: int) -> int:
    """Entries of a directory, read as readdir reads them."""
    after, n = 0, 0
    while True:
        batch = ns.listing(ino, after, 200)
        if not batch:
            return n
        n += len(batch)
        after = batch[-1][0]


def insert_file(ns: Namespace, cat: Catalog, parent: int, name: bytes, sig: str, size: int,
                commit: bool = True) -> int:
    """The catalog's part of a new file's create, write and close."""
    node = ns.create(parent, name, FILE_MODE, 0, 0)
    if cat.blocks_with_sigs([sig]):
        raise WrongAnswer(f"new signature {sig} found")
    grp = group_of(sig, 3)
    row = cat.insert_block(sig, 0, cat.group_disk(grp) or 0, size, size // 3, "gzip", 1, 0,
                           "2026-11-27T00:00:00Z", name.decode(), grp, sha256=bytes(32))
    ns.set_contents(node.id, [row], size, node.mtime_ns)
    if commit:
        cat.commit()
    return node.id


class Work:
    """The keys one run asks about, drawn from the layout with a seed."""

    def __init__(self, layout: Layout, seed: int, count: int, inserts: int):
        rnd = random.Random(seed)
        self.files = [rnd.randrange(layout.files) for _ in range(count)]
        self.paths = [layout.path(k) for k in self.files]
        self.sigs = [rnd.randrange(layout.files) for _ in range(count)]
        leaves = layout.leaf_dirs() or [layout.listing_ino]
        tag = time.time_ns() & 0xffffffff          # new names even on a catalog timed before
        self.new = [(rnd.choice(leaves), b"new-%08x-%05d.html" % (tag, i),
                     xxhash.xxh3_128_hexdigest(b"new/%d/%d/%d" % (seed, tag, i)), 1000 + i)
                    for i in range(inserts)]


# Warm rounds per operation and size, interleaved between the sizes (the
# order reversed every other round) and their median kept: a size timed
# after the other, or with fewer rounds, met another load on a shared host
# (100 inserts took 20 to 50 ms: one busy moment decided a fastest round).
WARM_ROUNDS = 9


def measure(sides: list[tuple[Callable[[], Catalog], Layout]], seed: int = 1, count: int = 2000,
            inserts: int = 300) -> list[dict[str, dict[str, float]]]:
    """For each (function opening a catalog, its layout) of ``sides``, op ->
    {"cold": ops/s, "warm": ops/s, "warm_cpu": ops per CPU second} of the four
    operations. Each operation opens every side's catalog afresh: a cold
    round of each, then WARM_ROUNDS rounds of each, interleaved, webfs's
    memory of names emptied before every round, of ``count`` lookups,
    ``inserts`` inserts or one listing; the warm figures are the rounds'
    medians. Raises WrongAnswer if any answer is wrong."""
    works = [Work(layout, seed, count, inserts * (1 + WARM_ROUNDS)) for _, layout in sides]

    def lookups(ns, cat, layout, work, rnd):
        for k, path in zip(work.files, work.paths):
            # Every name of every path from the catalog: with the memo kept, a
            # smaller tree would answer more of its upper directories from memory.
            cat.memo.clear()
            if walk(ns, path) != layout.file_ino(k):
                raise WrongAnswer(f"{path!r} is not inode {layout.file_ino(k)}")

    def sigs(ns, cat, layout, work, rnd):
        for k in work.sigs:
            rows = cat.blocks_with_sigs([layout.sig(k)]).get(layout.sig(k))
            if not rows or rows[0].id != layout.block_id(k):
                raise WrongAnswer(f"signature of file {k}: {rows}")

    def lists(ns, cat, layout, work, rnd):
        if listing(ns, layout.listing_ino) != layout.listed:
            raise WrongAnswer("the listing directory")

    def adds(ns, cat, layout, work, rnd):
        for parent, name, sig, size in work.new[rnd * inserts:(rnd + 1) * inserts]:
            ino = insert_file(ns, cat, parent, name, sig, size)
            if ns.find(parent, name).id != ino:
                raise WrongAnswer(f"new file {name!r}")

    out: list[dict[str, dict[str, float]]] = [{} for _ in sides]
    for op, fn, n in (("lookup", lookups, count), ("sig", sigs, count), ("insert", adds, inserts),
                      ("listing", lists, 1)):
        cats = []
        try:
            for open_catalog, _ in sides:
                cats.append(open_catalog())
            spaces = [Namespace(None, catalog=cat) for cat in cats]
            rates: list[list[float]] = [[] for _ in sides]
            cpu: list[list[float]] = [[] for _ in sides]
            for rnd in range(1 + WARM_ROUNDS):
                order = range(len(sides)) if rnd % 2 == 0 else reversed(range(len(sides)))
                for i in order:
                    cats[i].memo.clear()
                    t, c = time.perf_counter(), time.process_time()
                    fn(spaces[i], cats[i], sides[i][1], works[i], rnd)
                    rates[i].append(n / (time.perf_counter() - t))
                    cpu[i].append(n / max(time.process_time() - c, 1e-6))
            for i in range(len(sides)):
                # Beside the rates, per CPU second of this process: what other processes
                # on the machine do not change (the warm rounds read no disk).
                out[i][op] = {"cold": rates[i][0], "warm": median(rates[i][1:]), "warm_cpu": median(cpu[i][1:])}
        finally:
            for cat in cats:
                cat.close()
    return out


def _run_traced(cat: Catalog, layout: Layout) -> None:
    """The four operations once, and the reads of the rest of webfs that ask
    the catalog's secondary indexes (stripe members, dirty stripes, a
    group's blocks, blocks in no stripe), so that every index is asked."""
    ns = Namespace(None, catalog=cat)
    k = layout.files // 2
    walk(ns, layout.path(k))
    row = cat.blocks_with_sigs([layout.sig(k)])[layout.sig(k)][0]
    ns.entries(layout.listing_ino, 0, 200)
    ns.path_of(layout.file_ino(k))
    ns.position(layout.file_ino(k))
    ns.entries_ahead(layout.file_parent(k), 0, 64)
    ns.pieces(layout.file_ino(k))
    ns.listxattr(layout.file_ino(k))
    cat.get_meta("schema")
    insert_file(ns, cat, layout.file_parent(k), b"plan.html", "0" * 32, 1, commit=False)
    stripes = StripeLayout.__new__(StripeLayout)        # its queries, without an archive
    stripes.catalog = cat
    stripes.members(row.stripe)
    stripes.stripe_ids("state != 'ok'")
    cat.blocks_in_group(row.grp)
    cat.group_prefixes(row.grp[:2], 4)
    next(cat.blocks("stripe IS NULL"), None)


def _shape(sql: str) -> str:
    return re.sub(r"x'[0-9a-fA-F]*'|'[^']*'|\b\d+\b", "?", sql)


def plans(cat: Catalog, layout: Layout) -> dict[str, list[str]]:
    """EXPLAIN QUERY PLAN of every distinct statement ``_run_traced`` runs
    (its changes rolled back), as SQLite prints it: statement -> plan lines."""
    seen: list[str] = []
    cat.db.set_trace_callback(seen.append)
    try:
        _run_traced(cat, layout)
    finally:
        cat.db.set_trace_callback(None)
        cat.rollback()
    out: dict[str, list[str]] = {}
    shapes = set()
    for sql in seen:
        if re.match(r"\s*(SELECT|INSERT|UPDATE|DELETE)", sql, re.I) and _shape(sql) not in shapes:
            shapes.add(_shape(sql))
            out[sql] = [r[3] for r in cat.db.execute("EXPLAIN QUERY PLAN " + sql)]
    return out


def indexes_unused(cat: Catalog, found: dict[str, list[str]]) -> list[str]:
    """The catalog's indexes that no plan of ``found`` names."""
    names = [n for n, in cat.query("SELECT name FROM sqlite_master WHERE type='index' ORDER BY name")]
    return [n for n in names if not any(re.search(r"INDEX %s\b" % n, line)
                                        for plan in found.values() for line in plan)]
