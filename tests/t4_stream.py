"""webfs stream and export-warc over a subset through a real mount: killed at
random points and resumed, the concatenated output holds every page (every
capture's record) of the snapshot exactly once, while cp -r and import-warc
add pages and webfs cool moves groups beside it."""
from __future__ import annotations

import io
import os
import random
import re
import subprocess
import tarfile

import pytest

from conftest import BIN, Mounted, webfs
from t2_warc import records_of, write_warc
from t2_warc_export import gzip_members, run_until


def make_crawl(root, name: str, n: int):
    for i in range(n):
        p = root / name / "http" / f"site{i % 7}.example" / f"p{i}.html@20140301000000"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"<title>page %d</title>%s" % (i, os.urandom(200).hex().encode()))
    return root / name


def busy_beside(m, later, log, old="old"):
    """cp -r of a new crawl into the mount, then five times: reads of the
    files under ``old`` that live on disk 1, and webfs cool. Only one disk's
    files are read so that disk is hot and cooling has something to move
    (reads of every file heat every disk alike, and cool rightly says
    "balanced")."""
    hot = m.root / "hot-files"
    hot.write_text("".join(f"{p}\n" for p in sorted((m.mnt / old).rglob("*@*"))
                           if b"1" in os.getxattr(p, "user.webfs.disk").split(b",")))
    assert hot.stat().st_size > 0
    return subprocess.Popen(
        f"cp -r '{later}' '{m.mnt}/' && for i in 1 2 3 4 5; do xargs -d '\\n' cat <'{hot}' >/dev/null; "
        f"'{BIN}/webfs' cool --delta 0 '{m.mnt}' >>'{log}' 2>&1; done", shell=True)


@pytest.mark.parametrize("as_tar", [False, True], ids=["paths", "tar"])
def test_a_killed_stream_resumes_with_every_page_once(tmp_path, as_tar):
    m = Mounted(tmp_path, disks=3, mount=False)
    webfs("import", make_crawl(tmp_path / "src", "old", 400), f"{m.disks[0]}:/")
    m.mount()
    later, log = make_crawl(tmp_path / "src", "new", 300), tmp_path / "cool.log"
    beside, parts, token = None, [], None
    rng = random.Random(26 + as_tar)
    try:
        for run in range(11):
            out_path = tmp_path / f"part{run}"
            with open(out_path, "wb") as out:
                args = (["--resume", token[0]] if token else []) + (["--tar"] if as_tar else []) + [m.mnt]
                token = run_until(args, rng.randint(1, 60) if run < 10 else None, out)
            if beside is None:          # the stream has started: what cp -r adds now is not in it
                beside = busy_beside(m, later, log)
            data = out_path.read_bytes()
            parts.append(data[:token[1]] if token else data)
            if token is None:
                break
        assert run == 10                            # killed ten times, then ran to the end
        assert beside.wait() == 0 and (m.mnt / "new").is_dir()
        moved = [int(n) for n in re.findall(r"(\d+) group\(s\) moved", log.read_text())]
        assert sum(moved) > 0, log.read_text()      # cooling did move groups meanwhile
        src = tmp_path / "src" / "old"
        want = sorted(str(p.relative_to(src)) for p in src.rglob("*@*"))
        if as_tar:
            with tarfile.open(fileobj=io.BytesIO(b"".join(parts))) as tar:
                members = tar.getmembers()
                got = [t.name for t in members]
                for t in members:
                    assert tar.extractfile(t).read() == (tmp_path / "src" / t.name).read_bytes(), t.name
            got = [g.removeprefix("old/") for g in got]
        else:
            got = [g.removeprefix(f"{m.mnt}/old/") for g in b"".join(parts).decode().splitlines()]
        assert len(got) == len(set(got))            # nothing twice
        assert sorted(got) == want                  # nothing missed, nothing added after the start
    finally:
        if beside is not None:
            beside.wait()
        m.umount()


def test_a_token_that_is_not_one(tmp_path):
    m = Mounted(tmp_path, disks=2, mount=False)
    proc = webfs("stream", "--resume", "bm90IGEgdG9rZW4", m.disks[0], check=False)
    assert proc.returncode == 1 and b"not a token printed by webfs stream" in proc.stderr
    assert webfs("stream", "--query", "date:x", m.disks[0], check=False).returncode == 2


