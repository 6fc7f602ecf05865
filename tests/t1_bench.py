"""tools/bench itself: the aims table the report builds from a run's JSON
(a tiny run of the issue-10 sections end to end is in t4_bench)."""

import pytest

import json
import os
import subprocess
import sys

TOOLS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools")
sys.path.insert(0, TOOLS)

import bench_report  # noqa: E402


def tiny_result():
    """A run's JSON cut to what the aims table reads."""
    def timed(target, key, seconds):
        return {"target": target, "figure": key, "rep": 0, "ok": True, "seconds": seconds,
                "files": 100, "nbytes": 1000000}
    ms = [timed("bindfs", "ingest.cp.1", 1.0), timed("webfs", "ingest.cp.1", 1.25),   # 0.80x
          timed("bindfs", "small.cp", 1.0), timed("webfs", "small.cp", 2.0),           # 0.50x
          timed("bindfs", "read.cat.cold", 1.0), timed("webfs", "read.cat.cold", 1.0)]  # 1.00x
    figures = {k: {"section": "x", "label": k, "kind": "time", "better": "higher",
                   "unit": "files"} for k in ("ingest.cp.1", "small.cp", "read.cat.cold")}
    extra = {
        "readers": {"disks": 4, "delay_s": 0.02, "ceiling_per_s": 200.0, "runs": [
            {"readers": n, "reads_per_s": r, "mean_ms": 1, "p90_ms": 1}
            for n, r in ((1, 45), (4, 150), (16, 170), (64, 181))]},
        "rebuild": {"disks": 6, "configs": [{"group_size": 6, "median": {"mb_per_s": 42.0},
                                             "scrub": {"mb_per_s": 300.0}}]},
        "scale": {"files": 20000, "meta_per_file_at_rest": 650.0, "meta_per_file_peak": 900.0,
                  "rate_end_vs_start": 0.8,
                  "cpu_per_file_end_vs_start": 1.1,
                  "slices": [{"rate": 500.0, "plain_rate": 2000.0},
                             {"rate": 400.0, "plain_rate": 2000.0}],
                  "at": {"10": {"files_done": 2000, "rss": 40 << 20},
                         "50": {"files_done": 10000, "rss": 44 << 20},
                         "100": {"files_done": 20000, "rss": 46 << 20, "indexer_rss": 35 << 20}}},
        "import": {"median": {"main": {"cp_plain_1": 2.0, "import_1": 1.6, "import_2": 0.4}},
                   "files": {"main": [1000, 1000]}},
    }
    result = {"subject": "webfs", "started": "2026-11-26T03:00:00Z", "git": "abc1234",
              "machine": {"loadavg_start": [2.5, 2, 2], "loadavg_end": [3.25, 3, 3]},
              "targets": [{"name": "bindfs"}, {"name": "webfs"}], "figures": figures,
              "figure_order": list(figures), "measurements": ms, "extra": extra}
    result["summary"] = bench_report.summarize(result)
    return result


def row(table, start):
    hits = [line for line in table if line.startswith("| " + start)]
    assert len(hits) == 1, (start, table)
    return [c.strip() for c in hits[0].strip("|").split("|")]


