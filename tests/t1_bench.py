"""tools/bench itself: the aims table the report builds from a run's JSON
(a tiny run of the issue-10 sections end to end is in t4_bench)."""

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
                         "100": {"files_done": 20000, "rss": 46 << 20}}},
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
    assert "| aim (issues 10, 12, 13) | figure | met |" in t
    assert row(t, "`cp -r` crawl 1 into the mount vs bindfs ≥ 0.7× (bench corpus)")[1:] == ["0.80×", "met"]
    assert row(t, "`cp -r` crawl 1 into the mount vs bindfs ≥ 0.7× (small pages)")[1:] == ["0.50×", "**not met**"]
    assert row(t, "cold `cat` of everything vs bindfs ≥ 0.8× (bench corpus)")[1:] == ["1.00×", "met"]
    assert row(t, "`rsync -a`")[1:] == ["not measured", "–"]
    assert row(t, "64 readers")[2] == "met"
    assert row(t, "rebuild of a lost disk (C = 6, G = 6)")[1:] == ["42.0 MB/s", "**not met**"]
    assert row(t, "scrub (C = 6, G = 6)")[2] == "–"
    assert row(t, "daemon RSS after 20,000 files ≤ 1.2× RSS after 2,000")[1:] == [
        "1.15× (40.0 → 46.0 MiB)", "met"]
    assert row(t, "`meta/` per file at rest")[1:] == ["650 B (peak during the ingest 900 B)", "**not met**"]   # aim 400 B
    assert row(t, "ingest rate at the end")[1:] == [
        "0.80× (500 → 400 files/s; plain directory 2,000 → 2,000; daemon CPU per file 1.10×)",
        "**not met**"]
    assert row(t, "`webfs import` crawl 1 vs `cp -r`")[1:] == ["1.25×", "met"]
    assert row(t, "crawl 2 vs crawl 1 through `webfs import`")[1:] == ["4.00×", "met"]


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
    assert "| aim (issues 10, 12, 13) | figure | met |" in out and "**not met**" in out
