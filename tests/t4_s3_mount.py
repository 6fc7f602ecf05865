"""S3 disks on real SeaweedFS servers (tests/seaweed.py), through real mounts:
cp -r, diff -r and dedup over buckets; a whole server killed (a failure
domain holding two disks) while mounted: every file still reads back, writes
go on; the archive mounted on a "new machine" (a fresh state directory) from
its URLs alone; buckets copied to directories and read back by
tools/webfs-recover, without webfs."""
from __future__ import annotations

import json
import os
import signal
import sqlite3
import time
import uuid
from pathlib import Path

from conftest import REPO, eventually, sh, state_of, unmount, webfs
from webfs.backends.s3 import DiskURL


def bucket(tag: str) -> str:
    return f"t-{tag}-{uuid.uuid4().hex[:10]}"


def site(corpus):
    return sorted((corpus / "crawl-001").iterdir())[1]


def status(target) -> dict:
    return json.loads(webfs("status", "--json", target).stdout)


def bucket_on_each(weeds, tag: str) -> list[str]:
    """Disk URLs: a new bucket on each server."""
    return [w.url(bucket(f"{tag}{i}")) for i, w in enumerate(weeds)]


def mounted_site(disks, tmp_path, corpus, *mkfs_options, via: int = 0):
    """The disks made an archive (mkfs with these options), mounted through
    disk ``via``, with one site copied in: (mount point, the site's source)."""
    webfs("mkfs", *mkfs_options, *disks)
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    src = site(corpus)
    webfs("mount", disks[via], mnt)
    try:
        sh(f"cp -r '{src}' '{mnt}/site'")
    except BaseException:
        unmount(mnt)
        raise
    return mnt, src


def kill_daemon(mnt) -> None:
    """kill -9 of the mount's daemon, and the kernel made to let go of the mount."""
    os.kill(int(os.getxattr(mnt, "user.webfs.pid")), signal.SIGKILL)
    sh(f"fusermount3 -uz '{mnt}'")


def reads_back_clean(disk: str, mnt, src, name: str) -> None:
    """Mounted through ``disk``: ``name`` is ``src`` again and scrub finds nothing wrong."""
    webfs("mount", disk, mnt)
    try:
        sh(f"diff -r '{src}' '{mnt}/{name}'")
        proc = webfs("scrub", mnt, check=False)
        assert proc.returncode == 0, proc.stdout.decode() + proc.stderr.decode()
    finally:
        unmount(mnt)


def test_a_dead_server_loses_nothing_and_writes_go_on(weeds, tmp_path, corpus):
    """Four disks in three failure domains: two buckets on one server, one on
    another, one local directory. Killing the server with two disks loses no
    file, because no stripe has two members in one domain."""
    w0, w1 = weeds[0], weeds[1]
    disks = [w0.url(bucket("a")), w0.url(bucket("b")), w1.url(bucket("c")), str(tmp_path / "local")]
    mnt, src = mounted_site(disks, tmp_path, corpus, "--group-size", "4", via=3)
    try:
        first = status(mnt)
        sh(f"rsync -a '{src}/' '{mnt}/again/'")        # every page is a duplicate
        sh(f"diff -r '{src}' '{mnt}/site'")
        st = status(mnt)
        assert st["blocks"] == first["blocks"] > 0 and st["references"] > first["references"]
        assert [d["domain"] for d in st["disks"]] == [w0.endpoint, w0.endpoint, w1.endpoint, "disk 3"]
        assert "disk 3" in webfs("status", mnt).stdout.decode()
        webfs("sync", mnt)
    finally:
        unmount(mnt)
    # No stripe has two members (blocks or parity) in one domain.
    catalog = os.path.join(state_of(disks[0]), "meta", "catalog.db")
    db = sqlite3.connect(catalog)
    masks = [m for (m,) in db.execute("SELECT disks FROM stripes")]
    db.close()
    assert masks and all(bin(m & 0b0011).count("1") <= 1 for m in masks)

    webfs("mount", disks[3], mnt)                       # cold: nothing cached in the daemon
    try:
        w0.kill()
        sh(f"diff -r '{src}' '{mnt}/site'")              # through parity, without hanging
        sh(f"diff -r '{src}' '{mnt}/again'")
        sh(f"cp -r '{src}' '{mnt}/while-down'")         # writes go to the disks that are left
        (mnt / "new.html").write_bytes(b"<p>written while a server is down</p>" * 40)
        sh(f"diff -r '{src}' '{mnt}/while-down'")
        st = status(mnt)
        assert [d["state"] for d in st["disks"]][:2] == ["missing", "missing"]
    finally:
        unmount(mnt)
        w0.start()
    webfs("mount", disks[3], mnt)
    try:
        # The pages copied while the server was down gave its blocks references
        # their headers could not take (that mount ended before it came back):
        # scrub says so, and --repair writes them from the catalog.
        proc = webfs("scrub", mnt, check=False)
        said = proc.stdout.decode() + proc.stderr.decode()
        found = [line for line in said.splitlines() if line.startswith(("refs", "parity", "corrupt", "orphan"))]
        assert proc.returncode == 4 and found, said
        assert all(line.startswith("refs") and "header says Refs" in line for line in found), said
        proc = webfs("scrub", "--repair", mnt, check=False)
        assert proc.returncode == 0, proc.stdout.decode() + proc.stderr.decode()
        proc = webfs("scrub", mnt, check=False)
        assert proc.returncode == 0 and " 0 problem(s)" in proc.stdout.decode(), proc.stdout.decode()
        assert all(d["state"] == "present" for d in status(mnt)["disks"])
        assert (mnt / "new.html").read_bytes() == b"<p>written while a server is down</p>" * 40
    finally:
        unmount(mnt)


