"""Heat tracking and disk cooling on an archive in temporary directories: heat
kept in the catalog, and the cooling procedure moving groups between disks.
The estimator and the planner alone are in t1_cooling; a real mount read with
a skewed (Zipf) workload and cooled while it is read is in t4_cooling."""
from __future__ import annotations

import itertools
import random

import pytest

from conftest import make_archive, webfs_here
from webfs.figures import archive_figures
from webfs.assembly import open_archive
from webfs import admin
from webfs.admincommands import ADMIN_COMMANDS
from webfs.assembly import OpenArchive
from webfs.heat import HeatTracker


def test_heat_is_kept_in_memory_and_survives_a_reopen(disks):
    store = open_archive(str(disks[0]), holder="test")
    now = [1000.0]
    store.heat = HeatTracker(store.catalog, k=5, clock=lambda: now[0])
    rows = [store.store(f"page {i}".encode() * 50, pin=True) for i in range(4)]
    store.commit()
    for _ in range(8):                                       # 10 reads/s
        store.read(rows[0])
        now[0] += 0.1
    for _ in range(2):                                       # 1 read/s
        store.read(rows[1])
        now[0] += 1
    hot, warm = store.heat.heat(rows[0].grp), store.heat.heat(rows[1].grp)
    assert hot > warm > 0 and store.heat.heat(rows[2].grp) == 0
    assert store.heat.reads(rows[0].grp) == 5                # only the last k are kept
    store.sync()
    store.close()
    store = open_archive(str(disks[0]), holder="test")
    try:
        assert store.heat.reads(rows[0].grp) == 5 and store.heat.reads(rows[1].grp) == 2
        assert store.heat.heat(rows[0].grp) > store.heat.heat(rows[1].grp) > 0
        heat, accesses = store.catalog.query("SELECT heat, accesses FROM groups WHERE grp=?",
                                             (rows[0].grp,))[0]
        assert heat > 0 and len(accesses.split()) == 5
    finally:
        store.close()


def test_cooling_moves_groups_and_keeps_every_block_readable(disks):
    store = open_archive(str(disks[0]), holder="test")
    try:
        rng = random.Random(4)
        rows = [store.store(rng.randbytes(rng.randint(500, 4000)), pin=True) for _ in range(300)]
        store.commit()
        ranked = rows[:]
        rng.shuffle(ranked)
        for row in rng.choices(ranked, cum_weights=list(itertools.accumulate(
                1 / (i + 1) for i in range(len(ranked)))), k=4000):
            store.read(row)
        res = ADMIN_COMMANDS["cool"](OpenArchive(store), admin.Progress(), delta=0.1)
        f = res.figures
        assert f["moves"] and f["bytes_moved"] > 0
        assert f["ratio_after"] < f["ratio_before"]
        assert res.lines[-1].startswith(f"{len(f['moves'])} group(s) moved")
        for m in f["moves"]:
            assert {r.disk for r in store.catalog.blocks("grp=?", (m["group"],))} == {m["to"]}
            assert store.catalog.group_disk(m["group"]) == m["to"]
        for row in rows:
            store.read(store.catalog.block_by_id(row.id))
        status = archive_figures(store)["protection"]
        assert status["dirty_stripes"] == 0 and status["unprotected_blocks"] == 0
    finally:
        store.close()


def test_cool_and_heat_on_an_unmounted_archive(tmp_path):
    paths = make_archive(tmp_path)
    out = webfs_here("heat", paths[0]).stdout.decode()
    assert "disk 3:" in out
    out = webfs_here("cool", "--dry-run", paths[0]).stdout.decode()
    assert "stopped: no reads have reached the disks yet" in out


def test_heat_ages_on_the_clock_of_reads_so_a_quiet_spell_keeps_the_ranking(disks):
    """Heats asked for after the reads stopped compare as they did while the
    reads came: a hot group's short window is not aged more by the silence
    than a cool group's long one (cooling would stop before the hot disk is cool)."""
    store = open_archive(str(disks[0]), holder="test")
    try:
        now = [1000.0]
        store.heat = HeatTracker(store.catalog, k=20, clock=lambda: now[0])
        rows = [store.store(f"page {i}".encode() * 50, pin=True) for i in range(2)]
        store.commit()
        for i in range(80):                                  # 10 reads/s and 0.5 read/s, for 8 s
            store.read(rows[0])
            if i % 20 == 0:
                store.read(rows[1])
            now[0] += 0.1
        while_reading = store.heat.heat(rows[0].grp) / store.heat.heat(rows[1].grp)
        now[0] += 5.0                                        # a quiet spell, then the survey
        assert store.heat.heat(rows[0].grp) / store.heat.heat(rows[1].grp) == pytest.approx(while_reading)
        assert store.heat.heat(rows[0].grp) == pytest.approx(10.0, rel=0.1)
        # A group that goes cold while another is read still ages.
        for _ in range(50):
            store.read(rows[0])
            now[0] += 0.1
        assert store.heat.heat(rows[1].grp) < 0.5 * 0.7
    finally:
        store.close()


def test_heat_shows_the_pages_of_hot_groups_by_their_blocks_name_hints(disks):
    """The catalog keeps no Name: hints (schema 5): webfs heat reads them from
    the blocks' headers; a block without one is shown by its signature."""
    from webfs.commands.cooling import heat
    store = open_archive(str(disks[0]), holder="test")
    try:
        now = [1000.0]
        store.heat = HeatTracker(store.catalog, k=5, clock=lambda: now[0])
        named = store.store(b"<html>a hot page</html>" * 50, name=b"/crawl/hot page.html", pin=True)
        nameless = store.store(b"<html>no name</html>" * 50, pin=True)
        store.commit()
        for _ in range(5):
            store.read(named)
            store.read(nameless)
            now[0] += 0.1
        groups = {g["group"]: g["pages"] for g in heat(store, admin.Progress(), top=100).figures["groups"]}
        assert "/crawl/hot page.html" in groups[named.grp]
        assert nameless.sig in groups[nameless.grp]
    finally:
        store.close()
