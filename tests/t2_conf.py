"""webfs.conf is checked at mkfs, mount and every command, and unclear errors
are one line naming the file and the next step (issue 11, items 2 and 8)."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import cases, make_archive, webfs, webfs_here
from records_helpers import read_manifest

from webfs import archive as archmod
from webfs.mkfs import mkfs


def _set(disks, key: str, value: str) -> None:
    """Put key = value in [archive] of webfs.conf on every disk."""
    for d in disks:
        p = Path(d) / "webfs.conf"
        text = p.read_text()
        text, n = re.subn(rf"^{key} = .*$", f"{key} = {value}", text, flags=re.M)
        if not n:
            text = text.replace("[archive]\n", f"[archive]\n{key} = {value}\n", 1)
        p.write_text(text)


def _archive_with(tmp_path, files: dict[str, bytes]) -> tuple[list[Path], Path]:
    """A 4-disk archive holding files (stored by webfs import into DISK:/, no
    mount needed), and an empty directory to try mounting it on."""
    disks = make_archive(tmp_path)
    src = tmp_path / "src"
    src.mkdir()
    for name, data in files.items():
        (src / name).write_bytes(data)
    webfs_here("import", f"{src}/", f"{disks[0]}:/")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    return disks, mnt


def _one_line_error(proc, *must) -> str:
    assert proc.returncode != 0
    err = proc.stderr.decode()
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    for m in must:
        assert m in lines[0], (m, lines[0])
    return lines[0]


BAD_VALUES = [
    ("max_block", "0"), ("max_block", "-5"), ("max_block", "12x"), ("max_block", "99999999999999"),
    ("group_size", "0"), ("group_size", "-3"), ("group_size", "99"), ("group_size", "two"),
    ("depth", "1"), ("depth", "7"), ("level", "0"), ("level", "12"), ("codec", "zstd"),
    ("store_mode", "sometimes"), ("catalog", "7"), ("catalog", "-1"), ("generation", "-2"),
    ("format", "2"), ("uuid", "not-a-uuid"),
]


@pytest.mark.parametrize("key,value", cases(BAD_VALUES))
def test_a_bad_value_in_webfs_conf_is_refused_naming_file_key_value_and_range(tmp_path, key, value):
    disks = make_archive(tmp_path)
    _set(disks, key, value)
    conf = str(disks[0] / "webfs.conf")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    try:
        for cmd in (["status", disks[0]], ["sync", disks[0]], ["mount", disks[0], mnt]):
            line = _one_line_error(webfs_here(*cmd, check=False), conf, key, value)
            if key != "format":
                assert "allowed" in line, line
    finally:
        if os.path.ismount(mnt):
            webfs("umount", mnt, check=False)


def test_a_bad_disk_weight_is_refused(tmp_path):
    disks = make_archive(tmp_path, disks=2)
    for d in disks:
        p = d / "webfs.conf"
        p.write_text(p.read_text().replace("weight = 1.0", "weight = -4", 1))
    _one_line_error(webfs_here("status", disks[0], check=False), "webfs.conf", "weight", "-4", "allowed")


def test_the_daemon_never_sees_max_block_zero(tmp_path):
    """Item 2b: max_block = 0 killed the daemon at the first read; now the mount refuses."""
    disks, mnt = _archive_with(tmp_path, {"f": b"x" * 5000})
    _set(disks, "max_block", "0")
    try:
        _one_line_error(webfs("mount", disks[0], mnt, check=False), "max_block", "0")
        assert not os.path.ismount(mnt)
    finally:
        if os.path.ismount(mnt):
            webfs("umount", mnt, check=False)


def test_mkfs_checks_its_values_against_the_same_table(tmp_path):
    with pytest.raises(archmod.ArchiveError, match="max_block"):
        mkfs([str(tmp_path / "a"), str(tmp_path / "b")], max_block=0)
    assert not (tmp_path / "a" / "webfs.conf").exists()
    with pytest.raises(archmod.ArchiveError, match="level"):
        mkfs([str(tmp_path / "c"), str(tmp_path / "d")], level=42)


def test_changing_max_block_after_files_are_stored_is_refused(tmp_path):
    """Pieces are found by offset // max_block: another value would read wrong bytes."""
    disks, _ = _archive_with(tmp_path, {"f": os.urandom(3 << 20)})
    _set(disks, "max_block", str(1 << 20))
    _one_line_error(webfs_here("status", disks[0], check=False), "max_block", str(4 << 20))