def test_new_machine_mounts_from_urls_and_buckets_recover_without_webfs(weeds, tmp_path, corpus, monkeypatch):
    disks = bucket_on_each(weeds, "n")
    mnt, src = mounted_site(disks, tmp_path, corpus)
    try:
        sh(f"mv '{mnt}/site/' '{mnt}/moved'")
        fd = os.open(mnt, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)                    # the rename, durable (it is committed behind otherwise)
        finally:
            os.close(fd)
        kill_daemon(mnt)                    # what close() and fsync stored stays
        webfs("mount", disks[1], mnt)
        sh(f"diff -r '{src}' '{mnt}/moved'")
    finally:
        unmount(mnt)
    # A new machine: no state directory, nothing but the URLs and the credentials.
    monkeypatch.setenv("WEBFS_STATE_DIR", str(tmp_path / "new-machine"))
    webfs("mount", disks[2], mnt)
    try:
        sh(f"diff -r '{src}' '{mnt}/moved'")
        assert not (mnt / "site").exists()
    finally:
        unmount(mnt)
    # Buckets copied to directories (object name = file name) are disks webfs-recover reads.
    copies = [w.download(url.rsplit("/", 1)[1], tmp_path / f"copy{i}")
              for i, (w, url) in enumerate(zip(weeds, disks))]
    out = tmp_path / "recovered"
    proc = sh(f"sh '{REPO}/tools/webfs-recover' {' '.join(map(str, copies))} '{out}'", check=False)
    assert proc.returncode == 0, proc.stdout.decode() + proc.stderr.decode()
    sh(f"diff -r '{src}' '{out}/moved'")


def test_bad_disks_are_refused_in_one_line_naming_them(weeds, tmp_path):
    w = weeds[0]
    good = w.url(bucket("good"))
    taken = w.url(bucket("taken"))
    webfs("mkfs", taken)
    client = w.client()
    full = bucket("full")
    client.create_bucket(Bucket=full)
    client.put_object(Bucket=full, Key="someone-elses.txt", Body=b"x")
    down = "s3+http://127.0.0.1:1/nobody"
    wrong = tmp_path / "wrong-credentials"
    wrong.write_text("[default]\naws_access_key_id = webfs-test\naws_secret_access_key = not-it\n")
    cases = [
        ((good, down), {}, down),
        ((good, w.url(full)), {}, w.url(full)),
        ((good, taken), {}, taken),
        ((good, w.url(bucket("x"))), {"WEBFS_S3_CREDENTIALS": str(wrong)}, good),
        (("s3+http://key:secret@127.0.0.1:1/bucket",), {}, "no credentials in a disk URL"),
    ]
    for args, env, named in cases:
        proc = webfs("mkfs", *args, check=False, env=dict(os.environ, **env))
        err = proc.stderr.decode()
        assert proc.returncode != 0 and err.count("\n") == 1 and named in err, (args, err)
        assert "secret" not in err
    # Nothing was written: the good bucket is not even made.
    assert good.rsplit("/", 1)[1] not in [b["Name"] for b in client.list_buckets()["Buckets"]]
    # Mounting a disk whose server does not answer: one line, at once.
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    proc = webfs("mount", down, mnt, check=False, timeout=60)
    assert proc.returncode != 0 and proc.stderr.decode().count("\n") == 1
    assert down in proc.stderr.decode()
    # add-disk refuses a bucket of another archive.
    other = tmp_path / "other"
    webfs("mkfs", other)
    proc = webfs("add-disk", taken, other, check=False)
    assert proc.returncode != 0 and taken in proc.stderr.decode(), proc.stderr.decode()



