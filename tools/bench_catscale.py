"""The catscale section of tools/bench (issue 25): catalog operations on
generated catalogs of growing size (tools/catalog_gen.py), without a mount.

A catalog of each size (--catscale-files; 1 M and 10 M files with --full)
is made and closed; then each operation (tools/catscale_ops.py: lookup by
path, by signature, insert of a file, listing of a 10,000-entry directory)
is timed on every size's catalog opened afresh for it (cold: SQLite's page
cache and webfs's memory of names empty, the OS's cache as the generation
left it), then nine more rounds of each size, interleaved (A B B A ...),
webfs's memory of names emptied before each, their median kept (warm), as
operations per second (and per CPU second of the process).
The aim: the warm rate at the largest size within 1.5x of the rate at the
smallest, per operation. The report's functions need only the standard
library (tools/bench_report.py imports them).
"""
from __future__ import annotations

import os
import shutil
import sqlite3
import time

AIM = 1.5
OPS = ("lookup", "sig", "insert", "listing")
LABELS = {"lookup": "lookup by path", "sig": "lookup by signature", "insert": "insert of a file",
          "listing": "listing of the 10,000-entry directory"}


def make(workdir: str, files: int, seed: int, log) -> tuple[dict, str]:
    """Make a catalog of ``files`` files: its figures so far, and its path."""
    from catalog_gen import Layout, load_sqlite
    from webfs.catalog import Catalog
    d = os.path.join(workdir, "catscale-%d" % files)
    shutil.rmtree(d, ignore_errors=True)
    path = os.path.join(d, "meta", "catalog.db")
    t = time.perf_counter()
    cat = Catalog(path)
    try:
        steps = load_sqlite(cat, Layout(files, seed), log)
    finally:
        cat.close()
    made = time.perf_counter() - t
    # On the disk before the clock starts: no write-back of the new file under it.
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    res = {"engine": "sqlite", "files": files, "generate_s": made, "sync_s": time.perf_counter() - t - made,
           "steps": steps, "bytes": os.path.getsize(path)}
    log("catscale: %d files made in %.1f s (%.2f GB)", files, res["generate_s"], res["bytes"] / 1e9)
    return res, path


def run_sizes(workdir: str, sizes: list[int], seed: int, log) -> list[dict]:
    """Make a catalog of each size, time the operations on all of them at
    once (their rounds interleaved: each size meets the same load and the
    same warm-up), remove them."""
    from catalog_gen import Layout
    from catscale_ops import measure, plans
    from webfs.catalog import Catalog
    made: list[tuple[dict, str]] = []
    try:
        for files in sizes:
            made.append(make(workdir, files, seed, log))
        found = measure([(lambda path=path: Catalog(path), Layout(res["files"], seed)) for res, path in made], seed)
        for (res, path), rates in zip(made, found):
            res["rates"] = rates
            cat = Catalog(path)
            try:
                res["plans"] = plans(cat, Layout(res["files"], seed))
            finally:
                cat.close()
            log("catscale: %d files: %s", res["files"], ", ".join(
                "%s %.0f/%.0f ops/s" % (op, r["cold"], r["warm"]) for op, r in rates.items()))
    finally:
        for _, path in made:
            shutil.rmtree(os.path.dirname(os.path.dirname(path)), ignore_errors=True)
    return [res for res, _ in made]


def catscale_section(ctx):
    from bench_lib import log
    from bench_webfs import section_fail
    o = ctx.opts
    info = ctx.extra["catscale"] = {"runs": []}
    try:
        info["runs"] = run_sizes(ctx.workdir, [int(x) for x in o.catscale_files.split(",")], o.seed, log)
    except (OSError, ValueError, sqlite3.Error) as e:       # a wrong answer is a ValueError
        info["error"] = str(e)[-1000:]
        section_fail(ctx, "catscale", "webfs", e)