def test_aims_table_met_and_not_met():
    t = bench_report.goals_table(tiny_result())
    assert "load average 2.50 at the start and 3.25 at the end" in t[0]
    assert "| aim (issues 10, 12, 13, 22, 24, 25, 26) | figure | met |" in t
    assert row(t, "`cp -r` crawl 1 into the mount vs bindfs ≥ 0.6× (bench corpus)")[1:] == ["0.80×", "met"]
    assert row(t, "`cp -r` crawl 1 into the mount vs bindfs ≥ 0.6× (small pages)")[1:] == ["0.50×", "**not met**"]
    assert row(t, "cold `cat` of everything vs bindfs ≥ 0.8× (bench corpus)")[1:] == ["1.00×", "met"]
    assert row(t, "`rsync -a`")[1:] == ["not measured", "–"]
    assert row(t, "64 readers")[2] == "met"
    assert row(t, "rebuild of a lost disk (C = 6, G = 6)")[1:] == ["42.0 MB/s", "**not met**"]
    assert row(t, "scrub (C = 6, G = 6)")[2] == "–"
    assert row(t, "daemon RSS after 20,000 files ≤ 1.2× RSS after 2,000")[1:] == [
        "1.15× (40.0 → 46.0 MiB; its indexing process 35.0 MiB beside it)", "met"]
    assert row(t, "`meta/` per file at rest")[1:] == ["650 B (peak during the ingest 900 B)", "**not met**"]
    assert row(t, "ingest rate at the end")[1:] == [
        "0.80× (500 → 400 files/s; plain directory 2,000 → 2,000; daemon CPU per file 1.10×)",
        "**not met**"]
    assert row(t, "`webfs import` crawl 1 vs `cp -r`")[1:] == ["1.25×", "met"]
    assert row(t, "crawl 2 vs crawl 1 through `webfs import` ≥ 3× faster (bench corpus)")[1:] == ["4.00×", "met"]
    assert row(t, "crawl 2 vs crawl 1 through `webfs import` ≥ 3× faster (small pages)")[1:] == [
        "not measured", "–"]
    assert all(len(line) < 200 for line in t), max(t, key=len)


def test_readers_not_rising_is_not_met():
    r = tiny_result()
    r["extra"]["readers"]["runs"][2]["reads_per_s"] = 195      # 195 then 181: falls by more than 5 %
    assert row(bench_report.goals_table(r), "64 readers")[2] == "**not met**"


def test_report_cli_prints_the_aims(tmp_path):
    r = tiny_result()
    del r["summary"]
    p = tmp_path / "results.json"
    p.write_text(json.dumps(r))
    out = subprocess.run([sys.executable, os.path.join(TOOLS, "bench_report.py"), "--aims", str(p)],
                         capture_output=True, text=True, check=True).stdout
    assert "| aim (issues 10, 12, 13, 22, 24, 25, 26) | figure | met |" in out and "**not met**" in out


def with_times(peer, key, peer_seconds, webfs_seconds=1.0):
    """tiny_result with KEY timed on PEER and webfs: the ratio (webfs's files/s over the peer's) is
    peer_seconds / webfs_seconds."""
    r = tiny_result()
    r["targets"].append({"name": peer})
    r["figures"][key] = {"section": "x", "label": key, "kind": "time", "better": "higher", "unit": "files"}
    r["figure_order"].append(key)
    for target, seconds in ((peer, peer_seconds), ("webfs", webfs_seconds)):
        r["measurements"] = [m for m in r["measurements"] if (m["target"], m["figure"]) != (target, key)]
        r["measurements"].append({"target": target, "figure": key, "rep": 0, "ok": True, "seconds": seconds,
                                  "files": 100, "nbytes": 1000000})
    r["summary"] = bench_report.summarize(r)
    return r


THROUGH_THE_MOUNT = [   # issue 22: (row, figure key, peer, the aim)
    ("`cp -r` crawl 1 into the mount vs bindfs ≥ 0.6× (bench corpus)", "ingest.cp.1", "bindfs", 0.6),
    ("`cp -r` crawl 1 into the mount vs bindfs ≥ 0.6× (small pages)", "small.cp", "bindfs", 0.6),
    ("`cp -r` crawl 1 into the mount vs tools/memfs (the in-memory ceiling) ≥ 0.85× (bench corpus)", "ingest.cp.1", "memfs", 0.85),
    ("`cp -r` crawl 1 into the mount vs tools/memfs (the in-memory ceiling) ≥ 0.85× (small pages)", "small.cp", "memfs", 0.85),
    ("`cp -r` crawl 1 into the mount vs JuiceFS ≥ 1.5× (bench corpus)", "ingest.cp.1", "juicefs", 1.5),
    ("`cp -r` crawl 1 into the mount vs JuiceFS ≥ 1.5× (small pages)", "small.cp", "juicefs", 1.5),
    ("`rsync -a` crawl 1 vs bindfs ≥ 0.6× (bench corpus)", "ingest.rsync.1", "bindfs", 0.6),
    ("cold `cat` of everything vs bindfs ≥ 0.8× (small pages)", "small.cat.cold", "bindfs", 0.8),
    ("cold `grep -r` of everything vs bindfs ≥ 0.8× (bench corpus)", "read.grep.cold", "bindfs", 0.8),
    ("cold `grep -r` of everything vs bindfs ≥ 0.8× (small pages)", "small.grep.cold", "bindfs", 0.8),
    ("Zipf page reads, cold, vs bindfs ≥ 0.7× (bench corpus)", "zipf.cold", "bindfs", 0.7),
    ("`cp -r` crawl 1 into the mount vs bindfs ≥ 0.4× (small pages, 2 CPU hogs beside)", "load.cp", "bindfs",
     0.4),
]


