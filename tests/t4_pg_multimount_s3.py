"""Several machines mount one archive whose catalog is in PostgreSQL (a real
server, tests/postgres.py) and whose disks are SeaweedFS buckets (the
session's servers, tests/seaweed.py): two state directories and two mount
points stand for two machines. Each holds a shared lease of its own in every
bucket (webfs.locks), writes its blocks through to the bucket (nothing
staged that dies with it) and copies its records below its own name."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time

import pytest

from conftest import REPO, eventually, sh, wait_dead, webfs
from t4_pg_multimount import Machine, crawls, database, mounted_machines, poll  # noqa: F401 - crawls: a fixture
from t4_s3_mount import bucket_on_each
from webfs.backends.options import BackendOptions
from webfs.backends.s3 import STAGING, DiskURL, state_dir


def objects(weed, url: str, prefix: str) -> list[str]:
    """The names of a bucket's objects below a prefix."""
    listed = weed.client().list_objects_v2(Bucket=DiskURL.parse(url).bucket, Prefix=prefix)
    return sorted(item["Key"] for item in listed.get("Contents", []))


def staged_by(machine: Machine, disks: list[str]) -> list[str]:
    """What waits in a machine's staging directories to be uploaded."""
    found = []
    for url in disks:
        top = os.path.join(state_dir(DiskURL.parse(url), BackendOptions(state_dir=str(machine.state))), STAGING)
        found += [os.path.join(d, n) for d, _, names in os.walk(top) for n in names]
    return found


@pytest.fixture
def s3_machines(tmp_path, weeds, pg_catalog):
    disks = bucket_on_each(weeds, "mm")
    webfs("mkfs", "--catalog", pg_catalog, *disks)
    pair = [Machine(tmp_path, name, disks[i]) for i, name in enumerate("ab")]
    for m in pair:
        m.mount()
    yield pair, disks
    for m in pair:
        m.umount()


def test_two_machines_on_s3_disks_copy_at_once_and_each_reads_back_both(s3_machines, weeds, crawls, tmp_path,
                                                                       postgres, pg_catalog):
    """Each copies a crawl into a directory of its own and files of its own
    into one directory both write; a name made on one shows on the other
    within a second; an exclusive writer is refused while they are mounted;
    each machine's records are in the buckets under its own name."""
    (a, b), disks = s3_machines
    assert len(mounted_machines(postgres, pg_catalog)) == 2
    ids = sorted((m.state / "machine-id").read_text().strip() for m in (a, b))
    assert objects(weeds[0], disks[0], "meta/machines/") == [f"meta/machines/{i}/MOUNTED" for i in ids]
    assert objects(weeds[0], disks[0], "meta/MOUNTED") == []
    (a.mnt / "both").mkdir()
    start = time.monotonic()
    assert poll(lambda: (b.mnt / "both").is_dir(), 1.0), f"not seen after {time.monotonic() - start:.2f} s"
    copies = [subprocess.Popen(["cp", "-r", str(crawls / crawl), str(m.mnt / m.name)])
              for m, crawl in ((a, "crawl-001"), (b, "crawl-002"))]
    copies += [subprocess.Popen(f"cp '{crawls}'/flat-{m.name}/* '{m.mnt}/both/'", shell=True) for m in (a, b)]
    assert [c.wait() for c in copies] == [0] * 4
    busy = webfs("fsck", "--repair", disks[1], check=False)
    assert busy.returncode != 0 and b"in use by" in busy.stderr, busy.stderr
    for m in (a, b):
        sh(f"diff -r '{crawls}/crawl-001' '{m.mnt}/a'")
        sh(f"diff -r '{crawls}/crawl-002' '{m.mnt}/b'")
        assert sorted(os.listdir(m.mnt / "both")) == sorted(os.listdir(crawls / "flat-a") + os.listdir(crawls / "flat-b"))
        for name in ("a", "b"):
            sh(f"cd '{crawls}/flat-{name}' && for f in *; do cmp \"$f\" '{m.mnt}/both'/\"$f\"; done")
    for m in (a, b):
        webfs("umount", m.mnt)  # checked: a clean unmount says nothing went wrong
    assert mounted_machines(postgres, pg_catalog) == []
    records = objects(weeds[0], disks[0], "meta/machines/")
    for machine in ids:
        assert f"meta/machines/{machine}/JOURNAL" in records, records
    assert not [r for r in records if r.endswith("/MOUNTED")], records
    assert webfs("fsck", disks[0]).returncode == 0
    # Buckets copied to directories are disks webfs-recover reads, records and all, without webfs.
    copies = [w.download(DiskURL.parse(url).bucket, tmp_path / f"copy{i}") for i, (w, url) in enumerate(zip(weeds, disks))]
    out = tmp_path / "recovered"
    proc = sh(f"sh '{REPO}/tools/webfs-recover' {' '.join(map(str, copies))} '{out}'", check=False)
    assert proc.returncode == 0 and b"/meta/machines/" in proc.stderr, proc.stdout + proc.stderr
    sh(f"diff -r '{crawls}/crawl-001' '{out}/a' && diff -r '{crawls}/crawl-002' '{out}/b'")
    sh(f"diff -r '{crawls}/flat-a' '{out}/both' | grep -v '^Only in {out}/both: b-' | (! grep .)")


