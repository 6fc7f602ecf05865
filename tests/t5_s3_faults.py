"""S3 disks on real SeaweedFS servers, the slow cases (make test-long): a dead
server's disk rebuilt onto a new bucket on another server while mounted; a
server that hangs (SIGSTOP) does not hang the mount; webfs import into an
unmounted all-S3 archive killed with kill -9 mid-way, then resumed."""
from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from conftest import BIN, sh, unmount, webfs
from fault_helpers import LONG
from t4_import import import_
from t5_import import run_with_bar
from t4_s3_mount import bucket, bucket_on_each, mounted_site, status


@pytest.mark.soak
@pytest.mark.skipif(not LONG, reason="long: WEBFS_LONG_TESTS=1 (make test-long)")
def test_rebuild_a_dead_domain_onto_a_new_bucket(weeds, tmp_path, corpus):
    disks = bucket_on_each(weeds, "r")
    mnt, src = mounted_site(disks, tmp_path, corpus)
    try:
        webfs("sync", mnt)
        weeds[2].kill()
        new = weeds[1].url(bucket("replacement"))
        proc = webfs("rebuild", "--disk", "2", "--to", new, mnt, check=False)
        assert proc.returncode == 0, proc.stdout.decode() + proc.stderr.decode()
        sh(f"diff -r '{src}' '{mnt}/site'")
        assert status(mnt)["disks"][2]["path"] == new
    finally:
        unmount(mnt)
        weeds[2].start()


@pytest.mark.soak
@pytest.mark.skipif(not LONG, reason="long: WEBFS_LONG_TESTS=1 (make test-long)")
def test_a_hung_server_does_not_hang_the_mount(weeds, tmp_path, corpus):
    """A server that stops answering (SIGSTOP: connections open, no reply) costs
    the reads one timeout, then its disk fails fast and parity serves."""
    disks = bucket_on_each(weeds, "h")
    mnt, src = mounted_site(disks, tmp_path, corpus)
    try:
        webfs("sync", mnt)
        unmount(mnt)
        webfs("mount", disks[0], mnt)
        os.killpg(weeds[2].proc.pid, signal.SIGSTOP)
        try:
            proc = subprocess.run(["diff", "-r", str(src), str(mnt / "site")], capture_output=True, timeout=120)
            assert proc.returncode == 0, proc.stdout.decode()
        finally:
            os.killpg(weeds[2].proc.pid, signal.SIGCONT)
    finally:
        unmount(mnt)


@pytest.mark.soak
@pytest.mark.skipif(not LONG, reason="long: WEBFS_LONG_TESTS=1 (make test-long)")
def test_import_into_s3_killed_mid_way_resumes(weeds, tmp_path):
    """kill -9 of 'webfs import SRC s3+http://.../BUCKET:/PATH' mid-way: every
    file the bar counted reads back; a rerun (its lease was left by a process
    of this state directory that is gone: taken over) finishes the job."""
    src = tmp_path / "many"
    src.mkdir()
    for i in range(800):
        (src / f"f{i:04d}").write_bytes(f"page {i}\n".encode() * (1 + i % 50))
    disks = bucket_on_each(weeds, "k")
    webfs("mkfs", *disks)
    proc, shown = run_with_bar([str(BIN / "webfs"), "import", f"{src}/", f"{disks[1]}:/c"])
    deadline = time.time() + 120
    while shown() < 200 and proc.poll() is None and time.time() < deadline:
        time.sleep(0.01)
    reported = shown()
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert 200 <= reported < 800, reported
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    webfs("mount", disks[0], mnt)
    try:
        for name in sorted(os.listdir(src))[:reported]:
            assert (mnt / "c" / name).read_bytes() == (src / name).read_bytes(), name
    finally:
        unmount(mnt)
    out = import_(f"{src}/", f"{disks[2]}:/c", check=True).stdout.decode()
    assert "already there" in out, out
    webfs("mount", disks[0], mnt)
    try:
        sh(f"diff -r '{src}' '{mnt}/c'")
    finally:
        unmount(mnt)