@pytest.mark.parametrize("label,key,peer,aim", THROUGH_THE_MOUNT)
def test_mount_aims_met_at_the_boundary(label, key, peer, aim):
    assert row(bench_report.goals_table(with_times(peer, key, aim)), label)[1:] == ["%.2f×" % aim, "met"]
    below = row(bench_report.goals_table(with_times(peer, key, aim * 0.99)), label)
    assert below[2] == "**not met**"


@pytest.mark.parametrize("label,key,peer,aim", THROUGH_THE_MOUNT)
def test_mount_aims_not_measured_without_the_peer(label, key, peer, aim):
    r = tiny_result()
    r["measurements"] = [m for m in r["measurements"] if m["figure"] != key]
    r["summary"] = bench_report.summarize(r)
    assert row(bench_report.goals_table(r), label)[1:] == ["not measured", "–"]


def test_under_load_juicefs_must_be_behind():
    label = "`cp -r` crawl 1 into the mount ahead of JuiceFS (small pages, 2 CPU hogs beside)"
    assert row(bench_report.goals_table(tiny_result()), label)[1:] == ["not measured", "–"]
    assert row(bench_report.goals_table(with_times("juicefs", "load.cp", 1.0)), label)[1:] == [
        "1.00×", "**not met**"]
    assert row(bench_report.goals_table(with_times("juicefs", "load.cp", 1.01)), label)[2] == "met"


def test_meta_per_file_aim_is_400_bytes():
    r = tiny_result()
    for at_rest, verdict in ((400.0, "met"), (401.0, "**not met**")):
        r["extra"]["scale"]["meta_per_file_at_rest"] = at_rest
        assert row(bench_report.goals_table(r), "`meta/` per file at rest (all disks) ≤ 400 B")[2] == verdict
    del r["extra"]["scale"]["meta_per_file_at_rest"]
    assert row(bench_report.goals_table(r), "`meta/` per file at rest")[1:] == ["not measured", "–"]


def warc_result(**median):
    r = tiny_result()
    r["extra"]["warc"] = {"records": 10000, "median": median}
    return r


def test_warc_aims_at_the_boundary():
    start = "`webfs replay` start-up, first after import-warc, < 1 s (10,000 captures)"
    latency = "`webfs replay` + wayback latency of a capture vs plain pywb, median, ≤ 1.2×"
    indexer = "`webfs import-warc` records/s vs `cdxj-indexer` ≥ 0.5× (10,000 records)"
    t = bench_report.goals_table(warc_result(replay_first=1.0, replay=0.5, replay_ms=1.2, pywb_ms=1.0,
                                             cdxj=1.0, **{"import": 2.0}))
    assert row(t, start)[1:] == ["1.00 s (0.50 s with its CDXJ kept from a start before)", "**not met**"]
    assert row(t, latency)[1:] == ["1.20× (1.2 vs 1.0 ms)", "met"]
    assert row(t, indexer)[1:] == ["0.50× (5,000 vs 10,000 records/s)", "met"]
    assert all(len(line) < 200 for line in t), max(t, key=len)
    t = bench_report.goals_table(warc_result(replay_first=0.99, replay_ms=1.21, pywb_ms=1.0, cdxj=1.0,
                                             **{"import": 2.01}))
    assert row(t, start)[2] == "met"
    assert row(t, latency)[2] == "**not met**"
    assert row(t, indexer)[2] == "**not met**"
    t = bench_report.goals_table(tiny_result())
    for label in ("`webfs replay` start-up < 1 s", latency, "`webfs import-warc` records/s vs `cdxj-indexer`"):
        assert row(t, label)[1:] == ["not measured", "–"]


