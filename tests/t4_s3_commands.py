"""S3 disks between machines and without a mount, on real SeaweedFS servers
(tests/seaweed.py): the bucket's mount lease (a second machine is refused
while the archive is mounted, a stale lease is taken only when asked, a
read-only command needs none, a mount whose lease was taken stops copying its
catalog), ``webfs fsck --rebuild-catalog`` after the catalog is lost from the
state directories and the buckets, and ``webfs import`` / ``import-warc``
into an unmounted all-S3 archive, ``versions`` and ``export-warc`` out of it."""
from __future__ import annotations

import calendar
import gzip
import json
import os
import shutil
import stat
import time

from conftest import REPO, eventually, sh, state_of, unmount, webfs
from t2_warc import write_warc
from t4_s3_mount import bucket_on_each, kill_daemon, mounted_site, reads_back_clean, status
from webfs.backends.s3 import DiskURL

LEASE = "meta/MOUNTED"
FAST_RENEWAL = "1"          # seconds: renewals to watch (stale after 5 s: only while watched)


def machine(tmp_path, name: str, **more) -> dict:
    """The environment of a command run on another machine: its own state directory."""
    return dict(os.environ, WEBFS_STATE_DIR=str(tmp_path / name), **more)


def lease_of(weed, disk: str) -> bytes:
    return weed.client().get_object(Bucket=DiskURL.parse(disk).bucket, Key=LEASE)["Body"].read()


def age_leases(weeds, disks, seconds: int) -> None:
    """Make each bucket's lease look renewed that much earlier: a machine that
    died that long ago (instead of waiting for its lease to go stale)."""
    for w, d in zip(weeds, disks):
        bucket, text = DiskURL.parse(d).bucket, lease_of(w, d).decode()
        stamp = text.split("Renewed: ")[1].split("\n")[0]
        renewed = calendar.timegm(time.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ")) - seconds
        aged = text.replace(f"Renewed: {stamp}", "Renewed: " + time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                             time.gmtime(renewed)))
        w.client().put_object(Bucket=bucket, Key=LEASE, Body=aged.encode())


def has_lease(weed, disk: str) -> bool:
    listed = weed.client().list_objects_v2(Bucket=DiskURL.parse(disk).bucket, Prefix=LEASE)
    return bool(listed.get("Contents"))


