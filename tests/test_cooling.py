"""Heat tracking and disk cooling: the estimator, the procedure, and a real
mount read with a skewed (Zipf) workload and cooled while it is read."""
from __future__ import annotations

import itertools
import json
import os
import random
import threading
from pathlib import Path
from typing import Optional

import pytest

from conftest import Mounted, make_archive, sh, webfs
from webfs.assembly import open_archive
from webfs import admin
from webfs.operations import OPERATIONS
from webfs.commands.cooling import Group, Survey, apply, next_step
from webfs.heat import HeatTracker, estimate


# -- the estimator -----------------------------------------------------------------

def test_heat_is_the_read_rate_over_the_last_k_reads():
    times = [10.0 + 0.5 * i for i in range(30)]            # 2 reads per second
    k = 20
    assert estimate(times[-k:], k, now=times[-1]) == pytest.approx(2.0)
    # Fewer reads than k: the same rate from the ones there are (a group read
    # five times is not hotter than one read twenty times at the same pace);
    # a single read gives no rate.
    assert estimate(times[:5], k, now=times[4]) == pytest.approx(2.0)
    assert estimate(times[:2], k, now=times[1]) == pytest.approx(2.0)
    assert estimate(times[:1], k, now=100.0) == 0.0


def test_a_group_that_goes_cold_loses_heat():
    k = 20
    times = [float(i) for i in range(k)]                     # 1 read/s, then nothing
    hot = estimate(times, k, now=times[-1])
    later = [estimate(times, k, now=times[-1] + idle) for idle in (1, 10, 100, 1000)]
    assert later == sorted(later, reverse=True) and later[0] <= hot
    assert later[-1] < hot / 40                              # about k / idle time
    # A pseudo-request only ever lowers the estimate.
    burst = [0.0, 0.001, 0.002]
    assert estimate(burst, k, now=0.002) <= 3 / 0.002


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


# -- the procedure -----------------------------------------------------------------

def _survey(groups: list[tuple[str, int, float, int]], disks=(0, 1, 2, 3)) -> Survey:
    gs = [Group(g, d, h, size, 1) for g, d, h, size in groups]
    heat = {d: 0.0 for d in disks}
    for g in gs:
        heat[g.disk] += g.heat
    return Survey(gs, heat)


def everywhere(disk, nbytes):
    return True


def test_a_balanced_archive_is_left_alone():
    sv = _survey([("a", 0, 10, 100), ("b", 1, 10, 100), ("c", 2, 11, 100), ("d", 3, 9, 100)])
    step, why = next_step(sv, 0.2, everywhere)
    assert step is None and why.startswith("balanced")


def test_the_hottest_temperature_goes_to_the_coolest_disk():
    sv = _survey([("big", 0, 20, 10000), ("small", 0, 15, 100), ("x", 1, 10, 100),
                  ("y", 2, 5, 100), ("z", 3, 8, 100)])
    step, _ = next_step(sv, 0.1, everywhere)
    assert (step.group.grp, step.target) == ("small", 2)     # most heat per byte, coolest disk
    apply(sv, step)
    assert sv.disk_heat == {0: 20, 1: 10, 2: 20, 3: 8}


def test_a_move_that_would_make_the_target_hotter_than_the_source_is_skipped():
    # One group holds nearly all the heat: wherever it goes becomes the hot disk.
    sv = _survey([("hot", 0, 100, 100), ("warm", 0, 2, 100), ("x", 1, 5, 100), ("y", 2, 6, 100),
                  ("z", 3, 7, 100)])
    step, _ = next_step(sv, 0.1, everywhere)
    assert step.group.grp == "warm"                          # "hot" fails the cost test
    apply(sv, step)
    step, why = next_step(sv, 0.1, everywhere)
    assert step is None and "no migration candidate" in why


def test_a_disk_without_room_is_passed_over():
    sv = _survey([("a", 0, 20, 100), ("b", 0, 10, 1000), ("x", 1, 1, 100), ("y", 2, 5, 100),
                  ("z", 3, 6, 100)])
    step, _ = next_step(sv, 0.1, lambda disk, nbytes: disk != 1)
    assert step.target == 2


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
        res = OPERATIONS["cool"](store, admin.Progress(), delta=0.1)
        f = res.figures
        assert f["moves"] and f["bytes_moved"] > 0
        assert f["ratio_after"] < f["ratio_before"]
        assert res.lines[-1].startswith(f"{len(f['moves'])} group(s) moved")
        for m in f["moves"]:
            assert {r.disk for r in store.catalog.blocks("grp=?", (m["group"],))} == {m["to"]}
            assert store.catalog.group_disk(m["group"]) == m["to"]
        for row in rows:
            store.read(store.catalog.block_by_id(row.id))
        status = store.status()["protection"]
        assert status["dirty_stripes"] == 0 and status["unprotected_blocks"] == 0
    finally:
        store.close()


# -- through a mount -----------------------------------------------------------------