def ratios(runs: list[dict]) -> dict[str, tuple]:
    """op -> (warm rate at the smallest size, at the largest, smallest / largest,
    the same ratio of the rates per CPU second or None), of one engine's runs."""
    if len(runs) < 2 or any("rates" not in r for r in runs):
        return {}
    small, big = runs[0]["rates"], runs[-1]["rates"]
    out = {}
    for op in OPS:
        cpu = small[op].get("warm_cpu"), big[op].get("warm_cpu")
        out[op] = (small[op]["warm"], big[op]["warm"], small[op]["warm"] / big[op]["warm"],
                   cpu[0] / cpu[1] if all(cpu) else None)
    return out


def _count(n: int) -> str:
    return "%g M" % (n / 1e6) if n >= 1e6 else "{:,}".format(n)


def catscale_aims(cs: dict) -> list[tuple]:
    """Issue 25's aim, per engine and operation: the warm rate at the largest
    catalog within 1.5x of the rate at the smallest (rows "not measured" without runs)."""
    out = []
    for engine in sorted({r["engine"] for r in cs.get("runs") or ()} or {"sqlite"}):
        runs = [r for r in cs.get("runs") or () if r["engine"] == engine]
        found = ratios(runs)
        sizes = ("at %s files within %.1f× of %s" % (_count(runs[-1]["files"]), AIM, _count(runs[0]["files"]))
                 if found else "at 10 M files within %.1f× of 1 M" % AIM)
        for op in OPS:
            label = "catalog %s, ops/s %s (%s, warm)" % (LABELS[op], sizes, engine)
            if op in found:
                a, b, x, cpu = found[op]
                out.append((label, "%.2f× (%s vs %s%s)" % (
                    x, _num(a), _num(b), "; per CPU second %.2f×" % cpu if cpu else ""), x <= AIM))
            else:
                out.append((label, "not measured", None))
    return out


def _num(x: float) -> str:
    return "{:,.0f}".format(x) if x >= 100 else "%.1f" % x


def render_catscale(result) -> list[str]:
    from bench_lib import failure_lines
    cs = (result.get("extra") or {}).get("catscale") or {}
    runs = cs.get("runs") or []
    if not runs:
        return failure_lines(cs)
    out = ["Catalogs made by `tools/catalog_gen.py`; each operation on the catalog opened afresh "
           "(cold), then the median of nine more rounds, the sizes' rounds interleaved (warm); operations per second "
           "(`tools/catscale_ops.py`):", "",
           "| engine | files | made in | size | " + " | ".join(LABELS[op] + " cold / warm" for op in OPS) + " |",
           "|--|--:|--:|--:|" + "--:|" * len(OPS)]
    for r in runs:
        rates = r.get("rates") or {}
        out.append("| %s | %s | %.0f s | %.2f GB | %s |" % (
            r["engine"], _count(r["files"]), r["generate_s"], r["bytes"] / 1e9, " | ".join(
                "%s / %s" % (_num(rates[op]["cold"]), _num(rates[op]["warm"])) if op in rates else "–" for op in OPS)))
    out.append("")
    return out


SECTIONS = {
    "catscale": (catscale_section, "catalog lookups, inserts and listings on generated catalogs of growing size"),
}


def main(argv=None) -> int:
    """Run the section alone: `tools/bench_catscale.py --files 1000000,10000000 --workdir DIR`."""
    import argparse
    import json
    import logging
    ap = argparse.ArgumentParser(prog="bench_catscale.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", default="20000,200000", help="catalog sizes, comma-separated (default %(default)s)")
    ap.add_argument("--seed", type=int, default=1, help="generator and key seed (default 1)")
    ap.add_argument("--workdir", default="/tmp", help="where the catalogs are made (default /tmp)")
    ap.add_argument("--json", metavar="FILE", help="write the figures and query plans here")
    o = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    log = logging.getLogger("catscale").info
    runs = run_sizes(o.workdir, [int(n) for n in o.files.split(",")], o.seed, log)
    result = {"extra": {"catscale": {"runs": runs}}}
    print("\n".join(render_catscale(result) + ["| aim | figure | met |", "|--|--:|:-:|"] + [
        "| %s | %s | %s |" % (a, f, "met" if m else "**not met**") for a, f, m in catscale_aims(result["extra"]["catscale"])]))
    if o.json:
        with open(o.json, "w") as f:
            json.dump(runs, f, indent=1)
    return 0


if __name__ == "__main__":
    import sys
    sys.exit(main())