def test_a_killed_machine_on_s3_disks_loses_no_closed_file(s3_machines, weeds, crawls, postgres, pg_catalog):
    """kill -9 of one machine right after its copy returned, and its state
    directory deleted (the machine is gone): nothing of it was staged, the
    other takes over its stripes and its leases within 10 s, every file it
    closed reads back, and fsck is clean."""
    (a, b), disks = s3_machines
    db = database(pg_catalog)
    dead = (a.state / "machine-id").read_text().strip()
    sh(f"cp -r '{crawls}/flat-a' '{a.mnt}/from-a'")
    assert staged_by(a, disks) == []            # every closed file's blocks are in the buckets
    os.kill(a.pid(), signal.SIGKILL)
    killed = time.monotonic()
    subprocess.run(["fusermount3", "-uz", str(a.mnt)], check=False)
    shutil.rmtree(a.state)
    assert poll(lambda: postgres.psql(db, "SELECT count(*) FROM stripes WHERE owner = "
                                          f"'{dead}'").strip() == "0"
                and postgres.psql(db, "SELECT count(*) FROM mounts").strip() == "1", 10.0, 0.1)
    assert poll(lambda: objects(weeds[0], disks[0], f"meta/machines/{dead}/MOUNTED") == [], 10.0, 0.1)
    print(f"the dead machine's mount, stripes and leases taken over after {time.monotonic() - killed:.1f} s")
    sh(f"diff -r '{crawls}/flat-a' '{b.mnt}/from-a'")
    sh(f"cp -r '{crawls}/flat-b' '{b.mnt}/from-b'")
    b.umount()
    proc = webfs("fsck", disks[0], check=False)
    assert proc.returncode == 0, proc.stdout.decode() + proc.stderr.decode()
    # A new machine (a fresh state directory) mounts from a URL and finds both.
    c = Machine(a.state.parent, "c", disks[2])
    c.mount()
    try:
        sh(f"diff -r '{crawls}/flat-a' '{c.mnt}/from-a'")
        sh(f"diff -r '{crawls}/flat-b' '{c.mnt}/from-b'")
    finally:
        c.umount()


def test_a_shared_lease_removed_from_the_bucket_is_seen_gone(weeds):
    """A machine's shared lease is read from the bucket, never from the
    backend's cache: one that another machine removed (it took this
    machine's mount over) is no longer held."""
    from webfs.locks import BucketLease, shared_lease_path
    from webfs.backends.s3 import open_s3
    url = bucket_on_each(weeds, "sl")[0]
    webfs("mkfs", url)
    lease = BucketLease(open_s3(url, BackendOptions.from_env(os.environ)), "a test", machine="m-test")
    lease.take()
    try:
        assert lease.held()
        weeds[0].client().delete_object(Bucket=DiskURL.parse(url).bucket, Key=shared_lease_path("m-test"))
        assert not lease.held()
    finally:
        lease.release()


def test_a_machine_taken_over_while_it_unmounts_still_copies_its_records(weeds, crawls, tmp_path, postgres,
                                                                         pg_catalog):
    """A machine that stands still at the start of its unmount (SIGSTOP: a
    stalled host) long enough for the other to take its row and its leases
    over still copies its JOURNAL, with every name it committed, to its own
    place in the buckets: that place is its alone, whoever took the lease."""
    disks = bucket_on_each(weeds, "to")
    webfs("mkfs", "--catalog", pg_catalog, *disks)
    a, b = (Machine(tmp_path, name, disks[i]) for i, name in enumerate("ab"))
    a.env["WEBFS_TEST_KILL_AT"] = "unmount-after-loop:1:stop"
    a.mount()
    b.mount()
    pid = a.pid()
    stalled = (a.state / "machine-id").read_text().strip()
    names = sorted(os.listdir(crawls / "flat-a"))
    try:
        sh(f"cp -r '{crawls}/flat-a' '{a.mnt}/from-a'")
        assert poll(lambda: sorted(os.listdir(b.mnt / "from-a")) == names, 30.0, 0.05)    # committed
    finally:
        sh(f"fusermount3 -u '{a.mnt}'")     # A's unmount: its daemon stops as it begins
        eventually(lambda: stopped(pid), "the daemon stopping at its unmount", every=0.02)
    try:
        eventually(lambda: not any(objects(w, url, f"meta/machines/{stalled}/MOUNTED")
                                   for w, url in zip(weeds, disks)), "the other machine taking it over")
    finally:
        os.kill(pid, signal.SIGCONT)        # never left stopped, whatever failed
        wait_dead(pid)
        b.umount()
    for w, url in zip(weeds[:2], disks[:2]):          # the record disks: the first two
        journal = w.client().get_object(Bucket=DiskURL.parse(url).bucket,
                                        Key=f"meta/machines/{stalled}/JOURNAL")["Body"].read()
        assert all(f"/from-a/{n}".encode() in journal for n in names), journal[:500]


def stopped(pid: int) -> bool:
    """Is this process stopped (SIGSTOP)?"""
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rpartition(")")[2].split()[0] == "T"
