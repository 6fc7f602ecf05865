"""The mount lease of an S3 disk (webfs.locks.BucketLease) against a bucket
that misbehaves in ways SeaweedFS does not (t4_s3_commands drives the real
one): a store that ignores If-None-Match, a lease that vanishes as it is
read, an endpoint that fails, a renewal that fails."""
from __future__ import annotations

import errno
import logging

import pytest
from conftest import eventually

from webfs.errors import ArchiveBusy
from webfs.locks import LEASE_PATH, SYSTEM_CLOCK, BucketLease, Clock, remove_shared, shared_lease_path


class Bucket:
    """Objects in a dict, with the methods of an S3 backend the lease uses."""

    location = "s3+http://127.0.0.1:1/fake"
    root = "/nonexistent/state"
    lease = None

    def __init__(self, honours_condition: bool = True):
        self.objects: dict[str, bytes] = {}
        self.honours_condition = honours_condition
        self.on_read = None             # called before each read (to change the bucket meanwhile)
        self.fail = False

    def _check(self):
        if self.fail:
            raise OSError(errno.EHOSTDOWN, "endpoint unreachable (ConnectTimeoutError)")

    def read(self, path):
        self._check()
        if self.on_read:
            self.on_read()
        if path not in self.objects:
            raise FileNotFoundError(path)
        return self.objects[path]

    def write_if_absent(self, path, data):
        self._check()
        if path in self.objects and self.honours_condition:
            raise FileExistsError(path)
        self.objects[path] = data

    def write_atomic(self, path, data):
        self._check()
        self.objects[path] = data

    def remove(self, path):
        self._check()
        self.objects.pop(path, None)

    def list(self, prefix):
        self._check()
        return sorted(p for p in self.objects if p.startswith(prefix + "/"))


def other_holder(bucket: Bucket, clock: Clock = SYSTEM_CLOCK, renewed_ago: float = 0.0) -> bytes:
    """Another machine's lease, renewed that many seconds ago."""
    them = BucketLease(Bucket(), "webfs mount on /mnt/elsewhere", clock=clock)
    them.backend.root = "/elsewhere/state"
    return them._text(clock.time() - renewed_ago).replace(b"Machine: ", b"Machine: other-")


START = 1_800_000_000.0            # 2027-01-15T08:00:00Z, a manual clock's start


def test_a_store_that_ignores_the_condition_is_caught_by_the_read_back():
    bucket = Bucket(honours_condition=False)
    other = other_holder(bucket)

    def someone_else_wrote_meanwhile():
        bucket.objects[LEASE_PATH] = other
    bucket.on_read = someone_else_wrote_meanwhile
    with pytest.raises(ArchiveBusy, match="who took it as we did"):
        BucketLease(bucket, "webfs mount on /mnt/here").take()
    assert bucket.lease is None


def test_a_lease_that_keeps_vanishing_is_refused():
    bucket = Bucket()

    def vanish():
        bucket.objects.pop(LEASE_PATH, None)
    bucket.objects[LEASE_PATH] = other_holder(bucket)
    bucket.on_read = vanish
    with pytest.raises(ArchiveBusy, match="keeps vanishing"):
        BucketLease(bucket, "webfs put").take()


def test_an_endpoint_that_fails_refuses_in_one_line():
    bucket = Bucket()
    bucket.fail = True
    with pytest.raises(ArchiveBusy, match=r"^s3\+http://127.0.0.1:1/fake: cannot take the mount lease: endpoint unreachable"):
        BucketLease(bucket, "webfs put").take()


def test_a_failed_renewal_is_logged_and_the_next_one_renews(caplog):
    clock = Clock(start=START)
    bucket = Bucket()
    lease = BucketLease(bucket, "webfs mount on /mnt/here", renew=60, clock=clock)
    lease.take()
    try:
        first = bucket.objects[LEASE_PATH]
        with caplog.at_level(logging.WARNING):
            bucket.fail = True
            clock.advance(60)
            eventually(lambda: "cannot renew the mount lease" in caplog.text, "a failed renewal logged")
            bucket.fail = False
            assert bucket.objects[LEASE_PATH] == first
            clock.advance(60)
            eventually(lambda: bucket.objects[LEASE_PATH] != first, "the next renewal")
        assert b"Renewed: 2027-01-15T08:02:00Z" in bucket.objects[LEASE_PATH]
        assert caplog.text.count("cannot renew") == 1 and lease.held()
    finally:
        lease.release()
    assert LEASE_PATH not in bucket.objects and bucket.lease is None


