"""Adding, rebalancing and removing disks: offline, online under readers and
writers (killed with SIGKILL halfway: t5_rebalance)."""
from __future__ import annotations

import json
import random
import threading
from pathlib import Path

from conftest import Mounted, sh, webfs
from t4_cooling import start_reading


def _json(*args) -> dict:
    return json.loads(webfs(*args, "--json").stdout)


def _files(disk: Path, sub: str = "blocks") -> list[Path]:
    return [p for p in (disk / sub).rglob("*") if p.is_file()] if (disk / sub).exists() else []


def assert_clean_and_identical(m: Mounted, corpus: Path) -> None:
    """fsck finds nothing, parity is whole, and the crawls read back identical."""
    check = webfs("fsck", m.disks[0], check=False)
    assert check.returncode == 0, check.stdout.decode()
    st = json.loads(webfs("status", "--json", m.disks[0]).stdout)
    assert st["protection"]["dirty_stripes"] == 0 and st["protection"]["unprotected_blocks"] == 0
    m.mount()
    try:
        for crawl in ("crawl-001", "crawl-002"):
            sh(f"diff -r '{corpus}/{crawl}' '{m.mnt}/{crawl}'")
    finally:
        m.umount()


def filled(tmp_path, corpus) -> Mounted:
    """An unmounted 4-disk archive holding both crawls (webfs import into
    DISK:/ stores them as cp -a into the mount would, without FUSE)."""
    m = Mounted(tmp_path, mount=False)
    webfs("import", corpus / "crawl-001", corpus / "crawl-002", f"{m.disks[0]}:/")
    return m


def test_add_disk_then_rebalance_moves_one_group_in_c_plus_one(tmp_path, corpus):
    m = filled(tmp_path, corpus)
    new = tmp_path / "disk4"
    out = webfs("add-disk", new, m.disks[0]).stdout.decode()
    assert "added disk 4" in out and (new / "WEBFS-DISK").exists()
    for d in m.disks + [new]:
        assert "[disk 4]" in (d / "webfs.conf").read_text()
    dry = _json("rebalance", "--dry-run", m.disks[0])["figures"]
    assert _files(new) == []
    f = _json("rebalance", m.disks[0])["figures"]
    assert f["groups_total"] > 2000
    assert f["groups_moved"] == dry["groups_moved"]
    # Rendezvous hashing: one disk of five takes a fifth of the groups, from every other disk.
    assert 0.16 < f["fraction"] < 0.24, f
    assert {mv["to"] for mv in f["moves"]} == {4} and {mv["from"] for mv in f["moves"]} == {0, 1, 2, 3}
    assert len(_files(new)) >= f["groups_moved"]
    again = _json("rebalance", m.disks[0])["figures"]
    assert again["groups_moved"] == 0
    assert_clean_and_identical(m, corpus)


def test_remove_disk_leaves_nothing_on_it(tmp_path, small_corpus):
    # The smaller crawls (about 500 files each, through FUSE twice): a disk
    # left holding any block, or taking any new one, shows among a few
    # hundred groups as among a few thousand.
    corpus = small_corpus
    m = Mounted(tmp_path)
    try:
        sh(f"cp -a '{corpus}/crawl-001' '{m.mnt}/'")
        f = _json("remove-disk", "2", m.mnt)["figures"]
        assert f["groups_moved"] > 0 and f["blocks_left"] == 0
        assert _files(m.disks[2]) == [] and _files(m.disks[2], "parity") == []
        assert not (m.disks[2] / "WEBFS-DISK").exists() and (m.disks[2] / "WEBFS-DISK.removed").exists()
        st = json.loads(webfs("status", "--json", m.mnt).stdout)
        assert [d["index"] for d in st["disks"]] == [0, 1, 3]
        assert st["protection"]["dirty_stripes"] == 0 and st["protection"]["unprotected_blocks"] == 0
        sh(f"diff -r '{corpus}/crawl-001' '{m.mnt}/crawl-001'")
        # New files go to the disks that are left.
        sh(f"cp -a '{corpus}/crawl-002' '{m.mnt}/'")
        assert _files(m.disks[2]) == []
        m.remount()
        sh(f"diff -r '{corpus}/crawl-002' '{m.mnt}/crawl-002'")
    finally:
        m.umount()
    assert webfs("fsck", m.disks[0], check=False).returncode == 0
    for d in (m.disks[0], m.disks[1], m.disks[3]):
        assert "[disk 2]" not in (d / "webfs.conf").read_text()


class Writer(threading.Thread):
    """Writes new files through the mount and reads each back at once."""

    def __init__(self, mnt: Path):
        super().__init__(daemon=True)
        self.dir = mnt / "written"
        self.dir.mkdir()
        self.rng = random.Random(11)
        self.written: dict[str, bytes] = {}
        self.errors: list[str] = []
        self.halt = threading.Event()

    def run(self) -> None:
        i = 0
        while not self.halt.is_set():
            name = f"page-{i}.html"
            data = self.rng.randbytes(self.rng.randint(100, 40000))
            try:
                (self.dir / name).write_bytes(data)
                if (self.dir / name).read_bytes() != data:
                    self.errors.append(f"{name}: wrong bytes")
            except OSError as exc:
                self.errors.append(f"{name}: {exc}")
            self.written[name] = data
            i += 1

    def stop(self) -> None:
        self.halt.set()
        self.join()


def test_add_disk_and_rebalance_online_while_others_read_and_write(tmp_path, corpus):
    m = Mounted(tmp_path, options="piece_cache=0")
    try:
        src, reader = start_reading(m, corpus, seed=5)
        writer = Writer(m.mnt)
        writer.start()
        new = tmp_path / "disk4"
        webfs("add-disk", "--weight", "2", new, m.mnt)
        f = _json("rebalance", m.mnt)["figures"]
        assert 0.22 < f["fraction"] < 0.45, f             # weight 2 of 6: a third
        f = _json("remove-disk", "1", m.mnt)["figures"]
        assert f["blocks_left"] == 0
        reader.wait_for(reader.reads + 200)
        reader.stop()
        writer.stop()
        assert reader.errors == [] and writer.errors == []
        assert reader.reads > 0 and len(writer.written) > 0
        assert _files(m.disks[1]) == [] and len(_files(new)) > 0
        sh(f"diff -r '{src}' '{m.mnt}/crawl-001'")
        m.remount()
        for name, data in writer.written.items():
            assert (m.mnt / "written" / name).read_bytes() == data
    finally:
        m.umount()
    assert webfs("fsck", m.disks[0], check=False).returncode == 0


def test_add_disk_refuses_a_directory_in_use(tmp_path):
    m = Mounted(tmp_path)
    try:
        busy = tmp_path / "busy"
        busy.mkdir()
        (busy / "notes.txt").write_text("mine")
        out = webfs("add-disk", busy, m.mnt, check=False)
        assert out.returncode == 1 and b"not empty" in out.stderr
        out = webfs("add-disk", m.disks[1], m.mnt, check=False)
        assert out.returncode == 1 and b"disk 1 of this archive already" in out.stderr
        out = webfs("remove-disk", "0", m.mnt, check=False)
        assert out.returncode == 1 and b"holds the catalog" in out.stderr
        # Given a disk of a mounted archive (not its mount point), it refuses.
        out = webfs("rebalance", m.disks[0], check=False)
        assert out.returncode == 1 and b"in use" in out.stderr
    finally:
        m.umount()
