"""webfs stream through a real mount: killed at random points and resumed, the
concatenated output holds every page of the snapshot exactly once, while
cp -r adds pages and webfs cool moves groups beside it."""
from __future__ import annotations

import os
import random
import subprocess

from conftest import BIN, Mounted, webfs


def make_crawl(root, name: str, n: int):
    for i in range(n):
        p = root / name / "http" / f"site{i % 7}.example" / f"p{i}.html@20140301000000"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"<title>page %d</title>%s" % (i, os.urandom(200).hex().encode()))
    return root / name


def run_until(args, kill_after: int, out) -> tuple[str, int] | None:
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


def test_a_killed_stream_resumes_with_every_page_once(tmp_path):
    m = Mounted(tmp_path, disks=3, mount=False)
    webfs("import", make_crawl(tmp_path / "src", "old", 400), f"{m.disks[0]}:/")
    m.mount()
    later = make_crawl(tmp_path / "src", "new", 300)
    beside = None
    try:
        rng = random.Random(26)
        parts, token = [], None
        for run in range(11):
            out_path = tmp_path / f"part{run}"
            with open(out_path, "wb") as out:
                args = (["--resume", token[0]] if token else []) + [m.mnt]
                token = run_until(args, rng.randint(1, 60) if run < 10 else None, out)
            if beside is None:          # the stream has started: what cp -r adds now is not in it
                beside = subprocess.Popen(f"cp -r '{later}' '{m.mnt}/' && for i in 1 2 3 4 5; do "
                                          f"'{BIN}/webfs' cool --delta 0 '{m.mnt}' >/dev/null 2>&1; done",
                                          shell=True)
            data = out_path.read_bytes()
            parts.append(data[:token[1]] if token else data)
            if token is None:
                break
        assert run == 10                            # killed ten times, then ran to the end
        got = b"".join(parts).decode().splitlines()
        want = sorted(f"{m.mnt}/old/{p.relative_to(tmp_path / 'src' / 'old')}"
                      for p in (tmp_path / "src" / "old").rglob("*@*"))
        assert len(got) == len(set(got))            # nothing twice
        assert sorted(got) == want                  # nothing missed, nothing added after the start
        assert beside.wait() == 0
        assert (m.mnt / "new").is_dir()
    finally:
        if beside is not None:
            beside.wait()
        m.umount()