def test_garbage_webfs_conf_gives_one_printable_line(tmp_path):
    disks = make_archive(tmp_path)
    conf = disks[0] / "webfs.conf"
    conf.write_bytes(os.urandom(3000).replace(b"\n", b"\x00") + b"\n[archive\x07\xff\n")
    proc = webfs_here("status", disks[0], check=False)
    line = _one_line_error(proc, str(conf))
    assert line.isprintable(), repr(line)
    assert len(line.replace(str(tmp_path), "")) < 250     # none of the 3,000 bytes; the paths vary (TMPDIR)
    assert "another disk" in line          # the next step: the other disks hold copies


def test_truncated_webfs_conf_names_the_key(tmp_path):
    disks = make_archive(tmp_path)
    conf = disks[0] / "webfs.conf"
    text = conf.read_text()
    cut = text.index("group_size = ") + len("group_size = ")
    conf.write_text(text[:cut])
    line = _one_line_error(webfs_here("status", disks[0], check=False), str(conf), "group_size")
    assert "invalid literal" not in line


def test_webfs_conf_cut_before_the_disks_is_refused(tmp_path):
    disks = make_archive(tmp_path)
    conf = disks[0] / "webfs.conf"
    text = conf.read_text()
    conf.write_text(text[:text.index("[disk 0]")])
    _one_line_error(webfs_here("status", disks[0], check=False), str(conf), "disk")


def test_random_bytes_in_catalog_db(tmp_path):
    disks = make_archive(tmp_path)
    db = disks[0] / "meta" / "catalog.db"
    db.write_bytes(os.urandom(8192))
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    try:
        for cmd in (["status", disks[0]], ["sync", disks[0]], ["scrub", disks[0]],
                    ["mount", disks[0], mnt], ["put", disks[0], db]):
            line = _one_line_error(webfs_here(*cmd, check=False), str(db), "--rebuild-catalog")
            assert "file is not a database" != line.strip()
    finally:
        if os.path.ismount(mnt):
            webfs("umount", mnt, check=False)


def test_an_empty_catalog_db_is_not_taken_for_an_empty_archive(tmp_path):
    """A 0-byte catalog would open as a new, empty namespace and the next
    checkpoint would write empty MANIFESTs over the real ones."""
    disks, mnt = _archive_with(tmp_path, {"keep": b"precious"})
    db = disks[0] / "meta" / "catalog.db"
    db.write_bytes(b"")
    try:
        _one_line_error(webfs("mount", disks[0], mnt, check=False), str(db), "--rebuild-catalog")
    finally:
        if os.path.ismount(mnt):
            webfs("umount", mnt, check=False)
    assert b"keep" in read_manifest(disks[1] / "meta")


def test_catalog_check_is_one_function_fsck_can_call(tmp_path):
    from webfs.catalogfile import CatalogUnreadable, check_catalog_file
    disks = make_archive(tmp_path)
    db = disks[0] / "meta" / "catalog.db"
    check_catalog_file(str(db))
    db.write_bytes(os.urandom(4096))
    with pytest.raises(CatalogUnreadable, match="--rebuild-catalog"):
        check_catalog_file(str(db))


@pytest.mark.parametrize("given", [0, 1])
def test_missing_webfs_disk_on_the_catalog_disk_advises_restoring_it(tmp_path, given):
    disks = make_archive(tmp_path)
    ident = (disks[0] / "WEBFS-DISK").read_text()
    (disks[0] / "WEBFS-DISK").unlink()
    line = _one_line_error(webfs_here("status", disks[given], check=False), "WEBFS-DISK")
    assert "--rebuild-catalog" not in line, line
    assert str(disks[0]) in line
    # The advice works: do what it says, and the archive opens again.
    m = re.search(r"printf '([^']*)' > (\S+)", line)
    assert m, line
    os.system(f"printf '{m.group(1)}' > {m.group(2)}")
    got = (disks[0] / "WEBFS-DISK").read_text()
    assert got.splitlines()[:4] == ident.splitlines()[:4]
    webfs_here("status", disks[given])


