"""webfs stream through a real mount: killed at random points and resumed, the
concatenated output holds every page of the snapshot exactly once, while
cp -r adds pages and webfs cool moves groups beside it."""
from __future__ import annotations

import io
import os
import random
import re
import subprocess
import tarfile

import pytest

from conftest import BIN, Mounted, webfs


def make_crawl(root, name: str, n: int):
    for i in range(n):
        p = root / name / "http" / f"site{i % 7}.example" / f"p{i}.html@20140301000000"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"<title>page %d</title>%s" % (i, os.urandom(200).hex().encode()))
    return root / name


def run_until(args, kill_after, out) -> tuple[str, int] | None:
    """Run webfs stream; SIGKILL it after ``kill_after`` pages (None: to the end).
    The last (token, bytes) it printed, None if it finished."""
    proc = subprocess.Popen([str(BIN / "webfs"), "stream", *map(str, args)], stdout=out,
                            stderr=subprocess.PIPE)
    last, seen = None, 0
    for line in proc.stderr:
        if line.startswith(b"resume "):
            _, token, written = line.split()
            last, seen = (token.decode(), int(written)), seen + 1
            if kill_after is not None and seen >= kill_after:
                proc.kill()
                break
    proc.wait()
    return last if kill_after is not None and seen >= kill_after else None


def busy_beside(m, later, log):
    """cp -r of a new crawl into the mount, and reads then webfs cool, five times."""
    old = m.mnt / "old" / "http"
    return subprocess.Popen(
        f"cp -r '{later}' '{m.mnt}/' && for i in 1 2 3 4 5; do cat '{old}'/site[0-2].example/* >/dev/null; "
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