def test_a_server_that_comes_back_is_taken_back_without_a_remount(weeds, tmp_path, corpus):
    """kill -9 of a server while mounted, new pages and duplicates written,
    the server started again: its disk is in use again, the parity and Refs
    it missed are brought up to date (the log says so), scrub finds nothing
    and the unmount exits 0."""
    disks = bucket_on_each(weeds, "b")
    mnt, src = mounted_site(disks, tmp_path, corpus)
    back = weeds[1]
    try:
        back.kill()
        try:
            sh(f"cp -r '{src}' '{mnt}/again'")                   # duplicates: Refs the disk misses
            for i in range(40):                                 # new blocks: parity it misses
                (mnt / f"new-{i}").write_bytes(os.urandom(2000) * (i + 1))
            # Noticed by a request to it or by the mount's disk check (a duplicate's
            # Refs header is written after the commit, in the background).
            eventually(lambda: status(mnt)["disks"][1]["state"] == "missing", "the outage noticed",
                       every=0.1)
        finally:
            back.start()
        deadline = time.monotonic() + 60
        while True:
            st = status(mnt)
            if st["disks"][1]["state"] == "present" and not st["protection"]["dirty_stripes"]:
                break
            assert time.monotonic() < deadline, st["disks"][1]
            time.sleep(0.1)
        proc = webfs("scrub", mnt, check=False)
        said = proc.stdout.decode() + proc.stderr.decode()
        assert proc.returncode == 0 and " 0 problem(s)" in said, said
        sh(f"diff -r '{src}' '{mnt}/again'")
        # The mount names its log, which for an S3 disk is in the state directory.
        named = os.getxattr(mnt, "user.webfs.log").decode()
        assert named == str(Path(state_of(disks[0])) / "meta" / "webfs.log")
        log = Path(named).read_text()
        assert "disk 1 is back" in log and "Refs header(s) written from the catalog" in log
    finally:
        proc = webfs("umount", mnt, check=False)
        unmount(mnt)
    assert proc.returncode == 0, proc.stdout.decode() + proc.stderr.decode()


def test_a_disk_given_up_for_a_late_read_is_asked_again_at_the_unmount(weeds, tmp_path, corpus, monkeypatch):
    """A cold read of a block on disk 0 while its server stands still for a
    moment (SIGSTOP) is served through parity, and the disk is given up
    until its endpoint's next probe (a few seconds). An unmount that comes
    meanwhile asks that disk again at once and takes it back: its bucket gets
    the unmount's MANIFEST and catalog and loses the mount's lease, as the
    others do, and a new machine mounts it (before: the unmount left that
    disk out, its lease and a catalog without the last names in its bucket)."""
    disks = bucket_on_each(weeds, "late")
    mnt, src = mounted_site(disks, tmp_path, corpus)
    webfs("umount", mnt)
    webfs("mount", disks[0], mnt)               # cold: nothing cached in the daemon
    stopped = weeds[0]
    try:
        on_disk0 = next(p for p in (mnt / "site").rglob("*")
                        if p.is_file() and os.getxattr(p, "user.webfs.disk") == b"0")
        (mnt / "after").write_bytes(b"a name only the unmount's records hold")
        os.killpg(stopped.proc.pid, signal.SIGSTOP)
        try:
            assert on_disk0.read_bytes() == (src / on_disk0.relative_to(mnt / "site")).read_bytes()
        finally:
            os.killpg(stopped.proc.pid, signal.SIGCONT)
        log = Path(os.getxattr(mnt, "user.webfs.log").decode())
        assert "disk 0 is gone" in log.read_text()
    finally:
        proc = webfs("umount", mnt, check=False)
        unmount(mnt)
    assert proc.returncode == 0, proc.stdout.decode() + proc.stderr.decode()
    meta = [{o["Key"]: o["ETag"] for o in weeds[i].client().list_objects_v2(
        Bucket=DiskURL.parse(d).bucket, Prefix="meta/")["Contents"]} for i, d in enumerate(disks)]
    assert "meta/MOUNTED" not in meta[0], meta[0]
    manifests = {m["meta/MANIFEST.gz"] for m in meta if "meta/MANIFEST.gz" in m}     # the record disks'
    assert "meta/MANIFEST.gz" in meta[0] and len(manifests) == 1, meta
    monkeypatch.setenv("WEBFS_STATE_DIR", str(tmp_path / "new-machine"))
    webfs("mount", disks[0], mnt)
    try:
        assert (mnt / "after").read_bytes() == b"a name only the unmount's records hold"
        sh(f"diff -r '{src}' '{mnt}/site'")
    finally:
        webfs("umount", mnt)
