"""tools/bench itself: a tiny run of the issue-10 sections end to end, through
real mounts (the aims table alone is in t1_bench)."""

import json
import os
import subprocess
import sys

import pytest

from conftest import BIN

TOOLS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools")


@pytest.mark.skipif(not os.path.exists("/dev/fuse"), reason="needs FUSE")
def test_tiny_bench_run_of_the_new_sections(tmp_path):
    """small, import, scale and readers on a very small corpus: the run
    completes, and its JSON has every section's figures."""
    env = dict(os.environ, PATH="%s:%s" % (BIN, os.environ["PATH"]))
    out = tmp_path / "out"
    argv = [sys.executable, os.path.join(TOOLS, "bench"), "--targets", "plain,webfs",
         "--sections", "small,import,scale,readers", "--corpus-size", "200K",
         "--small-size", "150K", "--scale-files", "100", "--repeat", "1",
         "--readers", "1,2", "--readers-seconds", "0.3", "--workdir", str(tmp_path),
         "--out", str(out), "--webfs-cmd", os.path.relpath(BIN / "webfs", tmp_path)]
    # --webfs-cmd relative to where tools/bench starts: each section runs it from elsewhere
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
    try:
        _, err = p.communicate(timeout=240)
    except subprocess.TimeoutExpired:
        # what is stuck, then SIGTERM: tools/bench unmounts everything on its way out
        ps = subprocess.run(["ps", "-eo", "pid,stat,wchan:32,args"], capture_output=True,
                            text=True).stdout
        stuck = "\n".join(line for line in ps.splitlines() if str(tmp_path) in line)
        p.terminate()
        _, err = p.communicate(timeout=120)
        pytest.fail("tools/bench did not finish in 240 s; processes:\n%s\n%s" % (stuck, err[-3000:]))
    assert p.returncode == 0, err[-3000:]
    r = json.loads((out / "results.json").read_text())
    assert r["complete"] and not r["failures"], r["failures"]
    ex = r["extra"]
    assert ex["small_corpus"]["files"] > 0
    assert {m["figure"] for m in r["measurements"]} >= {
        "small.cp", "small.cat.cold", "small.grep.cold", "import.1", "import.2",
        "import.rerun", "import.disk", "scale", "readers.1", "readers.2"}
    assert ex["import"]["median"]["main"]["import_1"] > 0
    assert ex["import"]["median"]["small."]["import_2"] > 0      # crawl 2 of the small pages
    assert ex["scale"]["files"] > 0 and ex["scale"]["meta_per_file_at_rest"] > 0
    assert all(x["plain_rate"] > 0 for x in ex["scale"]["slices"])
    assert [x["readers"] for x in ex["readers"]["runs"]] == [1, 2]
    md = (out / "results.md").read_text()
    assert "Where webfs stands (the aims of issues 10, 12 and 13)" in md
    assert not [d for d in os.listdir(tmp_path) if d.startswith("webfs-bench-")]


@pytest.mark.skipif(not os.path.exists("/dev/fuse"), reason="needs FUSE")
def test_tiny_bench_run_of_the_postgres_section(tmp_path):
    """The postgres section on a very small corpus: its four runs complete on
    a server it starts itself, and the report has issue 25's rows."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from postgres import pg_bindir
    if pg_bindir() is None:
        pytest.skip("PostgreSQL is not installed (make deps installs it)")
    env = dict(os.environ, PATH="%s:%s" % (BIN, os.environ["PATH"]))
    out = tmp_path / "out"
    argv = [sys.executable, os.path.join(TOOLS, "bench"), "--targets", "webfs", "--sections", "postgres",
            "--corpus-size", "200K", "--repeat", "1", "--workdir", str(tmp_path), "--out", str(out),
            "--webfs-cmd", str(BIN / "webfs")]
    p = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    r = json.loads((out / "results.json").read_text())
    assert r["complete"] and not r["failures"], r["failures"]
    runs = r["extra"]["postgres"]["runs"]
    assert sorted(x["kind"] for x in runs) == ["one", "pg", "sqlite", "two"]
    assert all("error" not in x for x in runs), runs
    assert next(x for x in runs if x["kind"] == "one")["db_bytes"] > 0
    md = (out / "results.md").read_text()
    assert "two machines copying a crawl each at once vs one copying both" in md
    assert "PostgreSQL database per file (no aim)" in md
    assert not [d for d in os.listdir(tmp_path) if d.startswith("webfs-bench-")]
