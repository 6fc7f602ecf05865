"""The webfs command as a user runs it: mkfs, put, get, delete, status, fsck."""
from __future__ import annotations

import json
import os
import subprocess


from conftest import BIN, webfs, webfs_here


def test_help_everywhere():
    for cmd in ([], ["mkfs"], ["status"], ["fsck"], ["put"], ["get"], ["delete"]):
        out = webfs(*cmd, "--help").stdout.decode()
        assert "Usage: webfs" in out


def test_wrong_arguments_are_usage_errors(tmp_path):
    assert webfs("frobnicate", check=False).returncode == 2
    assert webfs("mkfs", check=False).returncode == 2
    assert webfs("mkfs", "--depth", "9", tmp_path / "d", check=False).returncode == 2
    proc = webfs("mkfs", "--group-size", "7", tmp_path / "a", tmp_path / "b", check=False)
    assert proc.returncode == 1 and b"group-size" in proc.stderr


def test_a_bad_setting_in_the_environment_is_one_line_and_touches_nothing(tmp_path):
    """The command line reads the S3 settings at its start: a value that is not
    one stops the command with a line naming the variable (exit 1), before
    any disk is made; a bad -o setting of a mount likewise, before it mounts;
    mount.webfs says the same as a mount failure (32)."""
    env = dict(os.environ, WEBFS_S3_REQUESTS="many")
    proc = webfs("mkfs", tmp_path / "d0", env=env, check=False)
    assert proc.returncode == 1 and not (tmp_path / "d0").exists()
    assert proc.stderr.decode() == "webfs: WEBFS_S3_REQUESTS takes a whole number above 0, not 'many'\n"
    (tmp_path / "mnt").mkdir()
    proc = webfs("mount", "-o", "s3_requests=0", tmp_path, tmp_path / "mnt", check=False)
    assert proc.returncode == 1 and not os.path.ismount(tmp_path / "mnt")
    assert proc.stderr.decode() == "webfs: s3_requests takes a whole number above 0, not '0'\n"
    proc = subprocess.run([str(BIN / "mount.webfs"), str(tmp_path / "d0"), str(tmp_path / "mnt")],
                          env=dict(os.environ, WEBFS_LEASE_RENEW="soon"), capture_output=True)
    assert proc.returncode == 32
    assert proc.stderr.decode() == "mount.webfs: WEBFS_LEASE_RENEW='soon': not a number of seconds\n"


def test_mkfs_writes_identity_and_config_on_every_disk(tmp_path):
    dirs = [tmp_path / f"d{i}" for i in range(3)]
    webfs_here("mkfs", "--label", "crawls", "--depth", "2", *dirs)
    uuids = set()
    for i, d in enumerate(dirs):
        ident = (d / "WEBFS-DISK").read_text()
        assert ident.startswith("WEBFS-DISK 1\n") and f"Index: {i}\n" in ident
        assert "Label: crawls" in ident
        uuids.add((d / "webfs.conf").read_text())
    assert len(uuids) == 1                          # the same configuration everywhere
    assert "depth = 2" in uuids.pop()


def test_mkfs_refuses_non_empty_and_existing(tmp_path):
    d = tmp_path / "d"
    d.mkdir()
    (d / "precious").write_text("keep me")
    proc = webfs_here("mkfs", d, check=False)
    assert proc.returncode == 1 and b"not empty" in proc.stderr
    webfs_here("mkfs", tmp_path / "e")
    proc = webfs_here("mkfs", tmp_path / "e", check=False)
    assert proc.returncode == 1 and b"existing webfs disk" in proc.stderr
    webfs_here("mkfs", "--force", d)
    assert (d / "precious").read_text() == "keep me"


