"""Archives written by the webfs before catalog schema 3 mount in this one:
the catalog (schema 2: signatures and stripe ids as hex text) is rewritten
at open (webfs.catalogmigration), every name, attribute and byte is kept,
fsck is clean before and after, and the new catalog is smaller. The old
archive is made by the old code itself, taken from git."""
from __future__ import annotations

import io
import os
import sqlite3
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from conftest import REPO, Mounted, webfs
from t4_import import assert_same, diff_r, make_tree, snapshot

SCHEMA_2_COMMIT = "aab0679"     # the last commit that wrote catalogs of schema 2


@pytest.fixture(scope="module")
def old_code(tmp_path_factory) -> Path:
    """webfs (and its backends) as of SCHEMA_2_COMMIT, to run beside this one."""
    proc = subprocess.run(["git", "-C", str(REPO), "archive", SCHEMA_2_COMMIT, "webfs", "backends"],
                          capture_output=True)
    assert proc.returncode == 0, f"this test needs the git history ({SCHEMA_2_COMMIT}): {proc.stderr!r}"
    out = tmp_path_factory.mktemp("webfs-schema2")
    with tarfile.open(fileobj=io.BytesIO(proc.stdout)) as tar:
        tar.extractall(out)
    # As installed (setup.cfg's package_dir): found inside the old package,
    # so the editable install's mapping never hands it today's backends.
    (out / "backends").rename(out / "webfs" / "backends")
    return out


def old_webfs(code: Path, *args) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(code))
    proc = subprocess.run([sys.executable, "-c", "import sys; from webfs.cli import run; "
                           "sys.argv[0] = 'webfs'; sys.exit(run())", *map(str, args)],
                          capture_output=True, env=env, cwd=code)
    assert proc.returncode == 0, proc.stdout.decode() + proc.stderr.decode()
    return proc


def catalog_facts(disk: Path) -> tuple:
    db = sqlite3.connect(f"file:{disk}/meta/catalog.db?mode=ro", uri=True)
    try:
        schema = db.execute("SELECT value FROM meta WHERE key='schema'").fetchone()[0]
        kinds = db.execute("SELECT DISTINCT typeof(sig) FROM blocks").fetchall()
        stripes = db.execute("SELECT DISTINCT typeof(id) FROM stripes").fetchall()
        names = db.execute("SELECT rowid, parent, name FROM dentries ORDER BY rowid").fetchall()
    finally:
        db.close()
    return schema, kinds, stripes, names


def test_a_schema_2_archive_mounts_migrated_with_everything_kept(tmp_path, old_code):
    src = tmp_path / "src"
    make_tree(src)
    want = snapshot(os.fsencode(src))
    disks = [tmp_path / f"disk{i}" for i in range(4)]
    old_webfs(old_code, "mkfs", *disks)
    old_webfs(old_code, "import", src, f"{disks[0]}:/")
    schema, kinds, stripes, names = catalog_facts(disks[0])
    assert (schema, kinds, stripes) == ("2", [("text",)], [("text",)])
    before = (disks[0] / "meta" / "catalog.db").stat().st_size

    assert webfs("fsck", disks[0], check=False).returncode == 0    # on a migrated private copy
    assert catalog_facts(disks[0])[0] == "2"                       # the archive's own untouched

    m = Mounted.__new__(Mounted)
    m.root, m.disks, m.mnt, m.options = tmp_path, disks, tmp_path / "mnt", ""
    m.mnt.mkdir()
    m.mount()
    try:
        assert_same(snapshot(os.fsencode(m.mnt / "src")), want)
        diff_r(src, m.mnt / "src")
        (m.mnt / "src" / "after.html").write_text("<html>written after the migration</html>")
        os.unlink(m.mnt / "src" / "site" / "copy.html")
    finally:
        m.umount()
    schema, kinds, stripes, names_after = catalog_facts(disks[0])
    assert (schema, kinds, stripes) == ("3", [("blob",)], [("blob",)])
    # Every entry kept its rowid (its readdir offset); the two changes are the only others.
    gone = {n for n in names if n not in names_after}
    assert [bytes(n[2]) for n in gone] == [b"copy.html"], gone
    assert (disks[0] / "meta" / "catalog.db").stat().st_size < before
    assert not list((disks[0] / "meta").glob("catalog.db.migrating*"))
    assert webfs("fsck", disks[0], check=False).returncode == 0
    m.mount()
    try:
        assert (m.mnt / "src" / "after.html").read_text() == "<html>written after the migration</html>"
        assert not (m.mnt / "src" / "site" / "copy.html").exists()
    finally:
        m.umount()


def test_a_reader_leaves_the_catalog_of_an_older_mount_alone(tmp_path, old_code):
    """webfs status of a disk that an older webfs has mounted: the catalog is
    not rewritten under the running daemon; one line says why, and the old
    mount goes on."""
    disks = [tmp_path / f"disk{i}" for i in range(3)]
    old_webfs(old_code, "mkfs", *disks)
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    old_webfs(old_code, "mount", disks[0], mnt)
    try:
        (mnt / "a.html").write_text("<html>a</html>")
        proc = webfs("status", disks[0], check=False)
        err = proc.stderr.decode()
        assert proc.returncode != 0 and "unmount it, then run this again" in err, err
        assert len(err.strip().splitlines()) == 1, err
        assert catalog_facts(disks[0])[0] == "2"
        (mnt / "b.html").write_text("<html>b</html>")
    finally:
        old_webfs(old_code, "umount", mnt)
    assert webfs("status", disks[0], check=False).returncode == 0     # free now: migrated
    assert catalog_facts(disks[0])[0] == "3"
    m = Mounted.__new__(Mounted)
    m.root, m.disks, m.mnt, m.options = tmp_path, disks, mnt, ""
    m.mount()
    try:
        assert sorted(p.name for p in mnt.iterdir()) == ["a.html", "b.html"]
        assert (mnt / "b.html").read_text() == "<html>b</html>"
    finally:
        m.umount()