def test_mkfs_of_one_disk_warns_that_there_is_no_parity(tmp_path):
    proc = webfs_here("mkfs", tmp_path / "only")
    err = proc.stderr.decode()
    assert "no parity" in err and "add-disk" in err, err
    proc = webfs_here("mkfs", tmp_path / "a", tmp_path / "b")
    assert b"parity" not in proc.stderr


def test_every_conf_key_and_range_is_in_webfs_format_5():
    """One source of truth: the table in archive.py; the man page must agree."""
    text = (Path(__file__).resolve().parent.parent / "man" / "webfs-format.5").read_text()
    text = text.replace("\\-", "-")
    for key in [*archmod.ARCHIVE_KEYS.values(), *archmod.DISK_KEYS.values(), archmod.DISK_INDEX]:
        assert key.name.split()[0] in text, key.name
        if key.kind == "int" and key.low != key.high:
            assert f"{key.low} to {key.high}" in text, key
        if key.kind == "float":
            assert f"{key.low:g} to {key.high:g}" in text, key
        for choice in key.choices:
            assert choice in text, (key.name, choice)


@pytest.mark.parametrize("text,says", [
    ("this is not a configuration\n", "no [archive] header at line 1"),
    ("[archive]\nuuid = 1\n  indented junk\nnot a key\n", "line 4"),
    ("[archive]\ndepth = 3\ndepth = 4\n", "a key given twice at line 3"),
])
def test_text_that_is_not_a_webfs_conf_says_where(tmp_path, text, says):
    disks = make_archive(tmp_path, disks=2)
    (disks[0] / "webfs.conf").write_text(text)
    line = _one_line_error(webfs_here("status", disks[0], check=False), str(disks[0] / "webfs.conf"), says)
    assert f"cp {disks[1] / 'webfs.conf'}" in line, line


def test_a_mount_asks_the_catalog_file_into_the_page_cache(tmp_path):
    """catalogfile.prefetch: a catalog file whose pages were dropped from the
    kernel's cache is read back in (fincore counts them), in the background;
    a path that is not there is passed over without a word."""
    import shutil
    import subprocess
    import time
    from webfs.catalogfile import prefetch
    if not shutil.which("fincore"):
        pytest.skip("fincore (util-linux) is not installed")
    path = tmp_path / "catalog.db"
    path.write_bytes(os.urandom(4 << 20))

    def resident() -> int:
        out = subprocess.run(["fincore", "--bytes", "--noheadings", "--output", "RES", str(path)],
                             capture_output=True, text=True, check=True).stdout
        return int(out.split()[0])
    fd = os.open(path, os.O_RDONLY)
    os.fsync(fd)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)
    assert resident() < 1 << 20
    prefetch(str(path))
    deadline = time.monotonic() + 60
    while resident() < 4 << 20 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert resident() == 4 << 20
    prefetch(str(tmp_path / "absent.db"))


def _tree_digest(root: Path) -> dict[str, bytes]:
    """Every file under root and its bytes (and a directory's name): what a
    command must leave as it was."""
    out = {}
    for p in sorted(root.rglob("*")):
        out[str(p.relative_to(root))] = p.read_bytes() if p.is_file() and not p.is_symlink() else b"<dir>"
    return out


def test_a_copy_of_an_archive_uses_its_own_disks_never_the_originals(tmp_path):
    """cp -a of an archive's directory is a working copy: opened through one of
    its disks, it finds its other disks beside it, although webfs.conf records
    the original's paths (which it looked at first, and so changed the
    original's disks: blocks and parity of the copy's writes there, the
    original's catalog no longer matching them)."""
    disks, _ = _archive_with(tmp_path / "orig", {"a.html": b"<p>one</p>", "b.html": b"<p>two</p>" * 500})
    copy = tmp_path / "copy"
    subprocess.run(["cp", "-a", tmp_path / "orig", copy], check=True)
    before = {d.name: _tree_digest(d) for d in disks}
    status = json.loads(webfs_here("status", "--json", str(copy / disks[0].name)).stdout)
    assert sorted(d["path"] for d in status["disks"]) == sorted(str(copy / d.name) for d in disks)
    src = tmp_path / "more"
    src.mkdir()
    (src / "c.html").write_bytes(b"<p>three</p>" * 300)
    webfs_here("import", f"{src}/", f"{copy / disks[0].name}:/new/")
    assert webfs("fsck", copy / disks[0].name, check=False).returncode == 0
    assert {d.name: _tree_digest(d) for d in disks} == before
    assert webfs("fsck", disks[0], check=False).returncode == 0


