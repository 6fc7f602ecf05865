"""The report of tools/bench: medians and ratios, as Markdown, JSON and PNG.

results.json keeps every raw measurement (for later comparison) plus the
summary the tables are made from; bench_report.markdown(result) rebuilds the
tables from a saved JSON file:

    python3 tools/bench_report.py bench-results/results.json   # print the tables
    python3 tools/bench_report.py --aims bench-results/results.json   # the README's table
"""

import json
import os
import shutil
import statistics
import sys

from bench_lib import failure_lines, git_describe, loadavg, write_json

SECTION_TITLES = {
    "ingest": "Ingest",
    "space": "Space",
    "read": "Full reads",
    "metadata": "Metadata",
    "random": "Random page reads",
    "daemon": "Daemon CPU and memory",
    "small": "Small pages (median about 6 KB)",
    "import": "webfs import against cp -r",
    "scale": "A long ingest: rate, daemon RSS and meta/ against files (webfs only)",
    "rebuild": "Rebuild of a lost disk and scrub (webfs only)",
    "readers": "Concurrent readers on slow disks (webfs only)",
    "cooling": "Disk cooling (webfs only)",
    "warc": "Web archives: import-warc and export-warc (webfs only)",
    "memory": "Daemon memory against archive size (webfs only)",
    "s3": "Disks on SeaweedFS (S3) against local disks and rclone mount",
    "postgres": "The catalog in PostgreSQL against SQLite; two machines against one",
    "query": "Query access and streams: search, index size, import with indexing (webfs only)",
    "catscale": "Catalog operations against catalog size (generated catalogs, no mount)",
}


def collect(ctx, opts, started, sections, repo, fmt):
    ctx.machine["loadavg_end"] = loadavg()
    names = [t.name for t in ctx.targets]
    subject = opts.subject or ("webfs" if "webfs" in names else names[-1])
    files, nbytes = ctx.size_of(ctx.crawls)
    result = {
        "format": fmt,
        "started": started.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "git": git_describe(repo),
        "machine": ctx.machine,
        "options": {k: v for k, v in vars(opts).items()},
        "sections": sections,
        "targets": [t.describe() for t in ctx.targets],
        "subject": subject,
        "corpus": {"path": ctx.corpus, "crawls": ctx.crawl_stats, "files": files,
                   "bytes": nbytes, "ingested": ctx.ingest_crawls, "info": ctx.info},
        "workdir": ctx.workdir,
        "figures": ctx.figures,
        "figure_order": list(ctx.figures),
        "measurements": ctx.measurements,
        "failures": ctx.failures,
        "extra": ctx.extra,
    }
    result["summary"] = summarize(result)
    return result


def _median(xs):
    return statistics.median(xs) if xs else None


def summarize(result):
    """[{key, section, label, kind, better, per target {value, rate, ...},
    ratios {peer: x}}] in figure order."""
    names = [t["name"] for t in result["targets"]]
    subject = result["subject"]
    rows = []
    order = result.get("figure_order") or list(result["figures"])
    for key in order:
        fig = result["figures"][key]
        row = {"key": key, **fig, "targets": {}, "ratios": {}}
        for n in names:
            ms = [m for m in result["measurements"] if m["figure"] == key and m["target"] == n]
            if not ms:
                continue
            good = [m for m in ms if m.get("ok", True)]
            cell = {"n": len(good), "failed": len(ms) - len(good)}
            if fig["kind"] == "time":
                secs = [m["seconds"] for m in good if m.get("seconds")]
                med = _median(secs)
                cell.update(seconds=med, min=min(secs) if secs else None,
                            max=max(secs) if secs else None)
                if med:
                    f = good[0].get("files")
                    b = _median([m["nbytes"] for m in good if m.get("nbytes")])
                    cell["rate"] = f / med if f else None
                    cell["mbps"] = b / med / 1e6 if b else None
                    cell["value"] = cell["rate"] or (1.0 / med)
            else:
                vals = [m["value"] for m in good if m.get("value") is not None]
                cell.update(value=_median(vals), min=min(vals) if vals else None,
                            max=max(vals) if vals else None)
                corp = [m["corpus"] for m in good if m.get("corpus")]
                if corp:
                    cell["corpus"] = corp[0]
            row["targets"][n] = cell
        s = row["targets"].get(subject, {}).get("value")
        for n in names:
            if n == subject:
                continue
            p = row["targets"].get(n, {}).get("value")
            if s and p:
                row["ratios"][n] = s / p
        rows.append(row)
    return rows


# --------------------------------------------------------------- format

def _num(x, digits=3):
    if x is None:
        return "–"
    if abs(x) >= 100:
        return "{:,.0f}".format(x)
    if abs(x) >= 10:
        return "%.1f" % x
    return ("%%.%dg" % digits) % x


def _duration(seconds):
    if seconds is None:
        return "?"
    return "%d min %02d s" % divmod(int(round(seconds)), 60) if seconds >= 60 else "%.0f s" % seconds


def _bytes(n):
    for unit, div in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if abs(n) >= div:
            return "%.1f %s" % (n / div, unit)
    return "%d B" % n


def cell_text(row, cell):
    if not cell:
        return ""
    warn = " ⚠" if cell.get("failed") else ""
    kind = row["kind"]
    if kind == "time":
        if cell.get("rate") is None:
            return ("%s s" % _num(cell.get("seconds"))) + warn if cell.get("seconds") else "failed"
        unit = row.get("unit") or "files"
        s = "%s %s/s" % (_num(cell["rate"]), unit)
        if cell.get("mbps"):
            s += ", %s MB/s" % _num(cell["mbps"])
        return s + warn
    v = cell.get("value")
    if v is None:
        return "failed" if cell.get("failed") else ""
    if kind == "latency":
        return "%s ms%s" % (_num(v), warn)
    if kind == "ratio":
        return "%.2f×%s" % (v, warn)
    if kind in ("seconds", "cpu"):
        return "%s s%s" % (_num(v), warn)
    if kind == "mem":
        return "%s MiB%s" % (_num(v / 1048576), warn)
    if kind == "bytes":
        s = _bytes(v)
        if cell.get("corpus"):
            s += " (%.2f×)" % (v / cell["corpus"])
        return s + warn
    return _num(v) + warn