QUERY = {"search": 0.1, "grep": 10.0, "index_bytes": 500, "covered_bytes": 1000, "import_plain": 0.7,
         "import_index": 1.0, "index_done": 1.4, "stream_pages_s": 900.0, "random_pages_s": 10.0}
QUERY_ROWS = {"search": "`webfs search` of a rare word vs `grep -rl` over the mount, cold, ≥ 100× faster",
              "index": "index size vs the compressed text it covers ≤ 0.5×",
              "import": "`webfs import` with indexing vs without ≥ 0.7×",
              "index_done": "`webfs import` with indexing, until its index is complete, vs without (no aim)",
              "stream": "subset stream pages/s vs random reads, cold (no aim; WebBase 75–180×)"}


def query_table(**changes):
    r = tiny_result()
    r["extra"]["query"] = {"pages": 10000, "median": {**QUERY, **changes}}
    return bench_report.goals_table(r)


def test_query_aims_at_the_boundary():
    t = query_table()
    assert row(t, QUERY_ROWS["search"] + " (10,000 small pages)")[1:] == ["100× (0.100 vs 10.00 s)", "met"]
    assert row(t, QUERY_ROWS["index"])[1:] == ["0.50× (500 B vs 1.0 KB)", "met"]
    assert row(t, QUERY_ROWS["import"])[1:] == ["0.70× (1.00 vs 0.70 s)", "met"]
    assert row(t, QUERY_ROWS["index_done"])[1:] == ["0.50× (1.40 vs 0.70 s)", "–"]
    assert row(t, QUERY_ROWS["stream"])[1:] == ["90.0× (900 vs 10.0 pages/s)", "–"]
    assert all(len(line) < 200 for line in t), max(t, key=len)
    t = query_table(grep=9.9, index_bytes=501, import_plain=0.69)
    for key in ("search", "index", "import"):
        assert row(t, QUERY_ROWS[key])[2] == "**not met**", key


def test_query_aims_not_measured_when_the_section_did_not_run():
    t = bench_report.goals_table(tiny_result())
    for label in QUERY_ROWS.values():
        assert row(t, label)[1:] == ["not measured", "–"]
    t = query_table(stream_pages_s=None, search=None)
    assert row(t, QUERY_ROWS["stream"])[1:] == ["not measured", "–"]
    assert row(t, QUERY_ROWS["search"])[1:] == ["not measured", "–"]


def catscale_table(small_warm, big_warm):
    r = tiny_result()
    rates = lambda warm: {op: {"cold": warm, "warm": warm} for op in ("lookup", "sig", "insert", "listing")}  # noqa: E731
    r["extra"]["catscale"] = {"runs": [
        {"engine": "sqlite", "files": 1000000, "generate_s": 40.0, "bytes": 4.4e8, "rates": rates(small_warm)},
        {"engine": "sqlite", "files": 10000000, "generate_s": 900.0, "bytes": 4.4e9, "rates": rates(big_warm)}]}
    return bench_report.goals_table(r)


def test_catscale_aim_is_within_one_and_a_half_times():
    label = "catalog lookup by path, ops/s at 10 M files within 1.5× of 1 M (sqlite, warm)"
    assert row(catscale_table(1500.0, 1000.0), label)[1:] == ["1.50× (1,500 vs 1,000)", "met"]
    assert row(catscale_table(1510.0, 1000.0), label)[2] == "**not met**"
    assert row(bench_report.goals_table(tiny_result()), label)[1:] == ["not measured", "–"]
    assert all(len(line) < 200 for line in catscale_table(1500.0, 1000.0))


