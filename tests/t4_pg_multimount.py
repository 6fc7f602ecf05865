"""Several machines mount one archive whose catalog is in PostgreSQL (a real
server, tests/postgres.py): two state directories and two mount points
stand for two machines, the disks are the same local directories. Each
mount holds a row in the catalog's ``mounts`` table (webfs.machines)."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path

import pytest

from conftest import REPO, sh, unmount, webfs

# Seconds between renewals of a mount's row: take-over after 3 s. Not less: under
# a loaded machine's cp -r, 0.3 s periods let a busy mount's row go stale.
RENEW = 1.0


class Machine:
    """One machine's mount of the archive: its own state directory and mount point."""

    def __init__(self, root: Path, name: str, disk: Path):
        self.name = name
        self.disk = disk
        self.state = root / f"state-{name}"
        self.mnt = root / f"mnt-{name}"
        self.mnt.mkdir()
        self.env = dict(os.environ, WEBFS_STATE_DIR=str(self.state))

    def mount(self) -> None:
        webfs("mount", "-o", f"machine_renew={RENEW}", self.disk, self.mnt, env=self.env)

    def umount(self) -> None:
        unmount(self.mnt)

    def pid(self) -> int:
        return int(os.getxattr(self.mnt, "user.webfs.pid"))


@pytest.fixture(scope="module")
def crawls(tmp_path_factory) -> Path:
    """Two small crawls (tools/make-corpus): a few hundred files each, no
    document in both (two machines storing one document at once is not
    handled yet: webfs-internals(7), SEVERAL MOUNTS OF ONE ARCHIVE)."""
    out = tmp_path_factory.mktemp("crawls") / "crawls"
    subprocess.run([sys.executable, str(REPO / "tools" / "make-corpus"), "--seed", "11", "--pages", "150",
                    "--crawls", "2", str(out)], check=True, capture_output=True)
    for path in (out / "crawl-002").rglob("*"):
        if path.is_file():
            with open(path, "ab") as f:
                f.write(b"<!-- crawl 2 -->")
    return out


@pytest.fixture
def machines(tmp_path, pg_catalog):
    disks = [tmp_path / f"disk{i}" for i in range(4)]
    webfs("mkfs", "--catalog", pg_catalog, *disks)
    pair = [Machine(tmp_path, name, disks[i]) for i, name in enumerate("ab")]
    for m in pair:
        m.mount()
    yield pair
    for m in pair:
        m.umount()


def database(pg_catalog: str) -> str:
    return urllib.parse.urlsplit(pg_catalog).path.strip("/")


def poll(what, deadline: float, step: float = 0.02):
    """``what()`` until it is true, at most ``deadline`` seconds: its last value."""
    end = time.monotonic() + deadline
    while True:
        got = what()
        if got or time.monotonic() > end:
            return got
        time.sleep(step)


def mounted_machines(postgres, pg_catalog) -> list[str]:
    return postgres.psql(database(pg_catalog), "SELECT host FROM mounts ORDER BY started").split()


def test_two_machines_copy_at_once_and_each_reads_back_both(machines, crawls, postgres, pg_catalog):
    a, b = machines
    assert len(mounted_machines(postgres, pg_catalog)) == 2
    copies = [subprocess.Popen(["cp", "-r", str(crawls / crawl), str(m.mnt / m.name)])
              for m, crawl in ((a, "crawl-001"), (b, "crawl-002"))]
    assert [c.wait() for c in copies] == [0, 0]
    for m in machines:
        sh(f"diff -r '{crawls}/crawl-001' '{m.mnt}/a'")
        sh(f"diff -r '{crawls}/crawl-002' '{m.mnt}/b'")
    for m in machines:
        m.umount()
    assert mounted_machines(postgres, pg_catalog) == []
    assert webfs("fsck", a.disk).returncode == 0


