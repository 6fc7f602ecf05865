"""Archives written by the webfs of catalog schemas 2, 3, 4 and 5 mount in
this one: the catalog (schema 2: signatures and stripe ids as hex text; 3: a
block's created as text, every table with a rowid; 4: each block's Name:
hint in its row; 5: stripes with a rowid) is rewritten at open
(webfs.catalogmigration), every name, attribute and byte is kept, fsck is
clean before and after, and the new catalog is smaller. The old archive is
made by the old code itself, taken from git."""
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
SCHEMA_3_COMMIT = "ae7c01e"     # the last commit that wrote catalogs of schema 3
SCHEMA_4_COMMIT = "f9448fd"     # the last commit that wrote catalogs of schema 4
SCHEMA_5_COMMIT = "8967d3b"     # the last commit that wrote catalogs of schema 5
OLD = {"2": SCHEMA_2_COMMIT, "3": SCHEMA_3_COMMIT, "4": SCHEMA_4_COMMIT, "5": SCHEMA_5_COMMIT}


def checkout(tmp_path_factory, commit: str) -> Path:
    """webfs (and its backends) as of a commit, to run beside this one."""
    proc = subprocess.run(["git", "-C", str(REPO), "archive", commit, "webfs", "backends"],
                          capture_output=True)
    assert proc.returncode == 0, f"this test needs the git history ({commit}): {proc.stderr!r}"
    out = tmp_path_factory.mktemp(f"webfs-{commit}")
    with tarfile.open(fileobj=io.BytesIO(proc.stdout)) as tar:
        tar.extractall(out)
    # As installed (setup.cfg's package_dir): found inside the old package,
    # so the editable install's mapping never hands it today's backends.
    (out / "backends").rename(out / "webfs" / "backends")
    return out


@pytest.fixture(scope="module")
def old_code(tmp_path_factory) -> Path:
    return checkout(tmp_path_factory, SCHEMA_2_COMMIT)


@pytest.fixture(scope="module", params=sorted(OLD))
def old_schema(request, tmp_path_factory) -> tuple[str, Path]:
    """(schema, the code that wrote it) for each older schema."""
    return request.param, checkout(tmp_path_factory, OLD[request.param])


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
        created = db.execute("SELECT DISTINCT typeof(created) FROM blocks").fetchall()
    finally:
        db.close()
    return schema, kinds + created, stripes, names


def parity_members(disks: list[Path]) -> set[str]:
    """The Member lines of every parity file (names and Created included)."""
    lines = set()
    for p in (p for d in disks for p in (d / "parity").rglob("*") if p.is_file()):
        data = p.read_bytes()
        head = int(data.split(b"\n")[1].split(b": ")[1])         # Header-Bytes
        lines |= {line for line in data[:head].decode().splitlines() if line.startswith("Member:")}
    return lines


def test_an_older_archive_mounts_migrated_with_everything_kept(tmp_path, old_schema):
    was, old_code = old_schema
    src = tmp_path / "src"
    make_tree(src)
    want = snapshot(os.fsencode(src))
    disks = [tmp_path / f"disk{i}" for i in range(4)]
    old_webfs(old_code, "mkfs", *disks)
    old_webfs(old_code, "import", src, f"{disks[0]}:/")
    schema, kinds, stripes, names = catalog_facts(disks[0])
    ids = "text" if was == "2" else "blob"
    created = "integer" if was in ("4", "5") else "text"
    assert (schema, kinds, stripes) == (was, [(ids,), (created,)], [(ids,)])
    before = (disks[0] / "meta" / "catalog.db").stat().st_size
    members = parity_members(disks)
    assert members

    assert webfs("fsck", disks[0], check=False).returncode == 0    # on a migrated private copy
    assert catalog_facts(disks[0])[0] == was                       # the archive's own untouched

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
    assert (schema, kinds, stripes) == ("6", [("blob",), ("integer",)], [("blob",)])
    # Every entry kept its rowid (its readdir offset); the two changes are the only others.
    gone = {n for n in names if n not in names_after}
    assert [bytes(n[2]) for n in gone] == [b"copy.html"], gone
    # Smaller (schema 4's and 5's small catalogs: in as many pages).
    assert (disks[0] / "meta" / "catalog.db").stat().st_size < before or was in ("4", "5")
    db = sqlite3.connect(f"file:{disks[0]}/meta/catalog.db?mode=ro", uri=True)
    assert "name" not in [c[1] for c in db.execute("PRAGMA table_info(blocks)")]
    assert "WITHOUT ROWID" in db.execute("SELECT sql FROM sqlite_master WHERE name='stripes'").fetchone()[0]
    db.close()
    assert not list((disks[0] / "meta").glob("catalog.db.migrating*"))
    assert webfs("fsck", disks[0], check=False).returncode == 0
    # Parity rewritten from the migrated rows lists the same names and times.
    assert webfs("scrub", disks[0], check=False).returncode == 0
    assert members <= parity_members(disks) | {m for m in members if "copy.html" in m}
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
    assert catalog_facts(disks[0])[0] == "6"
    m = Mounted.__new__(Mounted)
    m.root, m.disks, m.mnt, m.options = tmp_path, disks, mnt, ""
    m.mount()
    try:
        assert sorted(p.name for p in mnt.iterdir()) == ["a.html", "b.html"]
        assert (mnt / "b.html").read_text() == "<html>b</html>"
    finally:
        m.umount()
