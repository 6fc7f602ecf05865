"""webfs replay against plain pywb: pywb's own sample archive, imported into
a mount (every file alone, and all in one collection), replayed through
webfs and through `wb-manager add` + `wayback`, capture by capture (in the
collection of all, the captures whose answer may differ from their file's
own collection)."""
from __future__ import annotations

import collections
import http.client
import json
import os
import re
import subprocess
import time
import urllib.parse
from pathlib import Path
from typing import Optional

import pytest

from conftest import BIN, Mounted, webfs

SAMPLES = BIN.parent / "sample_archive" / "warcs"
pytestmark = pytest.mark.skipif(not (BIN / "wayback").exists() or not SAMPLES.is_dir(),
                                reason="pywb and its sample archive are not installed")


def free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(port: int, path: str, deadline: float = 60.0) -> tuple[int, bytes, str]:
    """(status, body, Location) of a GET on 127.0.0.1 (redirects not followed: the
    samples redirect off the machine), waiting up to the deadline for the server."""
    end = time.monotonic() + deadline
    while True:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        try:
            conn.request("GET", path)
            r = conn.getresponse()
            return r.status, r.read(), r.getheader("Location", "")
        except OSError:
            if time.monotonic() > end:
                raise AssertionError(f"{port}{path}: no answer in {deadline} s") from None
            time.sleep(0.2)
        finally:
            conn.close()


def same_host(answer: tuple[int, bytes, str], port: int) -> tuple[int, bytes, str]:
    """An answer with its server's own address (in links and redirects) made neutral."""
    status, body, location = answer
    me = f"127.0.0.1:{port}"
    return status, body.replace(me.encode(), b"PYWB"), location.replace(me, "PYWB")


def sample_files() -> list[Path]:
    """The sample WARC and ARC files that wb-manager takes."""
    return sorted(p for p in SAMPLES.iterdir() if re.search(r"\.(w?arc)(\.gz)?$", p.name))


def collection_name(p: Path) -> str:
    return "one-" + re.sub(r"\W", "-", p.name)


def captures(index: Path) -> list[tuple[str, str]]:
    """(timestamp, url) of every line of a CDXJ index."""
    out = []
    for line in index.read_text().splitlines():
        key, ts, fields = line.split(" ", 2)
        out.append((ts, json.loads(fields)["url"]))
    return out


def worth_comparing_in_all(index: Path) -> set[tuple[str, str]]:
    """The captures of the collection of every file whose answer may differ
    from their file's own collection (each of those is compared capture by
    capture): revisits (their original may be in another file), captures
    whose timestamp and URL more than one file holds (which one is served),
    and each file's first (every file is read through the collection)."""
    rows = []
    for line in index.read_text().splitlines():
        key, ts, fields = line.split(" ", 2)
        rows.append((ts, json.loads(fields)))
    files = collections.Counter()
    for ts, f in rows:
        files[ts, f["url"]] += 1
    keep, first = set(), set()
    for ts, f in rows:
        if f.get("mime") == "warc/revisit" or files[ts, f["url"]] > 1 or f["filename"] not in first:
            keep.add((ts, f["url"]))
        first.add(f["filename"])
    return keep


# wb-manager's own entry point, run for each command in one process: each
# wb-manager command alone spends most of a second importing pywb, and a
# reference of 16 collections is 32 commands (about 26 s of the suite).
WB_MANAGER_EACH = "import json, sys; from pywb.manager.manager import main; [main(a) for a in json.loads(sys.argv[1])]"


def reference_pywb(root: Path, colls: dict[str, list[Path]]) -> Path:
    """A pywb directory made as a user makes it: wb-manager init + add."""
    ref = root / "ref"
    ref.mkdir()
    commands = [c for coll, files in colls.items() for c in (["init", coll], ["add", coll, *map(str, files)])]
    subprocess.run([str(BIN / "python"), "-c", WB_MANAGER_EACH, json.dumps(commands)], cwd=ref, check=True,
                   capture_output=True)
    return ref


