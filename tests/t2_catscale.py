"""tools/catalog_gen.py and tools/catscale_ops.py (the catscale figures of
tools/bench) on a small catalog: what the generator makes is a consistent
catalog in webfs's own schema, and the timed operations give right answers
(no timing is asserted)."""
from __future__ import annotations

import os
import sqlite3
import subprocess
import sys

import pytest

from conftest import REPO

sys.path.insert(0, os.path.join(REPO, "tools"))

from catalog_gen import Layout, load_sqlite  # noqa: E402
from catscale_ops import WARM_ROUNDS, WrongAnswer, measure, plans  # noqa: E402
from webfs.catalog import Catalog, hex_of  # noqa: E402
from webfs.namespace.tree import Namespace  # noqa: E402
from webfs.parity.layout import size_class  # noqa: E402

FILES = 20_000


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("catscale") / "meta" / "catalog.db")
    cat = Catalog(path)
    load_sqlite(cat, Layout(FILES, seed=7))
    cat.close()
    return path


def rows(path, sql):
    db = sqlite3.connect(path)
    try:
        return db.execute(sql).fetchall()
    finally:
        db.close()


def test_the_schema_is_the_one_webfs_makes(made, tmp_path):
    fresh = Catalog(str(tmp_path / "catalog.db"))
    fresh.close()
    shape = "SELECT type, name, sql FROM sqlite_master ORDER BY name"
    assert rows(made, shape) == rows(str(tmp_path / "catalog.db"), shape)
    assert rows(made, "PRAGMA integrity_check") == [("ok",)]
    assert rows(made, "PRAGMA journal_mode") == [("wal",)]
    assert rows(made, "SELECT value FROM meta WHERE key='schema'") == [("6",)]