def test_a_killed_machine_is_taken_over_and_a_cut_off_one_writes_nothing(machines, postgres, pg_catalog):
    a, b = machines
    db = database(pg_catalog)
    (a.mnt / "from-a").write_bytes(b"a" * 5000)
    os.kill(a.pid(), signal.SIGKILL)
    subprocess.run(["fusermount3", "-uz", str(a.mnt)], check=False)
    shutil.rmtree(a.state)          # the machine is gone for good: a closed file is in the engine already
    # b's renewals find a's row stale (3 periods without renewal) and delete it.
    assert poll(lambda: postgres.psql(db, "SELECT count(*) FROM mounts").strip() == "1", 10.0)
    (b.mnt / "from-b").write_bytes(b"b" * 5000)
    assert (b.mnt / "from-a").read_bytes() == b"a" * 5000
    # b is cut off: its row taken (as another machine would after b stopped renewing).
    postgres.psql(db, "UPDATE mounts SET token = token + 1000")
    with pytest.raises(OSError):
        with open(b.mnt / "after-the-cut", "wb") as f:
            f.write(b"c" * 5000)
            f.flush()
            os.fsync(f.fileno())
    # Both daemons log to the first disk's meta/webfs.log.
    assert poll(lambda: b"read-only from now on" in (a.disk / "meta" / "webfs.log").read_bytes(), 10.0)
    b.umount()
    names = postgres.psql(db, "SELECT convert_from(name, 'UTF8') FROM dentries WHERE parent = 1").split()
    assert "from-b" in names and "after-the-cut" not in names
    assert webfs("fsck", a.disk).returncode == 0


def test_the_same_machine_cannot_mount_twice(machines, tmp_path):
    a, _ = machines
    other = tmp_path / "mnt-a2"
    other.mkdir()
    out = webfs("mount", a.disk, other, env=a.env, check=False)
    assert out.returncode != 0 and b"mounted from this machine already" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


def test_an_sqlite_archive_still_refuses_a_second_mount(tmp_path):
    disks = [tmp_path / f"disk{i}" for i in range(3)]
    webfs("mkfs", *disks)
    first, second = tmp_path / "m1", tmp_path / "m2"
    first.mkdir(), second.mkdir()
    webfs("mount", disks[0], first)
    try:
        out = webfs("mount", disks[0], second, env=dict(os.environ, WEBFS_STATE_DIR=str(tmp_path / "s2")),
                    check=False)
        assert out.returncode != 0 and b"in use" in out.stderr
    finally:
        webfs("umount", first)


def test_names_and_contents_made_on_one_show_on_the_other_within_a_second(machines):
    """B has looked the names up (misses the kernel keeps) and read the file
    (pages and attributes the kernel keeps): A's changes reach it anyway."""
    a, b = machines
    (a.mnt / "d").mkdir()
    (a.mnt / "d" / "f").write_bytes(b"first" * 100)
    assert poll(lambda: (b.mnt / "d" / "f").exists(), 2.0)
    delays = []
    for i in range(5):
        name = f"new-{i}"
        assert not (b.mnt / "d" / name).exists() and name not in os.listdir(b.mnt / "d")
        assert (b.mnt / "d" / "f").read_bytes() == (b"first" if i == 0 else b"v%d" % (i - 1)) * 100
        start = time.monotonic()
        (a.mnt / "d" / name).write_bytes(b"x")
        (a.mnt / "d" / "f").write_bytes(b"v%d" % i * 100)          # closed: whole on B
        assert poll(lambda: name in os.listdir(b.mnt / "d") and (b.mnt / "d" / name).exists(), 1.0)
        assert poll(lambda: (b.mnt / "d" / "f").read_bytes() == b"v%d" % i * 100, 1.0)
        delays.append(time.monotonic() - start)
    print(f"a name and a new content made on one machine seen on the other after "
          f"{', '.join(f'{d * 1000:.0f}' for d in delays)} ms")
    os.rename(a.mnt / "d" / "new-0", a.mnt / "d" / "renamed")
    assert poll(lambda: (b.mnt / "d" / "renamed").exists() and not (b.mnt / "d" / "new-0").exists(), 1.0)
    os.unlink(b.mnt / "d" / "renamed")
    assert poll(lambda: not (a.mnt / "d" / "renamed").exists(), 1.0)
