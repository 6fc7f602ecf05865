"""webfs import-warc killed with kill -9 mid-way, then run again."""
from __future__ import annotations

import os

from conftest import BIN, make_archive, webfs
from t2_warc import imp, tree, write_warc


def test_kill_9_then_rerun_finishes_the_import(tmp_path):
    """kill -9 of an import-warc mid-way; the rerun resumes (captures already
    there are not made twice), the result exports byte-identical and fsck is clean."""
    import signal
    import subprocess
    import time
    disks = make_archive(tmp_path, 3)
    pages = [(f"http://site.org/{i % 40}/p{i}.html", b"page %d " % i * (1 + i % 30)) for i in range(4000)]
    src = write_warc(tmp_path / "big.warc.gz", pages)
    proc = subprocess.Popen([str(BIN / "webfs"), "import-warc", "--collection", "c", str(src), f"{disks[0]}:/"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(2.5)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    _, fig = imp(disks[0], src, check=True)
    # (how far the killed import got depends on the machine's load)
    assert fig["captures"] + fig["already"] == 4000, fig
    assert fig["files"] - fig["captures"] in (0, 2)       # and the two kept files of the source
    out = tmp_path / "out.warc.gz"
    res = webfs("export-warc", f"{disks[0]}:/c", out)
    assert b"8001 records" in res.stdout and b"(100%) byte-identical" in res.stdout
    t = tree(disks[0], "/c")
    try:
        n = sum(len([x for x in t.listdir(b"http/site.org/" + str(d).encode())]) for d in range(40))
        assert n == 4000
    finally:
        t.close()
    assert webfs("fsck", disks[0], check=False).returncode == 0