def test_mkfs_force_replaces_planted_symlinks_never_follows_them(tmp_path):
    """--force replaces webfs's own names: a symlink (or a file) planted at
    meta, blocks or parity goes itself, as one at WEBFS-DISK does, and a real
    directory is made there; nothing is written where it pointed."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious").write_text("keep me")
    d0, d1 = tmp_path / "m0", tmp_path / "m1"
    d0.mkdir()
    d1.mkdir()
    (d0 / "meta").symlink_to("../outside")
    (d1 / "blocks").symlink_to("../outside")
    (d1 / "parity").symlink_to(outside / "parity")          # dangling: nothing made there
    (d0 / "WEBFS-DISK").symlink_to(outside / "precious")
    webfs_here("mkfs", "--force", d0, d1)
    assert sorted(os.listdir(outside)) == ["precious"]
    assert (outside / "precious").read_text() == "keep me"
    assert (d0 / "meta").is_dir() and not (d0 / "meta").is_symlink()
    assert (d0 / "meta" / "catalog.db").is_file()
    assert not os.path.lexists(d1 / "blocks") and not os.path.lexists(d1 / "parity")
    src = tmp_path / "page.html"
    src.write_text("<p>hello</p>")
    key = webfs_here("put", d0, src).stdout.decode().split("\t")[0]
    assert webfs_here("get", d0, key).stdout == b"<p>hello</p>"
    assert sorted(os.listdir(outside)) == ["precious"]


def test_mkfs_on_a_dangling_symlink_says_so_and_follows_a_good_one(tmp_path):
    """A DISK that is a symlink is followed to its directory (the archive is
    made there); one to a missing directory is one line naming it, and
    nothing is made."""
    (tmp_path / "sdx").symlink_to(tmp_path / "nowhere")
    proc = webfs_here("mkfs", tmp_path / "sdx", check=False)
    said = proc.stderr.decode()
    assert proc.returncode == 1 and said.count("\n") == 1, said
    assert said.startswith(f"webfs: {tmp_path}/sdx: a symlink to a missing directory"), said
    assert not os.path.lexists(tmp_path / "nowhere")
    (tmp_path / "real").mkdir()
    (tmp_path / "sdy").symlink_to("real")
    webfs_here("mkfs", tmp_path / "sdy")
    assert (tmp_path / "real" / "WEBFS-DISK").is_file() and (tmp_path / "real" / "meta").is_dir()


def test_mkfs_on_a_read_only_filesystem_is_one_line(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(ro)], check=True)
    try:
        proc = webfs("mkfs", ro, check=False)
    finally:
        subprocess.run(["umount", str(ro)], check=True)
    said = proc.stderr.decode()
    assert proc.returncode == 1 and said.count("\n") == 1 and "Read-only file system" in said, said
    assert said.startswith(f"webfs: {ro}/"), said


def test_put_get_delete_status(tmp_path, disks):
    page = tmp_path / "page.html"
    page.write_bytes(b"<html>" + b"the web " * 2000 + b"</html>")
    img = tmp_path / "img.png"
    img.write_bytes(b"\x89PNG\r\n\x1a\n" + os.urandom(30000))
    out = webfs_here("put", disks[1], page, img, page).stdout.decode().splitlines()
    keys = [line.split("\t")[0] for line in out]
    assert keys[0] == keys[2]
    assert webfs_here("get", disks[3], keys[0]).stdout == page.read_bytes()
    assert webfs_here("get", disks[0], keys[1].split("@")[0]).stdout == img.read_bytes()
    st = json.loads(webfs_here("status", "--json", disks[2]).stdout)
    assert st["blocks"] == 2 and st["references"] == 3
    assert st["dedup_ratio"] > 1 and st["compression_ratio"] > 1
    assert len(st["disks"]) == 4
    text = webfs_here("status", disks[0]).stdout.decode()
    assert "dedup ratio" in text and "compression ratio" in text
    assert webfs_here("delete", disks[0], keys[0]).stdout.decode().endswith("1 reference(s) left\n")
    webfs_here("delete", disks[0], keys[0])
    proc = webfs_here("get", disks[0], keys[0], check=False)
    assert proc.returncode == 1 and b"no block" in proc.stderr
    assert webfs_here("fsck", disks[0]).returncode == 0


def test_get_with_bad_key_or_not_an_archive(tmp_path, disks):
    assert webfs_here("get", disks[0], "nothex", check=False).returncode == 2
    proc = webfs_here("status", tmp_path, check=False)
    assert proc.returncode == 1 and b"not a webfs disk" in proc.stderr


def test_dd_gunzip_reads_a_block_written_by_put(tmp_path, disks):
    page = tmp_path / "page.html"
    page.write_bytes(b"<html><p>" + b"an archived page " * 500 + b"</p></html>\n")
    key = webfs_here("put", disks[0], page).stdout.decode().split("\t")[0]
    sig, disk = key.split("@")
    block = disks[int(disk)] / "blocks" / sig[:2] / sig[2:4] / sig[4:]
    assert block.read_bytes()[:13] == b"WEBFS-BLOCK 1"
    out = subprocess.run(f"dd if='{block}' bs=512 skip=1 2>/dev/null | gunzip", shell=True,
                         capture_output=True, check=True).stdout
    assert out == page.read_bytes()


def _put_some(tmp_path, disks, n=20):
    files = []
    for i in range(n):
        f = tmp_path / f"p{i}.html"
        f.write_bytes(f"<html>page {i}</html>".encode() * (50 + i))
        files.append(f)
    out = webfs_here("put", disks[0], *files).stdout.decode().splitlines()
    return [line.split("\t")[0] for line in out]


def _block_path(disks, key):
    sig, disk = key.split("@")
    return disks[int(disk)] / "blocks" / sig[:2] / sig[2:4] / sig[4:]


def test_fsck_finds_each_injected_fault_and_repairs_refs_and_orphans(tmp_path, disks):
    keys = _put_some(tmp_path, disks)
    assert webfs_here("fsck", disks[0]).returncode == 0
    # 1. wrong Refs in a header
    p = _block_path(disks, keys[0])
    p.write_bytes(p.read_bytes().replace(b"Refs: 0000000001", b"Refs: 0000000007"))
    # 2. an orphan: a valid block file no catalog row knows
    from webfs.block import BlockHeader
    from webfs.signature import signature
    from webfs.volume import Volume
    from webfs.backends import open_backend
    doc = b"nobody refers to me"
    Volume(open_backend(str(disks[2])), 2, "x", 3).write_block(
        BlockHeader(signature(doc), len(doc), len(doc), "identity", 1, "2026-01-01T00:00:00Z"), doc)
    # 3. a leftover temporary file
    (p.parent / (p.name + ".123.webfs-tmp")).write_bytes(b"half")
    # 4. a corrupt payload (parity mends it) and 5. a missing block, on the
    # same disk, so not in the same parity stripe: two of the 18 keys left
    # on one of the 4 disks (placement follows the disks' random uuids, so
    # which two is the run's: the first two was short of one in ~1 % of runs)
    damaged, gone = next((a, b) for i, a in enumerate(keys[2:], 2) for b in keys[i + 1:]
                         if a.split("@")[1] == b.split("@")[1])
    bad = _block_path(disks, damaged)
    raw = bytearray(bad.read_bytes()); raw[-5] ^= 0x55; bad.write_bytes(raw)
    _block_path(disks, gone).unlink()
    proc = webfs_here("fsck", disks[0], check=False)
    out = proc.stdout.decode()
    assert proc.returncode == 4, out
    for kind in ("refs:", "orphan:", "leftover:", "corrupt:", "missing:"):
        assert kind in out, (kind, out)
    proc = webfs_here("fsck", "--repair", disks[0], check=False)
    out = proc.stdout.decode()
    assert proc.returncode == 1, out                  # all found, all repaired
    assert "orphan" in out and "[repaired]" in out and "NOT repaired" not in out
    proc = webfs_here("fsck", disks[0], check=False)
    assert proc.returncode == 0, proc.stdout.decode()
    assert webfs_here("get", disks[0], damaged).stdout == (tmp_path / f"p{keys.index(damaged)}.html").read_bytes()
    assert webfs_here("get", disks[0], gone).stdout == (tmp_path / f"p{keys.index(gone)}.html").read_bytes()


def test_fsck_checks_the_digests_of_headers_and_catalog(tmp_path, disks):
    """A header whose Digest is not its content's is a damaged block (mended
    from parity, header from the catalog); a catalog digest that is not the
    content's is a 'digest' finding, set from the content by --repair, after
    which the document is a duplicate of its block again."""
    import hashlib
    import sqlite3
    keys = _put_some(tmp_path, disks)
    doc0, doc1 = (tmp_path / "p0.html").read_bytes(), (tmp_path / "p1.html").read_bytes()
    p = _block_path(disks, keys[0])
    right = hashlib.sha256(doc0).hexdigest().encode()
    p.write_bytes(p.read_bytes().replace(b"Digest: sha256:" + right, b"Digest: sha256:" + b"0" * 64))
    db = sqlite3.connect(disks[0] / "meta" / "catalog.db")
    db.execute("UPDATE blocks SET sha256=? WHERE sig=?", (b"\x01" * 32, bytes.fromhex(keys[1].split("@")[0])))
    db.commit()
    db.close()
    out = webfs_here("fsck", disks[0], check=False).stdout.decode()
    assert "corrupt:" in out and "does not match its Digest" in out, out
    assert "digest:" in out and "the catalog's digest is not the content's" in out, out
    proc = webfs_here("fsck", "--repair", disks[0], check=False)
    assert proc.returncode == 1 and "NOT repaired" not in proc.stdout.decode(), proc.stdout.decode()
    assert webfs_here("fsck", disks[0], check=False).returncode == 0
    assert right in p.read_bytes()[:512]
    again = webfs_here("put", disks[0], tmp_path / "p1.html").stdout.decode().split("\t")[0]
    assert again == keys[1]                           # the same block, not an overflow
    assert webfs_here("get", disks[0], keys[0]).stdout == doc0 and webfs_here("get", disks[0], keys[1]).stdout == doc1


def test_fsck_refuses_while_the_archive_is_held(disks):
    from webfs.assembly import open_archive
    s = open_archive(str(disks[0]), holder="webfs mount on /mnt/x")
    try:
        for args in ((), ("--repair",)):        # not run: exit 8, not 1 ("all repaired")
            proc = webfs_here("fsck", *args, disks[1], check=False)
            assert proc.returncode == 8 and b"in use" in proc.stderr and b"/mnt/x" in proc.stderr
    finally:
        s.close()


def test_a_command_without_a_terminal_draws_no_bar_and_imports_no_tqdm(tmp_path):
    """A script's command (stderr not a terminal) gets the bar's stand-in:
    tqdm is not even imported (its import is some 55 ms of every command's
    start), and a problem line still reaches stderr as it is met."""
    webfs("mkfs", tmp_path / "d0")
    src = tmp_path / "src"
    (src / ".webfs").mkdir(parents=True)        # the root's .webfs is webfs's own: a problem line
    (src / "page.html").write_bytes(b"<p>hello</p>")
    run = ("import sys\nfrom webfs.cli import main\n"
           "try:\n    main(sys.argv[1:])\n"
           "finally:\n    print('tqdm' in sys.modules, file=sys.stderr)\n")
    proc = subprocess.run([str(BIN / "python"), "-c", run, "import", f"{src}/", f"{tmp_path / 'd0'}:/"],
                          capture_output=True)
    err = proc.stderr.decode()
    assert proc.returncode == 4, err
    assert err.splitlines()[0].endswith(".webfs: the name .webfs in the root is webfs's own (EEXIST); not walked")
    assert err.splitlines()[-1] == "False"


def test_fsck_and_scrub_name_the_files_whose_content_is_left_damaged(tmp_path, disks):
    """A damaged block is reported by its file name on the disk; what a user has
    to restore is the files that hold it: both names of a page stored once
    (two copies of a crawl), not the other pages. --repair that mends it
    names none; damage left (a scrub without --repair) names them again."""
    src = tmp_path / "src"
    for crawl in ("crawl-1", "crawl-2"):
        (src / crawl).mkdir(parents=True)
        (src / crawl / "hit.html").write_bytes(b"<html>the page that is hit</html>" * 40)
    (src / "crawl-1" / "fine.html").write_bytes(b"<html>a page left alone</html>" * 40)
    webfs_here("import", src, f"{disks[0]}:/")
    # the one block of both hit.html (its header's Name: hint is one of them)
    blocks = [p for d in disks for p in (d / "blocks").rglob("*")
              if p.is_file() and b"/hit.html\n" in p.read_bytes()[:512]]
    assert len(blocks) == 1, blocks
    data = bytearray(blocks[0].read_bytes())
    data[-12] ^= 0xFF
    blocks[0].write_bytes(bytes(data))
    for cmd in (("fsck",), ("scrub",)):
        proc = webfs_here(*cmd, disks[0], check=False)
        out = proc.stdout.decode()
        assert proc.returncode == 4, out
        assert "2 file(s) hold content in those blocks (left damaged or lost):\n" \
               "  /src/crawl-1/hit.html\n  /src/crawl-2/hit.html\n" in out, out
        assert "fine.html" not in out
    got = json.loads(webfs_here("scrub", "--json", disks[0], check=False).stdout)["figures"]
    assert (got["files_hit"], got["files_hit_shown"]) == (2, ["/src/crawl-1/hit.html", "/src/crawl-2/hit.html"])
    proc = webfs_here("fsck", "--repair", disks[0], check=False)
    assert proc.returncode == 1 and "file(s) hold content" not in proc.stdout.decode(), proc.stdout.decode()
    assert webfs_here("fsck", disks[0]).returncode == 0