def test_counts_links_and_references_agree(made):
    layout = Layout(FILES, seed=7)
    dirs = len(list(layout.dirs()))
    assert rows(made, "SELECT count(*) FROM inodes") == [(1 + dirs + FILES,)]
    assert rows(made, "SELECT count(*) FROM dentries") == [(dirs + FILES,)]
    assert rows(made, "SELECT count(*) FROM blocks") == [(FILES - FILES // 10,)]
    # Every name leads to an inode, every file to a block, every directory's link count is 2 + its subdirectories.
    assert rows(made, "SELECT count(*) FROM dentries WHERE inode NOT IN (SELECT id FROM inodes)") == [(0,)]
    assert rows(made, "SELECT count(*) FROM contents WHERE block NOT IN (SELECT id FROM blocks)") == [(0,)]
    assert rows(made, "SELECT count(*) FROM inodes i WHERE mode >= 32768 AND id NOT IN (SELECT inode FROM contents)") \
        == [(0,)]
    assert rows(made, "SELECT count(*) FROM inodes i WHERE mode < 32768 AND nlink != 2 + (SELECT count(*) "
                      "FROM dentries d JOIN inodes c ON c.id = d.inode WHERE d.parent = i.id AND c.mode < 32768)") \
        == [(0,)]
    cat = Catalog(made)
    try:
        refs = {i: refs for i, refs in cat.query("SELECT id, refs FROM blocks")}
        assert cat.namespace_refs() == refs
        assert sorted(set(refs.values())) == [1, 2]
    finally:
        cat.close()


def test_blocks_groups_and_stripes_agree(made):
    assert rows(made, "SELECT count(*) FROM blocks WHERE grp != lower(hex(substr(sig, 1, 2))) "
                      "OR length(sig) != 16 OR length(sha256) != 32") == [(0,)]
    assert rows(made, "SELECT count(*) FROM blocks b JOIN groups g USING (grp) WHERE g.disk != b.disk") == [(0,)]
    assert rows(made, "SELECT count(*) FROM blocks WHERE grp NOT IN (SELECT grp FROM groups)") == [(0,)]
    members: dict[bytes, list] = {}
    for stripe, disk, stored in rows(made, "SELECT stripe, disk, stored FROM blocks"):
        members.setdefault(stripe, []).append((disk, stored))
    stripes = rows(made, "SELECT id, parity_disk, size_class, length, state, members, disks FROM stripes")
    assert len(stripes) == len(members) and None not in members
    full = 0
    for sid, parity, cls, length, state, n, mask in stripes:
        mine = members[sid]
        disks = [d for d, _ in mine]
        assert len(set(disks)) == len(disks) == n <= 3 and parity not in disks, hex_of(sid)
        assert mask == (1 << parity) | sum(1 << d for d in disks)
        assert length == max(s for _, s in mine) and {size_class(s) for _, s in mine} == {cls}
        assert state == "ok"
        full += n == 3
    assert full > 0.8 * len(stripes)


def test_layout_paths_names_and_signatures_match_the_rows(made):
    layout = Layout(FILES, seed=7)
    cat = Catalog(made)
    try:
        for k in (0, 9, 9_999, 10_000, 12_345, FILES - 1):
            row = cat.blocks_with_sigs([layout.sig(k)])[layout.sig(k)][0]
            assert row.id == layout.block_id(k)
            if not layout.is_copy(k):
                assert row.size == layout.size_of_block(row.id)
    finally:
        cat.close()


def test_the_operations_answer_right_and_their_plans_use_indexes(made, tmp_path):
    paths = [str(tmp_path / ("catalog-%d.db" % i)) for i in range(2)]
    src = sqlite3.connect(made)
    for p in paths:
        dst = sqlite3.connect(p)
        src.backup(dst)
        dst.close()
    src.close()
    path = paths[0]
    layout = Layout(FILES, seed=7)
    # Two sides, their rounds interleaved: a figure for each, each side's inserts in its own catalog.
    found = measure([(lambda p=p: Catalog(p), layout) for p in paths], seed=3, count=200, inserts=10)
    assert len(found) == 2
    for rates, p in zip(found, paths):
        assert set(rates) == {"lookup", "sig", "insert", "listing"}
        assert all(r["cold"] > 0 and r["warm"] > 0 for r in rates.values())
        assert rows(p, "SELECT count(*) FROM dentries WHERE CAST(name AS TEXT) LIKE 'new-%'") == [(10 * (1 + WARM_ROUNDS),)]
    measure([(lambda: Catalog(path), layout)], seed=3, count=20, inserts=1)      # again: new names, no EEXIST
    assert rows(path, "SELECT count(*) FROM dentries WHERE CAST(name AS TEXT) LIKE 'new-%'") == [(11 * (1 + WARM_ROUNDS),)]
    cat = Catalog(path)
    try:
        found = plans(cat, layout)
    finally:
        cat.close()
    lines = [line for plan in found.values() for line in plan]
    assert any("sqlite_autoindex_blocks_1 (sig=?)" in line for line in lines)
    assert any("dentries_parent (parent=? AND rowid>?)" in line for line in lines)
    # No walk of a whole table or index, but two: the partial index of dirty
    # stripes, and the groups table, which a lone mount reads whole once (at
    # most GROUP_CACHE rows: webfs/cataloggroups.py) instead of a row per new block;
    # path_of's walk up scans only its own rows (up, own), each found by dentries_inode.
    assert "SCAN stripes USING COVERING INDEX stripes_dirty" in lines     # schema 6: it holds the id
    assert "SEARCH d USING INDEX dentries_inode (inode=?)" in lines
    assert not [line for line in lines if line.startswith("SCAN") and "stripes_dirty" not in line
                and line not in ("SCAN groups", "SCAN up", "SCAN own")], found
    # Nothing the plans traced (an insert) was kept.
    assert rows(path, "SELECT count(*) FROM dentries WHERE name = CAST('plan.html' AS BLOB)") == [(0,)]


def test_a_wrong_answer_is_told(made, tmp_path):
    with pytest.raises(WrongAnswer, match="signature of file"):
        measure([(lambda: Catalog(made), Layout(FILES, seed=8))], count=5, inserts=0)
    with pytest.raises(WrongAnswer, match="is not inode|no b'"):
        measure([(lambda: Catalog(made), Layout(FILES + 100, seed=7))], count=50, inserts=0)


def test_a_catalog_with_files_is_not_filled(made, tmp_path):
    cat = Catalog(made)
    try:
        with pytest.raises(ValueError, match="not an empty catalog"):
            load_sqlite(cat, Layout(10))
    finally:
        cat.close()
    out = subprocess.run([sys.executable, os.path.join(REPO, "tools", "catalog_gen.py"), "--files", "10", made],
                         capture_output=True, text=True)
    assert out.returncode == 2 and "exists" in out.stderr


def test_a_path_is_found_in_one_statement(made):
    # path_of walks up to the root in one recursive query (a round trip with
    # PostgreSQL), not a statement per level: at 1 M files new files in random
    # directories asked 2 a file, at 100,000 files 0.9 (their parents' paths kept).
    layout = Layout(FILES, seed=7)
    cat = Catalog(made)
    try:
        for k in (12_345, FILES - 1, 3):
            ns = Namespace(None, catalog=cat)
            seen: list[str] = []
            cat.db.set_trace_callback(seen.append)
            try:
                assert ns.path_of(layout.file_ino(k)) == layout.path(k)
            finally:
                cat.db.set_trace_callback(None)
            assert len(seen) == 1, seen
            assert ns.path_of(layout.file_parent(k)) == layout.path(k).rsplit(b"/", 1)[0]     # kept
        assert Namespace(None, catalog=cat).path_of(10 ** 9) == b""
    finally:
        cat.close()