def test_a_lease_goes_stale_after_five_missed_renewals():
    """Another machine's lease, renewed every 60 s, is in use for 300 s after
    its last renewal and stale (taken over when asked) after that."""
    clock = Clock(start=START)
    bucket = Bucket()
    bucket.objects[LEASE_PATH] = other_holder(bucket, clock)
    clock.advance(300)
    with pytest.raises(ArchiveBusy, match="renewed 300 s ago; unmount it there"):
        BucketLease(bucket, "webfs put", take_over=True, clock=clock).take()
    clock.advance(1)
    with pytest.raises(ArchiveBusy, match="stale: that machine stopped"):
        BucketLease(bucket, "webfs put", clock=clock).take()     # stale, but not asked to take it
    lease = BucketLease(bucket, "webfs put", take_over=True, clock=clock)
    lease.take()
    assert b"Mount: " + lease.mount_id.encode() in bucket.objects[LEASE_PATH]
    lease.release()


def test_a_stale_lease_with_an_unreadable_age_is_never_taken():
    bucket = Bucket()
    bucket.objects[LEASE_PATH] = other_holder(bucket).replace(b"Renewed: ", b"Renewed: x")
    with pytest.raises(ArchiveBusy, match="its lease is unreadable"):
        BucketLease(bucket, "webfs put", take_over=True).take()
    bucket.objects[LEASE_PATH] = other_holder(bucket, renewed_ago=400)
    lease = BucketLease(bucket, "webfs put", take_over=True)
    lease.take()                        # stale (5 x 60 s) and asked: taken
    lease.release()


def test_machines_share_the_lease_and_an_exclusive_writer_waits_for_them():
    """Two machines' shared leases (a PostgreSQL catalog's mounts) stand side
    by side; an exclusive writer (fsck --repair) is refused while one is
    fresh, and leaves no lease of its own behind; a shared one is refused
    while an exclusive one is held."""
    clock = Clock(start=START)
    bucket = Bucket()
    bucket.objects[shared_lease_path("m-b")] = other_holder(bucket, clock)       # another machine's mount
    ours = BucketLease(bucket, "webfs mount on /mnt/a", clock=clock, machine="m-a")
    ours.take()
    assert sorted(bucket.objects) == [shared_lease_path("m-a"), shared_lease_path("m-b")]
    ours.release()
    assert list(bucket.objects) == [shared_lease_path("m-b")]
    with pytest.raises(ArchiveBusy, match="in use by webfs mount on /mnt/elsewhere"):
        BucketLease(bucket, "webfs fsck --repair", clock=clock).take()
    assert LEASE_PATH not in bucket.objects
    del bucket.objects[shared_lease_path("m-b")]
    bucket.objects[LEASE_PATH] = other_holder(bucket, clock)                     # another machine's fsck --repair
    with pytest.raises(ArchiveBusy, match="in use by webfs mount on /mnt/elsewhere"):
        BucketLease(bucket, "webfs mount on /mnt/a", clock=clock, machine="m-a").take()
    assert list(bucket.objects) == [LEASE_PATH]


def test_an_exclusive_lease_made_while_a_machine_takes_its_shared_one_stops_it():
    """Each side writes its own lease, then looks for the other's: a machine
    that finds an exclusive lease made meanwhile takes its own back."""
    bucket = Bucket()
    other = other_holder(bucket)

    def exclusive_made_meanwhile():
        if shared_lease_path("m-a") in bucket.objects:
            bucket.objects[LEASE_PATH] = other
    bucket.on_read = exclusive_made_meanwhile
    with pytest.raises(ArchiveBusy, match="who took it as we did"):
        BucketLease(bucket, "webfs mount on /mnt/a", machine="m-a").take()
    assert list(bucket.objects) == [LEASE_PATH]


def test_a_dead_machines_shared_lease_is_stale_or_removed_by_the_one_that_took_it_over():
    clock = Clock(start=START)
    bucket = Bucket()
    bucket.objects[shared_lease_path("m-dead")] = other_holder(bucket, clock)
    clock.advance(301)
    with pytest.raises(ArchiveBusy, match="stale: that machine stopped"):
        BucketLease(bucket, "webfs fsck --repair", clock=clock).take()
    lease = BucketLease(bucket, "webfs fsck --repair", take_over=True, clock=clock)
    lease.take()
    assert list(bucket.objects) == [LEASE_PATH]
    lease.release()
    bucket.objects[shared_lease_path("m-dead")] = other_holder(bucket, clock)
    remove_shared(bucket, "m-dead")         # its mount was taken over in the catalog
    BucketLease(bucket, "webfs fsck --repair", clock=clock).take()
