"""S3 disks on real SeaweedFS servers, the slow cases (make test-long): a dead
server's disk rebuilt onto a new bucket on another server while mounted; a
server that hangs (SIGSTOP) does not hang the mount."""
from __future__ import annotations

import os
import signal
import subprocess

import pytest

from conftest import sh, unmount, webfs
from fault_helpers import LONG
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