def machine_line(m):
    fs = m.get("workdir_fs") or {}
    mem = m.get("mem_bytes")
    la = [m.get("loadavg_start"), m.get("loadavg_end")]
    load = "; load average %s at the start, %s at the end" % tuple(
        ("%.2f" % x[0]) if x else "?" for x in la)
    return "%s, %s CPUs (nproc), %s RAM, Linux %s, work filesystem %s on %s%s%s" % (
        m.get("cpu", "?"), m.get("nproc", "?"),
        ("%.0f GiB" % (mem / 2**30)) if mem else "?", m.get("kernel", "?"),
        fs.get("fstype", "?"), fs.get("source", "?"),
        "" if m.get("drop_caches") else " (not root: caches not dropped)", load)


AIM_ISSUES = "issues 10, 12, 13, 22, 24, 25, 26"


def goals(result):
    """Where the subject stands against the aims of issues 10, 12 and 13 and of
    the open issues 22, 24, 25 and 26: [(aim, figure, met: True, False or None
    when there is no figure or no pass mark)], one row per aim and corpus, in
    the table's order (the current aim where a later issue raised an older
    one).  Only when the subject is webfs."""
    if result["subject"] != "webfs":
        return []
    extra = result.get("extra") or {}
    return (datapath_aims({r["key"]: r for r in result["summary"]})
            + resolved_aims(extra) + import_aims(extra.get("import") or {})
            + warc_aims(extra.get("warc") or {}) + query_aims(extra.get("query") or {})
            + s3_aims(extra.get("s3") or {}) + bench_pg.pg_aims(extra.get("postgres") or {})
            + bench_catscale.catscale_aims(extra.get("catscale") or {}))


MAIN, SMALL = "bench corpus", "small pages"
PEER_NAMES = {"bindfs": "bindfs", "memfs": "tools/memfs (the in-memory ceiling)", "juicefs": "JuiceFS"}


def datapath_aims(rows):
    """Issue 22's aims through the mount: against bindfs, the in-memory
    ceiling (tools/memfs) and JuiceFS, each from the ratio of files/s the
    summary holds for the figure (the subject's over the peer's)."""
    out = []

    def ratio(key, peer):
        r = rows.get(key)
        return r["ratios"].get(peer) if r else None

    def versus(label, keys, peer, floor, strict=False):
        name = PEER_NAMES[peer]
        for key, corpus in keys:
            x = ratio(key, peer)
            aim = ("ahead of %s" % name) if strict else ("vs %s ≥ %s×" % (name, ("%.2f" % floor).rstrip("0")))
            out.append(("%s %s (%s)" % (label, aim, corpus), "%.2f×" % x if x is not None else "not measured",
                        (x > floor if strict else x >= floor) if x is not None else None))

    cp = [("ingest.cp.1", MAIN), ("small.cp", SMALL)]
    versus("`cp -r` crawl 1 into the mount", cp, "bindfs", 0.6)
    versus("`cp -r` crawl 1 into the mount", cp, "memfs", 0.85)
    versus("`cp -r` crawl 1 into the mount", cp, "juicefs", 1.5)
    versus("`rsync -a` crawl 1", [("ingest.rsync.1", MAIN)], "bindfs", 0.6)
    versus("cold `cat` of everything", [("read.cat.cold", MAIN), ("small.cat.cold", SMALL)], "bindfs", 0.8)
    versus("cold `grep -r` of everything", [("read.grep.cold", MAIN), ("small.grep.cold", SMALL)], "bindfs", 0.8)
    versus("Zipf page reads, cold,", [("zipf.cold", MAIN)], "bindfs", 0.7)
    hogs = [("load.cp", SMALL + ", 2 CPU hogs beside")]
    versus("`cp -r` crawl 1 into the mount", hogs, "bindfs", 0.4)
    versus("`cp -r` crawl 1 into the mount", hogs, "juicefs", 1.0, strict=True)
    return out


def resolved_aims(extra):
    """The aims of resolved issues whose figures tools/bench still produces
    (readers, rebuild, cooling, memory, ingest rate), with issue 25's
    `meta/` size."""
    out = []
    rd = extra.get("readers") or {}
    runs = rd.get("runs") or []
    if runs:
        rates = [r.get("reads_per_s") or 0 for r in runs]
        top = runs[-1]
        rising = all(b >= a * 0.95 for a, b in zip(rates, rates[1:]))
        met = (top.get("reads_per_s") or 0) >= 160 and rising
        out.append(("%d readers at once, %d disks of %g ms (%.0f reads/s possible): ≥ 160 "
                    "reads/s, rising with readers (none 5 %% below the last)" % (top["readers"], rd["disks"],
                                                      rd["delay_s"] * 1e3, rd["ceiling_per_s"]),
                    " → ".join("%s: %.0f" % (r["readers"], r.get("reads_per_s") or 0)
                               for r in runs) + " reads/s", met))
    else:
        out.append(("64 readers at once, 4 disks of 20 ms: ≥ 160 reads/s, rising with readers",
                    "not measured", None))
    rb = extra.get("rebuild") or {}
    cfgs = [c for c in rb.get("configs", []) if (c.get("median") or {}).get("mb_per_s")]
    for cfg in cfgs:
        mbps = cfg["median"]["mb_per_s"]
        out.append(("rebuild of a lost disk (C = %d, G = %d) ≥ 100 MB/s written"
                    % (rb["disks"], cfg["group_size"]), "%s MB/s" % _num(mbps), mbps >= 100))
    if not cfgs:
        out.append(("rebuild of a lost disk ≥ 100 MB/s written", "not measured", None))
    for cfg in rb.get("configs", []):
        sc = cfg.get("scrub") or {}
        if sc.get("mb_per_s"):
            out.append(("scrub (C = %d, G = %d), MB read per second (no aim)"
                        % (rb["disks"], cfg["group_size"]), "%s MB/s" % _num(sc["mb_per_s"]), None))
    co = extra.get("cooling") or {}
    hot = [x for x in co.get("scenarios", []) if x.get("before") and x.get("after")]
    for sc in hot:
        x = sc["before"]["mean_ms"] / sc["after"]["mean_ms"]
        aim = sc["scenario"] == "hot"
        out.append(("disk cooling, %s set: mean response before/after ≥ 3×%s"
                    % (sc["scenario"], "" if aim else " (no aim)"),
                    "%.2f× (%s → %s ms)" % (x, _num(sc["before"]["mean_ms"]),
                                            _num(sc["after"]["mean_ms"])), x >= 3 if aim else None))
    if not hot:
        out.append(("disk cooling, hot set: mean response before/after ≥ 3×", "not measured", None))
    return out + scale_aims(extra.get("scale") or {}) + pg_catalog_rows(extra.get("pg_catalog"))


