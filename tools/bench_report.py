"""The report of tools/bench: medians and ratios, as Markdown, JSON and PNG.

results.json keeps every raw measurement (for later comparison) plus the
summary the tables are made from; bench_report.markdown(result) rebuilds the
tables from a saved JSON file:

    python3 tools/bench_report.py bench-results/results.json   # print the tables
"""

import json
import os
import shutil
import statistics
import sys

from bench_lib import git_describe, loadavg, write_json

SECTION_TITLES = {
    "ingest": "Ingest",
    "space": "Space",
    "read": "Full reads",
    "metadata": "Metadata",
    "random": "Random page reads",
    "daemon": "Daemon CPU and memory",
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


def goals(result):
    """Where the subject stands against the aims of issue 7: [(aim, measured,
    met or None)].  Only when the subject is webfs."""
    if result["subject"] != "webfs":
        return []
    rows = {r["key"]: r for r in result["summary"]}
    out = []

    def ratio(key, peer):
        r = rows.get(key)
        return r["ratios"].get(peer) if r else None

    def rate(key):
        r = rows.get(key)
        c = r["targets"].get("webfs", {}) if r else {}
        return c.get("rate")

    for key, label, floor in (("ingest.cp.1", "ingest cp -r crawl 1", 0.7),
                              ("ingest.rsync.1", "ingest rsync -a crawl 1", 0.7),
                              ("read.cat.cold", "cat all, cold", 0.7),
                              ("read.tar.cold", "tar, cold", 0.7),
                              ("read.grep.cold", "grep -r, cold", 0.7),
                              ("read.cat.warm", "cat all, warm", 1.0),
                              ("read.tar.warm", "tar, warm", 1.0),
                              ("read.grep.warm", "grep -r, warm", 1.0)):
        x = ratio(key, "bindfs")
        if x is not None:
            out.append(("%s ≥ %.1f× bindfs" % (label, floor), "%.2f×" % x, x >= floor))
    for tool in ("cp", "rsync"):
        a, b = rate("ingest.%s.1" % tool), rate("ingest.%s.2" % tool)
        if a and b:
            out.append(("%s of crawl 2 ≥ 2× as fast as crawl 1" % tool, "%.2f×" % (b / a),
                        b / a >= 2.0))
    ref = (result.get("extra") or {}).get("reference")
    r = rows.get("space.alloc")
    alloc = r["targets"].get("webfs", {}).get("value") if r else None
    if ref and alloc:
        st = (result.get("extra") or {}).get("webfs_status") or {}
        parity = sum(v for k, v in st.items() if "parity" in k and k.endswith("bytes")
                     and isinstance(v, (int, float)))
        ideal = ref["distinct_compressed_bytes"] + parity
        x = alloc / ideal
        out.append(("bytes on disks within 5 %% of distinct compressed content + parity%s"
                    % ("" if parity else " (no parity figure in webfs status)"),
                    "%.2f×" % x, x <= 1.05 if parity else None))
    r = rows.get("daemon.hwm")
    hwm = r["targets"].get("webfs", {}).get("value") if r else None
    if hwm:
        files = result["corpus"]["files"]
        out.append(("daemon memory does not grow with files (compare bench and bench-full)",
                    "peak %.0f MiB at %s files" % (hwm / 1048576, "{:,}".format(files)), None))
    return out


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
    out.append("")
    g = goals(result)
    if g:
        out.append("## Where webfs stands (issue 7 aims)")
        out.append("")
        out.append("| aim | measured | met |")
        out.append("|---|--:|:-:|")
        for aim, measured, met in g:
            out.append("| %s | %s | %s |" % (aim, measured,
                                             "–" if met is None else ("yes" if met else "**no**")))
        out.append("")
    rows = result["summary"]
    for section in result["sections"] + [s for s in SECTION_TITLES if s not in result["sections"]]:
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
                           "each gzip -6 or stored: %s. Ratios in brackets: to the corpus."
                           % (" + ".join(ref["crawls"]), _bytes(ref["bytes"]),
                              "{:,}".format(ref["files"]), _bytes(ref["distinct_bytes"]),
                              "{:,}".format(ref["distinct_documents"]),
                              _bytes(ref["distinct_compressed_bytes"])))
                out.append("")
            st = (result.get("extra") or {}).get("webfs_status")
            if isinstance(st, dict):
                items = ["%s %s" % (k, ("{:,}".format(v) if isinstance(v, int) else v))
                         for k, v in sorted(st.items())
                         if isinstance(v, (int, float, str)) and k not in ("archive", "label")]
                out.append("`webfs status` after ingest: " + ", ".join(items) + ".")
                out.append("")
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


# ----------------------------------------------------------------- chart

def chart(result, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
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
    else:
        print("bench: no chart (matplotlib missing: pip install matplotlib, extra 'bench')",
              file=sys.stderr)
    return paths


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: bench_report.py results.json")
    with open(sys.argv[1]) as f:
        r = json.load(f)
    r["summary"] = summarize(r)
    print(markdown(r))
