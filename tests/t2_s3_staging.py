"""An S3 disk's staging area (backends/staging.py) without a server: its
replay when the disk is opened, against an endpoint that refuses
(127.0.0.1:1), and when its uploads start, by a manual clock; that
endpoint down, and probed again, by the disk's manual clock."""
from __future__ import annotations

import errno
import os
import subprocess
import sys
import threading

import pytest
from conftest import eventually

from webfs.backends.options import BackendOptions
from webfs.backends.s3 import ARCHIVE_LOCK, STAGING, DiskURL, S3Backend, forget_open, open_s3
from webfs.backends.s3endpoint import DOWN_SECONDS
from webfs.backends.staging import RETRY_SECONDS, UPLOAD_AFTER, Staging
from webfs.locks import Clock

URL = "s3+http://127.0.0.1:1/staged"
NAME = "blocks/aa/bb/cccc"


@pytest.fixture
def staged(tmp_path):
    """A state directory with one object left staged by a killed daemon."""
    options = BackendOptions(state_dir=str(tmp_path / "state"))
    forget_open()
    root = open_s3(URL, options, fetch=False).root
    path = os.path.join(root, STAGING, NAME)
    os.makedirs(os.path.dirname(path))
    with open(path, "wb") as f:
        f.write(b"a block nobody uploaded")
    os.makedirs(os.path.join(root, "meta"), exist_ok=True)
    yield root, path, options
    open_s3(URL, options, fetch=False).staging.close()       # its uploaders stop retrying
    forget_open()


def test_an_open_uploads_what_is_staged_first_and_keeps_it_if_that_fails(staged):
    root, path, options = staged
    forget_open()
    with pytest.raises(OSError, match="wait in .* to be uploaded"):
        open_s3(URL, options)                        # the replay's upload is refused
    assert os.path.exists(path)             # kept for the next open


def test_an_open_leaves_the_staging_area_of_a_mount_alone(staged):
    """Another process holds the archive's lock (a mount, uploading its own
    staged objects and maybe writing them again): no replay here."""
    root, path, options = staged
    lock = os.path.join(root, ARCHIVE_LOCK)
    holder = subprocess.Popen([sys.executable, "-c", (
        "import fcntl, os, sys, time\n"
        f"fd = os.open({lock!r}, os.O_RDWR | os.O_CREAT)\n"
        "fcntl.flock(fd, fcntl.LOCK_EX)\n"
        "print('locked', flush=True)\n"
        "time.sleep(60)\n")], stdout=subprocess.PIPE)
    try:
        assert holder.stdout.readline() == b"locked\n"
        forget_open()
        with pytest.raises(OSError) as failed:
            open_s3(URL, options)                    # then fails on the identity files, endpoint down
        assert "to be uploaded" not in str(failed.value)
        assert open_s3(URL, options, fetch=False).staging.pending == 0
        assert os.path.exists(path)
    finally:
        holder.kill()
        holder.wait()


def test_an_upload_waits_its_time_puts_the_last_bytes_once_and_retries_after_a_failure(tmp_path):
    """By a manual clock: an object staged twice inside UPLOAD_AFTER is PUT
    once, with its last bytes, when UPLOAD_AFTER has passed; a failed PUT is
    tried again RETRY_SECONDS later, not before."""
    clock = Clock(start=1000.0)
    puts, refuse = [], [False]

    def upload(path: str, data: bytes) -> None:
        puts.append((path, data, clock.monotonic()))
        if refuse[0]:
            raise OSError(errno.EHOSTDOWN, "endpoint unreachable")
    staging = Staging(str(tmp_path / "staging"), upload, 1, 1 << 30, URL, clock)
    try:
        staging.put(NAME, b"first bytes")
        eventually(lambda: clock.waiters == 1, "the uploader waiting")
        clock.advance(UPLOAD_AFTER / 2)
        staging.put(NAME, b"last bytes")
        clock.advance(UPLOAD_AFTER / 2)
        eventually(lambda: staging.pending == 0, "the upload")
        assert puts == [(NAME, b"last bytes", 1000.0 + UPLOAD_AFTER)]
        refuse[0] = True
        staging.put("blocks/dd/ee/ffff", b"refused once")
        clock.advance(UPLOAD_AFTER)
        eventually(lambda: len(puts) == 2 and clock.waiters == 1, "the refused upload")
        refuse[0] = False
        clock.advance(RETRY_SECONDS)
        eventually(lambda: staging.pending == 0, "the retried upload")
        assert [at for _, _, at in puts[1:]] == [1000.0 + 2 * UPLOAD_AFTER,
                                                 1000.0 + 2 * UPLOAD_AFTER + RETRY_SECONDS]
    finally:
        staging.close()


def test_a_refusing_endpoint_is_down_at_once_and_probed_again_by_the_disks_clock(tmp_path, monkeypatch):
    """S3Backend(url, options, clock) times its endpoint by that clock: a block read
    that is refused (a hedged read, waited for by the clock) marks the
    endpoint down; the next request fails at once without asking; a probe
    starts only when DOWN_SECONDS have passed by the clock, in the background."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    clock = Clock(start=0.0)
    disk = S3Backend(DiskURL.parse(URL), BackendOptions(state_dir=str(tmp_path / "state")), clock)
    try:
        with pytest.raises(OSError) as refused:
            disk.read(NAME)
        assert refused.value.errno == errno.EHOSTDOWN and "endpoint unreachable" in str(refused.value)
        assert not disk.known_present() and not disk.present()
        with pytest.raises(OSError, match="endpoint down .asked again every few seconds."):
            disk.read(NAME)
        assert not probing()
        clock.advance(DOWN_SECONDS)
        assert not disk.present()               # starts the probe and does not wait for it
        eventually(lambda: not probing(), "the probe")
        assert disk.endpoint.down               # refused again: down another period
    finally:
        disk.staging.close()


def probing() -> bool:
    return any(t.name == "webfs-endpoint-probe" for t in threading.enumerate())