class ZipfReader(threading.Thread):
    """Reads files under a mount in a Zipf mix until stopped, each whole and
    past the kernel's page cache (posix_fadvise DONTNEED after reading), and
    checks every byte against the source tree. Popularity ranks are shuffled;
    with ``hot_disk``, the files on that disk take the top ranks, so that
    disk gets most of the reads (placement itself is random: disk uuids are)."""

    def __init__(self, mnt: Path, src: Path, seed: int = 1, s: float = 1.0, hot_disk: Optional[int] = None):
        super().__init__(daemon=True)
        rels = sorted(str(p.relative_to(src)) for p in src.rglob("*") if p.is_file())
        rng = random.Random(seed)
        rng.shuffle(rels)
        if hot_disk is not None:
            rels.sort(key=lambda rel: str(hot_disk).encode() not in
                      os.getxattr(mnt / rel, "user.webfs.disk").split(b","))
        self.rels, self.mnt, self.src, self.rng = rels, mnt, src, rng
        self.cum = list(itertools.accumulate(1 / (i + 1) ** s for i in range(len(rels))))
        self.expected: dict[str, bytes] = {}
        self.reads = 0
        self.errors: list[str] = []
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.is_set():
            rel = self.rng.choices(self.rels, cum_weights=self.cum)[0]
            try:
                fd = os.open(self.mnt / rel, os.O_RDONLY)
                try:
                    data = b"".join(iter(lambda: os.read(fd, 1 << 20), b""))
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                finally:
                    os.close(fd)
            except OSError as exc:
                self.errors.append(f"{rel}: {exc}")
                continue
            if rel not in self.expected:
                self.expected[rel] = (self.src / rel).read_bytes()
            if data != self.expected[rel]:
                self.errors.append(f"{rel}: wrong bytes")
            self.reads += 1

    def wait_for(self, reads: int) -> None:
        while self.reads < reads and self.is_alive() and not self.errors:
            self.halt.wait(0.05)

    def stop(self) -> None:
        self.halt.set()
        self.join()


def start_reading(m: Mounted, corpus: Path, **kwargs) -> tuple[Path, ZipfReader]:
    """Copy a crawl into the mount and start a ZipfReader on it."""
    src = corpus / "crawl-001"
    sh(f"cp -a '{src}' '{m.mnt}/crawl-001'")
    reader = ZipfReader(m.mnt / "crawl-001", src, **kwargs)
    reader.start()
    return src, reader


def _json(*args) -> dict:
    return json.loads(webfs(*args, "--json").stdout)


def test_zipf_reads_through_a_mount_are_cooled_while_they_go_on(tmp_path, corpus):
    # piece_cache=0: every read the kernel passes on reaches a disk, as on a
    # mount whose cache is small beside its working set.
    m = Mounted(tmp_path, options="piece_cache=0")
    try:
        src, reader = start_reading(m, corpus, seed=3, hot_disk=1)
        reader.wait_for(3000)
        before = _json("heat", m.mnt)["figures"]
        cooled = _json("cool", "--delta", "0.1", m.mnt)["figures"]
        reader.wait_for(reader.reads + 1000)
        after = _json("heat", m.mnt)["figures"]
        reader.stop()
        assert reader.errors == []
        assert before["ratio"] > 1.1 and cooled["ratio_before"] > 1.1
        assert cooled["moves"] and cooled["bytes_moved"] > 0
        assert cooled["ratio_after"] < 1.1 < cooled["ratio_before"], cooled["reason"]
        assert cooled["reason"].startswith("balanced")
        moved = {mv["group"]: mv["to"] for mv in cooled["moves"]}
        shown = {g["group"]: g["disk"] for g in after["groups"]}
        assert all(moved[g] == d for g, d in shown.items() if g in moved)
        for grp, disk in moved.items():
            blocks = list((m.disks[disk] / "blocks").glob(f"{grp[:2]}/{grp[2:]}/*"))
            others = [p for d in m.disks if d != m.disks[disk]
                      for p in (d / "blocks").glob(f"{grp[:2]}/{grp[2:]}/*")]
            assert blocks and not others
        sh(f"diff -r '{src}' '{m.mnt}/crawl-001'")
        # Heat survives a remount.
        m.remount()
        again = _json("heat", m.mnt)["figures"]
        assert again["groups"] and again["mean"] > 0
        sh(f"diff -r '{src}' '{m.mnt}/crawl-001'")
    finally:
        m.umount()
    assert webfs("fsck", m.disks[0], check=False).returncode == 0


def test_cool_interval_cools_in_the_background(tmp_path, corpus):
    m = Mounted(tmp_path, options="piece_cache=0,cool_interval=0.2")
    try:
        _, reader = start_reading(m, corpus, seed=3, hot_disk=2)
        reader.wait_for(6000)
        reader.stop()
        assert reader.errors == []
        log = (m.disks[0] / "meta" / "webfs.log").read_text()
        assert "cooling: moved group" in log
        dry = _json("cool", "--dry-run", m.mnt)["figures"]
        assert dry["dry_run"]
    finally:
        m.umount()
    assert webfs("fsck", m.disks[0], check=False).returncode == 0


def test_cool_and_heat_on_an_unmounted_archive(tmp_path):
    paths = make_archive(tmp_path)
    out = webfs("heat", paths[0]).stdout.decode()
    assert "disk 3:" in out
    out = webfs("cool", "--dry-run", paths[0]).stdout.decode()
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