def test_the_lease_keeps_a_second_machine_out(weeds, tmp_path):
    disks = bucket_on_each(weeds, "lease")
    webfs("mkfs", *disks)
    # b renews every 60 s (the default): its lease stays fresh however slow
    # this machine is, until the test ages it.
    a, b = machine(tmp_path, "machine-a", WEBFS_LEASE_RENEW=FAST_RENEWAL), machine(tmp_path, "machine-b")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    webfs("mount", disks[0], mnt, env=a)
    try:
        (mnt / "from-a").write_bytes(b"written on machine a\n" * 100)
        assert all(has_lease(w, d) for w, d in zip(weeds, disks))
        other = tmp_path / "other"
        other.mkdir()
        for refused in (("mount", disks[1], other), ("put", disks[2], mnt / "from-a")):
            proc = webfs(*refused, check=False, env=b)
            err = proc.stderr.decode().strip()
            assert proc.returncode != 0 and not os.path.ismount(other), err
            assert len(err.splitlines()) == 1 and "in use by webfs mount on" in err, err
            assert "renewed" in err and "s ago" in err and "s3+http://" in err, err
        # Commands that only read need no lease, and leave the holder's alone,
        # which its daemon renews.
        before = lease_of(weeds[0], disks[0])
        assert webfs("status", disks[1], env=b).returncode == 0
        proc = webfs("fsck", disks[2], check=False, env=b)     # (by the bucket's older catalog copy)
        assert proc.returncode in (0, 4) and b"read-only check" in proc.stdout, proc.stderr.decode()
        # fsck --rebuild-catalog without --repair writes nothing: no lease, no copy
        # pushed; with --repair the lease refuses it, which is exit 8 (not run).
        bucket0 = DiskURL.parse(disks[0]).bucket
        copy_before = weeds[0].client().get_object(Bucket=bucket0, Key="meta/COPY")["Body"].read()
        proc = webfs("fsck", "--rebuild-catalog", disks[2], check=False, env=b)
        assert proc.returncode in (0, 4) and b"nothing was written" in proc.stdout, proc.stderr.decode()
        for args in (("--repair",), ("--rebuild-catalog", "--repair", "--force")):
            proc = webfs("fsck", *args, disks[2], check=False, env=b)
            err = proc.stderr.decode()
            assert proc.returncode == 8 and "in use by webfs mount on" in err, (args, proc.returncode, err)
        assert weeds[0].client().get_object(Bucket=bucket0, Key="meta/COPY")["Body"].read() == copy_before
        def renewed():
            now = lease_of(weeds[0], disks[0])
            return now if now != before else None
        after = eventually(renewed, "a renewal of the holder's lease", every=0.2)
        assert after.split(b"Renewed: ")[0] == before.split(b"Renewed: ")[0]
    finally:
        unmount(mnt)
    assert not any(has_lease(w, d) for w, d in zip(weeds, disks))   # a clean unmount lets go

    # Once a has unmounted, b mounts (from the bucket's copy of the catalog) ...
    webfs("mount", disks[1], mnt, env=b)
    try:
        assert (mnt / "from-a").read_bytes() == b"written on machine a\n" * 100
        (mnt / "from-b").write_bytes(b"written on machine b\n" * 100)
        webfs("sync", mnt, env=b)
        kill_daemon(mnt)                               # ... and dies: its lease is not renewed
    finally:
        unmount(mnt)
    # Buckets copied with the lease in them are disks webfs-recover reads.
    assert all(has_lease(w, d) for w, d in zip(weeds, disks))
    copies = [w.download(DiskURL.parse(d).bucket, tmp_path / f"copy{i}")
              for i, (w, d) in enumerate(zip(weeds, disks))]
    out = tmp_path / "recovered"
    proc = sh(f"sh '{REPO}/tools/webfs-recover' {' '.join(map(str, copies))} '{out}'", check=False)
    assert proc.returncode == 0, proc.stdout.decode() + proc.stderr.decode()
    assert (out / "from-b").read_bytes() == b"written on machine b\n" * 100
    assert "MOUNTED" not in (out / ".webfs-recover.report").read_text()
    proc = webfs("mount", "-o", "take_lease", disks[0], mnt, check=False, env=a)
    assert proc.returncode != 0 and "renewed" in proc.stderr.decode(), proc.stderr.decode()
    age_leases(weeds, disks, 3600)                     # b died an hour ago: stale
    proc = webfs("mount", disks[0], mnt, check=False, env=a)
    err = proc.stderr.decode()
    assert proc.returncode != 0 and "stale" in err and "--take-lease" in err, err
    webfs("mount", "-o", "take_lease", disks[0], mnt, env=a)
    try:
        assert (mnt / "from-b").read_bytes() == b"written on machine b\n" * 100
        # Someone takes the lease from under this mount: it stops copying its
        # catalog to the buckets and leaves the other lease alone.
        client = weeds[0].client()
        bucket0 = DiskURL.parse(disks[0]).bucket
        copy_before = client.get_object(Bucket=bucket0, Key="meta/COPY")["Body"].read()
        foreign = lease_of(weeds[0], disks[0]).replace(b"Mount: ", b"Mount: ff")
        client.put_object(Bucket=bucket0, Key=LEASE, Body=foreign)
        (mnt / "after-loss").write_bytes(b"x")
    finally:
        unmount(mnt)
    assert lease_of(weeds[0], disks[0]) == foreign
    assert client.get_object(Bucket=bucket0, Key="meta/COPY")["Body"].read() == copy_before
    log = (tmp_path / "machine-a").rglob("webfs.log")
    assert any(b"the mount lease is no longer ours" in p.read_bytes() for p in log)