def test_replay_serves_what_plain_pywb_serves(tmp_path):
    files = sample_files()
    colls = {collection_name(p): [p] for p in files}
    colls["all"] = files
    m = Mounted(tmp_path, disks=3, mount=False)
    procs = []
    try:
        for coll, srcs in colls.items():
            res = webfs("import-warc", "--collection", coll, *srcs, f"{m.disks[0]}:/", check=False)
            assert res.returncode in (0, 4), res.stderr      # 4: problems reported (bad.arc)
        m.mount()
        ref = reference_pywb(tmp_path, colls)
        pw = tmp_path / "pw"
        ports = [free_port() for _ in range(3)]
        rep = subprocess.Popen([str(BIN / "webfs"), "replay", "--port", str(ports[0]), str(m.mnt), str(pw)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        procs.append(rep)
        said = b"".join(rep.stdout.readline() for _ in range(len(colls) + 2))
        assert b"now run" in said and b"-b 127.0.0.1" in said, said
        for d, port in ((pw, ports[1]), (ref, ports[2])):
            procs.append(subprocess.Popen([str(BIN / "wayback"), "-p", str(port), "-b", "127.0.0.1"], cwd=d,
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        compared, differ, revived = 0, [], []
        for coll in colls:
            want = captures(ref / "collections" / coll / "indexes" / "index.cdxj")
            # the same captures (lines of one key and second may come in another order:
            # their file names and offsets differ)
            assert sorted(captures(pw / "webfs-cdxj" / f"{coll}.cdxj")) == sorted(want), coll
            if coll == "all":
                subset = worth_comparing_in_all(ref / "collections" / coll / "indexes" / "index.cdxj")
                want = [c for c in want if c in subset]
            for ts, url in want:
                path = f"/{coll}/{ts}id_/{urllib.parse.quote(url, safe=':/?&=%@+,;~')}"
                ours, theirs = (same_host(get(port, path), port) for port in ports[1:])
                compared += 1
                if ours[0] >= 500 and ours[0] == theirs[0]:
                    continue        # an error page: it names each side's own files
                if (theirs[0], ours[0]) == (503, 200) and coll != "all":
                    # a revisit whose original another collection holds: pywb cannot load
                    # it, webfs shows it as "all" (which holds both) shows it
                    revived.append(path)
                    assert ours == same_host(get(ports[1], path.replace(f"/{coll}/", "/all/", 1)), ports[1])
                    continue
                if ours != theirs:
                    differ.append((path, ours[0], theirs[0], ours[1][:80], theirs[1][:80], ours[2], theirs[2]))
        assert not differ, "\n".join(map(repr, differ))
        assert compared > 300, compared
        assert any("url-agnostic-revisit" in p for p in revived), revived
    finally:
        for p in procs:
            p.terminate()
            p.wait(timeout=30)
        m.umount()


def replay_says(target: Path, pw: Path, *more: str) -> str:
    """What `webfs replay` prints before it serves (then it is stopped)."""
    return replay_said(target, pw, *more)[0]


def replay_said(target, pw: Path, *more: str) -> tuple[str, str]:
    """What `webfs replay` prints on stdout and on stderr before it serves (then it is stopped)."""
    proc = subprocess.Popen([str(BIN / "webfs"), "replay", "--port", str(free_port()), *more, str(target), str(pw)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        lines = []
        while not lines or not lines[-1].startswith(b"now run"):
            line = proc.stdout.readline()
            assert line, proc.stderr.read().decode()
            lines.append(line)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    return b"".join(lines).decode(), proc.stderr.read().decode()


def test_replay_indexes_again_only_what_changed(tmp_path):
    from t2_warc import write_warc
    m = Mounted(tmp_path, disks=3)
    try:
        pages = [(f"http://example.com/{i}", f"<html>page {i}</html>".encode()) for i in range(5)]
        webfs("import-warc", "--collection", "c", write_warc(tmp_path / "a.warc.gz", pages), m.mnt)
        pw = tmp_path / "pw"
        # the first start takes the lines import-warc kept, the next its own copy
        opens = lambda: json.loads(os.getxattr(m.mnt, "user.webfs.requests")).get("open", 0)  # noqa: E731
        before = opens()
        assert "(5 lines; 0 of 1 source file(s) indexed now, 1 as import-warc" in replay_says(m.mnt / "c", pw)
        # the kept lines are all it opens: the daemon laid the collection out (no .heads, .index read here)
        assert opens() - before == 1
        assert "(5 lines; 0 of 1 source file(s) indexed now, 0 as import-warc" in replay_says(m.mnt / "c", pw)
        later = [("http://example.com/new", b"<html>new</html>")]
        webfs("import-warc", "--collection", "c", write_warc(tmp_path / "b.warc.gz", later, start=100), m.mnt)
        webfs("import-warc", "--collection", "d", write_warc(tmp_path / "d.warc.gz", later, start=200), m.mnt)
        said = replay_says(m.mnt, pw, "--host", "127.0.0.1")
        assert "CDXJ index of c: " in said and "(6 lines; 0 of 2 source file(s) indexed now" in said
        assert "CDXJ index of d: " in said and "2 collection(s)" in said
        config = (pw / "config.yaml").read_text()
        assert "  c:\n" in config and "  d:\n" in config and "0.0.0.0" not in config
        # a capture deleted: its record leaves the virtual file, whose source is indexed again
        (m.mnt / "c" / "http" / "example.com" / "3@20240101120000").unlink()
        # (the kept lines of a.warc.gz are stale: replay indexes it itself, and keeps that)
        assert "(5 lines; 1 of 2 source file(s) indexed now, 0 as import-warc" in replay_says(m.mnt / "c", pw)
        assert "(5 lines; 0 of 2 source file(s) indexed now, 0 as import-warc" in replay_says(m.mnt / "c", pw)
        assert b"example.com/3" not in (pw / "webfs-cdxj" / "c.cdxj").read_bytes()
        # a collection's index made anew, byte for byte the same as the cached one
        cached = (pw / "webfs-cdxj" / "c.cdxj").read_bytes()
        fresh = tmp_path / "fresh"
        replay_says(m.mnt / "c", fresh)
        assert (fresh / "webfs-cdxj" / "c.cdxj").read_bytes() == cached
    finally:
        m.umount()


def test_replay_refuses_a_directory_without_collections(tmp_path):
    res = webfs("replay", tmp_path, tmp_path / "pw", check=False)
    assert res.returncode == 1 and b"no collection of web archive files here" in res.stderr


def replay_with_wayback(target: str, pw: Path, procs: list, said: Optional[list] = None) -> int:
    """`webfs replay TARGET PW` and `wayback` in PW started (into procs); wayback's
    port. ``said``: gets the lines replay printed."""
    port = free_port()
    rep = subprocess.Popen([str(BIN / "webfs"), "replay", "--port", str(free_port()), target, str(pw)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    procs.append(rep)
    while True:
        line = rep.stdout.readline()
        assert line, rep.stderr.read().decode()       # replay ended before serving
        if said is not None:
            said.append(line.decode())
        if line.startswith(b"now run"):
            break
    procs.append(subprocess.Popen([str(BIN / "wayback"), "-p", str(port), "-b", "127.0.0.1"], cwd=pw,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    return port


def same_second_warc(path: Path) -> Path:
    """Three captures of one URL in one second (a 404 first), and one two seconds later."""
    import io
    from warcio.statusandheaders import StatusAndHeaders
    from warcio.warcwriter import WARCWriter
    with open(path, "wb") as f:
        w = WARCWriter(f, gzip=True)
        for status, ctype, body, date in (("404 Not Found", "text/html", b"gone-gone", "2024-01-01T12:00:00Z"),
                                          ("200 OK", "text/plain", b"plain text", "2024-01-01T12:00:00Z"),
                                          ("200 OK", "text/html", b"html", "2024-01-01T12:00:00Z"),
                                          ("200 OK", "text/html", b"later page", "2024-01-01T12:00:02Z")):
            http = StatusAndHeaders(status, [("Content-Type", ctype)], protocol="HTTP/1.1")
            w.write_record(w.create_warc_record("http://example.com/t", "response", payload=io.BytesIO(body),
                                                http_headers=http, warc_headers_dict={"WARC-Date": date}))
    return path


def test_url_and_replay_pick_what_pywb_picks_on_a_tie(tmp_path):
    m = Mounted(tmp_path, disks=3, mount=False)
    procs = []
    try:
        webfs("import-warc", "--collection", "c", same_second_warc(tmp_path / "t.warc.gz"), f"{m.disks[0]}:/")
        disk = str(m.disks[0])
        ports = [0, replay_with_wayback(f"{disk}:/", tmp_path / "pw", procs)]
        for at, want in (("20240101120000", b"html"), ("20240101120001", b"html"),
                         ("20240101120002", b"later page")):
            status, body, _ = get(ports[1], f"/c/{at}id_/http://example.com/t")
            assert body == want, (at, status, body)      # pywb: mime text/html before text/plain
            path = webfs("url", "--at", at, "http://example.com/t", disk).stdout.decode().strip()
            got = webfs("versions", "--json", "http://example.com/t", disk).stdout
            size = {c["path"]: c["size"] for c in json.loads(got)}[path.lstrip("/")]
            assert size == len(want), (at, path)        # webfs url: the same capture
    finally:
        for p in procs:
            p.terminate()
            p.wait(timeout=30)


def one_page_warc(path: Path, body: bytes) -> Path:
    """A WARC of one capture of http://example.com/p."""
    import io
    from warcio.statusandheaders import StatusAndHeaders
    from warcio.warcwriter import WARCWriter
    with open(path, "wb") as f:
        w = WARCWriter(f, gzip=True)
        http = StatusAndHeaders("200 OK", [("Content-Type", "text/plain")], protocol="HTTP/1.1")
        w.write_record(w.create_warc_record("http://example.com/p", "response", payload=io.BytesIO(body),
                                            http_headers=http, warc_headers_dict={"WARC-Date": "2024-01-01T12:00:00Z"}))
    return path


def test_nested_collections_replay_under_their_path(tmp_path):
    """Collections nested in a plain top directory and in a collection are
    served under their path with - for /, as versions finds them; a nested
    one whose name a top directory has is not served, and replay says so."""
    m = Mounted(tmp_path, disks=3, mount=False)
    disk = f"{m.disks[0]}:/"
    for coll, dest in (("crawl", "org"), ("sub", "a"), ("a", ""), ("org-crawl", ""), ("x", "org/crawl")):
        webfs("import-warc", "--collection", coll, one_page_warc(tmp_path / f"{coll}.warc.gz", coll.encode()),
              disk + dest)
    procs, said = [], []
    try:
        port = replay_with_wayback(disk, tmp_path / "pw", procs, said)
        for name, body in (("a", b"a"), ("a-sub", b"sub"), ("org-crawl", b"org-crawl"), ("org-crawl-x", b"x")):
            assert get(port, f"/{name}/20240101120000id_/http://example.com/p")[:2] == (200, body), name
        config = (tmp_path / "pw" / "config.yaml").read_text()
        assert sorted(re.findall(r"^  (\S+):$", config, re.M)) == ["a", "a-sub", "org-crawl", "org-crawl-x"]
        assert any("org/crawl: not served: a collection is already named org-crawl" in x for x in said), said
        got = json.loads(webfs("versions", "--json", "http://example.com/p", disk).stdout)
        assert sorted(c["collection"] for c in got) == ["a", "a/sub", "org-crawl", "org/crawl", "org/crawl/x"]
    finally:
        for p in procs:
            p.terminate()
            p.wait(timeout=30)


def test_a_revisit_whose_original_is_in_another_collection_replays(tmp_path):
    m = Mounted(tmp_path, disks=3, mount=False)
    procs = []
    try:
        disk = f"{m.disks[0]}:/"
        webfs("import-warc", "--collection", "a", SAMPLES / "example-url-agnostic-orig.warc.gz", disk)
        webfs("import-warc", "--collection", "b", SAMPLES / "example-url-agnostic-revisit.warc.gz", disk)
        ports = [0, replay_with_wayback(disk, tmp_path / "pw", procs)]
        status, orig, _ = get(ports[1], "/a/20130702195402id_/http://example.iana.org/")
        assert status == 200 and b"Example Domain" in orig
        status, body, _ = get(ports[1], "/b/20130729195151id_/http://test@example.com/")
        assert (status, body) == (200, orig)          # plain pywb: 503, its original is not in b
    finally:
        for p in procs:
            p.terminate()
            p.wait(timeout=30)


def test_a_deleted_capture_is_not_replayed_and_its_revisits_are(tmp_path):
    """rm of a capture file, then replay: its record is not served, wherever
    its bytes are kept (a gzip-encoded page's entity and a revisit are kept
    whole in the heads, and were still served); a revisit whose original was
    deleted is served with the page its file still holds (pywb answered 503,
    "Original for revisit record could not be loaded")."""
    from t2_warc import write_warc
    from t4_warc_pages import ENCODED, encoded_warc
    m = Mounted(tmp_path, disks=3)
    procs = []
    try:
        page = b"<html>the original page</html>"
        webfs("import-warc", "--collection", "c",
              write_warc(tmp_path / "a.warc.gz", [("http://example.com/", page)], every_type=True), m.mnt)
        webfs("import-warc", "--collection", "c", encoded_warc(tmp_path / "enc.warc.gz", ENCODED[:1]), m.mnt)
        host = m.mnt / "c" / "http" / "example.com"
        (host / "@20240101120000").unlink()
        (host / "gz.html@20240101120000").unlink()
        assert (host / "copy.html@20240102120000").read_bytes() == page
        port = replay_with_wayback(str(m.mnt), tmp_path / "pw", procs)
        assert get(port, "/c/20240102120000id_/http://example.com/copy.html")[:2] == (200, page)
        # the response gone from the index, what is left of that URL is the conversion record
        assert get(port, "/c/20240101120000id_/http://example.com/")[:2] == (200, b"page 0 as text")
        assert get(port, "/c/20240101120000id_/http://example.com/gz.html")[0] == 404
        (host / "copy.html@20240102120000").unlink()
        port = replay_with_wayback(str(m.mnt), tmp_path / "pw2", procs)
        assert get(port, "/c/20240102120000id_/http://example.com/copy.html")[0] == 404
    finally:
        for p in procs:
            p.terminate()
            p.wait(timeout=30)
        m.umount()


@pytest.mark.parametrize("where", ["disk", "mount"])
def test_a_long_and_a_deep_url_replay(tmp_path, where):
    """A 6,000-byte URL and a 2,000-segment URL (their capture paths past PATH_MAX)
    served by replay with their bodies, as any other, and as plain pywb
    (wb-manager add + wayback) serves them: same status and body; from unmounted
    disks (over HTTP) and from a mount (its .webfs/warc)."""
    from t2_warc import _one
    long_url = b"http://example.com/long?" + b"q" * 6000
    deep_url = b"http://example.com/" + b"a/" * 2000 + b"end"
    src = tmp_path / "long.warc"
    src.write_bytes(_one(long_url, b"long body") + _one(deep_url, b"deep body") + _one(b"http://example.com/", b"home"))
    m = Mounted(tmp_path, disks=3, mount=False)
    procs = []
    try:
        disk = f"{m.disks[0]}:/"
        webfs("import-warc", "--collection", "c", src, disk)
        if where == "mount":
            m.mount()
        port = replay_with_wayback(disk if where == "disk" else str(m.mnt), tmp_path / "pw", procs)
        ref, ref_port = reference_pywb(tmp_path, {"c": [src]}), free_port()
        procs.append(subprocess.Popen([str(BIN / "wayback"), "-p", str(ref_port), "-b", "127.0.0.1"], cwd=ref,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        for url, body in ((long_url, b"long body"), (deep_url, b"deep body"), (b"http://example.com/", b"home")):
            for view in ("id_/", "/"):
                path = "/c/20240101120000" + view + url.decode()
                status, got, _ = same_host(get(port, path), port)
                assert (status, got) == same_host(get(ref_port, path), ref_port)[:2], url[:40]
                if view == "id_/":
                    assert (status, got) == (200, body), url[:40]
    finally:
        for p in procs:
            p.terminate()
            p.wait(timeout=30)
        if where == "mount":
            m.umount()


def test_the_mount_shows_the_virtual_warc_files_pywb_reads(tmp_path):
    """A collection in a mount: replay hands its layout to the daemon, which shows
    each virtual WARC file under .webfs/warc/VIEW/ (the bytes replay's own reader
    gives), read-only, while the mount lasts, one per collection (a newer layout
    replaces the older; the same layout keeps its id); a capture deleted since
    fails its own record's read (EIO), not the others'."""
    import errno
    import os
    from t2_warc import write_warc
    from webfs import replay, warc
    m = Mounted(tmp_path, disks=3)
    try:
        pages = [(f"http://example.com/{i}", f"<html>page {i}</html>".encode()) for i in range(5)]
        webfs("import-warc", "--collection", "c", write_warc(tmp_path / "a.warc.gz", pages), m.mnt)
        pw = tmp_path / "pw"
        said = webfs("replay", "--port", str(free_port()), m.mnt / "c", pw).stdout.decode()  # it ends at once
        assert f"as files of {m.mnt}/.webfs/warc/" in said and "serving" not in said, said
        (view,) = os.listdir(m.mnt / ".webfs" / "warc")
        vfile = m.mnt / ".webfs" / "warc" / view / "a.warc"
        assert f"archive_paths: {vfile.parent}/\n" in (pw / "config.yaml").read_text()
        mine = replay.virtual_files(warc.MountTree(str(m.mnt / "c")))["a.warc"]
        assert vfile.read_bytes() == mine.read(0, mine.size) and os.stat(vfile).st_size == mine.size
        lines = [json.loads(x.split(" ", 2)[2]) for x in (pw / "webfs-cdxj" / "c.cdxj").read_text().splitlines()]
        at = {x["url"]: (int(x["offset"]), int(x["length"])) for x in lines}
        with open(vfile, "rb") as f:
            for url, (off, length) in at.items():       # each CDXJ line names its record
                f.seek(off)
                record = f.read(length)
                assert record.startswith(b"WARC/1.0\r\n") and f"WARC-Target-URI: {url}\r\n".encode() in record
        reads = lambda: json.loads(os.getxattr(m.mnt, "user.webfs.requests")).get("read", 0)  # noqa: E731
        assert os.stat(vfile).st_blksize == 128 * 1024
        off, length = at["http://example.com/2"]
        with open(vfile, "rb") as f:        # as pywb reads a record: a line, then the rest
            before = reads()
            f.seek(off)
            first = f.readline()
            record = first + f.read(length - len(first))
            assert reads() - before == 1    # Python's buffer fill took the whole record, and no more
            fd = f.fileno()
            whole = os.pread(fd, 1 << 17, off)     # a read ends at its record's end (and its CRLFs)
            assert whole.startswith(record) and whole[length:] == b"\r\n\r\n"
            assert os.pread(fd, 100, off + 10) == record[10:110]
        with pytest.raises(OSError) as refused:
            open(vfile, "r+b")
        assert refused.value.errno == errno.EROFS
        assert not (m.mnt / ".webfs" / "warc" / "0123456789abcdef").exists()
        capture = m.mnt / "c" / "http" / "example.com" / "3@20240101120000"
        held = open(capture, "rb")      # the kernel keeps the unlinked inode: gone all the same
        capture.unlink()
        with held, open(vfile, "rb") as f:
            f.seek(at["http://example.com/3"][0])
            with pytest.raises(OSError) as gone:
                f.read(at["http://example.com/3"][1])
            assert gone.value.errno == errno.EIO
            f.seek(at["http://example.com/4"][0])
            assert b"page 4" in f.read(at["http://example.com/4"][1])
        webfs("replay", "--port", str(free_port()), m.mnt / "c", pw)
        (again,) = os.listdir(m.mnt / ".webfs" / "warc")        # the newer layout replaced the older
        assert again != view and b"page 3" not in (m.mnt / ".webfs" / "warc" / again / "a.warc").read_bytes()
        with pytest.raises(FileNotFoundError):      # the older view's files went with it
            open(vfile, "rb")
        m.remount()
        assert os.listdir(m.mnt / ".webfs" / "warc") == []      # views last as long as the mount
        webfs("replay", "--port", str(free_port()), m.mnt / "c", pw)
        assert os.listdir(m.mnt / ".webfs" / "warc") == [again]     # the same layout, the same id
    finally:
        m.umount()


def test_a_second_source_of_the_same_name_replays(tmp_path):
    """Two files named a.warc.gz in one collection (the second kept as
    @warc/a.warc.gz.index~2): replay serves the captures of both, the second's
    from a virtual file of its own, a~2.warc (it had no CDXJ line: only the
    names ending in .index were taken)."""
    from t2_warc_export import _same_name_twice
    m = Mounted(tmp_path, disks=3, mount=False)
    procs = []
    try:
        _same_name_twice(tmp_path, m.disks)
        port = replay_with_wayback(f"{m.disks[0]}:/", tmp_path / "pw", procs)
        assert get(port, "/c/20240101120000id_/http://example.com/one")[:2] == (200, b"the first file")
        for i in range(3):
            assert get(port, f"/c/20240101120000id_/http://example.com/two{i}")[:2] == (200, b"the second file %d" % i)
        index = (tmp_path / "pw" / "webfs-cdxj" / "c.cdxj").read_text()
        assert '"filename": "a~2.warc"' in index and '"filename": "a.warc"' in index
    finally:
        for p in procs:
            p.terminate()
            p.wait(timeout=30)


NO_DATE = (b"WARC/1.0\r\nWARC-Type: resource\r\nWARC-Target-URI: http://nodate.example/\r\n"
           b"Content-Type: text/plain\r\nContent-Length: 5\r\n\r\nhello\r\n\r\n")
GARBAGE = b"WARC/1.0\r\nWARC-Type: response\r\nContent-Length: -5\r\n\r\nabc"


def test_a_record_pywb_cannot_index_is_left_out_and_the_rest_replayed(tmp_path):
    """Records pywb's indexer cannot index (a resource without a WARC-Date, which
    import-warc keeps in the heads only, and a garbage record), alone in a
    collection and between good records of one file (a POST among them):
    replay names each in one line (collection, source file, offset), at every
    start, leaves it out of the CDXJ index and serves everything else; the
    good records' lines are those wb-manager add makes of them (replay died
    with pywb's traceback, and wrote no config.yaml)."""
    from t2_warc import _digest, _one
    block = b"POST /form HTTP/1.1\r\nContent-Type: application/x-www-form-urlencoded\r\n\r\na=1&b=2"
    post = (b"WARC/1.0\r\nWARC-Type: request\r\nWARC-Target-URI: http://example.com/form\r\n"
            b"WARC-Date: 2024-01-01T12:00:00Z\r\nWARC-Record-ID: <urn:uuid:post>\r\n"
            b"Content-Type: application/http; msgtype=request\r\nContent-Length: %d\r\n\r\n" % len(block)
            + block + b"\r\n\r\n")
    good = [_one(b"http://example.com/a", b"page a", digest=_digest(b"page a")), post,
            _one(b"http://example.com/form", b"answer", digest=_digest(b"answer")).replace(
                b"Content-Type:", b"WARC-Concurrent-To: <urn:uuid:post>\r\nContent-Type:", 1),
            _one(b"http://example.com/b", b"page b")]
    (tmp_path / "clean").mkdir()
    (tmp_path / "clean" / "mixed.warc").write_bytes(b"".join(good))
    (tmp_path / "mixed.warc").write_bytes(good[0] + NO_DATE + b"".join(good[1:]) + GARBAGE)
    (tmp_path / "nodate.warc").write_bytes(NO_DATE)
    m = Mounted(tmp_path, disks=3, mount=False)
    procs = []
    try:
        disk = f"{m.disks[0]}:/"
        for coll, src in (("bad", tmp_path / "nodate.warc"), ("mixed", tmp_path / "mixed.warc"),
                          ("good", SAMPLES / "example.warc.gz")):
            res = webfs("import-warc", "--collection", coll, src, disk, check=False)
            assert res.returncode == (0 if coll == "good" else 4), res.stderr
        pw = tmp_path / "pw"
        port = replay_with_wayback(disk, pw, procs)
        assert get(port, "/mixed/20240101120000id_/http://example.com/a")[:2] == (200, b"page a")
        assert get(port, "/mixed/20240101120000id_/http://example.com/b")[:2] == (200, b"page b")
        assert get(port, "/good/20140103030321id_/http://example.com/?example=1")[0] == 200
        assert all(f"  {coll}:\n" in (pw / "config.yaml").read_text() for coll in ("bad", "mixed", "good"))
        ref = reference_pywb(tmp_path, {"mixed": [tmp_path / "clean" / "mixed.warc"]})
        keys = lambda index: sorted(x.split(" ", 2)[:2] for x in index.read_text().splitlines())  # noqa: E731
        ours = keys(pw / "webfs-cdxj" / "mixed.cdxj")
        assert ours == keys(ref / "collections" / "mixed" / "indexes" / "index.cdxj") and len(ours) == 3
        assert any("__wb_method=post" in k for k, _ in ours)        # the POST joined to its response
        procs[0].terminate()
        procs[0].wait(timeout=30)
        at = len(good[0]) + len(NO_DATE) + sum(map(len, good[1:]))
        want = {"bad: nodate.warc: offset 0: a resource record",
                f"mixed: mixed.warc: offset {len(good[0])}: a resource record",
                f"mixed: mixed.warc: offset {at}: a response record"}
        for said in (procs[0].stderr.read().decode(), replay_said(disk, pw)[1]):      # first start, and again
            lines = [x for x in said.splitlines() if "pywb's indexer cannot index" in x]
            assert {x.split(": ", 1)[1].split(" pywb's")[0] for x in lines} == want and len(lines) == 3, said
            assert all(x.endswith("left out of the CDXJ index, not replayed") for x in lines), said
            assert "Traceback" not in said
    finally:
        for p in procs:
            p.terminate()
            p.wait(timeout=30)