@pytest.mark.parametrize("where", ["elsewhere", "beside"])
def test_a_copy_of_one_disk_is_not_opened_with_the_originals_other_disks(tmp_path, where):
    """A copy of one disk (kept as a backup, elsewhere or beside the original)
    whose other disks are found only at their own places, the original's, is
    refused in one line that says so: opened, its commands and mount would
    write the copy's catalog's view onto the original's disks."""
    disks, mnt = _archive_with(tmp_path / "orig", {"a.html": b"<p>one</p>"})
    copy = (tmp_path / "backup" / disks[0].name) if where == "elsewhere" else disks[0].with_name("d0.bak")
    copy.parent.mkdir(exist_ok=True)
    subprocess.run(["cp", "-a", disks[0], copy], check=True)
    before = {d.name: _tree_digest(d) for d in disks}
    for args in (["status", copy], ["fsck", "--repair", copy], ["import", tmp_path / "orig" / "src", f"{copy}:/x/"],
                 ["mount", copy, mnt]):
        proc = webfs(*args, check=False)
        err = proc.stderr.decode()
        assert proc.returncode != 0 and "Traceback" not in err, (args, err)
        assert f"{copy} is a copy of disk 0, which is still at {disks[0]}" in err, (args, err)
        assert "would change the original" in err and len(err.strip().splitlines()) == 1, (args, err)
    assert {d.name: _tree_digest(d) for d in disks} == before
    assert not os.path.ismount(mnt)


def test_a_moved_archive_and_a_moved_disk_are_found(tmp_path):
    """What looking beside the given disk is for stays: an archive whose
    directory was moved (mv) opens from any of its disks, and a disk moved
    alone (its old place gone) finds the others at their recorded paths."""
    disks, _ = _archive_with(tmp_path / "orig", {"a.html": b"<p>one</p>"})
    moved = tmp_path / "moved"
    os.rename(tmp_path / "orig", moved)
    status = json.loads(webfs_here("status", "--json", str(moved / disks[2].name)).stdout)
    assert sorted(d["path"] for d in status["disks"]) == sorted(str(moved / d.name) for d in disks)
    os.rename(moved, tmp_path / "orig")
    alone = tmp_path / "newdrive" / disks[0].name
    alone.parent.mkdir()
    os.rename(disks[0], alone)
    status = json.loads(webfs_here("status", "--json", str(alone)).stdout)
    assert sorted(d["path"] for d in status["disks"]) == sorted([str(alone)] + [str(d) for d in disks[1:]])
    assert webfs("fsck", alone, check=False).returncode == 0


def test_a_disk_of_another_archive_in_a_disks_place_is_said_to_be_one(tmp_path):
    """A disk's place holding a disk of another archive (h1/disk3 replaced by a
    copy of h2/disk3): the missing disk is not "not found" there, a disk is
    there that is another archive's, and the message says which."""
    h1, h2 = make_archive(tmp_path / "h1"), make_archive(tmp_path / "h2")
    other = archmod.read_disk_id(str(h2[3]))["Archive"]
    shutil.rmtree(h1[3])
    shutil.copytree(h2[3], h1[3], symlinks=True)
    err = webfs_here("status", h1[0], check=False).stderr.decode()
    assert f"disk 3 ({archmod.read_disk_id(str(h2[3]))['Disk']}) " not in err, err    # h1's disk 3 is missing
    assert f"is missing: at {h1[3]} is a disk of another archive ({other})" in err, err
    assert "not found" not in err, err
    shutil.rmtree(h1[3])                            # nothing there: "not found", as before
    err = webfs_here("status", h1[0], check=False).stderr.decode()
    assert f"is missing: not found at {h1[3]} nor beside {h1[0]}" in err, err