def test_rebuild_catalog_after_losing_it_everywhere(weeds, tmp_path, corpus):
    disks = bucket_on_each(weeds, "rebuild")
    mnt, src = mounted_site(disks, tmp_path, corpus)
    unmount(mnt)
    # The buckets of the two record disks hold the names, gzip'd; no plain MANIFEST.
    for w, d in zip(weeds[:2], disks[:2]):
        client, bucket = w.client(), DiskURL.parse(d).bucket
        keys = {o["Key"] for o in client.list_objects_v2(Bucket=bucket, Prefix="meta/").get("Contents", [])}
        assert "meta/MANIFEST.gz" in keys and "meta/MANIFEST" not in keys, keys
        names = gzip.decompress(client.get_object(Bucket=bucket, Key="meta/MANIFEST.gz")["Body"].read())
        assert names.startswith(b"#\tcheckpoint\t") and b"\t/site" in names, names[:300]
    # Every state directory and every bucket's copy of the catalog: gone.
    for w, d in zip(weeds, disks):
        shutil.rmtree(state_of(d))
        for key in ("meta/catalog.db", "meta/COPY"):
            w.client().delete_object(Bucket=DiskURL.parse(d).bucket, Key=key)
    proc = webfs("mount", disks[0], mnt, check=False)
    assert proc.returncode != 0 and "--rebuild-catalog" in proc.stderr.decode(), proc.stderr.decode()
    proc = webfs("fsck", "--rebuild-catalog", "--repair", disks[1], check=False)
    assert proc.returncode in (0, 1), proc.stdout.decode() + proc.stderr.decode()
    reads_back_clean(disks[2], mnt, src, "site")


def test_import_into_an_unmounted_s3_archive(weeds, tmp_path, corpus):
    disks = bucket_on_each(weeds, "import")
    webfs("mkfs", *disks)
    states = [state_of(d) for d in disks]
    assert [stat.S_IMODE(os.stat(s).st_mode) for s in states] == [0o700] * len(disks)
    src = sorted((corpus / "crawl-001").iterdir())[1]
    webfs("import", src, f"{disks[1]}:/crawls")
    pages = [("http://example.com/", b"<html>home</html>"), ("http://example.com/a.html", b"<html>a</html>")]
    warc = write_warc(tmp_path / "crawl.warc.gz", pages)
    webfs("import-warc", warc, f"{disks[2]}:/")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    os.chmod(states[1], 0o755)          # a state directory others can read is refused as a disk root is
    proc = webfs("mount", disks[0], mnt, check=False)
    assert proc.returncode == 1 and f"chmod 700 {states[1]}".encode() in proc.stderr, proc.stderr
    os.chmod(states[1], 0o700)
    webfs("mount", disks[0], mnt)
    try:
        sh(f"diff -r '{src}' '{mnt}/crawls/{src.name}'")
        assert (mnt / "crawl/http/example.com/a.html@20240101120000").read_bytes() == b"<html>a</html>"
        assert status(mnt)["disks"][0]["state"] == "present"
    finally:
        unmount(mnt)
    # and read back without a mount, from any of the buckets
    listed = webfs("versions", "--json", "http://example.com/a.html", disks[0])
    assert [v["path"] for v in json.loads(listed.stdout)] == ["crawl/http/example.com/a.html@20240101120000"]
    assert webfs("url", "http://example.com/", disks[2]).stdout == b"/crawl/http/example.com/@20240101120000\n"
    out = tmp_path / "out.warc.gz"
    done = webfs("export-warc", f"{disks[1]}:/crawl", out)
    assert b"(100%) byte-identical" in done.stdout
    assert out.read_bytes() == warc.read_bytes()
    assert not has_lease(weeds[1], disks[1])