def pg_catalog_rows(pg):
    """The PostgreSQL catalog's size per file (issue 25 asks it beside meta/'s),
    only when the webfs-pg target ran."""
    if not pg:
        return []
    return [("catalog in PostgreSQL per file, tables and indexes after `cp -r` of %s files (no aim)"
             % "{:,}".format(pg["files"]), "%.0f B" % pg["per_file"], None)]


def scale_aims(scl):
    """The scale section's aims: RSS, `meta/` per file (issue 25: ≤ 400 B), ingest rate."""
    out = []
    at = scl.get("at") or {}
    if at.get("10") and at.get("100") and at["10"].get("rss") and at["100"].get("rss"):
        x = at["100"]["rss"] / at["10"]["rss"]
        beside = at["100"].get("indexer_rss")
        out.append(("daemon RSS after %s files ≤ 1.2× RSS after %s (`cp -r` of small pages)" % (
            "{:,}".format(at["100"]["files_done"]), "{:,}".format(at["10"]["files_done"])),
            "%.2f× (%s → %s MiB%s)" % (
                x, _num(at["10"]["rss"] / 2**20), _num(at["100"]["rss"] / 2**20),
                "; its indexing process %s MiB beside it" % _num(beside / 2**20) if beside else ""),
            x <= 1.2))
    else:
        out.append(("daemon RSS after 100,000 files ≤ 1.2× RSS after 10,000", "not measured", None))
    if scl.get("meta_per_file_at_rest") is not None:
        out.append(("`meta/` per file at rest (all disks) ≤ 400 B, after %s files"
                    % "{:,}".format(scl["files"]),
                    "%.0f B (peak during the ingest %.0f B)" % (scl["meta_per_file_at_rest"],
                                                            scl.get("meta_per_file_peak") or 0),
                    scl["meta_per_file_at_rest"] <= 400))
    else:
        out.append(("`meta/` per file at rest ≤ 400 B", "not measured", None))
    if scl.get("rate_end_vs_start"):
        # The issue's figure: the rate of the last slice against the first's,
        # every slice started after `sync`. The same slices into a plain
        # directory and the daemon's CPU per file say whether a change is
        # webfs's or the machine's (slices differ in file sizes).
        x = scl["rate_end_vs_start"]
        sl = scl.get("slices") or []
        cpu = scl.get("cpu_per_file_end_vs_start")
        out.append(("ingest rate at the end of a %s-file copy within 15 %% of its start"
                    % "{:,}".format(scl["files"]),
                    "%.2f× (%s → %s files/s; plain directory %s → %s; daemon CPU per file %s)"
                    % (x, _num(sl[0]["rate"]), _num(sl[-1]["rate"]), _num(sl[0].get("plain_rate")),
                       _num(sl[-1].get("plain_rate")), "%.2f×" % cpu if cpu else "?"),
                    x >= 0.85))
    else:
        out.append(("ingest rate at the end of a 100,000-file copy within 15 % of its start",
                    "not measured", None))
    return out


def import_aims(imp):
    """`webfs import` against `cp -r` to a plain directory, and crawl 2 against crawl 1 (issue 22: ≥ 3×)."""
    out = []
    for tag, corpus in (("main", MAIN), ("small.", SMALL)):
        med = (imp.get("median") or {}).get(tag) or {}
        files = (imp.get("files") or {}).get(tag) or []
        if med.get("cp_plain_1") and med.get("import_1"):
            x = med["cp_plain_1"] / med["import_1"]
            out.append(("`webfs import` crawl 1 vs `cp -r` into a plain directory ≥ 1.0× (%s)"
                        % corpus, "%.2f×" % x, x >= 1.0))
        elif tag == "main":
            out.append(("`webfs import` vs `cp -r` into a plain directory ≥ 1.0×", "not measured",
                        None))
        label = "crawl 2 vs crawl 1 through `webfs import` ≥ 3× faster (%s)" % corpus
        if med.get("import_1") and med.get("import_2") and len(files) > 1:
            x = (files[1] / med["import_2"]) / (files[0] / med["import_1"])
            out.append((label, "%.2f×" % x, x >= 3.0))
        else:
            out.append((label, "not measured", None))
    return out


def warc_aims(wa):
    """The warc section: import-warc and replay (issue 24), export-warc (issue 12)."""
    out = []
    med = wa.get("median") or {}
    if med.get("cdxj") and med.get("import"):
        x = med["cdxj"] / med["import"]
        out.append(("`webfs import-warc` records/s vs `cdxj-indexer` ≥ 0.5× (%s records)"
                    % "{:,}".format(wa["records"]), "%.2f× (%s vs %s records/s)" % (
                        x, _num(wa["records"] / med["import"]), _num(wa["records"] / med["cdxj"])), x >= 0.5))
    else:
        out.append(("`webfs import-warc` records/s vs `cdxj-indexer` ≥ 0.5×", "not measured", None))
    if med.get("tar") and med.get("export"):
        x = med["tar"] / med["export"]
        out.append(("`webfs export-warc` pages/s vs `tar -cf -` of the collection, cold, ≥ 1.0×",
                    "%.2f× (%s vs %s pages/s)" % (x, _num(wa["records"] / med["export"]),
                                                  _num(wa["records"] / med["tar"])), x >= 1.0))
    else:
        out.append(("`webfs export-warc` pages/s vs `tar -cf -` through the mount ≥ 1.0×", "not measured", None))
    if med.get("replay_first"):
        out.append(("`webfs replay` start-up, first after import-warc, < 1 s (%s captures)"
                    % "{:,}".format(wa["records"]), "%.2f s (%s with its CDXJ kept from a start before)" % (
                        med["replay_first"], "%.2f s" % med["replay"] if med.get("replay") else "?"),
                    med["replay_first"] < 1.0))
    else:
        out.append(("`webfs replay` start-up < 1 s", "not measured", None))
    label = "`webfs replay` + wayback latency of a capture vs plain pywb, median, ≤ 1.2×"
    if med.get("replay_ms") and med.get("pywb_ms"):
        x = med["replay_ms"] / med["pywb_ms"]
        out.append((label, "%.2f× (%.1f vs %.1f ms)" % (x, med["replay_ms"], med["pywb_ms"]), x <= 1.2))
    else:
        out.append((label, "not measured", None))
    return out