def test_a_killed_subset_export_resumes_with_every_record_once(tmp_path):
    """export-warc --host, killed ten times at random records (SIGKILL after a
    token) and resumed, while import-warc adds captures of the same host to the
    collection, cp -r adds pages and webfs cool moves groups: the finished OUT
    holds the records of the host's captures at the start, each once, each the
    very gzip member an uninterrupted export writes."""
    pages = [(f"http://site{i % 4}.org/p{i}.html", b"<html><title>p %d</title>%s</html>" % (i, os.urandom(300).hex().encode()))
             for i in range(240)]
    later_pages = [(f"http://site1.org/new{i}.html", b"<html>new %d</html>" % i) for i in range(60)]
    src = write_warc(tmp_path / "a.warc.gz", pages)
    later = write_warc(tmp_path / "b.warc.gz", later_pages, date="2024-02-01T12:00:00Z", start=1000)
    m = Mounted(tmp_path, disks=3, mount=False)
    webfs("import-warc", "--collection", "c", src, f"{m.disks[0]}:/")
    m.mount()
    crawl, log = make_crawl(tmp_path / "src", "plain", 200), tmp_path / "cool.log"
    whole = tmp_path / "whole.warc.gz"
    webfs("export-warc", "--host", "site1.org", m.mnt / "c", whole)
    out, token, beside, rng = tmp_path / "out.warc.gz", None, None, random.Random(2604)
    try:
        for run in range(11):
            args = (["--resume", token[0]] if token else ["--host", "site1.org"]) + [m.mnt / "c", out]
            token = run_until(args, rng.randint(1, 8) if run < 10 else None, command="export-warc")
            if beside is None:          # the export has started: what is added now is not in it
                webfs("import-warc", "--collection", "c", later, m.mnt)
                beside = busy_beside(m, crawl, log, "c")
            if token is None:
                break
            assert (tmp_path / "out.warc.gz.part").stat().st_size >= token[1]
        assert run == 10 and not (tmp_path / "out.warc.gz.part").exists()
        assert beside.wait() == 0
        assert sum(int(n) for n in re.findall(r"(\d+) group\(s\) moved", log.read_text())) > 0, log.read_text()
        got, want = gzip_members(out.read_bytes()), gzip_members(whole.read_bytes())
        assert len(got) == len(set(got)) == 60                  # the host's 60 captures, each once
        assert sorted(got) == sorted(want)                      # byte-identical per record
        by_id = {r["id"]: r for r in records_of(src)}
        for r in records_of(out):
            assert r == by_id[r["id"]] and "site1.org" in r["uri"]
        assert webfs("versions", "http://site1.org/new3.html", m.mnt).returncode == 0   # imported meanwhile
    finally:
        if beside is not None:
            beside.wait()
        m.umount()


def test_a_file_made_after_a_restart_is_not_in_a_stream_resumed_from_before(tmp_path):
    """The highest-numbered page removed, the daemon restarted, pages made: the
    new pages take numbers past the removed one (kept in the catalog: the
    numbers of a stream's snapshot are never given again), so a stream resumed
    from a token printed before the restart sends none of them."""
    m = Mounted(tmp_path, disks=2, mount=False)
    webfs("import", make_crawl(tmp_path / "src", "old", 30), f"{m.disks[0]}:/")
    m.mount()
    try:
        pages = lambda: {str(p): p.stat().st_ino for p in (m.mnt / "old").rglob("*@*")}
        highest = max(pages().values())
        with open(tmp_path / "first", "wb") as f:
            token = run_until([m.mnt], 1, f)
        first = (tmp_path / "first").read_bytes()[:token[1]].decode().splitlines()
        os.unlink(next(p for p, ino in pages().items() if ino == highest))
        m.remount()
        new = [m.mnt / "old" / "http" / "site0.example" / f"new{i}.html@20150301000000" for i in range(5)]
        for p in new:
            p.write_bytes(b"made after the stream began")
        assert min(p.stat().st_ino for p in new) > highest
        out = tmp_path / "rest"
        with open(out, "wb") as f:
            assert run_until(["--resume", token[0], m.mnt], None, f) is None
        sent = out.read_bytes().decode().splitlines()
        old = set(pages()) - {str(p) for p in new}
        assert len(first) == 1 and len(sent) == len(set(sent))
        assert set(sent) == old - set(first)        # none of the new pages, each old one once
    finally:
        m.umount()