def test_catscale_aim_shows_the_cpu_ratio_beside():
    r = tiny_result()
    rates = lambda warm, cpu: {op: {"cold": warm, "warm": warm, "warm_cpu": cpu}  # noqa: E731
                               for op in ("lookup", "sig", "insert", "listing")}
    r["extra"]["catscale"] = {"runs": [{"engine": "sqlite", "files": 1000000, "rates": rates(2000.0, 2200.0)},
                                       {"engine": "sqlite", "files": 10000000, "rates": rates(1000.0, 2000.0)}]}
    label = "catalog insert of a file, ops/s at 10 M files within 1.5× of 1 M (sqlite, warm)"
    assert row(bench_report.goals_table(r), label)[1:] == [
        "2.00× (2,000 vs 1,000; per CPU second 1.10×)", "**not met**"]


def postgres_table(lite_cp, pg_cp, one, two, error=None):
    r = tiny_result()
    runs = [{"kind": "sqlite", "rep": 0, "cp": lite_cp, "cold_cat": 1.0},
            {"kind": "pg", "rep": 0, "cp": pg_cp, "cold_cat": 2.0},
            {"kind": "one", "rep": 0, "copy": one, "db_bytes": 900000, "db_files": 1000},
            {"kind": "two", "rep": 0, "copy": two},
            {"kind": "two", "rep": 1, "error": "mount failed"}]
    r["extra"]["postgres"] = {"runs": runs, "crawls": ["crawl-001", "crawl-002"], "files": [500, 500]}
    return bench_report.goals_table(r)


def test_postgres_aims_at_the_boundary():
    cp = "`cp -r` crawl 1, catalog in PostgreSQL vs SQLite ≥ 0.8×"
    two = "two machines copying a crawl each at once vs one copying both, files/s ≥ 1.5×"
    t = postgres_table(4.0, 5.0, 3.0, 2.0)
    assert row(t, cp)[1:] == ["0.80× (5.00 vs 4.00 s)", "met"]
    assert row(t, "cold `cat` of everything, catalog in PostgreSQL")[1:] == ["0.50× (2.00 vs 1.00 s)", "**not met**"]
    assert row(t, two)[1].startswith("1.50× (2.00 vs 3.00 s") and row(t, two)[2] == "met"
    assert row(t, "PostgreSQL database per file (no aim)")[1:] == ["900 B (1000 files)", "–"]
    t = postgres_table(4.0, 5.1, 3.0, 2.01)
    assert row(t, cp)[2] == row(t, two)[2] == "**not met**"


def test_postgres_aims_not_measured_when_the_section_did_not_run():
    t = bench_report.goals_table(tiny_result())
    assert row(t, "`cp -r` crawl 1, catalog in PostgreSQL")[1:] == ["not measured", "–"]
    assert row(t, "PostgreSQL database per file (no aim)")[1:] == ["not measured", "–"]


def test_what_the_bench_removes_is_put_aside_until_the_end_of_its_run(tmp_path):
    """bench_lib.rmtree renames a tree into a trash directory beside it (no
    inode freed before a timed step: ext4 without a journal skips recently
    freed ones at each allocation); empty_trash removes it for good, and
    ``now`` removes at once."""
    import bench_lib
    target = tmp_path / "target"
    (target / "d").mkdir(parents=True)
    (target / "d" / "f").write_bytes(b"x")
    bench_lib.rmtree(str(target))
    assert not target.exists()
    assert [p.read_bytes() for p in (tmp_path / bench_lib.TRASH).rglob("f")] == [b"x"]
    for again in (b"y", b"z"):            # the name is free for the next step at once,
        target.mkdir()                    # and trees of the same name are put aside too
        (target / "g").write_bytes(again)
        bench_lib.rmtree(str(target))
    assert not target.exists()
    assert sorted(p.read_bytes() for p in (tmp_path / bench_lib.TRASH).rglob("*") if p.is_file()) == [b"x", b"y", b"z"]
    target.mkdir()
    bench_lib.empty_trash()
    assert not (tmp_path / bench_lib.TRASH).exists() and target.is_dir()
    bench_lib.rmtree(str(target), now=True)
    assert not target.exists() and not (tmp_path / bench_lib.TRASH).exists()
