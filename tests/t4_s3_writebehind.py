"""Write-behind of S3 disks (backends/staging.py) through real mounts on real
SeaweedFS servers: files closed while the servers do not answer (SIGSTOP),
so their blocks wait in the staging directories, then the daemon killed with
kill -9 (webfs status then uploads nothing and waits on no hung server):
the next mount uploads them first, every file reads back identical,
and a new machine (a fresh state directory) mounting from the buckets alone
finds them too."""
from __future__ import annotations

import os
import signal
import time

from conftest import sh, state_of, unmount, webfs
from t4_s3_mount import bucket_on_each, kill_daemon, mounted_site, reads_back_clean, status
from webfs.backends.s3 import STAGING


STATUS_WITHIN = 12.0        # seconds: webfs status with a server hung asks it 5 s at most


def staged(disks) -> list[str]:
    """Files waiting in the disks' staging directories."""
    found = []
    for url in disks:
        top = os.path.join(state_of(url), STAGING)
        for dirpath, _, names in os.walk(top):
            found += [os.path.join(dirpath, n) for n in names]
    return found


def test_closed_files_survive_kill_9_while_their_uploads_wait(weeds, tmp_path, corpus, monkeypatch):
    disks = bucket_on_each(weeds, "w")
    mnt, src = mounted_site(disks, tmp_path, corpus)
    try:
        sh(f"diff -r '{src}' '{mnt}/site'")
        webfs("sync", mnt)
        assert staged(disks) == []                       # a sync waits for every upload
        for w in weeds:
            os.killpg(w.proc.pid, signal.SIGSTOP)        # uploads hang from here on
        try:
            sh(f"cp -r '{src}' '{mnt}/while-stopped'")   # every close() returns
            kill_daemon(mnt)
            left = staged(disks)        # after the kill: the daemon stages more until then (parity, temp names)
            assert left, "nothing waits for upload"
            # status looks without uploading what is left (it would wait on the hung server)
            for w in weeds[:2]:
                os.killpg(w.proc.pid, signal.SIGCONT)
            start = time.monotonic()
            st = status(disks[0])
            assert time.monotonic() - start <= STATUS_WITHIN and st["disks"][2]["state"] == "missing"
            assert sorted(staged(disks)) == sorted(left)
        finally:
            for w in weeds:
                os.killpg(w.proc.pid, signal.SIGCONT)
        # The uploads cut short are replayed when the disk is opened again.
        webfs("mount", disks[0], mnt)
        assert staged(disks) == []
        sh(f"diff -r '{src}' '{mnt}/while-stopped'")
        sh(f"diff -r '{src}' '{mnt}/site'")
    finally:
        unmount(mnt)
    # A new machine: only the buckets (and meta/ copied at the unmount).
    monkeypatch.setenv("WEBFS_STATE_DIR", str(tmp_path / "new-machine"))
    reads_back_clean(disks[1], mnt, src, "while-stopped")


def test_a_sync_with_uploads_failing_fails_and_keeps_them_staged(weeds, tmp_path, corpus):
    disks = bucket_on_each(weeds, "f")
    mnt, src = mounted_site(disks, tmp_path, corpus)
    try:
        webfs("sync", mnt)
        os.killpg(weeds[2].proc.pid, signal.SIGSTOP)
        try:
            sh(f"cp -r '{src}' '{mnt}/more'")
            assert any(disks[2].rsplit("/", 1)[1] in f for f in staged(disks))
            t0 = time.monotonic()
            proc = webfs("sync", mnt, check=False, timeout=120)
            said = proc.stderr.decode()
            assert proc.returncode != 0 and disks[2] in said and "internal error" not in said, said
            assert time.monotonic() - t0 < 90
        finally:
            os.killpg(weeds[2].proc.pid, signal.SIGCONT)
        # The uploads go on by themselves once the endpoint answers again.
        deadline = time.monotonic() + 60
        while staged(disks) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert staged(disks) == []
        sh(f"diff -r '{src}' '{mnt}/more'")
    finally:
        unmount(mnt)
    reads_back_clean(disks[0], mnt, src, "more")