def query_aims(q):
    """Issue 26's aims from the query section's medians (tools/bench_query.py)."""
    med = q.get("median") or {}
    pages = " (%s small pages)" % "{:,}".format(q["pages"]) if q.get("pages") else ""

    def row(label, num, den, aim, fmt):
        a, b = med.get(num), med.get(den)
        if not (a and b):
            return (label, "not measured", None)
        x = a / b
        return (label, "%.*f× (%s)" % (0 if x >= 100 else 1 if x >= 10 else 2, x, fmt(a, b)), aim(x) if aim else None)

    return [
        row("`webfs search` of a rare word vs `grep -rl` over the mount, cold, ≥ 100× faster" + pages,
            "grep", "search", lambda x: x >= 100, lambda a, b: "%.3f vs %.2f s" % (b, a)),
        row("index size vs the compressed text it covers ≤ 0.5×", "index_bytes", "covered_bytes",
            lambda x: x <= 0.5, lambda a, b: "%s vs %s" % (_bytes(a), _bytes(b))),
        row("`webfs import` with indexing vs without ≥ 0.7×", "import_plain", "import_index",
            lambda x: x >= 0.7, lambda a, b: "%.2f vs %.2f s" % (b, a)),
        row("`webfs import` with indexing, until its index is complete, vs without (no aim)", "import_plain",
            "index_done", None, lambda a, b: "%.2f vs %.2f s" % (b, a)),
        row("subset stream pages/s vs random reads, cold (no aim; WebBase 75–180×)", "stream_pages_s",
            "random_pages_s", None, lambda a, b: "%s vs %s pages/s" % (_num(a), _num(b))),
    ]


def s3_aims(s3):
    """Issue 13's aims: 4 SeaweedFS disks against 4 local ones (>= 0.5x), and against rclone mount (faster)."""
    def med(target, *keys):
        vals = sorted(sum(r[k] for k in keys) for r in s3.get("runs") or ()
                      if r["target"] == target and "error" not in r and all(r.get(k) for k in keys))
        return vals[len(vals) // 2] if vals else None
    out = []
    for what, keys in (("`cp -r` crawl 1 and the `webfs sync` after it (its uploads)", ("cp", "cp_sync")),
                       ("`webfs import` crawl 1", ("import",)), ("cold `cat` of everything", ("cold_cat",))):
        local, s3disk = med("webfs-4local", *keys), med("webfs-4s3", *keys)
        label = "%s on 4 SeaweedFS disks vs 4 local disks ≥ 0.5×" % what
        out.append((label, "%.2f× (%.2f vs %.2f s)" % (local / s3disk, s3disk, local), local / s3disk >= 0.5)
                   if local and s3disk else (label, "not measured", None))
    # The same command timed for both; webfs's uploads written behind are shown beside, not judged:
    # a close() through rclone (--vfs-cache-mode off) returns once uploaded, through webfs once staged.
    for what, key in (("`cp -r` crawl 1", "cp"), ("cold `cat`", "cold_cat")):
        s3disk, rclone = med("webfs-4s3", key), med("rclone-s3", key)
        label = "%s on SeaweedFS: webfs faster than `rclone mount`" % what
        settled = med("webfs-4s3", "cp", "cp_sync") if key == "cp" else None
        out.append((label, "%.2f× (%.2f vs %.2f s%s)" % (
            rclone / s3disk, s3disk, rclone,
            "; with the uploads after it %.2f×" % (rclone / settled) if settled else ""), rclone > s3disk)
            if s3disk and rclone else (label, "not measured", None))
    return out


def render_warc(result):
    wa = (result.get("extra") or {}).get("warc") or {}
    runs = wa.get("runs") or []
    if not runs:
        return failure_lines(wa)
    out = ["A WARC of %s response records (%s, per-record gzip, warcio's writer) made from "
           "`tools/make-corpus --small-pages`; each run: `cdxj-indexer` of it, `webfs import-warc` "
           "into a fresh mount, then (cold) `tar -cf - COLLECTION | wc -c` and `webfs export-warc "
           "--order disk`. Seconds:" % ("{:,}".format(wa["records"]), _mb(wa["bytes"])), "",
           "| run | cdxj-indexer | import-warc | ratio | tar | export-warc | ratio |",
           "|--:|--:|--:|--:|--:|--:|--:|"]
    for i, r in enumerate(runs + [wa["median"]]):
        out.append("| %s | %.2f | %.2f | %.2f× | %.2f | %.2f | %.2f× |" % (
            i + 1 if i < len(runs) else "median", r["cdxj"], r["import"], r["cdxj"] / r["import"],
            r["tar"], r["export"], r["tar"] / r["export"]))
    out.append("")
    return out


def goals_table(result):
    """The aims table as Markdown lines (the README's table is pasted from
    here: `tools/bench_report.py --aims results.json`)."""
    g = goals(result)
    if not g:
        return []
    m = result.get("machine") or {}
    la = [m.get("loadavg_start"), m.get("loadavg_end")]
    out = ["Run of %s (%s), load average %s at the start and %s at the end:" % (
        result["started"].replace("T", " ").replace("Z", " UTC"), result.get("git") or "?",
        *(("%.2f" % x[0]) if x else "?" for x in la)), "",
        "| aim (%s) | figure | met |" % AIM_ISSUES, "|---|--:|:-:|"]
    for aim, measured, met in g:
        out.append("| %s | %s | %s |" % (aim, measured,
                                         "–" if met is None else ("met" if met else "**not met**")))
    return out


def space_figures(result):
    """The webfs space breakdown against the reference (issue 7's space aim)."""
    extra = result.get("extra") or {}
    ref = extra.get("reference")
    st = extra.get("webfs_status")
    sp = None
    for m in result["measurements"]:
        if m["target"] == "webfs" and m["figure"] == "space.breakdown":
            sp = m.get("breakdown") if m.get("crawls") == (ref or {}).get("crawls") else None
    if not (ref and st and sp):
        return None
    prot = st.get("protection") or {}
    parity_payload = prot.get("parity_bytes") or 0
    blocks = st.get("blocks") or 0
    stored = sp["blocks"]["apparent"] + sp["parity"]["apparent"]
    comp = ref["distinct_compressed_bytes"]
    g = st.get("group_size") or prot.get("group_size")
    return {
        "breakdown": sp, "status": st, "protection": prot, "reference": ref,
        "stored": stored, "parity_payload": parity_payload,
        "block_headers": 512 * blocks, "blocks": blocks,
        "parity_headers": sp["parity"]["apparent"] - parity_payload,
        "aim": stored / (comp + parity_payload) if comp + parity_payload else None,
        "aim_ideal_parity": (stored / (comp * (1 + 1 / (g - 1)))) if g and g > 1 and comp else None,
        "alloc_total": sum(v["alloc"] for v in sp.values()),
        "apparent_total": sum(v["apparent"] for v in sp.values()),
        "group_size": g,
    }


def memory_figures(result):
    mem = (result.get("extra") or {}).get("memory")
    scales = [x for x in (mem or {}).get("scales", []) if x.get("files")]
    if len(scales) < 2:
        return None
    a, b = scales[0], scales[-1]
    keys = ("hwm_ingest", "hwm_meta", "hwm_read_nocache")
    pa = max(a.get(k) or 0 for k in keys)
    pb = max(b.get(k) or 0 for k in keys)
    return {"scale": b["scale"] // max(a["scale"], 1), "files": (a["files"], b["files"]),
            "aim": pb / pa if pa and pb else None, "a": a, "b": b}


def markdown(result):
    names = [t["name"] for t in result["targets"]]
    subject = result["subject"]
    peers = [n for n in names if n != subject]
    corp = result["corpus"]
    opts = result["options"]
    out = []
    out.append("# webfs benchmark — %s" % result["started"].replace("T", " ").replace("Z", " UTC"))
    out.append("")
    out.append("- Machine: " + machine_line(result["machine"]))
    info = corp.get("info") or {}
    o = info.get("options") or {}
    desc = ("tools/make-corpus --seed %s --size %s --crawls %s" % (
        o.get("seed"), opts.get("corpus_size"), o.get("crawls"))) if o else corp["path"]
    if o.get("base"):
        desc += " --base %s" % o["base"]
    out.append("- Corpus: %s — %d crawls, %s files, %s (%s ingested, all read)" % (
        desc, len(corp["crawls"]), "{:,}".format(corp["files"]), _bytes(corp["bytes"]),
        " + ".join(corp["ingested"])))
    wd = result.get("workdir")
    if wd:
        out.append("- Work directory `%s` (below: `$W`), removed after the run" % wd)
    for t in result["targets"]:
        cmd = t.get("mount") or ""
        if wd:
            cmd = cmd.replace(wd, "$W")
        out.append("- `%s`: %s%s" % (t["name"], t.get("description", ""),
                                     (" — `%s`" % cmd) if cmd else ""))
    out.append("- Method: median of %s run(s) per figure, targets interleaved (A B C D, "
               "B C D A, ...); *cold* = unmounted, `sync` + `drop_caches`, mounted again; "
               "ingest times include `sync`. Ratio columns: %s / peer of the figure shown "
               "(the better direction is in the second column). git %s." % (
                   opts.get("repeat"), subject, result.get("git") or "?"))
    ex = result.get("extra") or {}
    if ex.get("section_seconds"):
        out.append("- Time: %s in all; %s." % (
            _duration(ex.get("wall_seconds")), ", ".join(
                "%s %s" % (k, _duration(v)) for k, v in ex["section_seconds"].items())))
    out.append("")
    g = goals_table(result)
    if g:
        out.append("## Where webfs stands (the aims of issues 10, 12 and 13)")
        out.append("")
        out.extend(g)
        out.append("")
    rows = result["summary"]
    for section in result["sections"] + [s for s in SECTION_TITLES if s not in result["sections"]]:
        if section in RENDERERS:
            lines = RENDERERS[section](result)
            if lines:
                out.append("## %s" % SECTION_TITLES.get(section, section.capitalize()))
                out.append("")
                out += lines
            continue
        srows = [r for r in rows if r["section"] == section and r["targets"]]
        if not srows:
            continue
        out.append("## %s" % SECTION_TITLES.get(section, section.capitalize()))
        out.append("")
        head = ["figure", "better"] + names + ["%s/%s" % (subject, p) for p in peers]
        out.append("| " + " | ".join(head) + " |")
        out.append("|" + "|".join(["---", ":-:"] + ["--:"] * (len(head) - 2)) + "|")
        for r in srows:
            cells = [r["label"], "↑" if r["better"] == "higher" else "↓"]
            cells += [cell_text(r, r["targets"].get(n)) for n in names]
            cells += [("%.2f×" % r["ratios"][p]) if p in r["ratios"] else "" for p in peers]
            out.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
        out.append("")
        if section == "space":
            ref = (result.get("extra") or {}).get("reference")
            if ref:
                out.append("Corpus %s: %s in %s files; distinct documents %s (%s); distinct, "
                           "each %s or stored: %s. Ratios in brackets: to the corpus."
                           % (" + ".join(ref["crawls"]), _bytes(ref["bytes"]),
                              "{:,}".format(ref["files"]), _bytes(ref["distinct_bytes"]),
                              "{:,}".format(ref["distinct_documents"]),
                              ref.get("compressed_with", "gzip -6"),
                              _bytes(ref["distinct_compressed_bytes"])))
                out.append("")
            out += space_table(result)
    fails = result.get("failures") or []
    bad = [m for m in result["measurements"] if not m.get("ok", True)]
    if fails or bad:
        out.append("## Problems")
        out.append("")
        for f in fails:
            out.append("- %s, %s: %s" % (f["target"], f["where"],
                                         f["error"].strip().splitlines()[0][:300] if f["error"].strip() else ""))
        for m in bad:
            out.append("- %s, %s, run %s: %s" % (m["target"], m["figure"], m["rep"], m.get("note")))
        out.append("")
    if not result.get("complete", True):
        out.append("**The run did not complete** (interrupted or failed); figures are partial.")
        out.append("")
    return "\n".join(out)


# ------------------------------------------------------ webfs-only tables

def _mb(n):
    return "–" if n is None else "%.1f MB" % (n / 1e6)


def _mib(n):
    return "–" if not n else "%.1f MiB" % (n / 1048576)


def space_table(result):
    sp = space_figures(result)
    if not sp:
        return []
    b = sp["breakdown"]
    st, prot, ref = sp["status"], sp["protection"], sp["reference"]
    comp = ref["distinct_compressed_bytes"]
    g = sp["group_size"]
    out = ["What the webfs disks hold after the last ingest run (`webfs sync` first; apparent = "
           "file sizes, allocated = what `du` counts, 4 KiB per small file):", "",
           "| on the disks | files | apparent | allocated (du) |", "|---|--:|--:|--:|"]
    row = lambda label, files, app, alloc: out.append("| %s | %s | %s | %s |" % (
        label, "" if files is None else "{:,}".format(files), _bytes(app) if app is not None else "",
        _bytes(alloc) if alloc is not None else ""))
    row("block files (`blocks/`)", b["blocks"]["files"], b["blocks"]["apparent"], b["blocks"]["alloc"])
    row("… of which headers, 512 × %s blocks" % "{:,}".format(sp["blocks"]), None,
        sp["block_headers"], None)
    row("… of which payloads (`webfs status` payload_bytes)", None, st.get("payload_bytes"), None)
    row("parity files (`parity/`)", b["parity"]["files"], b["parity"]["apparent"], b["parity"]["alloc"])
    row("… of which parity payload (`webfs status` parity_bytes)", None, sp["parity_payload"], None)
    row("… of which parity headers", None, sp["parity_headers"], None)
    row("meta (`meta/`: catalog, journal, MANIFEST)", b["meta"]["files"], b["meta"]["apparent"],
        b["meta"]["alloc"])
    row("other (WEBFS-DISK, webfs.conf)", b["other"]["files"], b["other"]["apparent"], b["other"]["alloc"])
    row("**total**", sum(v["files"] for v in b.values()), sp["apparent_total"], sp["alloc_total"])
    out.append("")
    out += ["| ratio | value |", "|---|--:|"]
    out.append("| **stored (block + parity files) / (distinct compressed content + parity payload)**"
               " — %s + %s | **%.3f×** |" % (_bytes(comp), _bytes(sp["parity_payload"]), sp["aim"]))
    if sp.get("aim_ideal_parity"):
        out.append("| stored / (distinct compressed content × (1 + 1/(G−1))), G = %d: parity as "
                   "full stripes would cost | %.3f× |" % (g, sp["aim_ideal_parity"]))
    out.append("| headers (block + parity) / stored | %.1f %% |" % (
        100.0 * (sp["block_headers"] + sp["parity_headers"]) / sp["stored"]))
    if st.get("payload_bytes"):
        out.append("| webfs payloads / distinct compressed content (same codec and level) | %.3f× |"
                   % (st["payload_bytes"] / comp))
    out.append("| parity overhead, `webfs status` (parity payload / protected payload; "
               "1/(G−1) = %.3f) | %s |" % (1 / (g - 1) if g and g > 1 else float("nan"),
                                           prot.get("parity_overhead")))
    out.append("| stripes: all / open (fewer than G−1 members) | %s / %s |" % (
        prot.get("stripes"), prot.get("open_stripes")))
    out.append("| allocated (du) of the disks / (distinct compressed content + parity payload) | "
               "%.3f× |" % (sp["alloc_total"] / (comp + sp["parity_payload"])))
    out.append("| allocated / apparent, whole disks | %.3f× |" % (sp["alloc_total"] / sp["apparent_total"]))
    out.append("")
    return out


def render_rebuild(result):
    rb = (result.get("extra") or {}).get("rebuild")
    cfgs = [c for c in (rb or {}).get("configs", []) if c.get("median")]
    if not cfgs:
        return []
    c = rb["disks"]
    n = max(len(x["runs"]) for x in cfgs)
    out = ["C = %d disks; disk %d deleted, then rebuilt into an empty directory (`%s`; caches "
           "dropped before each run), %d run(s) per configuration, interleaved, medians. The "
           "archive: %s, copied in with `cp -r`. *Share* = bytes read from a surviving disk / "
           "bytes written to the new one (headers and parity files included); declustered "
           "parity (Golubchik & Muntz) predicts (G−1)/(C−1)." % (
               c, rb["lost_disk"], rb.get("how", "webfs rebuild"), n, " + ".join(rb["crawls"])),
           "",
           "| | " + " | ".join("G = %d" % x["group_size"] for x in cfgs) + " |",
           "|---|" + "--:|" * len(cfgs)]

    def line(label, f):
        out.append("| %s | %s |" % (label, " | ".join(f(x) for x in cfgs)))
    m = lambda x: x["median"]
    line("rebuilt: blocks + parity files", lambda x: "%d + %d" % (
        m(x)["blocks_rebuilt"] or 0, m(x)["parity_rebuilt"] or 0))
    line("bytes written", lambda x: _mb(m(x)["bytes_written"]))
    line("**throughput, MB/s written** (webfs's clock; whole process)", lambda x: "**%s** (%s)" % (
        _num(m(x)["mb_per_s"]),
        _num(m(x)["bytes_written"] / m(x)["wall_seconds"] / 1e6) if m(x)["wall_seconds"] else "–"))
    line("predicted share per survivor, (G−1)/(C−1)", lambda x: "%.2f" % x["predicted_share"])
    line("**measured share per survivor: min – max**", lambda x: "**%.2f – %.2f**" % (
        m(x)["share_min"], m(x)["share_max"]) if m(x)["share_min"] is not None else "–")
    line("mean share; max/min", lambda x: "%.2f; %.2f" % (
        m(x)["share_mean"], m(x)["share_max"] / m(x)["share_min"]) if m(x)["share_min"] else "–")
    line("bytes read from survivors (webfs's count)", lambda x: _mb(m(x)["survivor_bytes"]))
    line("bytes its read calls returned (/proc/self/io rchar: + catalog)", lambda x: _mb(m(x)["rchar"]))
    line("device reads, whole process (+ ext4 metadata, Python)", lambda x: _mb(m(x)["device_read_bytes"]))
    line("parity overhead, `webfs status` (1/(G−1))", lambda x: "%s (%.3f)" % (
        x.get("parity_overhead"), 1 / (x["group_size"] - 1)))
    line("stripes: all / open", lambda x: "%s / %s" % (x.get("stripes"), x.get("open_stripes")))
    line("scrub afterwards: MB read / s (`webfs scrub`, caches dropped)", lambda x: "%s (%s in %s s)" % (
        _num(x["scrub"]["mb_per_s"]), _mb(x["scrub"]["bytes_read"]), _num(x["scrub"]["seconds"]))
         if (x.get("scrub") or {}).get("mb_per_s") else "–")
    line("`webfs fsck` after the last rebuild", lambda x: "clean" if x.get("fsck_rc") == 0
         else "**exit %s**" % x.get("fsck_rc"))
    out.append("")
    return out


def render_cooling(result):
    co = (result.get("extra") or {}).get("cooling")
    scs = [x for x in (co or {}).get("scenarios", []) if x.get("before")]
    if not scs:
        errs = [x for x in (co or {}).get("scenarios", []) if x.get("error")]
        return ["Failed: " + "; ".join("%s: %s" % (x["scenario"], x["error"][:200]) for x in errs), ""] if errs else []
    out = ["%d disks, each serving one I/O at a time in %g ms (mount option `disk_delay`), "
           "`piece_cache=0`; pages of one crawl up to 128 KiB (one read, one block). Open "
           "workload through the mount: Poisson arrivals of whole-page reads, Zipf (s = 1) "
           "popularity, each read past the page cache (`posix_fadvise DONTNEED`) and checked "
           "against the corpus, %s readers at once (a later arrival waits, and the wait "
           "counts); the rate keeps the busiest disk *busy* before cooling "
           "(`bench_zipf.py --busy`). Then `webfs cool --delta %s`, then the same arrivals "
           "again. *spread*: popularity ranks shuffled over the pages (the skew hashing "
           "leaves); *hot*: the pages of one disk take the top ranks (a hot collection). "
           "*M/D/1 model*: the mean if every disk were an independent queue with these "
           "arrivals (what the disks alone explain). One run each." % (
               co["disks"], co["delay_s"] * 1e3, co.get("threads", "?"), co["delta"]), "",
           "| | " + " | ".join("%s: before | %s: after" % (x["scenario"], x["scenario"]) for x in scs) + " |",
           "|---|" + "--:|" * (2 * len(scs))]

    def line(label, f):
        cells = []
        for x in scs:
            for when in ("before", "after"):
                try:
                    cells.append(f(x, when))
                except (KeyError, TypeError, ZeroDivisionError):
                    cells.append("–")
        out.append("| %s | %s |" % (label, " | ".join(cells)))
    line("pages; reads (rate /s); busy", lambda x, w: "%s; %s (%s); %s" % (
        _num(x["pages"]), _num(x[w]["reads"]), _num(x[w]["rate_per_s"]), x.get("busy")))
    line("**mean response time**", lambda x, w: "**%s ms**" % _num(x[w]["mean_ms"]))
    line("p50 / p90 / p99", lambda x, w: "%s / %s / %s ms" % (
        _num(x[w]["p50_ms"]), _num(x[w]["p90_ms"]), _num(x[w]["p99_ms"])))
    line("M/D/1 model mean", lambda x, w: ("%s ms" % _num(x[w]["model_mean_ms"]))
         if x[w].get("model_mean_ms") else "overloaded")
    line("reads per disk", lambda x, w: " ".join(str(v) for _, v in sorted(x[w]["reads_per_disk"].items())))
    line("reads: busiest disk / mean", lambda x, w: "%.2f" % x[w]["disk_max_over_mean"])
    line("disk heat max/mean (`webfs cool`: measured → its plan)", lambda x, w: "%.2f" % (
        x["cool"]["ratio_before"] if w == "before" else x["cool"]["ratio_after"]))
    line("disk heat max/mean (`webfs heat` after the run)", lambda x, w: "%.2f" % x["heat_" + w]["ratio"])
    line("groups moved; bytes moved; cool took", lambda x, w: "" if w == "before" else "%d; %s; %.1f s" % (
        x["cool"]["moves"], _bytes(x["cool"]["bytes_moved"] or 0), x["cool"]["seconds"]))
    line("**mean response: before / after**", lambda x, w: "" if w == "before" else "**%.2f×**" % (
        x["before"]["mean_ms"] / x["after"]["mean_ms"]))
    line("M/D/1 model: before / after", lambda x, w: "" if w == "before" else "%.2f×" % (
        x["before"]["model_mean_ms"] / x["after"]["model_mean_ms"]))
    out.append("")
    for x in scs:
        if x.get("cool", {}).get("reason"):
            out.append("- %s: `webfs cool` stopped: %s" % (x["scenario"], x["cool"]["reason"]))
    out.append("")
    return out


def render_memory(result):
    mf = memory_figures(result)
    if not mf:
        mem = (result.get("extra") or {}).get("memory")
        errs = [x for x in (mem or {}).get("scales", []) if x.get("error")]
        return ["Failed: " + "; ".join("%d×: %s" % (x["scale"], x["error"][:200]) for x in errs), ""] if errs else []
    a, b = mf["a"], mf["b"]
    out = ["Two archives made the same way (`tools/make-corpus --pages N --crawls 1`, %s and "
           "%s pages), each: mkfs + mount, `cp -r`, `webfs sync`, remount, `find`/`ls -lR`/`du` "
           "of every file, `cat` of every file, then remount with `piece_cache=0` and `cat` + "
           "`ls -lR` again. RSS of the daemon process (VmRSS; peak = VmHWM since its mount)." % (
               "{:,}".format(a["pages"]), "{:,}".format(b["pages"])), "",
           "| daemon memory | %d× | %d× | ratio | per 1,000 more files |" % (a["scale"], b["scale"]),
           "|---|--:|--:|--:|--:|"]
    df = (b["files"] - a["files"]) / 1000.0

    def line(label, key, bold=False):
        x, y = a.get(key), b.get(key)
        if x is None or y is None:
            return
        f = "**%s**" if bold else "%s"
        out.append("| %s | %s | %s | %s | %s |" % (
            label, _mib(x), _mib(y), f % ("%.2f×" % (y / x)),
            "%+.2f MiB" % ((y - x) / 1048576 / df) if df else "–"))
    out.append("| files (blocks) | %s (%s) | %s (%s) | %.2f× | |" % (
        "{:,}".format(a["files"]), "{:,}".format(a.get("blocks") or 0), "{:,}".format(b["files"]),
        "{:,}".format(b.get("blocks") or 0), b["files"] / a["files"]))
    line("RSS after mounting an empty archive", "rss_empty")
    line("peak RSS during `cp -r`", "hwm_ingest", True)
    line("RSS after mounting the full archive", "rss_mounted")
    line("peak RSS during find, ls -lR, du", "hwm_meta", True)
    line("peak RSS during cat of every file (piece cache, 128 MiB at most)", "hwm_read")
    line("peak RSS during cat + ls -lR, `piece_cache=0`", "hwm_read_nocache", True)
    out.append("")
    return out


def render_readers(result):
    rd = (result.get("extra") or {}).get("readers")
    runs = (rd or {}).get("runs") or []
    if not runs:
        return failure_lines(rd)
    out = ["%d disks, each serving one I/O at a time in %g ms (mount option `disk_delay`), "
           "`piece_cache=0`, %s pages of one crawl up to 128 KiB; N readers each read whole pages "
           "(uniform) one after the other for %g s, each read past the page cache. The disks "
           "could serve %.0f reads/s." % (rd["disks"], rd["delay_s"] * 1e3,
                                         "{:,}".format(rd.get("pages") or 0), rd["seconds"],
                                         rd["ceiling_per_s"]), "",
           "| readers | " + " | ".join(str(c["readers"]) for c in runs) + " |",
           "|---|" + "--:|" * len(runs),
           "| reads/s | " + " | ".join(_num(c["reads_per_s"]) for c in runs) + " |",
           "| mean / p90 read time | " + " | ".join(
               "%s / %s ms" % (_num(c["mean_ms"]), _num(c["p90_ms"])) for c in runs) + " |", ""]
    return out


def render_scale(result):
    sc = (result.get("extra") or {}).get("scale")
    sl = (sc or {}).get("slices") or []
    if not sl:
        return failure_lines(sc)
    out = ["`tools/make-corpus --small-pages --pages N --crawls 1` (%s files, %s), copied into "
           "a fresh %d-disk archive with `cp -r` in %d slices of hosts; after each slice the "
           "daemon's RSS (VmRSS) and CPU time per file, the same of its indexing process (started "
           "at the first index pass, every 30 s during the copy) and the bytes under `meta/` on every disk. "
           "The same slices are first copied into a plain directory; every slice of both starts "
           "after `sync`. At rest: after `webfs umount`." % ("{:,}".format(sc["files"]), _mb(sc["bytes"]),
                                 result["options"].get("disks") or 4, len(sl)), "",
           "| files | files/s (slice) | plain directory, files/s | daemon CPU per file | RSS "
           "| indexing process: CPU per file, RSS | `meta/` (peak during the slice) | per file |",
           "|--:|--:|--:|--:|--:|--:|--:|--:|"]
    ms = lambda v: "%.2f ms" % (v * 1000) if v is not None else "?"
    for x in sl:
        out.append("| %s | %s | %s | %s | %s MiB | %s, %s MiB | %s (%s) | %.0f B |" % (
            "{:,}".format(x["files_done"]), _num(x["rate"]), _num(x.get("plain_rate")),
            ms(x.get("daemon_cpu_per_file")), _num((x["rss"] or 0) / 2**20),
            ms(x.get("indexer_cpu_per_file")), _num((x.get("indexer_rss") or 0) / 2**20),
            _mb(x["meta_bytes"]), _mb(x.get("meta_peak_during")), x["meta_per_file"]))
    out.append("| at rest | | | | | | %s | **%.0f B** |" % (_mb(sc["meta_at_rest"]),
                                                     sc["meta_per_file_at_rest"]))
    out.append("")
    out.append("Peak `meta/` during the ingest: %s, %.0f B a file of the %s." % (
        _mb(sc.get("meta_peak")), sc.get("meta_per_file_peak") or 0, "{:,}".format(sc["files"])))
    out.append("")
    return out


import bench_catscale  # noqa: E402
import bench_pg  # noqa: E402
import bench_query  # noqa: E402
import bench_s3  # noqa: E402

RENDERERS = {"warc": render_warc, "rebuild": render_rebuild, "readers": render_readers, "scale": render_scale, "cooling": render_cooling, "memory": render_memory,
             "s3": bench_s3.render, "postgres": bench_pg.render, "query": bench_query.render_query, "catscale": bench_catscale.render_catscale}


# ----------------------------------------------------------------- chart

def chart(result, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("bench: no chart (matplotlib missing: pip install matplotlib, extra 'bench')", file=sys.stderr)
        return None
    names = [t["name"] for t in result["targets"]]
    base = "plain" if "plain" in names else names[0]
    rows = result["summary"]
    speed = [r for r in rows if r["kind"] == "time" and r["targets"].get(base, {}).get("value")]
    lat = [r for r in rows if r["kind"] == "latency" and r["targets"]]
    space = [r for r in rows if r["kind"] == "bytes" and r["targets"]]
    panels = [p for p in (("speed", speed), ("latency", lat), ("space", space)) if p[1]]
    if not panels:
        return None
    heights = [max(2, len(p[1])) for p in panels]
    fig, axes = plt.subplots(len(panels), 1, figsize=(10, 0.32 * sum(heights) * len(names) / 2 + 2.5),
                             gridspec_kw={"height_ratios": heights}, squeeze=False)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    width = 0.8 / len(names)
    for ax, (kind, rs) in zip(axes[:, 0], panels):
        labels = [r["label"] for r in rs]
        for i, n in enumerate(names):
            vals = []
            for r in rs:
                c = r["targets"].get(n, {})
                v = c.get("value")
                if kind == "speed":
                    b = r["targets"][base]["value"]
                    vals.append(v / b if v and b else 0)
                elif kind == "space":
                    vals.append(v / c["corpus"] if v and c.get("corpus") else 0)
                else:
                    vals.append(v or 0)
            ys = [j + (i - (len(names) - 1) / 2) * width for j in range(len(rs))]
            ax.barh(ys, vals, height=width, label=n, color=colors[i % len(colors)])
        ax.set_yticks(range(len(rs)))
        ax.set_yticklabels(labels, fontsize=7)
        ax.invert_yaxis()
        if kind == "speed":
            ax.set_xscale("log")
            ax.axvline(1.0, color="grey", lw=0.8)
            ax.set_xlabel("speed relative to %s (log; higher is better)" % base, fontsize=8)
        elif kind == "latency":
            ax.set_xscale("log")
            ax.set_xlabel("latency, ms (log; lower is better)", fontsize=8)
        else:
            ax.axvline(1.0, color="grey", lw=0.8)
            ax.set_xlabel("bytes on disk relative to the corpus (lower is better)", fontsize=8)
        ax.tick_params(axis="x", labelsize=7)
        ax.grid(axis="x", alpha=0.3)
    axes[0, 0].legend(fontsize=8, loc="lower right")
    m = result["machine"]
    fig.suptitle("webfs benchmark %s — %s, %s CPUs, Linux %s" % (
        result["started"][:10], m.get("cpu", "?"), m.get("nproc", "?"), m.get("kernel", "?")),
        fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_all(result, outdir):
    os.makedirs(outdir, exist_ok=True)
    paths = []
    js = os.path.join(outdir, "results.json")
    write_json(js, result)
    stamp = result["started"].replace(":", "").replace("-", "")
    shutil.copyfile(js, os.path.join(outdir, "bench-%s.json" % stamp))
    paths.append(js)
    md = os.path.join(outdir, "results.md")
    with open(md, "w") as f:
        f.write(markdown(result) + "\n")
    paths.append(md)
    png = chart(result, os.path.join(outdir, "results.png"))
    if png:
        paths.append(png)
    return paths


def main(argv):
    aims = "--aims" in argv
    args = [a for a in argv if a != "--aims"]
    if len(args) != 1:
        sys.exit("usage: bench_report.py [--aims] results.json")
    with open(args[0]) as f:
        r = json.load(f)
    r["summary"] = summarize(r)
    print("\n".join(goals_table(r)) if aims else markdown(r))


if __name__ == "__main__":
    main(sys.argv[1:])
